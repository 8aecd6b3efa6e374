"""Every endpoint the clients offer, described once as a `Call` (or a `Pager`), with the
route, query and body the server's `/openapi.json` gives. `Client` and `AsyncClient` execute
these; nothing here does I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._core import Call, Pager, drop_none, segment
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


def _key(name: str) -> Any:
    return lambda body: body[name]


def still_running(answer: object) -> int | None:
    """The id of an erasure that answered `202` (still running past half the server's request
    timeout); None for a receipt or an empty answer."""
    if isinstance(answer, dict) and answer.get("status") == "running":
        return int(answer["erasure_id"])
    return None


# Sessions


def create_session(
    user_id: str,
    agent_id: str,
    *,
    session_id: str | None = None,
    flow_id: str | None = None,
    metadata: Metadata | None = None,
) -> Call[Session]:
    body = drop_none(
        {
            "session_id": session_id,
            "user_id": user_id,
            "agent_id": agent_id,
            "flow_id": flow_id,
            "metadata": metadata,
        }
    )
    return Call("POST", "/v1/sessions", body=body)


def get_session(session_id: str) -> Call[SessionWithMessages]:
    return Call("GET", f"/v1/sessions/{segment(session_id)}")


def delete_session(session_id: str) -> Call[RunningErasure | None]:
    return Call("DELETE", f"/v1/sessions/{segment(session_id)}")


def list_sessions(
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    page: int = 0,
    page_size: int | None = None,
) -> Call[SessionPage]:
    query = {"user_id": user_id, "agent_id": agent_id, "page": page, "page_size": page_size}
    return Call("GET", "/v1/sessions", query=query)


def session_pages(
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    page_size: int | None = None,
) -> Pager[SessionPage, Session]:
    def following(current: SessionPage) -> Call[SessionPage] | None:
        page = current["page"] + 1
        if page >= current["total_pages"] or not current["content"]:
            return None
        return list_sessions(user_id=user_id, agent_id=agent_id, page=page, page_size=page_size)

    first = list_sessions(user_id=user_id, agent_id=agent_id, page_size=page_size)
    return Pager(first, following, lambda page: page["content"])


# Messages


def _message(message: MessageInput | Mapping[str, Any]) -> dict[str, Any]:
    return dict(message)


def append(
    session_id: str,
    messages: Iterable[MessageInput | Mapping[str, Any]],
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    flow_id: str | None = None,
    session_metadata: Metadata | None = None,
    idempotency_key: str | None = None,
) -> Call[AppendResult]:
    body = drop_none(
        {
            "messages": [_message(message) for message in messages],
            "user_id": user_id,
            "agent_id": agent_id,
            "flow_id": flow_id,
            "session_metadata": session_metadata,
        }
    )
    headers = {"idempotency-key": idempotency_key} if idempotency_key is not None else {}
    return Call("POST", f"/v1/sessions/{segment(session_id)}/messages", body=body, headers=headers)


def messages(session_id: str, *, start: int = 0, limit: int | None = None) -> Call[MessagesPage]:
    query = {"from": start, "limit": limit}
    return Call("GET", f"/v1/sessions/{segment(session_id)}/messages", query=query)


def message_pages(
    session_id: str, *, start: int = 0, limit: int | None = None
) -> Pager[MessagesPage, Message]:
    def following(current: MessagesPage) -> Call[MessagesPage] | None:
        after = current.get("next_from")
        return None if after is None else messages(session_id, start=after, limit=limit)

    return Pager(messages(session_id, start=start, limit=limit), following, _key("messages"))


def erase_message(session_id: str, index: int) -> Call[Receipt | RunningErasure]:
    return Call("DELETE", f"/v1/sessions/{segment(session_id)}/messages/{int(index)}")


def search(session_id: str, q: str, *, limit: int | None = None) -> Call[SearchResults]:
    return Call("GET", f"/v1/sessions/{segment(session_id)}/search", query={"q": q, "limit": limit})


def clear(session_id: str) -> Call[Cleared]:
    return Call("POST", f"/v1/sessions/{segment(session_id)}/clear")


def end(session_id: str) -> Call[Ending]:
    return Call("POST", f"/v1/sessions/{segment(session_id)}/end")


def context(
    session_id: str,
    *,
    query: str | None = None,
    settings: Mapping[str, Any] | None = None,
    format: ContextFormat | None = None,
) -> Call[ContextResult]:
    body = drop_none(
        {"query": query, "settings": None if settings is None else dict(settings), "format": format}
    )
    return Call("POST", f"/v1/sessions/{segment(session_id)}/context", body=body)


def recall_turns(
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
) -> Call[RecallResult]:
    body = drop_none(
        {
            "query": query,
            "session_id": session_id,
            "user_id": user_id,
            "agent_id": agent_id,
            "k": k,
            "roles": None if roles is None else list(roles),
            "after": after,
            "before": before,
            "exclude_session_id": exclude_session_id,
            "exclude_indices": None if exclude_indices is None else list(exclude_indices),
        }
    )
    return Call("POST", "/v1/recall", body=body)


# Long-term memories


def remember(
    user_id: str,
    text: str,
    *,
    type: MemoryType = "fact",
    agent_id: str | None = None,
    tags: Sequence[str] | None = None,
    source: Mapping[str, Any] | None = None,
) -> Call[Remembered]:
    body = _memory_body(text, type, agent_id, tags, source)
    return Call("POST", f"/v1/users/{segment(user_id)}/memories", body=body)


def put_memory(
    user_id: str,
    key: str,
    text: str,
    *,
    type: MemoryType = "fact",
    agent_id: str | None = None,
    tags: Sequence[str] | None = None,
    source: Mapping[str, Any] | None = None,
) -> Call[Remembered]:
    body = _memory_body(text, type, agent_id, tags, source)
    path = f"/v1/users/{segment(user_id)}/memories/keys/{segment(key)}"
    return Call("PUT", path, body=body)


def memory_by_key(user_id: str, key: str, *, agent_id: str | None = None) -> Call[Memory]:
    path = f"/v1/users/{segment(user_id)}/memories/keys/{segment(key)}"
    return Call("GET", path, query={"agent_id": agent_id})


def _memory_body(
    text: str,
    type: MemoryType,
    agent_id: str | None,
    tags: Sequence[str] | None,
    source: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return drop_none(
        {
            "text": text,
            "type": type,
            "agent_id": agent_id,
            "tags": None if tags is None else list(tags),
            "source": None if source is None else dict(source),
        }
    )


def recall(
    user_id: str,
    query: str,
    *,
    k: int | None = None,
    agent_id: str | None = None,
    types: Sequence[MemoryType] | None = None,
    tags: Sequence[str] | None = None,
) -> Call[list[MemoryHit]]:
    body = drop_none(
        {
            "query": query,
            "k": k,
            "agent_id": agent_id,
            "types": None if types is None else list(types),
            "tags": None if tags is None else list(tags),
        }
    )
    return Call(
        "POST", f"/v1/users/{segment(user_id)}/memories/search", body=body, parse=_key("hits")
    )


def memories(
    user_id: str,
    *,
    agent_id: str | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> Call[MemoryList]:
    query = {"agent_id": agent_id, "after": after, "limit": limit}
    return Call("GET", f"/v1/users/{segment(user_id)}/memories", query=query)


def memory_pages(
    user_id: str, *, agent_id: str | None = None, limit: int | None = None
) -> Pager[MemoryList, Memory]:
    def following(current: MemoryList) -> Call[MemoryList] | None:
        after = current.get("next_after")
        if after is None:
            return None
        return memories(user_id, agent_id=agent_id, after=after, limit=limit)

    return Pager(memories(user_id, agent_id=agent_id, limit=limit), following, _key("memories"))


def get_memory(memory_id: int) -> Call[Memory]:
    return Call("GET", f"/v1/memories/{int(memory_id)}")


def forget(memory_id: int) -> Call[Receipt | RunningErasure]:
    return Call("DELETE", f"/v1/memories/{int(memory_id)}")


# Erasure and keys


def erase_user(user_id: str) -> Call[Receipt | RunningErasure]:
    return Call("DELETE", f"/v1/users/{segment(user_id)}")


def erasures(*, limit: int | None = None) -> Call[list[Receipt]]:
    return Call("GET", "/v1/admin/erasures", query={"limit": limit}, parse=_key("erasures"))


def erasure(erasure_id: int) -> Call[Receipt | RunningErasure]:
    return Call("GET", f"/v1/admin/erasures/{int(erasure_id)}")


def create_key(
    role: KeyRole,
    *,
    user_id: str | None = None,
    name: str | None = None,
    expires_in_days: int | None = None,
) -> Call[CreatedKey]:
    body = drop_none(
        {"role": role, "user_id": user_id, "name": name, "expires_in_days": expires_in_days}
    )
    return Call("POST", "/v1/keys", body=body)


def list_keys() -> Call[list[ApiKey]]:
    return Call("GET", "/v1/keys", parse=_key("keys"))


def revoke_key(prefix: str) -> Call[ApiKey]:
    return Call("DELETE", f"/v1/keys/{segment(prefix)}")
