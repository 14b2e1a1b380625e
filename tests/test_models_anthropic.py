"""AnthropicModel through the real SDK against a mock HTTP transport (no network).

Every request body the mock receives must pass `journal.api_pairing_problems`; the `api`
fixture checks that after each test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic_mock import (
    FAST_RETRY,
    MODEL,
    MockAPI,
    end,
    error_response,
    redacted_block,
    sse,
    start,
    stream_response,
    text_block,
    thinking_block,
    tool_block,
)

import journal
from agent.models import (
    AuthError,
    ContextOverflow,
    Model,
    ModelAborted,
    ModelError,
    ModelEvent,
    ModelRequest,
    ModelTimeout,
    Overloaded,
    RateLimited,
)
from agent.models.anthropic import AnthropicModel, price_for

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

@pytest.fixture
def api() -> Iterator[MockAPI]:
    mock = MockAPI()
    yield mock
    assert mock.problems == []


def text_reply(text: str = "Hello there.", stop: str = "end_turn") -> httpx2.Response:
    return stream_response([start(), *text_block(0, text), *end(stop)])


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def request(*messages: dict[str, Any], **kwargs: Any) -> ModelRequest:
    return ModelRequest(messages=list(messages), **kwargs)


TOOLS = [
    {"name": "read", "description": "Read a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "ls", "description": "List a directory.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]


# --- replies


def test_streamed_text_reply(api: MockAPI) -> None:
    api.queue(stream_response([start(), *text_block(0, "Hel", "lo ", "world."), *end()]))
    model = api.model()
    assert isinstance(model, Model)
    events: list[ModelEvent] = []
    message = model.complete(request(user("hi"), system="Be brief."), on_event=events.append)

    assert message["role"] == "assistant"
    assert message["content"] == [{"type": "text", "text": "Hello world."}]
    assert message["api"] == "anthropic-messages"
    assert message["provider"] == "anthropic"
    assert message["model"] == MODEL
    assert message["stopReason"] == "stop"
    assert isinstance(message["timestamp"], int)
    assert list(message) == [
        "role", "content", "api", "provider", "model", "usage", "stopReason", "timestamp"
    ]
    kinds = [e.kind for e in events]
    assert kinds == ["message_start", "text_delta", "text_delta", "text_delta", "message_end"]
    assert "".join(e.data for e in events if e.kind == "text_delta") == "Hello world."
    assert events[-1].data is message

    body = api.bodies[0]
    assert body["model"] == MODEL and body["stream"] is True
    assert body["system"][0]["text"] == "Be brief."
    assert body["messages"][0]["role"] == "user"
    assert "thinking" not in body


def test_tool_round_trip(api: MockAPI) -> None:
    first = stream_response([
        start(),
        *text_block(0, "Looking."),
        *tool_block(1, "toolu_01", "read", {"path": "a.py"}),
        *tool_block(2, "toolu_02", "ls", {"path": "."}),
        *end("tool_use"),
    ])
    api.queue(first, text_reply("a.py holds one line."))
    model = api.model()
    calls: list[ModelEvent] = []
    reply = model.complete(
        request(user("What is in a.py?"), tools=TOOLS),
        on_event=lambda e: calls.append(e) if e.kind == "tool_call" else None,
    )
    assert reply["stopReason"] == "toolUse"
    assert reply["content"][1:] == [
        {"type": "toolCall", "id": "toolu_01", "name": "read", "arguments": {"path": "a.py"}},
        {"type": "toolCall", "id": "toolu_02", "name": "ls", "arguments": {"path": "."}},
    ]
    assert [e.data["id"] for e in calls] == ["toolu_01", "toolu_02"]
    assert [t["name"] for t in api.bodies[0]["tools"]] == ["read", "ls"]

    history = [
        user("What is in a.py?"),
        reply,
        {"role": "toolResult", "toolCallId": "toolu_01", "toolName": "read",
         "content": [{"type": "text", "text": "x = 1"}], "isError": False, "timestamp": 2},
        {"role": "toolResult", "toolCallId": "toolu_02", "toolName": "ls",
         "content": [{"type": "text", "text": "a.py"}], "isError": True, "timestamp": 3},
        user("Also, be quick."),
    ]
    clean, _ = journal.sanitize(history)
    second = model.complete(request(*clean, tools=TOOLS))
    assert second["content"] == [{"type": "text", "text": "a.py holds one line."}]

    sent = api.bodies[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][1] == {
        "type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "a.py"}
    }
    results = sent[2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[0]["tool_use_id"] == "toolu_01" and results[0]["is_error"] is False
    assert results[0]["content"] == [{"type": "text", "text": "x = 1"}]
    assert results[1]["tool_use_id"] == "toolu_02" and results[1]["is_error"] is True
    assert results[2]["text"] == "Also, be quick."


def test_thinking_passed_back_unchanged(api: MockAPI) -> None:
    api.queue(
        stream_response([
            start(),
            *thinking_block(0, "Let me think about it.", "sig-abc=="),
            *redacted_block(1, "opaque-data"),
            *text_block(2, "Done."),
            *end(),
        ]),
        text_reply("Sure."),
    )
    model = api.model()
    first = model.complete(request(user("think"), thinking_level="high", max_tokens=4000))
    assert first["content"] == [
        {"type": "thinking", "thinking": "Let me think about it.",
         "thinkingSignature": "sig-abc=="},
        {"type": "thinking", "thinking": "[Reasoning redacted]",
         "thinkingSignature": "opaque-data", "redacted": True},
        {"type": "text", "text": "Done."},
    ]
    body = api.bodies[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert body["max_tokens"] == 4000 + 16384

    model.complete(request(user("think"), first, user("again"), thinking_level="low"))
    assistant = api.bodies[1]["messages"][1]
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "Let me think about it.", "signature": "sig-abc=="},
        {"type": "redacted_thinking", "data": "opaque-data"},
        {"type": "text", "text": "Done."},
    ]
    assert api.bodies[1]["thinking"]["budget_tokens"] == 2048


@pytest.mark.parametrize(
    ("api_stop", "pi_stop"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "error"),
    ],
)
def test_stop_reason_mapping(api: MockAPI, api_stop: str, pi_stop: str) -> None:
    api.queue(text_reply("Partial answer", stop=api_stop))
    message = api.model().complete(request(user("go")))
    assert message["stopReason"] == pi_stop
    assert ("errorMessage" in message) == (pi_stop == "error")


def test_usage_mapping_with_cache_fields(api: MockAPI) -> None:
    api.queue(stream_response([
        start(input_tokens=1200, cache_read=3000, cache_write=500),
        *text_block(0, "ok"),
        *end(output_tokens=85),
    ]))
    usage = api.model().complete(request(user("go")))["usage"]
    assert {k: usage[k] for k in ("input", "output", "cacheRead", "cacheWrite")} == {
        "input": 1200, "output": 85, "cacheRead": 3000, "cacheWrite": 500
    }
    assert usage["totalTokens"] == 1200 + 85 + 3000 + 500
    cost = usage["cost"]
    assert cost["input"] == pytest.approx(0.0036)
    assert cost["output"] == pytest.approx(0.001275)
    assert cost["cacheRead"] == pytest.approx(3000 * 0.3 / 1e6)
    assert cost["cacheWrite"] == pytest.approx(500 * 3.75 / 1e6)
    assert cost["total"] == pytest.approx(sum(cost[k] for k in
                                              ("input", "output", "cacheRead", "cacheWrite")))
    assert price_for("some-unknown-model") is None


def test_cache_breakpoints_on_system_and_last_user_block(api: MockAPI) -> None:
    api.queue(text_reply(), text_reply())
    model = api.model()
    model.complete(request(user("one"), system="sys", tools=TOOLS))
    body = api.bodies[0]
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all("cache_control" not in t for t in body["tools"])

    model.prompt_cache = False
    model.complete(request(user("one"), system="sys"))
    assert "cache_control" not in json.dumps(api.bodies[1])


def test_tool_call_with_broken_json_is_left_out(api: MockAPI) -> None:
    broken = [
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_9", "name": "write", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": '{"path": "a.py", "cont'}},
        {"type": "content_block_stop", "index": 0},
    ]
    api.queue(stream_response([start(), *broken, *end("max_tokens")]))
    message = api.model().complete(request(user("write it")))
    assert message["content"] == []
    assert message["stopReason"] == "length"


# --- errors


def test_prompt_too_long_is_context_overflow(api: MockAPI) -> None:
    api.queue(error_response(400, "invalid_request_error",
                             "prompt is too long: 210034 tokens > 200000 maximum"))
    with pytest.raises(ContextOverflow) as info:
        api.model().complete(request(user("big")))
    err = info.value
    assert err.kind == "overflow" and err.status == 400
    assert (err.tokens, err.limit) == (210034, 200000)
    assert err.partial is not None and err.partial["stopReason"] == "error"
    assert len(api.bodies) == 1


@pytest.mark.parametrize(
    ("status", "etype", "text"),
    [
        (413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
        (400, "request_too_large", "Request too large"),
        (400, "invalid_request_error",
         "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000"),
    ],
)
def test_other_overflow_shapes(api: MockAPI, status: int, etype: str, text: str) -> None:
    api.queue(error_response(status, etype, text))
    with pytest.raises(ContextOverflow):
        api.model().complete(request(user("big")))
    assert len(api.bodies) == 1


def test_other_bad_request_is_plain_model_error(api: MockAPI) -> None:
    api.queue(error_response(400, "invalid_request_error", "tools.0.name: bad name"))
    with pytest.raises(ModelError) as info:
        api.model().complete(request(user("x")))
    assert type(info.value) is ModelError
    assert info.value.kind == "invalid_request_error"


def test_bad_request_whose_message_is_not_text_is_a_model_error(api: MockAPI) -> None:
    # a proxy may answer with a structured message; classifying it must not raise TypeError
    body = {"type": "error", "error": {"type": "invalid_request_error",
                                       "message": {"field": "tools.0.name", "code": 7}}}
    api.queue(httpx2.Response(400, json=body))
    with pytest.raises(ModelError) as info:
        api.model().complete(request(user("x")))
    assert type(info.value) is ModelError
    assert info.value.kind == "invalid_request_error"
    assert "tools.0.name" in str(info.value)


def test_overloaded_is_retried_by_the_sdk(api: MockAPI) -> None:
    overloaded = error_response(529, "overloaded_error", "Overloaded", **FAST_RETRY)
    api.queue(overloaded, overloaded, text_reply("finally"))
    started = time.monotonic()
    message = api.model(max_retries=2).complete(request(user("go")))
    assert message["content"][0]["text"] == "finally"
    assert len(api.bodies) == 3
    assert time.monotonic() - started < 2


def test_overloaded_surfaces_after_retries(api: MockAPI) -> None:
    api.queue(*[error_response(529, "overloaded_error", "Overloaded", **FAST_RETRY)] * 3)
    with pytest.raises(Overloaded) as info:
        api.model(max_retries=2).complete(request(user("go")))
    assert info.value.retryable and info.value.status == 529
    assert len(api.bodies) == 3


def test_rate_limit_is_retried(api: MockAPI) -> None:
    api.queue(error_response(429, "rate_limit_error", "slow down", **FAST_RETRY), text_reply())
    api.model(max_retries=1).complete(request(user("go")))
    assert len(api.bodies) == 2


def test_rate_limit_surfaces_with_retry_after(api: MockAPI) -> None:
    api.queue(*[error_response(429, "rate_limit_error", "slow down", **FAST_RETRY)] * 2)
    with pytest.raises(RateLimited) as info:
        api.model(max_retries=1).complete(request(user("go")))
    assert info.value.retry_after == pytest.approx(0.001)


def test_unauthorized_is_auth_error_with_hint(api: MockAPI) -> None:
    api.queue(error_response(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(AuthError) as info:
        api.model().complete(request(user("go")))
    assert "ANTHROPIC_API_KEY" in str(info.value)
    assert "invalid x-api-key" in str(info.value)
    assert info.value.partial["errorMessage"] == str(info.value)
    assert len(api.bodies) == 1


def test_missing_credentials_is_auth_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE",
                 "ANTHROPIC_CONFIG_DIR", "ANTHROPIC_IDENTITY_TOKEN",
                 "ANTHROPIC_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    client = anthropic.Anthropic(
        http_client=httpx2.Client(transport=httpx2.MockTransport(lambda r: text_reply()))
    )
    with pytest.raises(AuthError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL, client=client).complete(request(user("go")))


def test_timeout_is_model_timeout(api: MockAPI) -> None:
    def stall(body: dict[str, Any]) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out")

    api.queue(stall)
    with pytest.raises(ModelTimeout):
        api.model(max_retries=0).complete(request(user("go")))


def test_error_event_mid_stream_keeps_partial(api: MockAPI) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    api.queue(stream_response([start(), *text_block(0, "Half an ans"), error]))
    with pytest.raises(Overloaded) as info:
        api.model().complete(request(user("go")))
    partial = info.value.partial
    assert partial["stopReason"] == "error"
    assert partial["content"] == [{"type": "text", "text": "Half an ans"}]
    assert len(api.bodies) == 1


def test_stream_cut_short_is_model_error(api: MockAPI) -> None:
    api.queue(stream_response([start(), *text_block(0, "cut")]))
    with pytest.raises(ModelError) as info:
        api.model().complete(request(user("go")))
    assert info.value.partial["content"] == [{"type": "text", "text": "cut"}]


# --- abort


def test_abort_mid_stream(api: MockAPI) -> None:
    events = [
        start(),
        *thinking_block(0, "Plan.", "sig"),
        *text_block(1, "First part. ", "Second part. ", "Third part."),
        *tool_block(2, "toolu_1", "ls", {}),
        *end("tool_use"),
    ]
    api.queue(stream_response(events))
    abort = threading.Event()
    seen: list[str] = []

    def on_event(event: ModelEvent) -> None:
        if event.kind == "text_delta":
            seen.append(event.data)
            if len(seen) == 2:
                abort.set()

    with pytest.raises(ModelAborted) as info:
        api.model().complete(request(user("go")), on_event=on_event, abort=abort)
    partial = info.value.partial
    assert info.value.kind == "aborted"
    assert partial["stopReason"] == "aborted"
    assert partial["content"] == [
        {"type": "thinking", "thinking": "Plan.", "thinkingSignature": "sig"},
        {"type": "text", "text": "First part. Second part. "},
    ]
    assert seen == ["First part. ", "Second part. "]


def test_abort_from_another_thread_while_the_stream_is_slow(api: MockAPI) -> None:
    abort = threading.Event()

    def slow() -> Iterator[bytes]:
        yield sse(start(), *text_block(0, "Working"))
        deadline = time.monotonic() + 5
        while not abort.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        yield sse(*text_block(1, "more"), *end())

    api.queue(stream_response(slow()))
    threading.Timer(0.1, abort.set).start()
    started = time.monotonic()
    with pytest.raises(ModelAborted) as info:
        api.model().complete(request(user("go")), abort=abort)
    assert time.monotonic() - started < 2
    assert info.value.partial["content"] == [{"type": "text", "text": "Working"}]


def test_abort_before_sending(api: MockAPI) -> None:
    abort = threading.Event()
    abort.set()
    with pytest.raises(ModelAborted) as info:
        api.model().complete(request(user("go")), abort=abort)
    assert info.value.partial["content"] == []
    assert api.bodies == []
