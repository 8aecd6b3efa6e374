"""The official MCP Python SDK against memlayer's MCP server, both ways an MCP host reaches
it: streamable HTTP at `/v1/sessions/{id}/mcp` with the key as a bearer token, and stdio
through `memlayer mcp` (the bridge a host starts as a process, the key in MEMLAYER_KEY).

`cargo xtask clients` runs this against the real server with MEMLAYER_URL,
MEMLAYER_ADMIN_KEY and MEMLAYER_BINARY set. Over each transport the SDK lists the tools,
remembers, recalls and forgets a memory, searches the session, and gets a tool's refusal
as a tool error, as a model's host would see them.
"""

import json
import os
import sys
import traceback
import urllib.request
import uuid
from importlib import metadata

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["MEMLAYER_URL"]
KEY = os.environ["MEMLAYER_ADMIN_KEY"]
TOOLS = {"memory_remember", "memory_recall", "memory_forget", "session_search", "clear_session"}


def http(method, path, body):
    request = urllib.request.Request(
        f"{URL}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"content-type": "application/json", "authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def conversation():
    """A new session of Mia's holding one message to search for; answers its id."""
    session_id = f"mcp-{uuid.uuid4()}"
    http("POST", "/v1/sessions", {"session_id": session_id, "user_id": "mia", "agent_id": "support"})
    http("POST", f"/v1/sessions/{session_id}/messages", {"role": "user", "content": "My locker code is 5521."})
    return session_id


def result(called):
    """A tool call's answer: its one text part, as JSON."""
    assert not called.is_error, called
    (part,) = called.content
    return json.loads(part.text)


async def exercise(session):
    await session.initialize()
    listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == TOOLS, listed
    remembered = result(
        await session.call_tool("memory_remember", {"text": "Mia's cat is called Biscuit", "type": "fact"})
    )
    memory_id = remembered["memory"]["memory_id"]
    recalled = result(await session.call_tool("memory_recall", {"query": "what is the cat called", "k": 3}))
    assert [hit["memory_id"] for hit in recalled["hits"]][:1] == [memory_id], recalled
    found = result(await session.call_tool("session_search", {"query": "locker code"}))
    assert [hit["index"] for hit in found["hits"]] == [0], found
    result(await session.call_tool("memory_forget", {"memory_id": memory_id}))
    # A refusal is the tool's error, for the model to read, not a protocol failure.
    again = await session.call_tool("memory_forget", {"memory_id": memory_id})
    assert again.is_error, again


async def over_http():
    endpoint = f"{URL}/v1/sessions/{conversation()}/mcp"
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
        async with streamable_http_client(endpoint, http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await exercise(session)


async def over_stdio():
    server = StdioServerParameters(
        command=os.environ["MEMLAYER_BINARY"],
        args=["mcp", "--url", URL, "--session", conversation()],
        env={"MEMLAYER_KEY": KEY, "NO_PROXY": "127.0.0.1"},
    )
    async with stdio_client(server) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await exercise(session)


def main():
    tests = [("streamable_http", over_http), ("stdio", over_stdio)]
    failed = 0
    for name, test in tests:
        try:
            anyio.run(test)
            print(f"mcp over {name} ... ok")
        except Exception:
            failed += 1
            print(f"mcp over {name} ... FAILED")
            traceback.print_exc()
    print(f"mcp {metadata.version('mcp')}: {len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
