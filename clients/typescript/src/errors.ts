/**
 * The errors the client throws: every error answer of the server becomes a `MemlayerError`,
 * of the subclass its status picks, carrying the answer's `status`, `code` and `message`
 * (the server's `{"error": {"code", "message"}}` body). A request that got no answer throws
 * `APIConnectionError` (status 0, code `connection_error`, or `timeout` when the client's
 * timeout ended it).
 */

/** Which error it is, one name per subclass, for a `switch` instead of `instanceof`. */
export type ErrorKind =
  | 'invalid_request'
  | 'unprocessable'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'rate_limited'
  | 'server'
  | 'connection'
  | 'http';

/** What an error carries besides its status, code and message. */
export interface ErrorDetails {
  /** Seconds to wait before retrying (`retry-after`), on 429 and overloaded 503s. */
  retryAfter?: number | undefined;
  /** The server's `x-request-id` of the failed request, as its log records it. */
  requestId?: string | undefined;
  /** The decoded error body as the server sent it (`undefined` when it was not JSON). */
  body?: unknown;
  /** The underlying failure of a request that got no answer. */
  cause?: unknown;
}

/**
 * An error answer of the server (`{"error": {"code", "message"}}` with an HTTP status), or,
 * with `status` 0, a request that got no answer.
 */
export class MemlayerError extends Error {
  /** The HTTP status; 0 when no answer came. */
  readonly status: number;
  /** The server's stable, machine-readable code: `session_not_found`, `invalid_value`, … */
  readonly code: string;
  readonly retryAfter: number | undefined;
  readonly requestId: string | undefined;
  readonly body: unknown;
  readonly kind: ErrorKind = 'http';

  constructor(status: number, code: string, message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.retryAfter = details.retryAfter;
    this.requestId = details.requestId;
    this.body = details.body;
  }

  /** `404 session_not_found: …`, as the Python client prints it. */
  override toString(): string {
    const head = this.status ? `${this.status} ${this.code}` : this.code;
    return `${this.name}: ${head}: ${this.message}`;
  }
}

/** The server could not be reached, or did not answer within the timeout (code `timeout`). */
export class APIConnectionError extends MemlayerError {
  override readonly kind: ErrorKind = 'connection';
}

/** 400 (malformed JSON or a bad field), 413 (body too large), 415 (not JSON). */
export class InvalidRequestError extends MemlayerError {
  override readonly kind: ErrorKind = 'invalid_request';
}

/** 422: a value or setting the server refuses (`invalid_id`, `invalid_settings`, …). */
export class UnprocessableError extends InvalidRequestError {
  override readonly kind: ErrorKind = 'unprocessable';
}

/** 401: no valid API key. */
export class UnauthorizedError extends MemlayerError {
  override readonly kind: ErrorKind = 'unauthorized';
}

/** 403: the key's role or user may not do this. */
export class ForbiddenError extends MemlayerError {
  override readonly kind: ErrorKind = 'forbidden';
}

/** 404: unknown, or another tenant's or user's. */
export class NotFoundError extends MemlayerError {
  override readonly kind: ErrorKind = 'not_found';
}

/** 409: the id is taken, or the state does not allow it. */
export class ConflictError extends MemlayerError {
  override readonly kind: ErrorKind = 'conflict';
}

/** 429 `rate_limited`: wait `retryAfter` seconds. */
export class RateLimitedError extends MemlayerError {
  override readonly kind: ErrorKind = 'rate_limited';
}

/**
 * 5xx: shutting down, overloaded (with `retryAfter`), timed out, storage faults, a failing
 * model.
 */
export class ServerError extends MemlayerError {
  override readonly kind: ErrorKind = 'server';
}

type ErrorClass = new (
  status: number,
  code: string,
  message: string,
  details?: ErrorDetails,
) => MemlayerError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: InvalidRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  413: InvalidRequestError,
  415: InvalidRequestError,
  422: UnprocessableError,
  429: RateLimitedError,
};

/** The error an answer with this status, headers and decoded JSON body (or undefined) means. */
export function errorFor(status: number, headers: Headers, body: unknown): MemlayerError {
  let code = 'http_error';
  let message = `HTTP ${status}`;
  if (isObject(body) && isObject(body['error'])) {
    const detail = body['error'];
    if (detail['code'] !== undefined) code = String(detail['code']);
    if (detail['message'] !== undefined) message = String(detail['message']);
  }
  const raw = headers.get('retry-after');
  const seconds = raw === null ? Number.NaN : Number(raw);
  const kind = status >= 500 ? ServerError : (BY_STATUS[status] ?? MemlayerError);
  return new kind(status, code, message, {
    retryAfter: raw === null || raw.trim() === '' || Number.isNaN(seconds) ? undefined : seconds,
    requestId: headers.get('x-request-id') ?? undefined,
    body,
  });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
