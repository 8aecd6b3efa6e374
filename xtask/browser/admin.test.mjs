// The admin page's browser test: run by `cargo xtask browser`, which starts the real server
// (MEMLAYER_URL, with the admin key MEMLAYER_ADMIN_KEY) and names Debian's Chromium
// (CHROMIUM) and where screenshots go (ARTIFACTS_DIR). It seeds sessions through the API,
// drives the page as an operator would (finding elements by role and label, as assistive
// technology does), and checks through the API that what the page claims happened did. After
// the settings, purge and session browser it seeds a second tenant population (long-term
// memories and conversations, some holding markup) for the memory browser, the context
// preview and the erasure receipts.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BASE = process.env.MEMLAYER_URL;
const KEY = process.env.MEMLAYER_ADMIN_KEY;
const ARTIFACTS = process.env.ARTIFACTS_DIR;
assert.ok(BASE && KEY && ARTIFACTS && process.env.CHROMIUM, "run me through `cargo xtask browser`");
// Long enough for a debug-built server on a busy machine, short enough to fail a hang.
const TIMEOUT_MS = 15_000;

async function api(method, path, body) {
  const response = await fetch(BASE + path, {
    method,
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function seed() {
  const sessions = [];
  for (let n = 1; n <= 8; n++) sessions.push({ id: `alice-${n}`, user: "alice", agent: "support" });
  for (let n = 1; n <= 4; n++) sessions.push({ id: `bob-${n}`, user: "bob", agent: "sales" });
  for (const { id, user, agent } of sessions) {
    const messages = id === "alice-3"
      ? [
          { role: "user", content: "My parcel 4711 never arrived." },
          { role: "assistant", content: "I am sorry. I will trace parcel 4711 with the carrier." },
          { role: "user", content: "Thanks, and the invoice address is fine." },
        ]
      : [
          { role: "user", content: `Hello from ${id}.` },
          { role: "assistant", content: `Hello ${user}, how can I help?` },
        ];
    const answer = await api("POST", `/v1/sessions/${id}/messages`, { user_id: user, agent_id: agent, messages });
    assert.equal(answer.status, 201, `seeding ${id}: ${JSON.stringify(answer.body)}`);
  }
}

async function totalConversations() {
  const answer = await api("GET", "/v1/admin/conversations/stats");
  assert.equal(answer.status, 200);
  return answer.body.total_conversations;
}

const flags = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

async function main() {
  await seed();
  assert.equal(await totalConversations(), 12);

  // A new empty profile for every run: nothing from an earlier run (a kept key) leaks in.
  const profile = mkdtempSync(join(tmpdir(), "memlayer-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM,
    headless: true,
    args: flags,
    viewport: { width: 1200, height: 1000 },
  });
  context.setDefaultTimeout(TIMEOUT_MS);
  const problems = [];
  try {
    const page = context.pages()[0] ?? await context.newPage();
    // The page must work air-gapped: it may ask nothing of any other origin.
    page.on("request", (request) => {
      if (!request.url().startsWith(BASE)) problems.push(`request to another origin: ${request.url()}`);
    });
    page.on("pageerror", (error) => problems.push(`script error: ${error.message}`));
    try {
      await run(page);
      await runMemoryPages(page);
    } catch (error) {
      await shot(page, "failure");
      throw error;
    }
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
  assert.deepEqual(problems, []);
  console.log("browser test: the admin page passed every step");
}

const region = (page, name) => page.getByRole("region", { name });
const shot = (page, name) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

async function expectText(locator, pattern) {
  // Polls, because the page answers asynchronously.
  const deadline = Date.now() + TIMEOUT_MS;
  let last = "";
  while (Date.now() < deadline) {
    last = (await locator.textContent()) ?? "";
    if (pattern.test(last)) return last;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`expected ${pattern} but the page shows ${JSON.stringify(last)}`);
}

// Reloads the page, which connects again with the key kept in the tab, and checks the
// settings form shows what the server has.
async function reloadShows(page, expected) {
  await page.reload();
  await expectText(region(page, "API key").getByRole("status"), /Connected to tenant default/);
  await page.waitForFunction((retention) => document.getElementById("retention").value === retention,
    expected.retention);
  const settings = region(page, "Settings");
  assert.equal(await settings.getByLabel("Session history depth").inputValue(), expected.depth);
  assert.equal(await settings.getByLabel("Strategy").inputValue(), expected.strategy);
}

async function run(page) {
  await page.goto(BASE + "/admin");
  const keySection = region(page, "API key");

  // A wrong key: the server's 401 is shown, and nothing else opens.
  await keySection.getByLabel("API key", { exact: true }).fill("mlk_wrong_0000000000000000");
  await keySection.getByRole("button", { name: "Connect" }).click();
  await expectText(keySection.getByRole("alert"), /Error 401 \(unauthorized\)/);
  assert.equal(await region(page, "Settings").isVisible(), false);
  await shot(page, "01-wrong-key");

  await keySection.getByLabel("API key", { exact: true }).fill(KEY);
  await keySection.getByRole("button", { name: "Connect" }).click();
  await expectText(keySection.getByRole("status"), /Connected to tenant default/);
  // An empty alert is hidden, so it is looked up by its role attribute, not in the
  // accessibility tree.
  assert.equal(await keySection.locator("[role=alert]").textContent(), "");

  // Stats: the twelve seeded sessions, the first one the least recently active.
  const stats = region(page, "Conversations");
  await expectText(stats.getByRole("definition").first(), /^12$/);
  await expectText(stats.getByRole("definition").nth(1), /alice-1/);

  // Settings: the defaults first; out-of-range depths are refused before anything is sent.
  const settings = region(page, "Settings");
  const depth = settings.getByLabel("Session history depth");
  await expectText(settings, /Strategy/);
  // The settings load beside the stats: wait for them rather than read the field too early.
  await page.waitForFunction(() => document.getElementById("depth").value !== "");
  assert.equal(await depth.inputValue(), "20");
  for (const bad of ["0", "101"]) {
    await depth.fill(bad);
    await settings.getByRole("button", { name: "Save settings" }).click();
    await expectText(settings.getByRole("alert"), /must be a whole number from 1 to 100; nothing was saved/);
  }
  await shot(page, "02-invalid-depth");
  assert.equal((await api("GET", "/v1/settings")).body.saved.session_history_depth, undefined);

  // The server's own 422 reaches the operator: a retention past its limit.
  await depth.fill("35");
  await settings.getByLabel("Retention in days").fill("40000");
  await settings.getByRole("button", { name: "Save settings" }).click();
  await expectText(settings.getByRole("alert"),
    /not the retention: Error 422 \(invalid_value\): conversation_retention_days must be between 1 and 36500/);

  // Valid values are saved and come back after a reload (the key survives it in the tab).
  await settings.getByLabel("Strategy").selectOption("history_depth");
  await settings.getByLabel("Retention in days").fill("30");
  await settings.getByRole("button", { name: "Save settings" }).click();
  await expectText(settings.getByRole("status"), /Saved/);
  await reloadShows(page, { depth: "35", strategy: "history_depth", retention: "30" });
  await depth.fill("20");
  await settings.getByRole("button", { name: "Save settings" }).click();
  await expectText(settings.getByRole("status"), /Saved/);
  const saved = (await api("GET", "/v1/settings")).body.saved;
  assert.equal(saved.session_history_depth, 20);
  assert.equal(saved.strategy, "history_depth");
  assert.equal((await api("GET", "/v1/admin/retention")).body.conversation_retention_days, 30);
  await reloadShows(page, { depth: "20", strategy: "history_depth", retention: "30" });

  // The session browser: two pages of ten, filters, one session's messages and a search.
  const sessions = region(page, "Sessions");
  const rows = sessions.getByRole("table", { name: "Sessions" }).locator("tbody tr");
  await expectText(sessions.getByRole("status").first(), /Page 1 of 2 \(12 sessions\)/);
  assert.equal(await rows.count(), 10);
  await sessions.getByRole("button", { name: "Next page" }).click();
  await expectText(sessions.getByRole("status").first(), /Page 2 of 2 \(12 sessions\)/);
  assert.equal(await rows.count(), 2);
  assert.equal(await sessions.getByRole("button", { name: "Next page" }).isDisabled(), true);
  await sessions.getByLabel("User").fill("bob");
  await sessions.getByRole("button", { name: "Filter" }).click();
  await expectText(sessions.getByRole("status").first(), /Page 1 of 1 \(4 sessions\)/);
  assert.equal(await rows.count(), 4);
  await sessions.getByLabel("User").fill("");
  await sessions.getByLabel("Agent").fill("support");
  await sessions.getByRole("button", { name: "Filter" }).click();
  await expectText(sessions.getByRole("status").first(), /Page 1 of 1 \(8 sessions\)/);
  await sessions.getByRole("button", { name: "Open session alice-3" }).click();
  await expectText(sessions.getByRole("heading", { name: "Session alice-3" }), /alice-3/);
  const messages = sessions.getByRole("list", { name: "Messages" }).getByRole("listitem");
  assert.equal(await messages.count(), 3);
  await expectText(messages.nth(0), /^user#0 · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTCMy parcel 4711 never arrived\.$/);
  await expectText(messages.nth(1), /^assistant#1 .*trace parcel 4711/);
  await sessions.getByLabel("Search in this session").fill("parcel");
  await sessions.getByRole("button", { name: "Search" }).click();
  await expectText(sessions.getByText(/matching messages/), /2 matching messages for “parcel”/);
  const hits = sessions.getByRole("list", { name: "Search results" }).getByRole("listitem");
  await expectText(hits.nth(0), /^assistant#1 /);
  await expectText(hits.nth(1), /^user#0 /);
  await shot(page, "03-session");

  // Purge by age: every seeded session is fresh, so a 30-day purge erases none of them.
  const purge = region(page, "Purge");
  await purge.getByLabel("Inactive for more than (days)").fill("30");
  await purge.getByRole("button", { name: "Purge old conversations" }).click();
  await expectText(purge.getByRole("status"), /Erasure #\d+ done: .*\b0 sessions\b/);
  assert.equal(await totalConversations(), 12);

  // Delete all only after DELETE ALL, exactly.
  for (const wrong of ["", "delete all", "DELETE ALL ", "DELETE"]) {
    await purge.getByLabel("Type DELETE ALL to confirm").fill(wrong);
    await purge.getByRole("button", { name: "Delete all conversations" }).click();
    await expectText(purge.getByRole("alert"), /Type DELETE ALL exactly to confirm\. Nothing was deleted\./);
    assert.equal(await totalConversations(), 12, `after confirming with ${JSON.stringify(wrong)}`);
  }
  await purge.getByLabel("Type DELETE ALL to confirm").fill("DELETE ALL");
  await purge.getByRole("button", { name: "Delete all conversations" }).click();
  await expectText(purge.getByRole("status"), /Erasure #\d+ done: .*\b12 sessions\b.*\b25 messages\b/);
  assert.equal(await purge.locator("[role=alert]").textContent(), "");
  await expectText(stats.getByRole("definition").first(), /^0$/);
  await expectText(sessions.getByRole("status").first(), /\(0 sessions\)/);
  assert.equal(await totalConversations(), 0);
  const listing = await api("GET", "/v1/sessions");
  assert.equal(listing.body.total_elements, 0);
  assert.equal((await api("GET", "/v1/sessions/alice-3")).status, 404);
  await shot(page, "04-deleted-all");
}


// Markup an attacker could get into a memory or a message: the page must show it as text.
// Were it parsed as HTML, the image would fail to load and its handler would set the flag.
const XSS = `<img src=x onerror="window.__xss = 1">`;

const CAROL_TURNS = [
  ["We start the inspection of the Tagus bridge on Monday.", "Noted: the Tagus bridge inspection starts Monday."],
  ["The crew is four people, led by Marta.", "Four people, led by Marta. Anything else?"],
  ["We need the drone permit from the harbour authority.", "I will draft the drone permit request for the harbour authority."],
  ["The budget for the inspection is 18000 euros.", "Budget noted: 18000 euros."],
  ["Remind me to check the cable anchors first.", "I will remind you to check the cable anchors first."],
  ["Should we bring rain gear next week?", "Yes, pack rain gear: the bridge deck is exposed."],
];

const CAROL_MEMORIES = [
  ["Carol works as a structural engineer at Acme Bridges.", "fact"],
  ["Carol prefers answers in bullet points.", "preference"],
  ["Carol's manager is Sam Okafor.", "relationship"],
  ["Always address Carol by her first name.", "instruction"],
  ["Carol lives in Lisbon near the river.", "fact"],
  ["Carol is allergic to peanuts.", "fact"],
  ["Carol rides a red bicycle to the office.", "fact"],
  ["Carol's daughter plays the cello in a youth orchestra.", "relationship"],
  ["Carol is learning Japanese for a trip to Osaka.", "fact"],
  ["Carol enjoys hiking in the Alps every summer.", "preference"],
  ["Carol's favourite board game is Go.", "preference"],
  [`Carol's e-mail signature is ${XSS}`, "fact"],
];

async function append(session, user, messages) {
  const answer = await api("POST", `/v1/sessions/${session}/messages`, { user_id: user, agent_id: "support", messages });
  assert.equal(answer.status, 201, `seeding ${session}: ${JSON.stringify(answer.body)}`);
}

// Returns the ids of Carol's memories by their text.
async function seedMemories() {
  // Back to the default settings (the first part saved history_depth): the preview below
  // shows the combined strategy's layers.
  assert.equal((await api("DELETE", "/v1/settings")).status, 200);
  await append("carol-1", "carol", CAROL_TURNS.flatMap(([question, answer]) =>
    [{ role: "user", content: question }, { role: "assistant", content: answer }]));
  await append("carol-2", "carol", [
    { role: "user", content: `Please use this signature: ${XSS}` },
    { role: "assistant", content: "Done, the signature is saved." },
  ]);
  await append("dave-1", "dave", [
    { role: "user", content: "Hello, I am Dave." },
    { role: "assistant", content: "Hello Dave." },
  ]);
  const ids = new Map();
  for (const [text, type] of CAROL_MEMORIES) {
    const answer = await api("POST", "/v1/users/carol/memories", { text, type });
    assert.equal(answer.status, 201, `remembering ${text}: ${JSON.stringify(answer.body)}`);
    ids.set(text, answer.body.memory.memory_id);
  }
  const dave = await api("POST", "/v1/users/dave/memories", { text: "Dave collects vintage radios.", type: "fact" });
  assert.equal(dave.status, 201);
  ids.set("dave", dave.body.memory.memory_id);
  // Recall searches what the indexing pipeline embedded: wait for it, so the preview and
  // the API's answer compared with it are built from the same index.
  const deadline = Date.now() + TIMEOUT_MS;
  for (;;) {
    const metrics = await (await fetch(BASE + "/metrics")).text();
    if (/^memlayer_embeddings_pending 0$/m.test(metrics)) break;
    assert.ok(Date.now() < deadline, "the messages were not embedded in time");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return ids;
}

// The text of every row of a table's body.
async function rowTexts(table) {
  return table.locator("tbody tr").allTextContents();
}

async function noMarkupRan(page) {
  assert.equal(await page.locator("main img, section img").count(), 0, "markup from the API became an element");
  assert.equal(await page.evaluate(() => window.__xss), undefined, "markup from the API ran a handler");
}

async function runMemoryPages(page) {
  const ids = await seedMemories();
  const memories = region(page, "Memories");
  const memoryRows = memories.getByRole("table", { name: "Long-term memories" }).locator("tbody tr");

  // A malformed user id: the server's own 422 is shown, and no user opens.
  await memories.getByLabel("User id", { exact: true }).fill("carol smith");
  await memories.getByRole("button", { name: "Open user" }).click();
  await expectText(memories.getByRole("alert"), /Error 422 \(invalid_id\): .*user_id/);
  assert.equal(await memories.getByRole("heading", { name: /^User / }).isVisible(), false);

  // Carol's twelve memories, ten a page, and not Dave's.
  await memories.getByLabel("User id", { exact: true }).fill("carol");
  await memories.getByRole("button", { name: "Open user" }).click();
  await expectText(memories.getByRole("heading", { name: "User carol" }), /carol/);
  assert.equal(await memories.locator("[role=alert]").textContent(), "");
  await expectText(memories.locator("#mem-info"), /^Page 1: 10 memories, oldest first; more follow$/);
  assert.equal(await memoryRows.count(), 10);
  const firstPage = await memoryRows.evaluateAll((rows) => rows.map((row) => row.dataset.memory));
  await memories.getByRole("button", { name: "Next memories" }).click();
  await expectText(memories.locator("#mem-info"), /^Page 2: 2 memories, oldest first$/);
  const secondPage = await memoryRows.evaluateAll((rows) => rows.map((row) => row.dataset.memory));
  const carolIds = CAROL_MEMORIES.map(([text]) => String(ids.get(text)));
  assert.deepEqual([...firstPage, ...secondPage].sort(), [...carolIds].sort());
  assert.equal(await memories.getByRole("button", { name: "Next memories" }).isDisabled(), true);
  await memories.getByRole("button", { name: "Previous memories" }).click();
  await expectText(memories.locator("#mem-info"), /^Page 1: 10 memories/);
  assert.equal(await memories.getByRole("button", { name: "Previous memories" }).isDisabled(), true);

  // The markup in a memory is shown as text, character for character.
  const signatureId = ids.get(`Carol's e-mail signature is ${XSS}`);
  await memories.getByLabel("Search this user's memories").fill("e-mail signature");
  await memories.getByRole("button", { name: "Search memories" }).click();
  await expectText(memories.locator("#mem-info"), /\bmemor(y|ies) for “e-mail signature”, best first/);
  const signature = memories.locator(`tr[data-memory="${signatureId}"] td.memory-text`);
  assert.equal(await signature.textContent(), `Carol's e-mail signature is ${XSS}`);
  await noMarkupRan(page);

  // Search: the peanut allergy comes first, with its score.
  await memories.getByLabel("Search this user's memories").fill("peanuts allergy");
  await memories.getByRole("button", { name: "Search memories" }).click();
  await expectText(memories.locator("#mem-info"), /\bmemor(y|ies) for “peanuts allergy”, best first/);
  const peanutsId = ids.get("Carol is allergic to peanuts.");
  const apiHits = (await api("POST", "/v1/users/carol/memories/search", { query: "peanuts allergy", k: 50 })).body.hits;
  assert.equal(apiHits[0].memory_id, peanutsId);
  assert.equal(await memoryRows.count(), apiHits.length);
  const top = await memoryRows.first().locator("td").allTextContents();
  assert.equal(top[0], String(peanutsId));
  assert.equal(top[1], "fact");
  assert.equal(top[2], "Carol is allergic to peanuts.");
  assert.equal(top[3], "every agent");
  assert.equal(top[6], apiHits[0].score.toFixed(3));
  await shot(page, "05-memory-search");

  // Forget asks first: Keep leaves the memory; confirming erases it, and the list updates.
  await memories.getByRole("button", { name: `Forget memory ${peanutsId}` }).click();
  await memories.getByRole("button", { name: `Keep memory ${peanutsId}` }).click();
  assert.equal((await api("GET", `/v1/memories/${peanutsId}`)).status, 200);
  await memories.getByRole("button", { name: `Forget memory ${peanutsId}` }).click();
  await shot(page, "06-memory-forget-confirm");
  await memories.getByRole("button", { name: `Confirm forgetting memory ${peanutsId}` }).click();
  await expectText(memories.getByRole("status"), new RegExp(`^Memory ${peanutsId} forgotten \\(erasure #\\d+\\)\\.$`));
  await expectText(memories.locator("#mem-info"), /^Page 1: 10 memories, oldest first; more follow$/);
  assert.equal(await memories.locator(`tr[data-memory="${peanutsId}"]`).count(), 0);
  assert.equal((await api("GET", `/v1/memories/${peanutsId}`)).status, 404);
  await memories.getByRole("button", { name: "Next memories" }).click();
  await expectText(memories.locator("#mem-info"), /^Page 2: 1 memory, oldest first$/);
  await memories.getByRole("button", { name: "Show all memories" }).click();
  await expectText(memories.locator("#mem-info"), /^Page 1: 10 memories/);

  // The forget's receipt is listed at once.
  const receipts = region(page, "Erasure receipts");
  const receiptRows = receipts.getByRole("table", { name: "Erasure receipts" }).locator("tbody tr");
  await expectText(receiptRows.first(), new RegExp(`^#\\d+memory ${peanutsId}by api.*1 memories.*none$`));

  // Conversation history: Carol's two sessions, not Dave's, and one read with its markup
  // shown as text.
  const history = memories.getByRole("table", { name: "Conversation history" });
  await expectText(memories.locator("#history-info"), /^Page 1 of 1 \(2 sessions\)$/);
  const sessionsOfCarol = (await rowTexts(history)).map((row) => row.split("support")[0]).sort();
  assert.deepEqual(sessionsOfCarol, ["carol-1", "carol-2"]);
  await memories.getByRole("button", { name: "Read session carol-2" }).click();
  await expectText(memories.getByRole("heading", { name: "Session carol-2 with support" }), /carol-2/);
  const said = memories.getByRole("list", { name: "Conversation messages" }).getByRole("listitem");
  assert.equal(await said.count(), 2);
  await expectText(said.nth(0), /^user#0 · .*UTCPlease use this signature: <img src=x onerror="window.__xss = 1">$/);
  await noMarkupRan(page);
  await memories.getByRole("button", { name: "Read session carol-1" }).click();
  await expectText(memories.getByRole("heading", { name: "Session carol-1 with support" }), /carol-1/);
  assert.equal(await said.count(), 12);
  await expectText(said.nth(11), /rain gear: the bridge deck is exposed\.$/);
  await shot(page, "07-memory-history");

  await contextPreview(page);

  // Erasing the user: only after the exact user id, then everything of Carol is gone, the
  // receipt says what, and Dave keeps his.
  for (const wrong of ["", "Carol", "carol ", "dave"]) {
    await memories.getByLabel("Type the user id to confirm").fill(wrong);
    await memories.getByRole("button", { name: "Erase user and all their data" }).click();
    await expectText(memories.getByRole("alert"), /Type the user id carol exactly to confirm\. Nothing was erased\./);
  }
  assert.equal((await api("GET", "/v1/users/carol/memories")).body.memories.length, 11);
  await memories.getByLabel("Type the user id to confirm").fill("carol");
  await memories.getByRole("button", { name: "Erase user and all their data" }).click();
  const erased = await expectText(memories.getByRole("status"), /^Erasure #\d+ done: .*\b2 sessions\b.*\b11 memories\b/);
  const erasureId = Number(/#(\d+)/.exec(erased)[1]);
  await expectText(memories.locator("#mem-info"), /^No long-term memories\.$/);
  await expectText(memories.locator("#history-info"), /\(0 sessions\)/);
  assert.equal((await api("GET", "/v1/users/carol/memories")).body.memories.length, 0);
  assert.equal((await api("GET", "/v1/sessions/carol-1")).status, 404);
  assert.equal((await api("GET", "/v1/users/dave/memories")).body.memories.length, 1);
  assert.equal((await api("GET", "/v1/sessions/dave-1")).status, 200);

  // The receipt, as the API gives it.
  const receipt = await api("GET", `/v1/admin/erasures/${erasureId}`);
  assert.equal(receipt.status, 200);
  const row = receipts.locator(`tr[data-erasure="${erasureId}"]`);
  await expectText(row, /user carol/);
  const cells = await row.locator("td").allTextContents();
  assert.equal(cells[0], `#${erasureId}`);
  assert.equal(cells[1], "user carolby api");
  const shownTime = (at) => new Date(at).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  assert.equal(cells[2], shownTime(receipt.body.requested_at));
  assert.equal(cells[3], shownTime(receipt.body.completed_at));
  const counts = Object.entries(receipt.body.counts).filter(([, n]) => n > 0)
    .map(([kind, n]) => `${n} ${kind.replaceAll("_", " ")}`).join(", ");
  assert.equal(cells[4], counts);
  assert.match(cells[4], /\b14 messages\b/);
  assert.deepEqual(cells[5].split(", ").sort(), ["carol-1", "carol-2"]);
  assert.deepEqual([...receipt.body.session_ids].sort(), ["carol-1", "carol-2"]);
  // The newest first, and the purges of the first part still listed.
  assert.equal(await receiptRows.first().getAttribute("data-erasure"), String(erasureId));
  await expectText(receipts, /every conversation/);
  await expectText(receipts, /conversations inactive for more than 30 days/);
  await shot(page, "09-erasure-receipts");
}

// The context preview of carol-1, opened from the session browser, checked against the
// API's own answer for the same request.
async function contextPreview(page) {
  const sessions = region(page, "Sessions");
  await sessions.getByLabel("User").fill("carol");
  await sessions.getByLabel("Agent").fill("");
  await sessions.getByRole("button", { name: "Filter" }).click();
  await expectText(sessions.getByRole("status").first(), /\(2 sessions\)/);
  await sessions.getByRole("button", { name: "Open session carol-1" }).click();
  await expectText(sessions.getByRole("heading", { name: "Session carol-1" }), /carol-1/);
  await sessions.getByRole("button", { name: "Preview its context" }).click();

  const preview = region(page, "Context preview");
  assert.equal(await preview.getByLabel("Session").inputValue(), "carol-1");
  await expectText(preview.locator("#ctx-summary"), /^Session carol-1, strategy combined: /);
  await checkPreview(preview, await api("POST", "/v1/sessions/carol-1/context", {}));

  // With a question the window narrows and recall joins: the report's drops are listed.
  const query = "How many people are in the crew?";
  await preview.getByLabel("Next user message (optional)").fill(query);
  await preview.getByRole("button", { name: "Preview context" }).click();
  await page.waitForFunction(() => !document.getElementById("context-view").hidden &&
    document.querySelectorAll("#ctx-layers tr").length > 0);
  const built = await api("POST", "/v1/sessions/carol-1/context", { query });
  assert.ok(built.body.report.dropped.length > 0, "a narrower window leaves out the oldest exchanges");
  await checkPreview(preview, built);
  await shot(page, "08-context-preview");

  // The server's error for a session that is not there.
  await preview.getByLabel("Session").fill("no-such-session");
  await preview.getByRole("button", { name: "Preview context" }).click();
  await expectText(preview.getByRole("alert"), /^Error 404 \(session_not_found\): /);
  assert.equal(await preview.locator("#context-view").isVisible(), false);
}

async function checkPreview(preview, answer) {
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  const { report, settings, messages } = answer.body;
  const reserve = settings.context_window - report.budget;
  const unused = report.budget - report.total_tokens;
  await expectText(preview.locator("#ctx-summary"), new RegExp(
    `strategy ${report.strategy}: ${report.total_tokens} of ${report.budget} budget tokens used, ` +
    `${unused} unused; ${reserve} tokens of the ${settings.context_window}-token window kept in reserve`));
  assert.ok(report.layers.some((layer) => layer.layer === "window"));

  // The bar: a part per layer with its tokens, then the unused budget and the reserve, each
  // as wide as its share of the window.
  const bar = preview.getByRole("img", { name: /^Token budget: / });
  const parts = await bar.locator("span").evaluateAll((spans) => spans.map((span) =>
    [span.dataset.part, Number(span.dataset.tokens), span.getBoundingClientRect().width]));
  const barWidth = await bar.evaluate((node) => node.clientWidth);
  const expected = [...report.layers.map((layer) => [layer.layer, layer.tokens]),
    ["unused", unused], ["reserve", reserve]];
  assert.deepEqual(parts.map(([part, tokens]) => [part, tokens]), expected);
  for (const [part, tokens, width] of parts) {
    const share = tokens / settings.context_window;
    assert.ok(Math.abs(width - share * barWidth) <= 1.5, `${part}: ${width}px for ${share} of ${barWidth}px`);
  }

  // The layer table says the same in numbers.
  const share = (tokens) => `${(100 * tokens / settings.context_window).toFixed(1)}%`;
  const layerRows = await rowTexts(preview.getByRole("table", { name: "Tokens by layer" }));
  assert.deepEqual(layerRows, [
    ...report.layers.map((l) => `${l.layer}${l.pieces}${l.tokens}${share(l.tokens)}`),
    `unused budget${unused}${share(unused)}`,
    `reserve${reserve}${share(reserve)}`,
  ]);

  // Dropped pieces, as reported.
  const droppedRows = await rowTexts(preview.getByRole("table", { name: "Dropped pieces" }));
  assert.deepEqual(droppedRows, report.dropped.length === 0 ? ["Nothing was left out."]
    : report.dropped.map((d) => `${d.layer}${d.sources.join(", ")}${d.tokens}${d.reason.replaceAll("_", " ")}`));

  // Every message the model would receive, in order, with its layer.
  const layerOf = report.layers.flatMap((layer) => Array(layer.pieces).fill(layer.layer));
  assert.equal(layerOf.length, messages.length);
  const items = await preview.getByRole("list", { name: "Context messages" }).getByRole("listitem").allTextContents();
  assert.deepEqual(items, messages.map((m, n) => `${layerOf[n]}${m.role}${m.content}`));
}

await main();
