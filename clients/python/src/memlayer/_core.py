"""The request-building core shared by `Client` and `AsyncClient`.

Every API call is described once, as a `Call`: its method, path, query, JSON body and how to
read the answer. A paged listing is described once as a `Pager`: its first call, the call for
the page after a given one, and the items of a page. The two clients only execute these
descriptions, one over `httpx.Client` and the other over `httpx.AsyncClient`, through
`request_args` and `read_response` below, so no endpoint's logic exists twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from ._errors import error_for

T = TypeVar("T")
P = TypeVar("P")
Item = TypeVar("Item")


def segment(value: str) -> str:
    """One path segment: ids are percent-encoded so that no id can name another route."""
    return quote(str(value), safe="")


def _identity(body: Any) -> Any:
    return body


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    query: Mapping[str, Any] = field(default_factory=dict)
    body: Any | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Turns the decoded JSON body (None for an empty one) into the result.
    parse: Callable[[Any], T] = _identity


@dataclass(frozen=True)
class Pager(Generic[P, Item]):
    """A paged listing: the first page's call, the next page's call after a page (None when
    it was the last), and a page's items."""

    first: Call[P]
    next: Callable[[P], Call[P] | None]
    items: Callable[[P], list[Item]]


def drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    """The entries whose value was given: the server reads an absent field as its default."""
    return {key: value for key, value in values.items() if value is not None}


def request_args(call: Call[Any]) -> dict[str, Any]:
    """The keyword arguments of `httpx.Client.request` (and the async one's) for `call`."""
    args: dict[str, Any] = {
        "method": call.method,
        "url": call.path,
        "params": drop_none(call.query) or None,
    }
    if call.headers:
        args["headers"] = dict(call.headers)
    if call.body is not None:
        args["content"] = json.dumps(call.body).encode()
        args.setdefault("headers", {})["content-type"] = "application/json"
    return args


def read_response(call: Call[T], response: httpx.Response) -> T:
    """The result of `call` from its answer, or the `MemlayerError` the answer means."""
    body: Any = None
    if response.content:
        try:
            body = response.json()
        except ValueError:
            body = None
    if response.status_code >= 400:
        raise error_for(response.status_code, response.headers, body)
    return call.parse(body)


def default_headers(api_key: str | None, user_agent: str) -> dict[str, str]:
    headers = {"accept": "application/json", "user-agent": user_agent}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers
