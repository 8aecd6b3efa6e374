// The admin page's browser test: run by `cargo xtask browser`, which starts the real server
// (MEMLAYER_URL, with the admin key MEMLAYER_ADMIN_KEY) and names Debian's Chromium
// (CHROMIUM) and where screenshots go (ARTIFACTS_DIR). It seeds sessions through the API,
// drives the page as an operator would (finding elements by role and label, as assistive
// technology does), and checks through the API that what the page claims happened did.
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

await main();
