//! memlayer's end-to-end tests, one binary: every test starts the real server
//! (`memlayer_server::serve`) on an ephemeral 127.0.0.1 port over a real redb file in a fresh
//! temporary directory (`memlayer_tests::TestServer`) and talks to it over HTTP.

// Sessions, messages and runs: creation, create-on-first-use, reads, listings, paging,
// deletion, turn state and tenant isolation.
mod sessions;
// Retried appends with an idempotency key: replayed, never stored twice; a reused key with
// another body is a conflict.
mod idempotency;
// Malformed, oversized, mistyped and invalid requests: a clear 4xx in the API's error shape,
// and the store unchanged.
mod bad_input;
// Everything acknowledged survives a restart on the same file, including one in mid-load.
mod durability;
// PostgreSQL stopped under the server: 503s meanwhile, then recovery by itself, and an
// interrupted erasure finished soon after.
mod database;
// Many clients at once: no lost or duplicated message, gapless indices, per-client order.
mod concurrency;
// Hybrid recall with the real embedding model: by meaning and by words, scoped, forgotten on
// delete, kept over a restart.
mod recall;
// Context assembly: strategies, the combined strategy's layers, formats and the report;
// summarised overflow with the extractive summariser and with a model behind the OpenAI wire
// format (a fake upstream on 127.0.0.1), falling back when it fails.
mod context;
// Saved settings per tenant and agent, laid under a request's overrides; an agent's memory
// configuration document mapped onto them.
mod settings;
// Long-term memories and agent tools: isolation, dedupe, pre-load into the next
// conversation, tool calls, forgetting.
mod memories;
// Episodic lessons: episodes recorded, lessons by task type, the context's lessons layer,
// isolation between users and tenants, validation, erasure with the session and the user.
mod episodes;
// Ids of memories, episodes and erasures: random, exact in JavaScript, and every listing in
// its documented order all the same.
mod ids;
// Bounded reads: long sessions, run logs and memory listings in pages, contexts reading the
// newest messages, memory histories and tags capped, searches with a bounded number of words.
mod bounds;
// Erasure by message, session and user: canaries gone from every API and every file byte;
// purge, stats, receipts and retention.
mod erasure;
// session_search over the whole history and clear_session's checkpoint.
mod search_clear;
// The agent tools over MCP (streamable HTTP) with the official SDK's client: initialise, list,
// run each tool and check its effect; keys checked as on every `/v1` route.
mod mcp;
// Operating the server: the OpenAPI document checked against real requests and answers, the
// offline docs page, Prometheus metrics by route template, request ids.
mod operations;
// API keys and roles: probes public, `/v1` behind a key; keys created, listed and revoked over
// HTTP and kept across restarts; service keys cannot administer; user keys see only their own
// user's sessions and memories, and everything else is `404`.
mod auth;
// Users racing each other: ownership checked in the store transaction that reads or writes,
// never before the body arrives; random interleavings never show one user's text to another.
mod isolation;
// Agent runs against a model behind the OpenAI wire format (a fake upstream on 127.0.0.1):
// messages and runs stored, context and memories sent upstream, the memory tool loop,
// streamed answers, and failures that keep the user's message and record a failed run.
mod runs;
// The OpenAI-compatible chat endpoint with memory, against a fake model: turns stored, the
// context in place of the client's history, OpenAI's answer and chunk shapes, tool calls
// passed through, isolation, and failures and bad input that store no answer.
mod openai;
// Connections: the header read timeout (slow heads, idle kept-alive connections), the
// connection cap, and a graceful stop with idle and stalled clients connected.
mod connections;
// Disk faults: a full tmpfs answers typed errors while reads go on, and writes resume by
// themselves once space is freed, every acknowledged append stored exactly once; an erasure
// the disk interrupted finishes then; a store that cannot be reopened stops the server.
mod disk_full;
