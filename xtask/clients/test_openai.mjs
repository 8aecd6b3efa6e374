// The official OpenAI JavaScript SDK against memlayer's OpenAI-compatible endpoint.
//
// `cargo xtask clients` runs it (after the Python SDK's test, on the same server and fake
// model) with MEMLAYER_URL, MEMLAYER_ADMIN_KEY and FAKE_UPSTREAM_CONTROL set. The SDK is used
// as its users use it: `baseURL` and `apiKey`, the memlayer headers in `defaultHeaders` and
// per-request `headers`, `withResponse()` to read the session header, its error classes.

import assert from 'node:assert/strict';
import test from 'node:test';

import OpenAI from 'openai';

const URL = process.env.MEMLAYER_URL;
const KEY = process.env.MEMLAYER_ADMIN_KEY;
const CONTROL = process.env.FAKE_UPSTREAM_CONTROL;

const client = new OpenAI({
  baseURL: `${URL}/v1/openai`,
  apiKey: KEY,
  defaultHeaders: { 'x-memlayer-user': 'jules', 'x-memlayer-agent': 'support' },
});

async function http(method, url, body, key) {
  const headers = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.ok(response.ok, `${method} ${url}: ${response.status} ${await response.clone().text()}`);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** Queues the fake model's next answer. */
const script = (reply) => http('POST', `${CONTROL}/replies`, reply);
const upstreamRequests = () => http('GET', `${CONTROL}/requests`);

/** The session's messages as memlayer stored them, as [role, content] pairs. */
async function stored(session) {
  const page = await http('GET', `${URL}/v1/sessions/${session}/messages`, undefined, KEY);
  return page.messages.map((m) => [m.role, m.content]);
}

async function firstTurn() {
  await script({ text: 'Hello Jules, noted: you prefer trains.' });
  const { data, response } = await client.chat.completions
    .create({
      model: 'gpt-4o',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'I am Jules and I prefer trains.' },
      ],
    })
    .withResponse();
  const session = response.headers.get('x-memlayer-session');
  assert.equal(data.object, 'chat.completion');
  assert.equal(data.choices[0].message.content, 'Hello Jules, noted: you prefer trains.');
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.ok(data.usage.total_tokens > 0);
  assert.deepEqual(await stored(session), [
    ['user', 'I am Jules and I prefer trains.'],
    ['assistant', 'Hello Jules, noted: you prefer trains.'],
  ]);
  return session;
}

test('a completion stores the turn and answers in OpenAI\'s shape', async () => {
  await firstTurn();
});

test('a stream continues the session with the earlier turn in the context', async () => {
  const session = await firstTurn();
  await script({ text: 'Take the night train.', chunk_delay_ms: 5 });
  const stream = await client.chat.completions.create(
    {
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'How should I travel?' }],
      stream: true,
      stream_options: { include_usage: true },
    },
    { headers: { 'x-memlayer-session': session } },
  );
  const pieces = [];
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    usage = chunk.usage ?? usage;
    for (const choice of chunk.choices) {
      if (choice.delta.content) pieces.push(choice.delta.content);
      finish = choice.finish_reason ?? finish;
    }
  }
  assert.equal(pieces.join(''), 'Take the night train.');
  assert.ok(pieces.length > 1);
  assert.equal(finish, 'stop');
  assert.ok(usage.total_tokens > 0);
  const sent = (await upstreamRequests()).at(-1).body.messages;
  assert.ok(sent.slice(0, -1).some((m) => (m.content ?? '').includes('prefer trains')));
  assert.deepEqual((await stored(session)).slice(2), [
    ['user', 'How should I travel?'],
    ['assistant', 'Take the night train.'],
  ]);
});

test('tool calls come back and their results continue the turn', async () => {
  const call = {
    id: 'call_1',
    type: 'function',
    function: { name: 'book_train', arguments: '{"to":"Lyon"}' },
  };
  const tools = [
    { type: 'function', function: { name: 'book_train', parameters: { type: 'object' } } },
  ];
  await script({ tool_calls: [call] });
  const question = { role: 'user', content: 'Book me a train to Lyon.' };
  const { data, response } = await client.chat.completions
    .create({ model: 'gpt-4o', messages: [question], tools })
    .withResponse();
  const session = response.headers.get('x-memlayer-session');
  const message = data.choices[0].message;
  assert.equal(data.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(message.tool_calls, [call]);

  await script({ text: 'Booked: the 9:04 to Lyon.' });
  const answer = await client.chat.completions.create(
    {
      model: 'gpt-4o',
      messages: [question, message, { role: 'tool', tool_call_id: 'call_1', content: 'booked 9:04' }],
      tools,
    },
    { headers: { 'x-memlayer-session': session } },
  );
  assert.equal(answer.choices[0].message.content, 'Booked: the 9:04 to Lyon.');
  assert.deepEqual(await stored(session), [
    ['user', 'Book me a train to Lyon.'],
    ['assistant', 'Booked: the 9:04 to Lyon.'],
  ]);
});

test('errors are raised with their status and memlayer\'s code', async () => {
  // Nothing scripted: the fake model answers 500, memlayer 502.
  const noRetries = client.withOptions({ maxRetries: 0 });
  await assert.rejects(
    noRetries.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi?' }] }),
    (error) => {
      assert.ok(error instanceof OpenAI.InternalServerError, String(error));
      assert.equal(error.status, 502);
      assert.equal(error.error.code, 'upstream_failed');
      return true;
    },
  );
  const headless = new OpenAI({ baseURL: `${URL}/v1/openai`, apiKey: KEY, maxRetries: 0 });
  await assert.rejects(
    headless.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi?' }] }),
    (error) => {
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal(error.status, 400);
      assert.equal(error.error.code, 'missing_header');
      return true;
    },
  );
  const stream = await noRetries.chat.completions.create({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'Still there?' }],
    stream: true,
  });
  await assert.rejects(
    (async () => {
      for await (const _ of stream);
    })(),
    (error) => {
      assert.ok(error instanceof OpenAI.APIError, String(error));
      assert.equal(error.error.code, 'upstream_failed');
      return true;
    },
  );
});
