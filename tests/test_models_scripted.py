"""ScriptedModel: replay, deterministic ids, usage from the estimator, failure injection, and the
shipped scenario files (demo.json is also replayed against the real tools)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import journal
import journal.validate
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
    tool_calls,
)
from agent.models.payload import to_api_messages
from agent.models.scripted import FAILURES, FINISHED_TEXT, ScenarioError, ScriptedModel
from agent.tokens import Estimator

SCENARIOS = Path(__file__).resolve().parents[1] / "agent" / "scenarios"
TOOL_ARGS = {
    "read": ({"path"}, {"offset", "limit"}),
    "write": ({"path", "content"}, set()),
    "edit": ({"path", "old_text", "new_text"}, set()),
    "bash": ({"command"}, {"timeout"}),
    "ls": (set(), {"path"}),
    "grep": ({"pattern"}, {"path", "glob"}),
}
TOOLS = [{"name": "ls", "description": "List files.", "input_schema": {"type": "object"}}]


def scenario(*turns: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "t", "turns": list(turns), **top}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def result_for(call: dict[str, Any], text: str = "ok") -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": call["id"], "toolName": call["name"],
            "content": [{"type": "text", "text": text}], "isError": False, "timestamp": 2}


TWO_TURNS = scenario(
    {"thinking": "Plan first.", "text": "Listing.",
     "tool_calls": [{"name": "ls", "arguments": {}}, {"name": "ls", "arguments": {"path": "src"}}]},
    {"text": "Two directories, both empty."},
)


def test_replays_turns_in_order_then_finishes() -> None:
    model = ScriptedModel(TWO_TURNS, clock=lambda: 1.5)
    assert isinstance(model, Model)
    assert (model.provider, model.model_id) == ("scripted", "scripted-1")
    assert model.context_window is None

    first = model.complete(ModelRequest([user("go")], tools=TOOLS))
    assert first["content"] == [
        {"type": "thinking", "thinking": "Plan first."},
        {"type": "text", "text": "Listing."},
        {"type": "toolCall", "id": "call_0_0", "name": "ls", "arguments": {}},
        {"type": "toolCall", "id": "call_0_1", "name": "ls", "arguments": {"path": "src"}},
    ]
    assert first["stopReason"] == "toolUse"
    assert first["timestamp"] == 1500
    assert (first["api"], first["provider"]) == ("scripted", "scripted")
    assert first["model"] == "scripted-1"

    history = [user("go"), first, *(result_for(c) for c in tool_calls(first))]
    second = model.complete(ModelRequest(history))
    assert second["content"] == [{"type": "text", "text": "Two directories, both empty."}]
    assert second["stopReason"] == "stop"
    assert model.finished

    for _ in range(2):
        extra = model.complete(ModelRequest([*history, second, user("more?")]))
        assert extra["content"] == [{"type": "text", "text": FINISHED_TEXT}]
        assert extra["stopReason"] == "stop"
    assert model.calls == 4


def test_ids_and_messages_are_deterministic() -> None:
    runs = []
    for _ in range(2):
        model = ScriptedModel(TWO_TURNS, clock=lambda: 7.0)
        runs.append([model.complete(ModelRequest([user("go")])) for _ in range(3)])
    assert runs[0] == runs[1]


def test_stop_override_and_events() -> None:
    model = ScriptedModel(scenario({"text": "x" * 60, "stop": "length"}))
    events: list[ModelEvent] = []
    message = model.complete(ModelRequest([user("go")]), on_event=events.append)
    assert message["stopReason"] == "length"
    kinds = [e.kind for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_end"
    assert "".join(e.data for e in events if e.kind == "text_delta") == "x" * 60
    assert kinds.count("text_delta") > 1


def test_usage_comes_from_the_estimator() -> None:
    estimator = Estimator()
    model = ScriptedModel(TWO_TURNS, estimator=estimator)
    messages = [user("please list the files " * 20)]
    request = ModelRequest(messages, tools=TOOLS, system="You are terse.")
    message = model.complete(request)
    expected_input = (
        estimator.estimate_messages(messages)
        + estimator.count_text(json.dumps(TOOLS, separators=(",", ":")))
        + estimator.count_text("You are terse.")
    )
    usage = message["usage"]
    assert usage["input"] == expected_input == model.prompt_tokens(request)
    assert usage["output"] == estimator.estimate_message(message) > 0
    assert usage["totalTokens"] == usage["input"] + usage["output"]
    assert usage["cacheRead"] == usage["cacheWrite"] == 0
    assert usage["cost"]["total"] == 0


@pytest.mark.parametrize(
    ("fail", "error_type"),
    [
        ("overflow", ContextOverflow),
        ("timeout", ModelTimeout),
        ("abort", ModelAborted),
        ("error", ModelError),
        ("overloaded", Overloaded),
        ("rate_limit", RateLimited),
        ("auth", AuthError),
    ],
)
def test_failure_is_raised_once_then_the_turn_succeeds(fail: str, error_type: type) -> None:
    model = ScriptedModel(scenario(
        {"text": "first turn", "fail": fail},
        {"text": "second turn"},
    ))
    request = ModelRequest([user("go")])
    with pytest.raises(error_type) as info:
        model.complete(request)
    error = info.value
    assert type(error) is error_type
    assert error.partial["role"] == "assistant"
    assert error.partial["stopReason"] == ("aborted" if fail == "abort" else "error")
    assert "errorMessage" in error.partial
    assert model.turn == 0

    assert model.complete(request)["content"][0]["text"] == "first turn"
    assert model.complete(request)["content"][0]["text"] == "second turn"
    assert sorted(FAILURES) == sorted(
        ["overflow", "timeout", "abort", "error", "overloaded", "rate_limit", "auth"]
    )


def test_scripted_abort_keeps_half_the_text() -> None:
    model = ScriptedModel(scenario({"text": "abcdefgh", "fail": "abort"}))
    with pytest.raises(ModelAborted) as info:
        model.complete(ModelRequest([user("go")]))
    assert info.value.partial["content"] == [{"type": "text", "text": "abcd"}]


def test_abort_event_mid_stream() -> None:
    text = "A reply long enough to be streamed in several pieces, one by one."
    model = ScriptedModel(scenario(
        {"text": text, "tool_calls": [{"name": "ls", "arguments": {}}]}
    ))
    abort = threading.Event()

    def on_event(event: ModelEvent) -> None:
        if event.kind == "text_delta":
            abort.set()

    with pytest.raises(ModelAborted) as info:
        model.complete(ModelRequest([user("go")]), on_event=on_event, abort=abort)
    partial = info.value.partial
    assert partial["stopReason"] == "aborted"
    assert len(partial["content"]) == 1
    assert text.startswith(partial["content"][0]["text"])
    assert partial["content"][0]["text"] != text
    assert model.turn == 0

    abort.clear()
    again = model.complete(ModelRequest([user("go")]), abort=abort)
    assert again["content"][0]["text"] == text

    abort.set()
    with pytest.raises(ModelAborted) as info:
        model.complete(ModelRequest([user("go")]), abort=abort)
    assert info.value.partial["content"] == []


def test_overflow_above_simulates_a_small_window() -> None:
    model = ScriptedModel(scenario({"text": "fits"}), overflow_above=50)
    big = ModelRequest([user("word " * 200)])
    for _ in range(2):
        with pytest.raises(ContextOverflow) as info:
            model.complete(big)
        assert info.value.tokens == model.prompt_tokens(big) > 50
        assert info.value.limit == 50
    assert model.turn == 0
    assert model.complete(ModelRequest([user("short")]))["content"][0]["text"] == "fits"


def test_scenario_settings_and_constructor_overrides() -> None:
    data = scenario({"text": "x"}, model="m-2", provider="p", context_window=16000,
                    overflow_above=9000)
    model = ScriptedModel(data)
    assert (model.model_id, model.provider, model.context_window) == ("m-2", "p", 16000)
    assert model.overflow_above == 9000
    assert ScriptedModel(data, context_window=20000, overflow_above=100).context_window == 20000


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "JSON object"),
        ({"turns": {}}, "'turns' must be a list"),
        ({"turns": [], "extra": 1}, "unknown top-level"),
        ({"turns": [{"txt": "x"}]}, "unknown keys"),
        ({"turns": [{"text": "x", "fail": "boom"}]}, "fail must be one of"),
        ({"turns": [{"text": "x", "stop": "aborted"}]}, "stop must be one of"),
        ({"turns": [{"fail": "timeout"}]}, "produces nothing"),
        ({"turns": [{"tool_calls": [{"name": ""}]}]}, "name must be"),
        ({"turns": [{"tool_calls": [{"name": "ls", "arguments": []}]}]}, "arguments must be"),
        ({"turns": [], "overflow_above": 0}, "positive integer"),
    ],
)
def test_bad_scenarios_are_refused(data: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        ScriptedModel(data)


def test_from_file_reports_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ScenarioError, match="bad.json"):
        ScriptedModel.from_file(bad)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.json")), ids=lambda p: p.name)
def test_shipped_scenarios_are_valid(path: Path) -> None:
    model = ScriptedModel.from_file(path)
    assert model.turns
    for turn in model.turns:
        for call in turn.get("tool_calls", []):
            required, optional = TOOL_ARGS[call["name"]]
            keys = set(call.get("arguments", {}))
            assert required <= keys <= required | optional, call


def play(model: ScriptedModel, prompt: str, max_turns: int = 200) -> list[dict[str, Any]]:
    """A minimal run loop: every tool call answered with a fixed result, failures retried."""
    history = [user(prompt)]
    for _ in range(max_turns):
        if model.finished:
            break
        clean, _ = journal.sanitize(history)
        assert journal.validate.api_pairing_problems(to_api_messages(clean)) == []
        try:
            message = model.complete(ModelRequest(clean, tools=TOOLS))
        except ModelError:
            continue
        history.append(message)
        history.extend(result_for(c, f"result of {c['id']}") for c in tool_calls(message))
        if not tool_calls(message):
            history.append(user("continue"))
    assert model.finished
    return history


def test_demo_scenario_replays_into_a_valid_history() -> None:
    model = ScriptedModel.from_file(SCENARIOS / "demo.json")
    assert 40 <= len(model.turns) <= 60
    assert model.prompt
    history = play(model, model.prompt)
    assert journal.validate.pairing_problems(history) == []
    ids = [c["id"] for m in history if m["role"] == "assistant" for c in tool_calls(m)]
    assert len(ids) == len(set(ids)) > 40
    kinds = {c["name"] for m in history if m["role"] == "assistant" for c in tool_calls(m)}
    assert kinds == set(TOOL_ARGS)


def test_failures_scenario_recovers_on_retry() -> None:
    model = ScriptedModel.from_file(SCENARIOS / "failures.json")
    history = play(model, model.prompt or "go")
    assert model.calls == 2 * len(model.turns)
    assert journal.validate.pairing_problems(history) == []


def test_demo_tool_calls_work_against_the_real_tools(tmp_path: Path) -> None:
    """Every call in demo.json runs in a fresh workspace; only calls marked expect_error fail."""
    tools_pkg = pytest.importorskip("tools")
    tools = tools_pkg.default_tools(tmp_path)
    scenario_data = json.loads((SCENARIOS / "demo.json").read_text())
    large = 0
    for i, turn in enumerate(scenario_data["turns"]):
        for call in turn.get("tool_calls", []):
            result = tools_pkg.run_tool(tools, call["name"], call["arguments"])
            assert result.is_error == bool(call.get("expect_error")), (i, call, result.content)
            large += len(result.content) > 20_000
    assert large >= 3


def test_call_id_prefix_keeps_ids_of_two_scenarios_apart() -> None:
    from agent.models import ModelRequest

    scenario = {"turns": [{"tool_calls": [{"name": "ls", "arguments": {}}]}]}
    first = ScriptedModel(scenario).complete(ModelRequest(messages=[]))
    second = ScriptedModel(scenario, call_id_prefix="resume_").complete(ModelRequest(messages=[]))
    ids = [b["id"] for m in (first, second) for b in m["content"] if b["type"] == "toolCall"]
    assert ids == ["call_0_0", "resume_0_0"]
