"""The run loop driving `AnthropicModel` through the real SDK, against a mock HTTP transport.

No network: `httpx2.MockTransport` serves hand-built SSE streams and error bodies. The mock
checks that every request it receives passes `journal.api_pairing_problems` (asserted in the
handler and again after each test), and the journal is checked after every run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anthropic_mock import (
    FAST_RETRY,
    MODEL,
    MockAPI,
    end,
    error_response,
    start,
    stream_response,
    text_block,
    tool_block,
)

from agent.compaction.summarize import ExtractiveSummarizer
from agent.models import ModelEvent
from agent.models.anthropic import AnthropicModel
from agent.runner import DEFAULT_SYSTEM_PROMPT, Runner, RunnerEvent
from agent.settings import DEFAULT_SETTINGS
from journal import Session, load
from journal.validate import pairing_problems
from tools import default_tools

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

@pytest.fixture(autouse=True)
def _no_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture
def api() -> Iterator[MockAPI]:
    mock = MockAPI()
    yield mock
    assert mock.problems == []
    assert mock.replies == [], "replies left unused"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


# --- SSE replies


def sse(events: list[dict[str, Any]]) -> httpx2.Response:
    return stream_response(events)


def message_start(input_tokens: int = 100) -> dict[str, Any]:
    return start(input_tokens)


def message_end(stop: str = "end_turn", output_tokens: int = 20) -> list[dict[str, Any]]:
    return end(stop, output_tokens)


text_events, tool_events = text_block, tool_block


def text_reply(*pieces: str, input_tokens: int = 100) -> httpx2.Response:
    return sse([message_start(input_tokens), *text_events(0, *pieces), *message_end()])


def tool_reply(text: str, call_id: str, name: str, args: dict[str, Any],
               input_tokens: int = 100) -> httpx2.Response:
    return sse([message_start(input_tokens), *text_events(0, text),
                *tool_events(1, call_id, name, args), *message_end("tool_use")])


# --- journal checks


def messages_of(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["message"] for e in entries if e.get("type") == "message"]


def check_journal(session: Session) -> list[dict[str, Any]]:
    """The file reads cleanly, every call in it has one result, and the projection of the
    active branch is valid (raw: failed turns that produced nothing aside, see
    tests/test_runner.py; as sent: strictly)."""
    snap = load(session.path)
    assert snap.diagnostics == []
    messages = messages_of(snap.entries)
    calls = [b["id"] for m in messages if m["role"] == "assistant"
             for b in m["content"] if b["type"] == "toolCall"]
    results = [m["toolCallId"] for m in messages if m["role"] == "toolResult"]
    assert sorted(calls) == sorted(results)
    raw = session.context(raw=True).messages
    allowed = {f"messages[{i}]: assistant message has no content" for i, m in enumerate(raw)
               if m.get("role") == "assistant" and m.get("stopReason") in ("error", "aborted")}
    assert [p for p in pairing_problems(raw) if p not in allowed] == []
    assert pairing_problems(session.context().messages) == []
    return snap.entries


def make_runner(session: Session, model: AnthropicModel, workspace: Path,
                **kwargs: Any) -> tuple[Runner, list[RunnerEvent]]:
    events: list[RunnerEvent] = []
    kwargs.setdefault("summarizer", ExtractiveSummarizer())
    runner = Runner(session, model, default_tools(workspace), workspace=str(workspace),
                    on_event=events.append, **kwargs)
    return runner, events


def request_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if block["type"] == "text":
            parts.append(block["text"])
        elif block["type"] == "tool_result":
            inner = block.get("content")
            parts.append(inner if isinstance(inner, str) else json.dumps(inner))
    return "\n".join(parts)


# --- tests


def test_tool_round_trip_runs_the_real_tool(api: MockAPI, tmp_path: Path,
                                            workspace: Path) -> None:
    (workspace / "notes.txt").write_text("remember the milk\n")
    api.queue(tool_reply("Let me read the notes.", "toolu_01", "read", {"path": "notes.txt"}),
              text_reply("The notes say: remember the milk."))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, events = make_runner(session, api.model(), workspace)
        result = runner.run("What do my notes say?")
        entries = check_journal(session)

    assert (result.stop_reason, result.turns) == ("stop", 2)
    assert result.final_text == "The notes say: remember the milk."
    first, second = api.bodies
    assert first["model"] == MODEL and first["stream"] is True
    assert first["system"][0]["text"] == DEFAULT_SYSTEM_PROMPT
    assert {t["name"] for t in first["tools"]} == {"read", "write", "edit", "ls", "grep", "bash"}
    assert [m["role"] for m in first["messages"]] == ["user"]
    # the next request carries the call and the real tool's result right after it
    sent = second["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert {"type": "tool_use", "id": "toolu_01", "name": "read",
            "input": {"path": "notes.txt"}} in sent[1]["content"]
    tool_result = sent[2]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "toolu_01"
    assert not tool_result.get("is_error", False)
    assert "remember the milk" in request_text(sent[2])
    # the journal: each turn as it happened
    messages = messages_of(entries)
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult", "assistant"]
    assert messages[1]["stopReason"] == "toolUse" and messages[1]["provider"] == "anthropic"
    assert messages[1]["usage"]["input"] == 100
    assert messages[2]["toolCallId"] == "toolu_01"
    assert "remember the milk" in messages[2]["content"][0]["text"]
    assert [e.kind for e in events if e.kind.startswith("tool")] == ["tool_start", "tool_end"]


def test_reply_is_streamed_through_the_runner(api: MockAPI, tmp_path: Path,
                                              workspace: Path) -> None:
    pieces = ("The work", "space is ", "empty; ", "nothing to do.")
    api.queue(tool_reply("Looking.", "toolu_ls", "ls", {}), text_reply(*pieces))
    streamed: list[ModelEvent] = []
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, events = make_runner(session, api.model(), workspace,
                                     on_model_event=streamed.append)
        result = runner.run("Anything in the workspace?")
        entries = check_journal(session)

    assert result.final_text == "".join(pieces)
    kinds = [e.kind for e in streamed]
    assert kinds == ["message_start", "text_delta", "tool_call", "message_end",
                     "message_start", *["text_delta"] * len(pieces), "message_end"]
    assert [e.data for e in streamed[-1 - len(pieces):-1]] == list(pieces)
    assert streamed[2].data["id"] == "toolu_ls"
    assert streamed[-1].data == messages_of(entries)[-1]  # what streamed is what was recorded
    assert [e.kind for e in events] == ["turn_start", "turn_end", "tool_start", "tool_end",
                                        "turn_start", "turn_end"]


def test_prompt_too_long_is_recovered_by_compaction(api: MockAPI, tmp_path: Path,
                                                    workspace: Path) -> None:
    for name in ("a", "b", "c"):
        (workspace / f"{name}.txt").write_text(
            "\n".join(f"{name} row {k}: " + "0123456789" * 7 for k in range(100)))
    too_long = error_response(400, "invalid_request_error",
                              "prompt is too long: 210034 tokens > 200000 maximum")
    api.queue(
        tool_reply("Reading a.", "toolu_a", "read", {"path": "a.txt"}),
        tool_reply("Reading b.", "toolu_b", "read", {"path": "b.txt"}),
        tool_reply("Reading c.", "toolu_c", "read", {"path": "c.txt"}),
        too_long,
        text_reply("Read all three files."),
    )
    settings = replace(DEFAULT_SETTINGS, keep_recent_tokens=1_000)
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, events = make_runner(session, api.model(), workspace, settings=settings)
        result = runner.run("Read a.txt, b.txt and c.txt.")
        entries = check_journal(session)

    assert (result.stop_reason, result.turns, result.compactions) == ("stop", 4, 1)
    assert len(api.bodies) == 5  # a 400 is not retried by the SDK; the runner retried once
    rejected, retry = api.bodies[3]["messages"], api.bodies[4]["messages"]
    assert len(json.dumps(retry)) < len(json.dumps(rejected)) / 2
    compaction = next(e for e in entries if e["type"] == "compaction")
    assert compaction["details"]["reason"] == "overflow"
    assert compaction["summary"] in request_text(retry[0])
    assert "<summary>" in request_text(retry[0])
    # the kept part: the last call and its result, still paired
    assert retry[-2]["role"] == "assistant"
    assert retry[-2]["content"][-1]["id"] == "toolu_c"
    assert retry[-1]["content"][0]["tool_use_id"] == "toolu_c"
    end = next(e.data for e in events if e.kind == "compaction_end")
    assert end["will_retry"] and end["compacted"] and end["reason"] == "overflow"
    roles = [m["role"] for m in messages_of(entries)]
    assert roles.count("assistant") == 4 and roles.count("toolResult") == 3


def test_overloaded_529_is_retried(api: MockAPI, tmp_path: Path, workspace: Path) -> None:
    api.queue(error_response(529, "overloaded_error", "Overloaded", **FAST_RETRY),
              text_reply("Hello."))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, api.model(), workspace)
        result = runner.run("Say hello.")
        entries = check_journal(session)

    assert (result.stop_reason, result.final_text) == ("stop", "Hello.")
    assert len(api.bodies) == 2 and api.bodies[0] == api.bodies[1]
    assert [m["role"] for m in messages_of(entries)] == ["user", "assistant"]


def test_overloaded_after_all_retries_is_recorded_then_resumed(
    api: MockAPI, tmp_path: Path, workspace: Path
) -> None:
    overloaded = error_response(529, "overloaded_error", "Overloaded", **FAST_RETRY)
    api.queue(overloaded, overloaded, overloaded, text_reply("Back again."))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, api.model(max_retries=2), workspace)
        failed = runner.run("Say hello.")
        check_journal(session)
        resumed = runner.run(None)
        entries = check_journal(session)

    assert failed.stop_reason == "error" and "overloaded" in failed.message
    assert len(api.bodies) == 4  # one call and two SDK retries, then the resumed run
    messages = messages_of(entries)
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[1]["stopReason"] == "error" and messages[1]["content"] == []
    assert "overloaded" in messages[1]["errorMessage"]
    # the empty failed turn is not sent again
    assert [m["role"] for m in api.bodies[3]["messages"]] == ["user"]
    assert resumed.final_text == "Back again."
