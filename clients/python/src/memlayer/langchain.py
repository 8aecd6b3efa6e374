"""LangChain's chat history over a memlayer session (`pip install "memlayer[langchain]"`).

    from langchain_core.runnables.history import RunnableWithMessageHistory

    client = memlayer.Client("http://127.0.0.1:7700", api_key="mlk_…")
    chain = RunnableWithMessageHistory(
        model,
        lambda session_id: MemlayerChatMessageHistory(
            client, session_id, user_id="alice", agent_id="support"),
    )

`messages` reads the session's messages from where its context starts (`load_from`), so
after `clear()` it is empty, as LangChain expects; the cleared messages stay stored, for
`search` and recall, until the session is deleted (`client.delete_session`). `add_messages`
appends them in one request, creating the session on first use. Human, AI, system and tool
messages map to the roles `user`, `assistant`, `system` and `tool` (a tool message's
`tool_call_id` is kept in the stored message's metadata); content is text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ._client import AsyncClient, Client
from ._errors import NotFoundError
from ._models import Message, SessionWithMessages

__all__ = ["MemlayerChatMessageHistory"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def to_memlayer(message: BaseMessage) -> dict[str, Any]:
    """The append form of a LangChain message."""
    role = _ROLES.get(message.type)
    if role is None:
        raise ValueError(
            f"memlayer stores human, ai, system and tool messages, not {message.type!r}"
        )
    stored: dict[str, Any] = {"role": role, "content": _text(message.content)}
    if isinstance(message, ToolMessage):
        stored["metadata"] = {"tool_call_id": message.tool_call_id}
    return stored


def _text(content: Any) -> str:
    """A message's text: a string, or its `text` parts joined (memlayer stores text only)."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        else:
            raise ValueError("memlayer stores text; this message holds a non-text part")
    return "".join(parts)


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain message of a stored one."""
    content = message["content"]
    role = message["role"]
    if role == "user":
        return HumanMessage(content=content)
    if role == "assistant":
        return AIMessage(content=content)
    if role == "system":
        return SystemMessage(content=content)
    call_id = str(message.get("metadata", {}).get("tool_call_id", ""))
    return ToolMessage(content=content, tool_call_id=call_id)


class MemlayerChatMessageHistory(BaseChatMessageHistory):
    """One memlayer session as LangChain's chat history.

    `user_id` and `agent_id` own the session when `add_messages` creates it (leave both out
    when it exists already). `async_client`, when given, serves the `a*` methods; without
    one they run the sync ones in a thread, as LangChain's default does."""

    def __init__(
        self,
        client: Client,
        session_id: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        async_client: AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.async_client = async_client
        self.session_id = session_id
        self.user_id = user_id
        self.agent_id = agent_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        try:
            session = self.client.get_session(self.session_id)
        except NotFoundError:
            return []
        if _complete(session):
            stored = session["messages"]
        else:
            stored = list(self.client.iter_messages(self.session_id, start=session["load_from"]))
        return [to_langchain(message) for message in stored]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        if messages:
            self.client.append(
                self.session_id,
                [to_memlayer(message) for message in messages],
                user_id=self.user_id,
                agent_id=self.agent_id,
            )

    def clear(self) -> None:
        try:
            self.client.clear(self.session_id)
        except NotFoundError:
            pass

    async def aget_messages(self) -> list[BaseMessage]:
        if self.async_client is None:
            return await super().aget_messages()
        client = self.async_client
        try:
            session = await client.get_session(self.session_id)
        except NotFoundError:
            return []
        if _complete(session):
            stored = session["messages"]
        else:
            stored = [
                m async for m in client.iter_messages(self.session_id, start=session["load_from"])
            ]
        return [to_langchain(message) for message in stored]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if self.async_client is None:
            return await super().aadd_messages(messages)
        if messages:
            await self.async_client.append(
                self.session_id,
                [to_memlayer(message) for message in messages],
                user_id=self.user_id,
                agent_id=self.agent_id,
            )

    async def aclear(self) -> None:
        if self.async_client is None:
            return await super().aclear()
        try:
            await self.async_client.clear(self.session_id)
        except NotFoundError:
            pass


def _complete(session: SessionWithMessages) -> bool:
    """Whether `get_session`'s answer holds every message the context starts from."""
    return session["load_from"] == 0 and session.get("next_from") is None
