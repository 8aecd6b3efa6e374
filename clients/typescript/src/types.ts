/**
 * The API's JSON shapes, named: each is the schema of the server's `/openapi.json` that
 * `generated/openapi.ts` holds, so a changed schema changes these types. Results are the
 * server's JSON as it sent it (snake_case keys); timestamps are RFC 3339 strings.
 */

import type { components, operations, paths } from './generated/openapi.js';

type Schemas = components['schemas'];

export type { components, operations, paths };

export type Role = Schemas['Role'];
export type MemoryType = Schemas['MemoryKind'];
export type ContextFormat = Schemas['OutputFormat'];
export type KeyRole = Schemas['KeyRole'];
export type KeyState = Schemas['KeyState'];
export type Metadata = Schemas['Metadata'];

/** One message to append: `{ role, content }`, with an optional `timestamp`, `metadata`. */
export type MessageInput = Schemas['MessageInput'];
export type Message = Schemas['Message'];
export type Session = Schemas['Session'];
export type SessionWithMessages = Schemas['SessionWithMessages'];
export type SessionPage = Schemas['SessionPage'];
export type MessagesPage = Schemas['MessagesPage'];
export type AppendResult = Schemas['AppendResponse'];
export type Cleared = Schemas['Cleared'];
export type Ending = Schemas['Ending'];
export type SearchHit = Schemas['SearchHit'];
export type SearchResults = Schemas['SearchResults'];

/**
 * Context settings, as saved ones or a request's own; any key left out takes the agent's
 * saved value or the default.
 */
export type ContextSettings = Schemas['SettingsDocument'];
/**
 * The context for the next model call: `messages` (and `system` for `anthropic`) or `text`,
 * by `format`; `report` says what went in and why.
 */
export type ContextResult = Schemas['ContextResponse'];
/** A context in OpenAI's format (the default): `messages`, the system prompt first. */
export type OpenAIContext = Exclude<
  Extract<ContextResult, { messages: unknown }>,
  { system: unknown }
>;
/** A context in Anthropic's format: `system` apart from the `messages`. */
export type AnthropicContext = Extract<ContextResult, { system: unknown }>;
/** A context as one `text`. */
export type TextContext = Extract<ContextResult, { text: unknown }>;
/** One message of a context, in the format asked for. */
export type ChatMessage = Schemas['ChatMessage'];

export type RecallHit = Schemas['RecallHit'];
export type RecallResult = Schemas['RecallResponse'];

export type Memory = Schemas['MemoryBody'];
export type MemoryHit = Schemas['MemoryHitBody'];
export type MemoryList = Schemas['MemoryList'];
export type MemorySource = Schemas['SourceBody'];
export type Remembered = Schemas['Remembered'];

/** What an erasure erased: counts and ids, never content. */
export type Receipt = Schemas['ReceiptBody'];
/** An erasure still running: `{ erasure_id, status: "running" }`. */
export type RunningErasure = Schemas['Running'];

/** A key as listed: never its secret. */
export type ApiKey = Schemas['ApiKey'];
/** A new key: its secret `key` is in this answer only. */
export type CreatedKey = Schemas['CreatedKey'];

/** The error body every error answer carries: `{ error: { code, message } }`. */
export type ErrorBody = Schemas['ErrorBody'];
