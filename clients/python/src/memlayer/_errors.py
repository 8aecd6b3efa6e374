"""The errors the clients raise: every error answer of the server becomes a `MemlayerError`,
of the subclass its status picks, carrying the answer's `status`, `code` and `message`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class MemlayerError(Exception):
    """An error answer of the server (`{"error": {"code", "message"}}` with an HTTP status),
    or, with `status` 0 and code `connection_error`, a request that got no answer."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retry_after: float | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.request_id = request_id


class APIConnectionError(MemlayerError):
    """The server could not be reached, or did not answer in time."""


class InvalidRequestError(MemlayerError):
    """400 (malformed JSON or a bad field), 413 (body too large), 415 (not JSON)."""


class UnprocessableError(InvalidRequestError):
    """422: a value or setting the server refuses (`invalid_id`, `invalid_settings`, …)."""


class UnauthorizedError(MemlayerError):
    """401: no valid API key."""


class ForbiddenError(MemlayerError):
    """403: the key's role or user may not do this."""


class NotFoundError(MemlayerError):
    """404: unknown, or another tenant's or user's."""


class ConflictError(MemlayerError):
    """409: the id is taken, or the state does not allow it."""


class RateLimitedError(MemlayerError):
    """429 `rate_limited`: wait `retry_after` seconds."""


class ServerError(MemlayerError):
    """5xx: shutting down, overloaded (with `retry_after`), timed out, storage faults, a
    failing model."""


_BY_STATUS = {
    400: InvalidRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidRequestError,
    415: InvalidRequestError,
    422: UnprocessableError,
    429: RateLimitedError,
}


def error_for(status: int, headers: Mapping[str, str], body: Any) -> MemlayerError:
    """The error an answer with this status, headers and decoded JSON body (or None) means."""
    code, message = "http_error", f"HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    retry_after: float | None = None
    raw = headers.get("retry-after")
    if raw is not None:
        try:
            retry_after = float(raw)
        except ValueError:
            retry_after = None
    if status >= 500:
        kind: type[MemlayerError] = ServerError
    else:
        kind = _BY_STATUS.get(status, MemlayerError)
    return kind(
        status,
        code,
        message,
        retry_after=retry_after,
        request_id=headers.get("x-request-id"),
    )
