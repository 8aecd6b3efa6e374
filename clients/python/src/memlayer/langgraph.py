"""LangGraph's long-term memory store over memlayer (`pip install "memlayer[langgraph]"`).

    from langgraph.graph import StateGraph
    from memlayer.langgraph import MemlayerStore

    store = MemlayerStore(memlayer.Client("http://127.0.0.1:7700", api_key="mlk_…"))
    graph = builder.compile(store=store)
    store.put(("alice",), "food", {"likes": "pizza", "avoids": "olives"})
    store.search(("alice",), query="what does she eat?")

A namespace names a memlayer user and, optionally, an agent: `(user_id,)` holds the user's
memories for every agent, `(user_id, agent_id)` those of one agent. An item is a memlayer
memory put under its key (`PUT /v1/users/{user_id}/memories/keys/{key}`): its value is
stored as the memory's text, in JSON, so it is embedded, found by `search(query=…)` and
assembled into contexts like any memory, and `get` gives back the same dict. A key names
what was last put under it; `delete` (or putting `None`) forgets the memory, an erasure
that leaves no bytes behind. Keys and ids follow memlayer's id rule (letters, digits and
`. _ - : @ +`).

Searching with a `query` ranks by keywords and meaning (at most 50 results); without one it
lists the namespace's items oldest first. `filter` matches top-level value fields, exactly or
with `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`. Memories remembered without a key (by an
agent's `memory_remember` tool, say) have no key, so they are not items. `list_namespaces`
needs a prefix naming the user: memlayer does not list users. memlayer indexes every memory,
so `index=False` is ignored, and it keeps memories until they are forgotten: no TTL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Mapping
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from . import _calls
from ._client import AsyncClient, Client
from ._core import Call, Pager
from ._errors import MemlayerError, NotFoundError
from ._models import Memory, MemoryType

__all__ = ["MemlayerStore"]

# The most results one ranked search answers (the server's bound).
_MAX_RANKED = 50

# An operation's steps: it yields the calls to make and is sent their answers (or thrown
# their errors), so the synchronous and the asynchronous client run the same steps.
Steps = Generator[Call[Any], Any, Result]


class MemlayerStore(BaseStore):
    """A LangGraph `BaseStore` whose items are memlayer's keyed memories.

    `client` serves the synchronous methods (`get`, `put`, `search`, ...), `async_client`
    the asynchronous ones (`aget`, `aput`, ...); give either or both. `type` is the memory
    type items are stored with.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        async_client: AsyncClient | None = None,
        type: MemoryType = "fact",
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("MemlayerStore needs a client, an async_client or both")
        self._client = client
        self._async_client = async_client
        self._type: MemoryType = type

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self._client is None:
            raise RuntimeError("this MemlayerStore has only an async_client: use abatch")
        return [self._run_sync(self._client, op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        if self._async_client is None:
            raise RuntimeError("this MemlayerStore has only a synchronous client: use batch")
        return [await self._run_async(self._async_client, op) for op in ops]

    def _run_sync(self, client: Client, op: Op) -> Result:
        steps = _steps(op, self._type)
        try:
            call = next(steps)
            while True:
                try:
                    answer = client._send(call)
                except MemlayerError as error:
                    call = steps.throw(error)
                else:
                    call = steps.send(answer)
        except StopIteration as done:
            return done.value

    async def _run_async(self, client: AsyncClient, op: Op) -> Result:
        steps = _steps(op, self._type)
        try:
            call = next(steps)
            while True:
                try:
                    answer = await client._send(call)
                except MemlayerError as error:
                    call = steps.throw(error)
                else:
                    call = steps.send(answer)
        except StopIteration as done:
            return done.value


def _steps(op: Op, type: MemoryType) -> Steps:
    if isinstance(op, GetOp):
        user, agent = _owner(op.namespace)
        try:
            memory = yield _calls.memory_by_key(user, op.key, agent_id=agent)
        except NotFoundError:
            return None
        return _item(memory)
    if isinstance(op, PutOp):
        user, agent = _owner(op.namespace)
        if op.value is not None:
            yield _calls.put_memory(user, op.key, _text(op.value), type=type, agent_id=agent)
            return None
        try:
            memory = yield _calls.memory_by_key(user, op.key, agent_id=agent)
            yield _calls.forget(memory["memory_id"])
        except NotFoundError:
            pass  # Nothing under the key, or forgotten meanwhile: either way it is gone.
        return None
    if isinstance(op, SearchOp):
        user, agent = _owner(op.namespace_prefix, prefix=True)
        if op.query:
            k = min(op.offset + op.limit, _MAX_RANKED)
            hits = yield _calls.recall(user, op.query, k=k, agent_id=agent)
            return _page(hits, op, agent)
        memories = yield from _every(_calls.memory_pages(user, agent_id=agent))
        return _page(memories, op, agent)
    if isinstance(op, ListNamespacesOp):
        user = _listed_user(op)
        memories = yield from _every(_calls.memory_pages(user))
        return _namespaces(memories, op)
    raise TypeError(f"unknown store operation {op!r}")


def _every(pager: Pager[Any, Memory]) -> Generator[Call[Any], Any, list[Memory]]:
    """Every item of a paged listing."""
    items: list[Memory] = []
    call: Call[Any] | None = pager.first
    while call is not None:
        page = yield call
        items.extend(pager.items(page))
        call = pager.next(page)
    return items


def _owner(namespace: tuple[str, ...], *, prefix: bool = False) -> tuple[str, str | None]:
    """The user and agent a namespace names."""
    if not 1 <= len(namespace) <= 2 or not all(namespace):
        what = "prefix" if prefix else "namespace"
        raise InvalidNamespaceError(
            f"a memlayer {what} is (user_id,) or (user_id, agent_id), not {namespace!r}"
        )
    return namespace[0], namespace[1] if len(namespace) == 2 else None


def _text(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), ensure_ascii=False)


def _value(memory: Memory) -> dict[str, Any]:
    value = json.loads(memory["text"])
    if not isinstance(value, dict):
        raise ValueError(f"memory {memory['memory_id']} does not hold a store item")
    return value


def _namespace(memory: Memory) -> tuple[str, ...]:
    agent = memory.get("agent_id")
    return (memory["user_id"],) if agent is None else (memory["user_id"], agent)


def _item(memory: Memory) -> Item:
    return Item(
        value=_value(memory),
        key=memory["key"],
        namespace=_namespace(memory),
        created_at=datetime.fromisoformat(memory["created_at"]),
        updated_at=datetime.fromisoformat(memory["updated_at"]),
    )


def _page(memories: list[Any], op: SearchOp, agent: str | None) -> list[SearchItem]:
    """The items among `memories` within `op`'s prefix and filter, paged by `op`."""
    items = []
    for memory in memories:
        # An agent's listing and search include the user's memories of every agent; the
        # prefix (user, agent) holds only the agent's own.
        if "key" not in memory or (agent is not None and memory.get("agent_id") != agent):
            continue
        value = _value(memory)
        if op.filter and not _matches(value, op.filter):
            continue
        items.append(
            SearchItem(
                namespace=_namespace(memory),
                key=memory["key"],
                value=value,
                created_at=datetime.fromisoformat(memory["created_at"]),
                updated_at=datetime.fromisoformat(memory["updated_at"]),
                score=memory.get("score"),
            )
        )
    return items[op.offset : op.offset + op.limit]


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _matches(value: dict[str, Any], filter: dict[str, Any]) -> bool:
    for field, wanted in filter.items():
        actual = value.get(field)
        if isinstance(wanted, dict) and wanted and all(op in _COMPARISONS for op in wanted):
            try:
                if not all(_COMPARISONS[op](actual, b) for op, b in wanted.items()):
                    return False
            except TypeError:
                return False
        elif actual != wanted:
            return False
    return True


def _listed_user(op: ListNamespacesOp) -> str:
    prefixes = [c.path for c in op.match_conditions or () if c.match_type == "prefix"]
    if not prefixes or not prefixes[0] or prefixes[0][0] == "*":
        raise NotImplementedError(
            "memlayer lists the namespaces of one user: pass prefix=(user_id,)"
        )
    return prefixes[0][0]


def _namespaces(memories: list[Memory], op: ListNamespacesOp) -> list[tuple[str, ...]]:
    found = sorted({_namespace(memory) for memory in memories if "key" in memory})
    for condition in op.match_conditions or ():
        path = tuple(condition.path)
        if condition.match_type == "prefix":
            found = [ns for ns in found if _fits(ns[: len(path)], path)]
        else:
            found = [ns for ns in found if len(ns) >= len(path) and _fits(ns[-len(path) :], path)]
    if op.max_depth is not None:
        found = sorted({ns[: op.max_depth] for ns in found})
    return found[op.offset : op.offset + op.limit]


def _fits(part: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(part) == len(pattern) and all(p in ("*", s) for s, p in zip(part, pattern))
