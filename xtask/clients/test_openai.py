"""The official OpenAI Python SDK against memlayer's OpenAI-compatible endpoint.

`cargo xtask clients` runs this against the real server, whose `[agent_model]` is the fake
model (`fake-upstream`), with MEMLAYER_URL, MEMLAYER_ADMIN_KEY and FAKE_UPSTREAM_CONTROL
set. The SDK is used as its users use it: `base_url` and `api_key`, the memlayer headers in
`default_headers` and `extra_headers`, `with_raw_response` to read the session header, its
own retries and its own error classes.
"""

import json
import os
import sys
import traceback
import urllib.request

import openai
from openai import OpenAI

URL = os.environ["MEMLAYER_URL"]
KEY = os.environ["MEMLAYER_ADMIN_KEY"]
CONTROL = os.environ["FAKE_UPSTREAM_CONTROL"]

CONVERSATION = {"x-memlayer-user": "dana", "x-memlayer-agent": "support"}
client = OpenAI(base_url=f"{URL}/v1/openai", api_key=KEY, default_headers=CONVERSATION)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def http(method, url, body=None, key=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    if key:
        request.add_header("authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def script(reply):
    """Queues the fake model's next answer."""
    http("POST", f"{CONTROL}/replies", reply)


def upstream_requests():
    return http("GET", f"{CONTROL}/requests")


def stored(session):
    """The session's messages as memlayer stored them, as (role, content) pairs."""
    page = http("GET", f"{URL}/v1/sessions/{session}/messages", key=KEY)
    return [(m["role"], m["content"]) for m in page["messages"]]


def first_turn():
    """A new session: the answer in OpenAI's shape, the session id in the header."""
    script({"text": "Sorry, Dana. I chased order 4711."})
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi, I am Dana. My order 4711 is late."},
        ],
    )
    session = raw.headers["x-memlayer-session"]
    completion = raw.parse()
    assert completion.object == "chat.completion", completion
    assert completion.id.startswith("chatcmpl-"), completion.id
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Sorry, Dana. I chased order 4711.", choice
    assert choice.finish_reason == "stop"
    assert completion.usage.total_tokens > 0, completion.usage
    assert stored(session) == [
        ("user", "Hi, I am Dana. My order 4711 is late."),
        ("assistant", "Sorry, Dana. I chased order 4711."),
    ], stored(session)
    sent = upstream_requests()[-1]["body"]["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}, sent
    return session


def test_completion():
    first_turn()


def test_stream_continues_the_session():
    session = first_turn()
    script({"text": "It was order 4711, Dana.", "chunk_delay_ms": 5})
    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Which order was late?"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-memlayer-session": session},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    assert "".join(pieces) == "It was order 4711, Dana.", pieces
    assert len(pieces) > 1, pieces
    assert finish == "stop"
    assert usage is not None and usage.total_tokens > 0, usage
    # The earlier turn reached the model from memlayer's store, not from the client.
    sent = upstream_requests()[-1]["body"]["messages"]
    assert any("order 4711 is late" in (m.get("content") or "") for m in sent[:-1]), sent
    assert stored(session)[2:] == [
        ("user", "Which order was late?"),
        ("assistant", "It was order 4711, Dana."),
    ], stored(session)


def weather_call(call_id, city):
    """A call of the weather tool, in OpenAI's shape."""
    arguments = json.dumps({"city": city}, separators=(",", ":"))
    function = {"name": "get_weather", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


def the_weather_call(choice, call):
    """The answer's one tool call, checked to be `call` as the model made it."""
    assert choice.finish_reason == "tool_calls", choice
    [made] = choice.message.tool_calls
    function = call["function"]
    assert (made.id, made.function.name, made.function.arguments) == (
        call["id"],
        function["name"],
        function["arguments"],
    ), made
    return made


def test_tool_calls_round_trip():
    call = weather_call("call_1", "Lyon")
    script({"tool_calls": [call]})
    question = {"role": "user", "content": "Weather in Lyon?"}
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[question], tools=[WEATHER]
    )
    session = raw.headers["x-memlayer-session"]
    choice = raw.parse().choices[0]
    made = the_weather_call(choice, call)
    assert upstream_requests()[-1]["body"]["tools"] == [WEATHER]

    # The SDK's own message object goes back, as its users write it.
    script({"text": "12°C and sunny in Lyon."})
    completion = client.chat.completions.create(
        model="gpt-4o",
        messages=[
            question,
            choice.message,
            {"role": "tool", "tool_call_id": made.id, "content": "12°C, sunny"},
        ],
        tools=[WEATHER],
        extra_headers={"x-memlayer-session": session},
    )
    assert completion.choices[0].message.content == "12°C and sunny in Lyon."
    assert stored(session) == [
        ("user", "Weather in Lyon?"),
        ("assistant", "12°C and sunny in Lyon."),
    ], stored(session)


def test_streamed_tool_calls_add_up_in_the_sdks_stream_helper():
    call = weather_call("call_2", "Paris")
    script({"tool_calls": [call], "chunk_delay_ms": 5})
    # The SDK's own accumulator checks every chunk's shape as it adds the pieces up.
    with client.chat.completions.stream(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
    ) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    made = the_weather_call(completion.choices[0], call)
    assert made.function.parsed_arguments == {"city": "Paris"}, made


def test_upstream_error_is_raised_with_its_status():
    session = first_turn()
    before = len(upstream_requests())
    # Nothing scripted: the fake model answers 500, memlayer 502. The SDK retries twice, and
    # in a named session the retries continue the turn instead of storing it again.
    try:
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Still there?"}],
            extra_headers={"x-memlayer-session": session},
        )
        raise AssertionError("no error raised")
    except openai.InternalServerError as error:
        assert error.status_code == 502, error
        body = error.response.json()
        assert body["error"]["code"] == "upstream_failed", body
        assert error.response.headers["x-memlayer-session"] == session
    assert len(upstream_requests()) - before == 3
    assert stored(session)[2:] == [("user", "Still there?")], stored(session)

    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Still there?"}],
        stream=True,
        extra_headers={"x-memlayer-session": session},
    )
    try:
        for _ in stream:
            pass
        raise AssertionError("no error raised")
    except openai.APIError as error:
        assert error.body["code"] == "upstream_failed", error.body
    assert stored(session)[2:] == [("user", "Still there?")], stored(session)


def test_bad_requests_are_raised_with_their_status():
    anonymous = OpenAI(base_url=f"{URL}/v1/openai", api_key="mlk_not_a_key", max_retries=0)
    hello = [{"role": "user", "content": "Hello?"}]
    cases = [
        (anonymous, CONVERSATION, hello, openai.AuthenticationError, 401, "unauthorized"),
        (
            OpenAI(base_url=f"{URL}/v1/openai", api_key=KEY),
            {},
            hello,
            openai.BadRequestError,
            400,
            "missing_header",
        ),
        (client, {}, [], openai.UnprocessableEntityError, 422, "invalid_messages"),
        (
            client,
            {"x-memlayer-session": "no-such-session"},
            hello,
            openai.NotFoundError,
            404,
            "session_not_found",
        ),
    ]
    for sdk, headers, messages, kind, status, code in cases:
        try:
            sdk.chat.completions.create(model="gpt-4o", messages=messages, extra_headers=headers)
            raise AssertionError(f"{code}: no error raised")
        except kind as error:
            assert error.status_code == status, error
            assert error.response.json()["error"]["code"] == code, error.response.text


def main():
    tests = [(name, test) for name, test in globals().items() if name.startswith("test_")]
    failed = 0
    for name, test in tests:
        try:
            test()
            print(f"{name} ... ok")
        except Exception:
            failed += 1
            print(f"{name} ... FAILED")
            traceback.print_exc()
    print(f"openai {openai.__version__}: {len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
