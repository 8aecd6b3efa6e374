/**
 * `Client`: memlayer's API over the global `fetch`. Every method is one typed request:
 * `request` takes the route as the OpenAPI document spells it (`'/v1/sessions/{session_id}'`),
 * and its path parameters, query, body and answer are the types `generated/openapi.ts` gives
 * that route, so a route or a field the server no longer has breaks the build.
 */

import type { paths } from './generated/openapi.js';
import { APIConnectionError, errorFor } from './errors.js';
import type {
  AnthropicContext,
  ApiKey,
  AppendResult,
  Cleared,
  ContextFormat,
  ContextResult,
  ContextSettings,
  CreatedKey,
  Ending,
  KeyRole,
  Memory,
  MemoryHit,
  MemoryList,
  MemorySource,
  MemoryType,
  Message,
  MessageInput,
  MessagesPage,
  Metadata,
  OpenAIContext,
  RecallResult,
  Receipt,
  Remembered,
  Role,
  RunningErasure,
  SearchResults,
  Session,
  SessionPage,
  SessionWithMessages,
  TextContext,
} from './types.js';
import { VERSION } from './version.js';

/** How to reach the server, set once for every request of a client. */
export interface ClientOptions {
  /** The server's address; `http://127.0.0.1:7700` when not given. */
  baseUrl?: string;
  /** A memlayer API key (`mlk_…`), sent as `Authorization: Bearer`. */
  apiKey?: string;
  /**
   * The user `append` creates an unknown session for when it names none (as `userId` of its
   * options does for one call).
   */
  userId?: string;
  /** The agent `append` creates an unknown session for when it names none. */
  agentId?: string;
  /** Milliseconds a request may take, answer read included; 30 000 when not given, 0 for none. */
  timeout?: number;
  /** Headers sent with every request (`x-memlayer-tenant`, say). */
  headers?: Record<string, string>;
  /** The `fetch` to call; the global one when not given. */
  fetch?: typeof fetch;
}

/** What any call may add: its own abort signal and timeout. */
export interface RequestOptions {
  /** Aborts the request; it then rejects with the signal's reason, as `fetch` does. */
  signal?: AbortSignal;
  /** Milliseconds this request may take, instead of the client's `timeout` (0 for none). */
  timeout?: number;
}

export interface CreateSessionOptions extends RequestOptions {
  /** The new session's id; the server makes one when not given (`409` if it exists). */
  sessionId?: string;
  flowId?: string;
  metadata?: Metadata;
}

export interface ListSessionsOptions extends RequestOptions {
  userId?: string;
  agentId?: string;
  /** Zero-based. */
  page?: number;
  pageSize?: number;
}

export interface AppendOptions extends RequestOptions {
  /** The owner of the session this append creates when it does not exist. */
  userId?: string;
  agentId?: string;
  flowId?: string;
  sessionMetadata?: Metadata;
  /** Makes a retried append answer the first one's result instead of storing it again. */
  idempotencyKey?: string;
}

export interface MessagesOptions extends RequestOptions {
  /** The first message's index (the API's `from`); 0 when not given. */
  start?: number;
  limit?: number;
}

export interface SearchOptions extends RequestOptions {
  limit?: number;
}

export interface ContextOptions extends RequestOptions {
  /** What the next turn is about: it picks the memories and earlier turns recalled. */
  query?: string;
  /** Settings for this context only, over the agent's saved ones. */
  settings?: ContextSettings;
  format?: ContextFormat;
}

export interface RecallTurnsOptions extends RequestOptions {
  /** One session's turns; or `userId` (and `agentId`) for a user's. */
  sessionId?: string;
  userId?: string;
  agentId?: string;
  k?: number;
  roles?: Role[];
  /** RFC 3339 bounds of the turns' timestamps. */
  after?: string;
  before?: string;
  excludeSessionId?: string;
  excludeIndices?: number[];
}

export interface RememberOptions extends RequestOptions {
  /** `fact` when not given. */
  type?: MemoryType;
  agentId?: string;
  tags?: string[];
  source?: MemorySource;
}

export interface MemoryByKeyOptions extends RequestOptions {
  /** The key's agent scope, as it was put; absent: the memories of every agent. */
  agentId?: string;
}

export interface RecallOptions extends RequestOptions {
  k?: number;
  agentId?: string;
  types?: MemoryType[];
  tags?: string[];
}

export interface MemoriesOptions extends RequestOptions {
  agentId?: string;
  /** The last memory id of the previous page (its `next_after`). */
  after?: number;
  limit?: number;
}

export interface ErasuresOptions extends RequestOptions {
  limit?: number;
}

export interface CreateKeyOptions extends RequestOptions {
  /** The user a `user` key is limited to. */
  userId?: string;
  name?: string;
  expiresInDays?: number;
}

// The types of a route of the document, looked up by its path template and method.
type Method = 'get' | 'post' | 'put' | 'delete';
type Route = keyof paths;
type Operation<P extends Route, M extends Method> = NonNullable<paths[P][M]>;
type Parameters<O> = O extends { parameters: infer A } ? A : never;
type PathOf<O> = Parameters<O> extends { path: infer A } ? A : undefined;
type QueryOf<O> = Parameters<O> extends { query?: infer Q } ? Q : undefined;
type BodyOf<O> = O extends { requestBody?: { content: { 'application/json': infer B } } }
  ? B
  : undefined;
type JsonOf<R> = R extends { content: { 'application/json': infer T } } ? T : undefined;
/** The JSON of the operation's 2xx answers (undefined for 204). */
type Answer<O> = O extends { responses: infer R }
  ? { [S in keyof R]: S extends 200 | 201 | 202 | 204 ? JsonOf<R[S]> : never }[keyof R]
  : never;

interface Request<O> {
  path?: PathOf<O>;
  query?: QueryOf<O>;
  body?: BodyOf<O>;
  headers?: Record<string, string>;
  options?: RequestOptions | undefined;
}

const DEFAULT_BASE_URL = 'http://127.0.0.1:7700';
const DEFAULT_TIMEOUT_MS = 30_000;
/** How often an erasure the server answered `202` is asked after until its receipt. */
const ERASURE_POLL_MS = 200;

/** Whether an erasure's answer says it is still running (the server answers `202` past half
 * its request timeout). */
function stillRunning(answer: unknown): answer is RunningErasure {
  return (
    typeof answer === 'object' &&
    answer !== null &&
    (answer as { status?: unknown }).status === 'running'
  );
}

/** Fills a path template's `{name}`s, each value one percent-encoded segment. */
function fill(template: string, values: object | undefined): string {
  const lookup = (values ?? {}) as Record<string, unknown>;
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const value = lookup[name];
    if (value === undefined) throw new TypeError(`${template}: no value for {${name}}`);
    return encodeURIComponent(String(value));
  });
}

/** The request's signal: the caller's, if any, and the timeout's, whichever fires first. */
function deadline(timeoutMs: number, signal: AbortSignal | undefined) {
  const controller = new AbortController();
  let timedOut = false;
  const onAbort = () => controller.abort(signal?.reason);
  if (signal?.aborted) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  const timer =
    timeoutMs > 0
      ? setTimeout(() => {
          timedOut = true;
          controller.abort();
        }, timeoutMs)
      : undefined;
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    done: () => {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    },
  };
}

/** Why a request got no answer: `fetch failed: connect ECONNREFUSED 127.0.0.1:1`, say. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause;
  return cause instanceof Error ? `${error.message}: ${cause.message}` : error.message;
}

/** memlayer's API; see the package's README. */
export class Client {
  readonly baseUrl: string;
  readonly userId: string | undefined;
  readonly agentId: string | undefined;
  readonly timeout: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
    this.userId = options.userId;
    this.agentId = options.agentId;
    this.timeout = options.timeout ?? DEFAULT_TIMEOUT_MS;
    this.#headers = {
      accept: 'application/json',
      'user-agent': `memlayer-typescript/${VERSION}`,
      ...(options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {}),
      ...options.headers,
    };
    const fetcher = options.fetch ?? globalThis.fetch;
    if (typeof fetcher !== 'function') {
      throw new TypeError('no global fetch (Node.js 18 or later has one): pass options.fetch');
    }
    this.#fetch = fetcher;
  }

  /**
   * One request to a route of the API, typed by the document: its answer's JSON, or a
   * `MemlayerError`.
   */
  async request<P extends Route, M extends Method>(
    method: M,
    route: P,
    request: Request<Operation<P, M>> = {},
  ): Promise<Answer<Operation<P, M>>> {
    const url = new URL(this.baseUrl + fill(route, request.path ?? undefined));
    for (const [name, value] of Object.entries((request.query ?? {}) as object)) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { ...this.#headers, ...request.headers };
    let body: string | undefined;
    if (request.body !== undefined) {
      // Fields left `undefined` are left out: the server reads an absent field as its default.
      body = JSON.stringify(request.body);
      headers['content-type'] = 'application/json';
    }
    const timeoutMs = request.options?.timeout ?? this.timeout;
    const signal = request.options?.signal;
    const limit = deadline(timeoutMs, signal);
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(url, {
        method: method.toUpperCase(),
        headers,
        body,
        signal: limit.signal,
      });
      text = await response.text();
    } catch (error) {
      if (limit.timedOut()) {
        throw new APIConnectionError(0, 'timeout', `no answer within ${timeoutMs} ms`, {
          cause: error,
        });
      }
      // The caller's own abort rejects as `fetch` does, with the signal's reason.
      if (signal?.aborted) throw signal.reason;
      throw new APIConnectionError(0, 'connection_error', describe(error), { cause: error });
    } finally {
      limit.done();
    }
    let json: unknown;
    if (text) {
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
    }
    if (response.status >= 400) throw errorFor(response.status, response.headers, json);
    return json as Answer<Operation<P, M>>;
  }

  // Sessions

  /** Creates a session (`409` if `sessionId` exists). */
  createSession(
    userId: string,
    agentId: string,
    options: CreateSessionOptions = {},
  ): Promise<Session> {
    return this.request('post', '/v1/sessions', {
      body: {
        user_id: userId,
        agent_id: agentId,
        session_id: options.sessionId,
        flow_id: options.flowId,
        metadata: options.metadata,
      },
      options,
    });
  }

  /** The session with its first 1,000 messages (`next_from` when it has more). */
  getSession(sessionId: string, options?: RequestOptions): Promise<SessionWithMessages> {
    return this.request('get', '/v1/sessions/{session_id}', {
      path: { session_id: sessionId },
      options,
    });
  }

  /** Erases the session and everything derived from it; resolves once nothing of it is left
   * (an erasure still running when the server answers is followed to its end). */
  async deleteSession(sessionId: string, options?: RequestOptions): Promise<void> {
    const answer = await this.request('delete', '/v1/sessions/{session_id}', {
      path: { session_id: sessionId },
      options,
    });
    await this.settled(answer, options);
  }

  /** One page of sessions, most recently active first (`iterSessions` follows the pages). */
  listSessions(options: ListSessionsOptions = {}): Promise<SessionPage> {
    return this.request('get', '/v1/sessions', {
      query: {
        user_id: options.userId,
        agent_id: options.agentId,
        page: options.page,
        page_size: options.pageSize,
      },
      options,
    });
  }

  // Messages

  /**
   * Appends messages (`{ role, content }`); with an owner (`userId` and `agentId`, given
   * here or to the client) an unknown session is created.
   */
  append(
    sessionId: string,
    messages: Iterable<MessageInput>,
    options: AppendOptions = {},
  ): Promise<AppendResult> {
    return this.request('post', '/v1/sessions/{session_id}/messages', {
      path: { session_id: sessionId },
      body: {
        messages: [...messages],
        user_id: options.userId ?? this.userId,
        agent_id: options.agentId ?? this.agentId,
        flow_id: options.flowId,
        session_metadata: options.sessionMetadata,
      },
      headers:
        options.idempotencyKey === undefined ? {} : { 'idempotency-key': options.idempotencyKey },
      options,
    });
  }

  /** One page of messages from index `start` (`iterMessages` follows the pages). */
  messages(sessionId: string, options: MessagesOptions = {}): Promise<MessagesPage> {
    return this.request('get', '/v1/sessions/{session_id}/messages', {
      path: { session_id: sessionId },
      query: { from: options.start, limit: options.limit },
      options,
    });
  }

  /** Erases one message and what was derived from it. */
  async eraseMessage(sessionId: string, index: number, options?: RequestOptions): Promise<Receipt> {
    const answer = await this.request('delete', '/v1/sessions/{session_id}/messages/{index}', {
      path: { session_id: sessionId, index },
      options,
    });
    return this.settled(answer, options);
  }

  /** Keyword search over the session's whole history, newest first. */
  search(sessionId: string, q: string, options: SearchOptions = {}): Promise<SearchResults> {
    return this.request('get', '/v1/sessions/{session_id}/search', {
      path: { session_id: sessionId },
      query: { q, limit: options.limit },
      options,
    });
  }

  /** Later context starts after the current last message; the history stays stored. */
  clear(sessionId: string, options?: RequestOptions): Promise<Cleared> {
    return this.request('post', '/v1/sessions/{session_id}/clear', {
      path: { session_id: sessionId },
      options,
    });
  }

  /** Ends the conversation: merged into the user's session memory in the background. */
  end(sessionId: string, options?: RequestOptions): Promise<Ending> {
    return this.request('post', '/v1/sessions/{session_id}/end', {
      path: { session_id: sessionId },
      options,
    });
  }

  /**
   * The context for the next model call: in OpenAI's format unless `format` says otherwise,
   * typed by the format asked for.
   */
  context(
    sessionId: string,
    options?: ContextOptions & { format?: 'openai' },
  ): Promise<OpenAIContext>;
  context(
    sessionId: string,
    options: ContextOptions & { format: 'anthropic' },
  ): Promise<AnthropicContext>;
  context(sessionId: string, options: ContextOptions & { format: 'text' }): Promise<TextContext>;
  context(sessionId: string, options?: ContextOptions): Promise<ContextResult>;
  context(sessionId: string, options: ContextOptions = {}): Promise<ContextResult> {
    return this.request('post', '/v1/sessions/{session_id}/context', {
      path: { session_id: sessionId },
      body: { query: options.query, settings: options.settings, format: options.format },
      options,
    });
  }

  /** Hybrid search over conversation turns (`POST /v1/recall`): one session's, or a user's. */
  recallTurns(query: string, options: RecallTurnsOptions = {}): Promise<RecallResult> {
    return this.request('post', '/v1/recall', {
      body: {
        query,
        session_id: options.sessionId,
        user_id: options.userId,
        agent_id: options.agentId,
        k: options.k,
        roles: options.roles,
        after: options.after,
        before: options.before,
        exclude_session_id: options.excludeSessionId,
        exclude_indices: options.excludeIndices,
      },
      options,
    });
  }

  // Long-term memories

  /** Remembers something about a user; a repeat or correction updates the memory it restates. */
  remember(userId: string, text: string, options: RememberOptions = {}): Promise<Remembered> {
    return this.request('post', '/v1/users/{user_id}/memories', {
      path: { user_id: userId },
      body: memoryBody(text, options),
      options,
    });
  }

  /**
   * Puts a memory under `key`: the memory the key names (in the user and agent scope) now says
   * `text`, or a new one is made. Keyed memories never merge with others.
   */
  putMemory(
    userId: string,
    key: string,
    text: string,
    options: RememberOptions = {},
  ): Promise<Remembered> {
    return this.request('put', '/v1/users/{user_id}/memories/keys/{key}', {
      path: { user_id: userId, key },
      body: memoryBody(text, options),
      options,
    });
  }

  /** The memory last put under `key` (`NotFoundError` when none is). */
  memoryByKey(userId: string, key: string, options: MemoryByKeyOptions = {}): Promise<Memory> {
    return this.request('get', '/v1/users/{user_id}/memories/keys/{key}', {
      path: { user_id: userId, key },
      query: { agent_id: options.agentId },
      options,
    });
  }

  /** The user's memories that match `query`, by keywords and meaning, best first. */
  async recall(userId: string, query: string, options: RecallOptions = {}): Promise<MemoryHit[]> {
    const found = await this.request('post', '/v1/users/{user_id}/memories/search', {
      path: { user_id: userId },
      body: {
        query,
        k: options.k,
        agent_id: options.agentId,
        types: options.types,
        tags: options.tags,
      },
      options,
    });
    return found.hits;
  }

  /** One page of the user's memories, oldest first (`iterMemories` follows the pages). */
  memories(userId: string, options: MemoriesOptions = {}): Promise<MemoryList> {
    return this.request('get', '/v1/users/{user_id}/memories', {
      path: { user_id: userId },
      query: { agent_id: options.agentId, after: options.after, limit: options.limit },
      options,
    });
  }

  /** One memory. */
  getMemory(memoryId: number, options?: RequestOptions): Promise<Memory> {
    return this.request('get', '/v1/memories/{memory_id}', {
      path: { memory_id: memoryId },
      options,
    });
  }

  /** Forgets a memory: an erasure, answered with its receipt. */
  async forget(memoryId: number, options?: RequestOptions): Promise<Receipt> {
    const answer = await this.request('delete', '/v1/memories/{memory_id}', {
      path: { memory_id: memoryId },
      options,
    });
    return this.settled(answer, options);
  }

  // Erasure and keys

  /** Erases every session, memory and episode of a user: answered with the receipt. */
  async eraseUser(userId: string, options?: RequestOptions): Promise<Receipt> {
    const answer = await this.request('delete', '/v1/users/{user_id}', {
      path: { user_id: userId },
      options,
    });
    return this.settled(answer, options);
  }

  /** Erasure receipts, newest first (`tenant_admin` keys). */
  async erasures(options: ErasuresOptions = {}): Promise<Receipt[]> {
    const list = await this.request('get', '/v1/admin/erasures', {
      query: { limit: options.limit },
      options,
    });
    return list.erasures;
  }

  /** An erasure's answer, a `202` followed to the receipt. */
  private async settled<A>(
    answer: A | RunningErasure,
    options: RequestOptions | undefined,
  ): Promise<Exclude<A, RunningErasure> | Receipt> {
    let current: A | Receipt | RunningErasure = answer;
    while (stillRunning(current)) {
      await new Promise((resolve) => setTimeout(resolve, ERASURE_POLL_MS));
      current = await this.erasure(current.erasure_id, options);
    }
    return current as Exclude<A, RunningErasure> | Receipt;
  }

  /** One erasure: its receipt once done, `{ erasure_id, status: "running" }` until then. */
  erasure(erasureId: number, options?: RequestOptions): Promise<Receipt | RunningErasure> {
    return this.request('get', '/v1/admin/erasures/{erasure_id}', {
      path: { erasure_id: erasureId },
      options,
    });
  }

  /** Creates a key of the caller's tenant; its secret `key` is in this answer only. */
  createKey(role: KeyRole, options: CreateKeyOptions = {}): Promise<CreatedKey> {
    return this.request('post', '/v1/keys', {
      body: {
        role,
        user_id: options.userId,
        name: options.name,
        expires_in_days: options.expiresInDays,
      },
      options,
    });
  }

  /** The tenant's keys, without secrets. */
  async listKeys(options?: RequestOptions): Promise<ApiKey[]> {
    return (await this.request('get', '/v1/keys', { options })).keys;
  }

  /** Revokes a key, by its prefix. */
  revokeKey(prefix: string, options?: RequestOptions): Promise<ApiKey> {
    return this.request('delete', '/v1/keys/{prefix}', { path: { prefix }, options });
  }

  // Every page

  /** Every session, following `page` up to `total_pages`. */
  async *iterSessions(
    options: Omit<ListSessionsOptions, 'page'> = {},
  ): AsyncGenerator<Session, void, undefined> {
    for (let page = 0; ; page += 1) {
      const current = await this.listSessions({ ...options, page });
      yield* current.content;
      if (page + 1 >= current.total_pages || current.content.length === 0) return;
    }
  }

  /** Every message from `start`, following `next_from`. */
  async *iterMessages(
    sessionId: string,
    options: MessagesOptions = {},
  ): AsyncGenerator<Message, void, undefined> {
    let start: number | null | undefined = options.start;
    do {
      const current = await this.messages(sessionId, { ...options, start: start ?? 0 });
      yield* current.messages;
      start = current.next_from;
    } while (start !== undefined && start !== null);
  }

  /** Every memory of the user, following `next_after`. */
  async *iterMemories(
    userId: string,
    options: Omit<MemoriesOptions, 'after'> = {},
  ): AsyncGenerator<Memory, void, undefined> {
    let after: number | null | undefined;
    do {
      const current = await this.memories(userId, { ...options, after: after ?? undefined });
      yield* current.memories;
      after = current.next_after;
    } while (after !== undefined && after !== null);
  }
}

/** The body of a remember or a put: `fact` unless the options say otherwise. */
function memoryBody(text: string, options: RememberOptions) {
  return {
    text,
    type: options.type ?? 'fact',
    agent_id: options.agentId,
    tags: options.tags,
    source: options.source,
  };
}
