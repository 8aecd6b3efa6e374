"""The API's JSON shapes as `TypedDict`s: results are the server's decoded JSON, typed.

They follow the server's `/openapi.json`; a key marked `NotRequired` may be absent.
Timestamps are RFC 3339 strings, metadata any JSON object.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Role = Literal["system", "user", "assistant", "tool"]
MemoryType = Literal["fact", "preference", "relationship", "instruction"]
ContextFormat = Literal["openai", "anthropic", "text"]
KeyRole = Literal["tenant_admin", "service", "user", "operator"]
Metadata = dict[str, Any]


class MessageInput(TypedDict):
    """One message to append."""

    role: Role
    content: str
    token_count: NotRequired[int]
    timestamp: NotRequired[str]
    metadata: NotRequired[Metadata]


class Message(TypedDict):
    index: int
    role: Role
    content: str
    token_count: int
    timestamp: str
    metadata: Metadata


class Session(TypedDict):
    session_id: str
    user_id: str
    agent_id: str
    flow_id: NotRequired[str | None]
    state: Literal["active", "incomplete_turn"]
    message_count: int
    run_count: int
    load_from: int
    metadata: Metadata
    created_at: str
    updated_at: str


class SessionWithMessages(Session):
    messages: list[Message]
    next_from: NotRequired[int | None]


class SessionPage(TypedDict):
    content: list[Session]
    total_elements: int
    total_pages: int
    page: int
    page_size: int


class MessagesPage(TypedDict):
    session_id: str
    messages: list[Message]
    next_from: NotRequired[int | None]


class AppendResult(TypedDict):
    session_id: str
    indices: list[int]
    created_session: bool
    replayed: bool


class Cleared(TypedDict):
    session_id: str
    load_from: int


class Ending(TypedDict):
    session_id: str
    merging: bool


class SearchHit(TypedDict):
    index: int
    role: Role
    preview: str
    timestamp: str


class SearchResults(TypedDict):
    session_id: str
    hits: list[SearchHit]


class ContextResult(TypedDict):
    """The context for the next model call. `messages` (and `system` for `anthropic`) or
    `text`, by `format`; `report` says what went in and why."""

    session_id: str
    format: ContextFormat
    messages: NotRequired[list[dict[str, Any]]]
    system: NotRequired[str]
    text: NotRequired[str]
    report: dict[str, Any]
    settings: dict[str, Any]
    summary_written: NotRequired[dict[str, Any] | None]
    recall_degraded: NotRequired[str | None]


class Source(TypedDict):
    session_id: str
    index: int


class ReplacedText(TypedDict):
    text: str
    replaced_at: str
    source: NotRequired[Source | None]


class Memory(TypedDict):
    memory_id: int
    user_id: str
    agent_id: NotRequired[str | None]
    text: str
    type: MemoryType
    tags: list[str]
    source: NotRequired[Source | None]
    created_at: str
    updated_at: str
    history: list[ReplacedText]
    key: NotRequired[str]


class MemoryHit(Memory):
    score: float


class Remembered(TypedDict):
    action: Literal["created", "updated", "unchanged"]
    memory: Memory


class MemoryList(TypedDict):
    memories: list[Memory]
    next_after: NotRequired[int | None]


class RecallHit(Message):
    session_id: str
    score: float
    keyword_rank: NotRequired[int | None]
    vector_rank: NotRequired[int | None]


class RecallResult(TypedDict):
    hits: list[RecallHit]
    degraded: NotRequired[str | None]


class Receipt(TypedDict):
    """What an erasure erased: counts and ids, never content."""

    erasure_id: int
    target: dict[str, Any]
    requested_by: str
    requested_at: str
    completed_at: str
    counts: dict[str, Any]
    session_ids: list[str]
    resumed: bool


class RunningErasure(TypedDict):
    erasure_id: int
    status: str


class ApiKey(TypedDict):
    prefix: str
    tenant: str
    role: KeyRole
    state: str
    created_at: str
    name: NotRequired[str | None]
    user_id: NotRequired[str | None]
    expires_at: NotRequired[str | None]
    revoked_at: NotRequired[str | None]


class CreatedKey(ApiKey):
    key: str
