"""`Client` and `AsyncClient`: the same methods, one blocking and one awaitable.

Each method is one line: it executes the call `memlayer._calls` describes for it, through
`_SyncBase._send` or `_AsyncBase._send`, so the route, query, body and answer of every
endpoint are written once; the `iter_*` helpers likewise walk a `Pager` described there.
"""

from __future__ import annotations

import asyncio
import time

from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import (
    Any,
    Self,
    TypeVar,
)

import httpx

from . import _calls
from ._core import Call, Pager, default_headers, read_response, request_args
from ._errors import APIConnectionError
from ._models import (
    ApiKey,
    AppendResult,
    Cleared,
    ContextFormat,
    ContextResult,
    CreatedKey,
    Ending,
    KeyRole,
    Memory,
    MemoryHit,
    MemoryList,
    MemoryType,
    Message,
    MessageInput,
    MessagesPage,
    Metadata,
    RecallResult,
    Receipt,
    Remembered,
    RunningErasure,
    SearchResults,
    Session,
    SessionPage,
    SessionWithMessages,
)
from ._version import __version__

T = TypeVar("T")
P = TypeVar("P")
Item = TypeVar("Item")

USER_AGENT = f"memlayer-python/{__version__}"
#: How often an erasure the server answered `202` is asked after until its receipt.
ERASURE_POLL_SECS = 0.2


def _settings(
    base_url: str, api_key: str | None, timeout: float, headers: Mapping[str, str] | None
) -> dict[str, Any]:
    merged = default_headers(api_key, USER_AGENT)
    merged.update(headers or {})
    return {"base_url": base_url.rstrip("/"), "headers": merged, "timeout": timeout}


class _SyncBase:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7700",
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """`api_key`: a memlayer key (`Authorization: Bearer`); `headers`: sent with every
        request (`x-memlayer-tenant`, say); `http_client`: your own `httpx.Client`, whose
        base URL and headers are then yours to set."""
        self._http = http_client or httpx.Client(**_settings(base_url, api_key, timeout, headers))

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.request(**request_args(call))
        except httpx.TransportError as error:
            raise APIConnectionError(0, "connection_error", str(error) or repr(error)) from error
        return read_response(call, response)

    def _erase(self, call: Call[Any]) -> Any:
        """Sends an erasure and follows a `202` to the receipt (`None` for an empty answer)."""
        answer = self._send(call)
        while (erasure_id := _calls.still_running(answer)) is not None:
            time.sleep(ERASURE_POLL_SECS)
            answer = self._send(_calls.erasure(erasure_id))
        return answer

    def _iterate(self, pager: Pager[P, Item]) -> Iterator[Item]:
        call: Call[P] | None = pager.first
        while call is not None:
            page = self._send(call)
            yield from pager.items(page)
            call = pager.next(page)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _AsyncBase:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7700",
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """As `Client`'s, with an `httpx.AsyncClient`."""
        self._http = http_client or httpx.AsyncClient(
            **_settings(base_url, api_key, timeout, headers)
        )

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(**request_args(call))
        except httpx.TransportError as error:
            raise APIConnectionError(0, "connection_error", str(error) or repr(error)) from error
        return read_response(call, response)

    async def _erase(self, call: Call[Any]) -> Any:
        """Sends an erasure and follows a `202` to the receipt (`None` for an empty answer)."""
        answer = await self._send(call)
        while (erasure_id := _calls.still_running(answer)) is not None:
            await asyncio.sleep(ERASURE_POLL_SECS)
            answer = await self._send(_calls.erasure(erasure_id))
        return answer

    async def _iterate(self, pager: Pager[P, Item]) -> AsyncIterator[Item]:
        call: Call[P] | None = pager.first
        while call is not None:
            page = await self._send(call)
            for item in pager.items(page):
                yield item
            call = pager.next(page)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


class Client(_SyncBase):
    """memlayer's API over `httpx.Client`; see the package's docstring."""

    def create_session(
        self,
        user_id: str,
        agent_id: str,
        *,
        session_id: str | None = None,
        flow_id: str | None = None,
        metadata: Metadata | None = None,
    ) -> Session:
        """Creates a session (`409` if `session_id` exists)."""
        return self._send(
            _calls.create_session(
                user_id, agent_id, session_id=session_id, flow_id=flow_id, metadata=metadata
            )
        )

    def get_session(self, session_id: str) -> SessionWithMessages:
        """The session with its first 1,000 messages (`next_from` when it has more)."""
        return self._send(_calls.get_session(session_id))

    def delete_session(self, session_id: str) -> None:
        """Erases the session and everything derived from it; returns once nothing of it is
        left (an erasure still running when the server answers is followed to its end)."""
        self._erase(_calls.delete_session(session_id))

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        page: int = 0,
        page_size: int | None = None,
    ) -> SessionPage:
        """One page of sessions, most recently active first (`iter_sessions` follows the pages)."""
        return self._send(
            _calls.list_sessions(user_id=user_id, agent_id=agent_id, page=page, page_size=page_size)
        )

    def append(
        self,
        session_id: str,
        messages: Iterable[MessageInput | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        flow_id: str | None = None,
        session_metadata: Metadata | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Appends messages (`{"role", "content"}` mappings); with `user_id` and `agent_id` an unknown session is created."""
        return self._send(
            _calls.append(
                session_id,
                messages,
                user_id=user_id,
                agent_id=agent_id,
                flow_id=flow_id,
                session_metadata=session_metadata,
                idempotency_key=idempotency_key,
            )
        )

    def messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None
    ) -> MessagesPage:
        """One page of messages from index `start` (`iter_messages` follows the pages)."""
        return self._send(_calls.messages(session_id, start=start, limit=limit))

    def erase_message(self, session_id: str, index: int) -> Receipt:
        """Erases one message and what was derived from it."""
        return self._erase(_calls.erase_message(session_id, index))

    def search(self, session_id: str, q: str, *, limit: int | None = None) -> SearchResults:
        """Keyword search over the session's whole history, newest first."""
        return self._send(_calls.search(session_id, q, limit=limit))

    def clear(self, session_id: str) -> Cleared:
        """Later context starts after the current last message; history stays stored."""
        return self._send(_calls.clear(session_id))

    def end(self, session_id: str) -> Ending:
        """Ends the conversation: merged into the user's session memory in the background."""
        return self._send(_calls.end(session_id))

    def context(
        self,
        session_id: str,
        *,
        query: str | None = None,
        settings: Mapping[str, Any] | None = None,
        format: ContextFormat | None = None,
    ) -> ContextResult:
        """The context for the next model call."""
        return self._send(_calls.context(session_id, query=query, settings=settings, format=format))

    def recall_turns(
        self,
        query: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        k: int | None = None,
        roles: Sequence[str] | None = None,
        after: str | None = None,
        before: str | None = None,
        exclude_session_id: str | None = None,
        exclude_indices: Sequence[int] | None = None,
    ) -> RecallResult:
        """Hybrid search over conversation turns (`POST /v1/recall`): one session's, or a user's."""
        return self._send(
            _calls.recall_turns(
                query,
                session_id=session_id,
                user_id=user_id,
                agent_id=agent_id,
                k=k,
                roles=roles,
                after=after,
                before=before,
                exclude_session_id=exclude_session_id,
                exclude_indices=exclude_indices,
            )
        )

    def remember(
        self,
        user_id: str,
        text: str,
        *,
        type: MemoryType = "fact",
        agent_id: str | None = None,
        tags: Sequence[str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> Remembered:
        """Remembers something about a user; a repeat or correction updates the memory it restates."""
        return self._send(
            _calls.remember(user_id, text, type=type, agent_id=agent_id, tags=tags, source=source)
        )

    def put_memory(
        self,
        user_id: str,
        key: str,
        text: str,
        *,
        type: MemoryType = "fact",
        agent_id: str | None = None,
        tags: Sequence[str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> Remembered:
        """Puts a memory under `key`: the memory the key names (in the user and agent scope)
        now says `text`, or a new one is made. Keyed memories never merge with others."""
        return self._send(
            _calls.put_memory(
                user_id, key, text, type=type, agent_id=agent_id, tags=tags, source=source
            )
        )

    def memory_by_key(
        self, user_id: str, key: str, *, agent_id: str | None = None
    ) -> Memory:
        """The memory last put under `key` (`NotFoundError` when none is)."""
        return self._send(_calls.memory_by_key(user_id, key, agent_id=agent_id))

    def recall(
        self,
        user_id: str,
        query: str,
        *,
        k: int | None = None,
        agent_id: str | None = None,
        types: Sequence[MemoryType] | None = None,
        tags: Sequence[str] | None = None,
    ) -> list[MemoryHit]:
        """The user's memories that match `query`, by keywords and meaning, best first."""
        return self._send(
            _calls.recall(user_id, query, k=k, agent_id=agent_id, types=types, tags=tags)
        )

    def memories(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> MemoryList:
        """One page of the user's memories, oldest first (`iter_memories` follows the pages)."""
        return self._send(_calls.memories(user_id, agent_id=agent_id, after=after, limit=limit))

    def get_memory(self, memory_id: int) -> Memory:
        """One memory."""
        return self._send(_calls.get_memory(memory_id))

    def forget(self, memory_id: int) -> Receipt:
        """Forgets a memory: an erasure, answered with its receipt."""
        return self._erase(_calls.forget(memory_id))

    def erase_user(self, user_id: str) -> Receipt:
        """Erases every session, memory and episode of a user."""
        return self._erase(_calls.erase_user(user_id))

    def erasures(self, *, limit: int | None = None) -> list[Receipt]:
        """Erasure receipts, newest first (`tenant_admin` keys)."""
        return self._send(_calls.erasures(limit=limit))

    def erasure(self, erasure_id: int) -> Receipt | RunningErasure:
        """One erasure: its receipt once done, `{erasure_id, status: "running"}` until then."""
        return self._send(_calls.erasure(erasure_id))

    def create_key(
        self,
        role: KeyRole,
        *,
        user_id: str | None = None,
        name: str | None = None,
        expires_in_days: int | None = None,
    ) -> CreatedKey:
        """Creates a key of the caller's tenant; its secret `key` is in this answer only."""
        return self._send(
            _calls.create_key(role, user_id=user_id, name=name, expires_in_days=expires_in_days)
        )

    def list_keys(self) -> list[ApiKey]:
        """The tenant's keys, without secrets."""
        return self._send(_calls.list_keys())

    def revoke_key(self, prefix: str) -> ApiKey:
        """Revokes a key."""
        return self._send(_calls.revoke_key(prefix))

    def iter_sessions(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Session]:
        """Every session, following `page` up to `total_pages`."""
        return self._iterate(
            _calls.session_pages(user_id=user_id, agent_id=agent_id, page_size=page_size)
        )

    def iter_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None
    ) -> Iterator[Message]:
        """Every message from `start`, following `next_from`."""
        return self._iterate(_calls.message_pages(session_id, start=start, limit=limit))

    def iter_memories(
        self, user_id: str, *, agent_id: str | None = None, limit: int | None = None
    ) -> Iterator[Memory]:
        """Every memory of the user, following `next_after`."""
        return self._iterate(_calls.memory_pages(user_id, agent_id=agent_id, limit=limit))


class AsyncClient(_AsyncBase):
    """memlayer's API over `httpx.AsyncClient`; see the package's docstring."""

    async def create_session(
        self,
        user_id: str,
        agent_id: str,
        *,
        session_id: str | None = None,
        flow_id: str | None = None,
        metadata: Metadata | None = None,
    ) -> Session:
        """Creates a session (`409` if `session_id` exists)."""
        return await self._send(
            _calls.create_session(
                user_id, agent_id, session_id=session_id, flow_id=flow_id, metadata=metadata
            )
        )

    async def get_session(self, session_id: str) -> SessionWithMessages:
        """The session with its first 1,000 messages (`next_from` when it has more)."""
        return await self._send(_calls.get_session(session_id))

    async def delete_session(self, session_id: str) -> None:
        """Erases the session and everything derived from it; returns once nothing of it is
        left (an erasure still running when the server answers is followed to its end)."""
        await self._erase(_calls.delete_session(session_id))

    async def list_sessions(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        page: int = 0,
        page_size: int | None = None,
    ) -> SessionPage:
        """One page of sessions, most recently active first (`iter_sessions` follows the pages)."""
        return await self._send(
            _calls.list_sessions(user_id=user_id, agent_id=agent_id, page=page, page_size=page_size)
        )

    async def append(
        self,
        session_id: str,
        messages: Iterable[MessageInput | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        flow_id: str | None = None,
        session_metadata: Metadata | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Appends messages (`{"role", "content"}` mappings); with `user_id` and `agent_id` an unknown session is created."""
        return await self._send(
            _calls.append(
                session_id,
                messages,
                user_id=user_id,
                agent_id=agent_id,
                flow_id=flow_id,
                session_metadata=session_metadata,
                idempotency_key=idempotency_key,
            )
        )

    async def messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None
    ) -> MessagesPage:
        """One page of messages from index `start` (`iter_messages` follows the pages)."""
        return await self._send(_calls.messages(session_id, start=start, limit=limit))

    async def erase_message(self, session_id: str, index: int) -> Receipt:
        """Erases one message and what was derived from it."""
        return await self._erase(_calls.erase_message(session_id, index))

    async def search(self, session_id: str, q: str, *, limit: int | None = None) -> SearchResults:
        """Keyword search over the session's whole history, newest first."""
        return await self._send(_calls.search(session_id, q, limit=limit))

    async def clear(self, session_id: str) -> Cleared:
        """Later context starts after the current last message; history stays stored."""
        return await self._send(_calls.clear(session_id))

    async def end(self, session_id: str) -> Ending:
        """Ends the conversation: merged into the user's session memory in the background."""
        return await self._send(_calls.end(session_id))

    async def context(
        self,
        session_id: str,
        *,
        query: str | None = None,
        settings: Mapping[str, Any] | None = None,
        format: ContextFormat | None = None,
    ) -> ContextResult:
        """The context for the next model call."""
        return await self._send(
            _calls.context(session_id, query=query, settings=settings, format=format)
        )

    async def recall_turns(
        self,
        query: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        k: int | None = None,
        roles: Sequence[str] | None = None,
        after: str | None = None,
        before: str | None = None,
        exclude_session_id: str | None = None,
        exclude_indices: Sequence[int] | None = None,
    ) -> RecallResult:
        """Hybrid search over conversation turns (`POST /v1/recall`): one session's, or a user's."""
        return await self._send(
            _calls.recall_turns(
                query,
                session_id=session_id,
                user_id=user_id,
                agent_id=agent_id,
                k=k,
                roles=roles,
                after=after,
                before=before,
                exclude_session_id=exclude_session_id,
                exclude_indices=exclude_indices,
            )
        )

    async def remember(
        self,
        user_id: str,
        text: str,
        *,
        type: MemoryType = "fact",
        agent_id: str | None = None,
        tags: Sequence[str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> Remembered:
        """Remembers something about a user; a repeat or correction updates the memory it restates."""
        return await self._send(
            _calls.remember(user_id, text, type=type, agent_id=agent_id, tags=tags, source=source)
        )

    async def put_memory(
        self,
        user_id: str,
        key: str,
        text: str,
        *,
        type: MemoryType = "fact",
        agent_id: str | None = None,
        tags: Sequence[str] | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> Remembered:
        """Puts a memory under `key`: the memory the key names (in the user and agent scope)
        now says `text`, or a new one is made. Keyed memories never merge with others."""
        return await self._send(
            _calls.put_memory(
                user_id, key, text, type=type, agent_id=agent_id, tags=tags, source=source
            )
        )

    async def memory_by_key(
        self, user_id: str, key: str, *, agent_id: str | None = None
    ) -> Memory:
        """The memory last put under `key` (`NotFoundError` when none is)."""
        return await self._send(_calls.memory_by_key(user_id, key, agent_id=agent_id))

    async def recall(
        self,
        user_id: str,
        query: str,
        *,
        k: int | None = None,
        agent_id: str | None = None,
        types: Sequence[MemoryType] | None = None,
        tags: Sequence[str] | None = None,
    ) -> list[MemoryHit]:
        """The user's memories that match `query`, by keywords and meaning, best first."""
        return await self._send(
            _calls.recall(user_id, query, k=k, agent_id=agent_id, types=types, tags=tags)
        )

    async def memories(
        self,
        user_id: str,
        *,
        agent_id: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> MemoryList:
        """One page of the user's memories, oldest first (`iter_memories` follows the pages)."""
        return await self._send(
            _calls.memories(user_id, agent_id=agent_id, after=after, limit=limit)
        )

    async def get_memory(self, memory_id: int) -> Memory:
        """One memory."""
        return await self._send(_calls.get_memory(memory_id))

    async def forget(self, memory_id: int) -> Receipt:
        """Forgets a memory: an erasure, answered with its receipt."""
        return await self._erase(_calls.forget(memory_id))

    async def erase_user(self, user_id: str) -> Receipt:
        """Erases every session, memory and episode of a user."""
        return await self._erase(_calls.erase_user(user_id))

    async def erasures(self, *, limit: int | None = None) -> list[Receipt]:
        """Erasure receipts, newest first (`tenant_admin` keys)."""
        return await self._send(_calls.erasures(limit=limit))

    async def erasure(self, erasure_id: int) -> Receipt | RunningErasure:
        """One erasure: its receipt once done, `{erasure_id, status: "running"}` until then."""
        return await self._send(_calls.erasure(erasure_id))

    async def create_key(
        self,
        role: KeyRole,
        *,
        user_id: str | None = None,
        name: str | None = None,
        expires_in_days: int | None = None,
    ) -> CreatedKey:
        """Creates a key of the caller's tenant; its secret `key` is in this answer only."""
        return await self._send(
            _calls.create_key(role, user_id=user_id, name=name, expires_in_days=expires_in_days)
        )

    async def list_keys(self) -> list[ApiKey]:
        """The tenant's keys, without secrets."""
        return await self._send(_calls.list_keys())

    async def revoke_key(self, prefix: str) -> ApiKey:
        """Revokes a key."""
        return await self._send(_calls.revoke_key(prefix))

    def iter_sessions(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Session]:
        """Every session, following `page` up to `total_pages`."""
        return self._iterate(
            _calls.session_pages(user_id=user_id, agent_id=agent_id, page_size=page_size)
        )

    def iter_messages(
        self, session_id: str, *, start: int = 0, limit: int | None = None
    ) -> AsyncIterator[Message]:
        """Every message from `start`, following `next_from`."""
        return self._iterate(_calls.message_pages(session_id, start=start, limit=limit))

    def iter_memories(
        self, user_id: str, *, agent_id: str | None = None, limit: int | None = None
    ) -> AsyncIterator[Memory]:
        """Every memory of the user, following `next_after`."""
        return self._iterate(_calls.memory_pages(user_id, agent_id=agent_id, limit=limit))
