/**
 * The TypeScript client of memlayer, the self-hosted memory layer for LLM agents.
 *
 *     import { Client } from 'memlayer';
 *
 *     const client = new Client({ baseUrl: 'http://127.0.0.1:7700', apiKey: 'mlk_…' });
 *     await client.append('s1', [{ role: 'user', content: "I'm vegetarian." }],
 *                         { userId: 'alice', agentId: 'support' });
 *     const context = await client.context('s1', { query: 'dinner ideas' });
 *
 * Results are the server's JSON, typed by the schemas of its `/openapi.json`; every error
 * answer rejects with a `MemlayerError` subclass carrying `status`, `code` and `message`.
 */

export { Client } from './client.js';
export type {
  AppendOptions,
  ClientOptions,
  ContextOptions,
  CreateKeyOptions,
  CreateSessionOptions,
  ErasuresOptions,
  ListSessionsOptions,
  MemoriesOptions,
  MessagesOptions,
  RecallOptions,
  RecallTurnsOptions,
  RememberOptions,
  RequestOptions,
  SearchOptions,
} from './client.js';
export {
  APIConnectionError,
  ConflictError,
  errorFor,
  ForbiddenError,
  InvalidRequestError,
  MemlayerError,
  NotFoundError,
  RateLimitedError,
  ServerError,
  UnauthorizedError,
  UnprocessableError,
} from './errors.js';
export type { ErrorDetails, ErrorKind } from './errors.js';
export type * from './types.js';
export { VERSION } from './version.js';
