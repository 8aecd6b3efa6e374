"""The Python client of memlayer, the self-hosted memory layer for LLM agents.

    import memlayer

    client = memlayer.Client("http://127.0.0.1:7700", api_key="mlk_…")
    client.append("s1", [{"role": "user", "content": "I'm vegetarian."}],
                  user_id="alice", agent_id="support")
    context = client.context("s1", query="dinner ideas")   # messages for the model
    client.remember("alice", "Is vegetarian", type="preference")
    hits = client.recall("alice", "food", k=5)

`AsyncClient` has the same methods, awaitable (`async for` over its `iter_*` helpers).
Results are the server's JSON as typed dicts (`memlayer.models`); every error answer
raises a `MemlayerError` subclass with `status`, `code` and `message`. The LangChain chat
history is `memlayer.langchain.MemlayerChatMessageHistory` (`pip install memlayer[langchain]`),
LangGraph's long-term memory store `memlayer.langgraph.MemlayerStore` (`pip install
memlayer[langgraph]`).
"""

from . import _models as models
from ._client import AsyncClient, Client
from ._errors import (
    APIConnectionError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    MemlayerError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    UnauthorizedError,
    UnprocessableError,
)
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "AsyncClient",
    "Client",
    "ConflictError",
    "ForbiddenError",
    "InvalidRequestError",
    "MemlayerError",
    "NotFoundError",
    "RateLimitedError",
    "ServerError",
    "UnauthorizedError",
    "UnprocessableError",
    "__version__",
    "models",
]
