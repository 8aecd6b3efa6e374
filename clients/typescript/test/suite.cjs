'use strict';
// The package's tests against the real server, run once per build: `esm.test.mjs` passes
// what `import` gives, `cjs.test.cjs` what `require` gives, so each format is proven on its
// own. `cargo xtask clients` starts the server and sets MEMLAYER_URL and MEMLAYER_ADMIN_KEY
// (its admin key); the tests share its store, so every one uses ids no other test uses.

const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { readFileSync } = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { describe, test } = require('node:test');

const URL = process.env.MEMLAYER_URL;
const ADMIN_KEY = process.env.MEMLAYER_ADMIN_KEY;

const unique = (prefix) => `${prefix}-${randomUUID().replaceAll('-', '').slice(0, 12)}`;
const turn = (content, role = 'user') => ({ role, content });

/** The error `promise` rejects with, which must be an instance of `kind`. */
async function rejection(promise, kind) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof kind, `${error} is not a ${kind.name}`);
    return error;
  }
  assert.fail(`resolved; a ${kind.name} was expected`);
}

/** Collects an async iterator. */
async function collect(iterator) {
  const items = [];
  for await (const item of iterator) items.push(item);
  return items;
}

/** A port of 127.0.0.1 nothing listens on. */
function closedPort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

module.exports = function suite(memlayer, format) {
  assert.ok(URL && ADMIN_KEY, 'MEMLAYER_URL and MEMLAYER_ADMIN_KEY must be set');
  const { Client } = memlayer;
  const admin = () => new Client({ baseUrl: URL, apiKey: ADMIN_KEY, timeout: 30_000 });

  describe(`memlayer (${format})`, () => {
    test('append creates the session, a retry is replayed, context assembles it', async () => {
      const client = admin();
      const [user, session] = [unique('user'), unique('session')];
      const conversation = [
        turn('I live in Lyon and I am vegetarian.'),
        turn('Noted!', 'assistant'),
      ];
      const owner = { userId: user, agentId: 'support' };
      const first = await client.append(session, conversation, { ...owner, idempotencyKey: 'k1' });
      assert.deepEqual(first, {
        session_id: session,
        indices: [0, 1],
        created_session: true,
        replayed: false,
      });
      const again = await client.append(session, conversation, { ...owner, idempotencyKey: 'k1' });
      assert.equal(again.replayed, true);
      const conflict = await rejection(
        client.append(session, [turn('Another request')], { idempotencyKey: 'k1' }),
        memlayer.ConflictError,
      );
      assert.equal(conflict.status, 409);

      const context = await client.context(session, { query: 'dinner ideas' });
      assert.equal(context.format, 'openai');
      const turns = context.messages.filter((m) => m.role !== 'system').map((m) => m.content);
      assert.deepEqual(turns, ['I live in Lyon and I am vegetarian.', 'Noted!']);
      assert.ok(context.report);
      const text = await client.context(session, {
        settings: { strategy: 'sliding_window', max_turns: 1 },
        format: 'text',
      });
      assert.equal(text.format, 'text');
      assert.equal(text.settings.strategy, 'sliding_window');
      assert.match(text.text, /Noted!/);

      const stored = await client.getSession(session);
      assert.equal(stored.user_id, user);
      assert.equal(stored.agent_id, 'support');
      assert.deepEqual(
        stored.messages.map((m) => m.role),
        ['user', 'assistant'],
      );
      const found = await client.search(session, 'LYON');
      assert.deepEqual(
        found.hits.map((hit) => hit.index),
        [0],
      );
      const recalled = await client.recallTurns('Lyon', { userId: user, k: 5 });
      assert.equal(recalled.hits[0].session_id, session);
      assert.equal((await client.clear(session)).load_from, 2);
      assert.deepEqual(await client.end(session), { session_id: session, merging: true });
    });

    test("the client's userId and agentId own the sessions append creates", async () => {
      const [user, session] = [unique('user'), unique('session')];
      const client = new Client({ baseUrl: URL, apiKey: ADMIN_KEY, userId: user, agentId: 'bot' });
      assert.equal((await client.append(session, [turn('hi')])).created_session, true);
      const stored = await client.getSession(session);
      assert.deepEqual([stored.user_id, stored.agent_id], [user, 'bot']);
    });

    test('sessions are created, listed page by page and deleted', async () => {
      const client = admin();
      const user = unique('user');
      const ids = new Set();
      for (let n = 0; n < 5; n += 1) {
        ids.add((await client.createSession(user, 'support')).session_id);
      }
      const first = await client.listSessions({ userId: user, pageSize: 2 });
      assert.deepEqual([first.total_pages, first.content.length], [3, 2]);
      const listed = await collect(client.iterSessions({ userId: user, pageSize: 2 }));
      assert.equal(listed.length, 5);
      assert.deepEqual(new Set(listed.map((s) => s.session_id)), ids);

      const named = unique('session');
      const created = await client.createSession(user, 'billing', {
        sessionId: named,
        metadata: { channel: 'web' },
      });
      assert.deepEqual(created.metadata, { channel: 'web' });
      await rejection(
        client.createSession(user, 'billing', { sessionId: named }),
        memlayer.ConflictError,
      );
      assert.equal(await client.deleteSession(named), undefined);
      await rejection(client.getSession(named), memlayer.NotFoundError);
    });

    test('iterMessages follows next_from over several pages', async () => {
      const client = admin();
      const session = unique('session');
      const contents = Array.from({ length: 7 }, (_, n) => `message ${n}`);
      await client.append(
        session,
        contents.map((c) => turn(c)),
        { userId: unique('user'), agentId: 'support' },
      );
      const page = await client.messages(session, { limit: 3 });
      assert.deepEqual(
        page.messages.map((m) => m.index),
        [0, 1, 2],
      );
      assert.equal(page.next_from, 3);
      const walked = await collect(client.iterMessages(session, { limit: 3 }));
      assert.deepEqual(
        walked.map((m) => m.content),
        contents,
      );
      const tail = await collect(client.iterMessages(session, { start: 5, limit: 3 }));
      assert.deepEqual(
        tail.map((m) => m.index),
        [5, 6],
      );
      const receipt = await client.eraseMessage(session, 0);
      assert.equal(receipt.counts.messages, 1);
      assert.equal((await collect(client.iterMessages(session)))[0].content, 'message 1');
    });

    test('remember, recall, get, list page by page and forget memories', async () => {
      const client = admin();
      const user = unique('user');
      const preference = { type: 'preference' };
      const made = await client.remember(user, 'Prefers email over phone calls', preference);
      assert.equal(made.action, 'created');
      const memory = made.memory;
      assert.deepEqual([memory.type, memory.user_id], ['preference', user]);
      const same = await client.remember(user, 'Prefers email over phone calls', preference);
      assert.equal(same.action, 'unchanged');
      await client.remember(user, 'Lives in Lyon', { tags: ['home'] });
      await client.remember(user, 'Has a dog named Rex', { type: 'relationship' });

      const hits = await client.recall(user, 'email or phone', { k: 2 });
      assert.ok(hits.length <= 2);
      assert.equal(hits[0].memory_id, memory.memory_id);
      assert.equal(typeof hits[0].score, 'number');
      const homes = await client.recall(user, 'where', { tags: ['home'] });
      assert.deepEqual(
        homes.map((h) => h.text),
        ['Lives in Lyon'],
      );

      const first = await client.memories(user, { limit: 2 });
      assert.equal(first.memories.length, 2);
      assert.notEqual(first.next_after ?? null, null);
      const walked = await collect(client.iterMemories(user, { limit: 2 }));
      assert.deepEqual(
        walked.map((m) => m.text),
        ['Prefers email over phone calls', 'Lives in Lyon', 'Has a dog named Rex'],
      );
      assert.equal((await client.getMemory(memory.memory_id)).text, memory.text);

      const receipt = await client.forget(memory.memory_id);
      assert.deepEqual(receipt.target, { kind: 'memory', memory_id: memory.memory_id });
      assert.equal(receipt.counts.memories, 1);
      const gone = await rejection(client.getMemory(memory.memory_id), memlayer.NotFoundError);
      assert.equal(gone.status, 404);
      await rejection(client.forget(memory.memory_id), memlayer.NotFoundError);
    });

    test('putMemory names a memory by a key; memoryByKey reads it; forgetting frees the key', async () => {
      const client = admin();
      const user = unique('user');
      const put = await client.putMemory(user, 'seat', 'Prefers window seats');
      assert.deepEqual([put.action, put.memory.key], ['created', 'seat']);
      // Nearly the same words under another key are another memory.
      const other = await client.putMemory(user, 'seat-2', 'Prefers window seat');
      assert.notEqual(other.memory.memory_id, put.memory.memory_id);
      const moved = await client.putMemory(user, 'seat', 'Prefers aisle seats', { tags: ['travel'] });
      assert.deepEqual(
        [moved.action, moved.memory.memory_id, moved.memory.tags],
        ['updated', put.memory.memory_id, ['travel']],
      );
      const read = await client.memoryByKey(user, 'seat');
      assert.equal(read.text, 'Prefers aisle seats');
      assert.equal(read.history[0].text, 'Prefers window seats');
      await rejection(client.memoryByKey(user, 'seat', { agentId: 'planner' }), memlayer.NotFoundError);
      await client.forget(read.memory_id);
      await rejection(client.memoryByKey(user, 'seat'), memlayer.NotFoundError);
      const invalid = await rejection(client.putMemory(user, 'two words', 'x'), memlayer.UnprocessableError);
      assert.equal(invalid.code, 'invalid_id');
    });

    test('eraseUser answers a receipt, listed with the erasures', async () => {
      const client = admin();
      const [user, session] = [unique('user'), unique('session')];
      await client.append(session, [turn('hello')], { userId: user, agentId: 'support' });
      await client.remember(user, 'Likes tea');
      const receipt = await client.eraseUser(user);
      assert.deepEqual(receipt.target, { kind: 'user', user_id: user });
      assert.deepEqual(receipt.session_ids, [session]);
      assert.equal(receipt.counts.messages, 1);
      assert.equal(receipt.counts.memories, 1);
      const listed = await client.erasures();
      assert.ok(listed.some((r) => r.erasure_id === receipt.erasure_id));
      assert.deepEqual(await client.erasure(receipt.erasure_id), receipt);
      assert.deepEqual((await client.memories(user)).memories, []);
      await rejection(client.getSession(session), memlayer.NotFoundError);
    });

    test('keys: created, used, limited to their user, revoked', async () => {
      const client = admin();
      const [user, session] = [unique('user'), unique('session')];
      const created = await client.createKey('user', { userId: user, name: 'test key' });
      assert.match(created.key, /^mlk_/);
      assert.ok((await client.listKeys()).some((k) => k.prefix === created.prefix));
      const own = new Client({ baseUrl: URL, apiKey: created.key });
      await own.append(session, [turn('mine')], { userId: user, agentId: 'support' });
      const forbidden = await rejection(
        own.append(unique('session'), [turn('theirs')], { userId: 'someone-else', agentId: 'a' }),
        memlayer.ForbiddenError,
      );
      assert.equal(forbidden.status, 403);
      assert.equal((await client.revokeKey(created.prefix)).state, 'revoked');
      await rejection(own.getSession(session), memlayer.UnauthorizedError);
    });

    test('errors: 401 for a missing or unknown key', async () => {
      for (const apiKey of [undefined, 'mlk_not_a_key']) {
        const anonymous = new Client({ baseUrl: URL, apiKey });
        const error = await rejection(anonymous.listSessions(), memlayer.UnauthorizedError);
        assert.ok(error instanceof memlayer.MemlayerError);
        const { status, code, kind } = error;
        assert.deepEqual([status, code, kind], [401, 'unauthorized', 'unauthorized']);
        assert.equal(error.name, 'UnauthorizedError');
      }
    });

    test('errors: 404 for an unknown session, with the request id', async () => {
      const error = await rejection(admin().getSession(unique('missing')), memlayer.NotFoundError);
      assert.ok(error instanceof memlayer.MemlayerError);
      assert.ok(error instanceof Error);
      const { status, code, kind } = error;
      assert.deepEqual([status, code, kind], [404, 'session_not_found', 'not_found']);
      assert.match(error.message, /not found/);
      assert.ok(error.requestId);
      assert.match(String(error), /^NotFoundError: 404 session_not_found: /);
    });

    test('errors: 422 for an invalid id, value or settings', async () => {
      const client = admin();
      const badId = await rejection(client.getSession('not an id'), memlayer.UnprocessableError);
      assert.ok(badId instanceof memlayer.InvalidRequestError);
      assert.deepEqual([badId.status, badId.code], [422, 'invalid_id']);
      const badK = await rejection(
        client.recall(unique('user'), 'tea', { k: 0 }),
        memlayer.UnprocessableError,
      );
      assert.equal(badK.status, 422);
      const session = unique('session');
      await client.append(session, [turn('hi')], { userId: unique('user'), agentId: 'support' });
      const badSettings = await rejection(
        client.context(session, { settings: { strategy: 'no-such-strategy' } }),
        memlayer.UnprocessableError,
      );
      assert.equal(badSettings.status, 422);
      // An id holding a slash is one path segment, percent-encoded: it reaches no other route.
      const slash = await rejection(client.getSession('a/messages'), memlayer.MemlayerError);
      assert.ok([404, 422].includes(slash.status));
    });

    test('errors: no server is a connection error, a slow one a timeout', async () => {
      const port = await closedPort();
      const gone = new Client({ baseUrl: `http://127.0.0.1:${port}`, apiKey: ADMIN_KEY });
      const error = await rejection(gone.listSessions(), memlayer.APIConnectionError);
      const { status, code, kind } = error;
      assert.deepEqual([status, code, kind], [0, 'connection_error', 'connection']);

      // A server that accepts the connection and never answers.
      const sockets = new Set();
      const silent = net.createServer((socket) => sockets.add(socket));
      await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
      try {
        const baseUrl = `http://127.0.0.1:${silent.address().port}`;
        const slow = new Client({ baseUrl, timeout: 200 });
        const late = await rejection(slow.listSessions(), memlayer.APIConnectionError);
        assert.deepEqual([late.status, late.code], [0, 'timeout']);
        // The caller's own signal aborts with the caller's reason, not a MemlayerError.
        const controller = new AbortController();
        const pending = slow.listSessions({ signal: controller.signal, timeout: 0 });
        controller.abort(new Error('stop'));
        await assert.rejects(pending, /stop/);
      } finally {
        for (const socket of sockets) socket.destroy();
        silent.close();
      }
    });

    test('errorFor maps the statuses a test cannot provoke (429, 5xx, foreign bodies)', () => {
      const { errorFor } = memlayer;
      const body = { error: { code: 'rate_limited', message: 'too many requests' } };
      const headers = new Headers({ 'retry-after': '2', 'x-request-id': 'r1' });
      const limited = errorFor(429, headers, body);
      assert.ok(limited instanceof memlayer.RateLimitedError);
      assert.deepEqual(
        [limited.status, limited.code, limited.message, limited.retryAfter, limited.requestId],
        [429, 'rate_limited', 'too many requests', 2, 'r1'],
      );
      for (const [status, code] of [
        [503, 'overloaded'],
        [507, 'storage_full'],
        [502, 'upstream_failed'],
      ]) {
        const error = errorFor(status, new Headers(), { error: { code, message: 'm' } });
        assert.ok(error instanceof memlayer.ServerError);
        assert.deepEqual([error.status, error.code, error.kind], [status, code, 'server']);
      }
      const classes = {
        400: memlayer.InvalidRequestError,
        401: memlayer.UnauthorizedError,
        403: memlayer.ForbiddenError,
        404: memlayer.NotFoundError,
        409: memlayer.ConflictError,
        413: memlayer.InvalidRequestError,
        415: memlayer.InvalidRequestError,
        422: memlayer.UnprocessableError,
      };
      for (const [status, kind] of Object.entries(classes)) {
        const body = { error: { code: 'c', message: 'm' } };
        const error = errorFor(Number(status), new Headers(), body);
        assert.equal(error.constructor, kind);
      }
      assert.equal(errorFor(405, new Headers(), undefined).constructor, memlayer.MemlayerError);
      // A proxy in front of the server may answer with its own body, and a date to retry at.
      const date = new Headers({ 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' });
      const proxy = errorFor(502, date, '<html>');
      assert.deepEqual(
        [proxy.code, proxy.message, proxy.retryAfter],
        ['http_error', 'HTTP 502', undefined],
      );
    });

    test('the package has no runtime dependencies, and its version is the one it reports', () => {
      const manifest = JSON.parse(readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8'));
      assert.equal(manifest.dependencies, undefined);
      assert.equal(manifest.peerDependencies, undefined);
      assert.equal(manifest.optionalDependencies, undefined);
      assert.equal(memlayer.VERSION, manifest.version);
    });
  });
};
