"""The run loop end to end with `ScriptedModel`, the real tools and a real journal.

Every test checks the journal afterwards: the entries were written turn by turn (a `Watch`
observer reads the file at each turn and tool event), every tool call has a result in the file,
the file reads without diagnostics, and the raw projection of the active branch passes
`journal.pairing_problems`. Every request the model receives must pass it too (`Checked`).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from processes import alive

import journal
from agent.compaction.summarize import ExtractiveSummarizer, SummaryOverflow
from agent.models import ModelEvent, ModelRequest
from agent.models.scripted import ScriptedModel
from agent.replay import continue_scripted
from agent.runner import Runner, RunnerEvent
from agent.settings import DEFAULT_SETTINGS
from journal import BadKeptEntry, RotationPolicy, Session, load
from journal.validate import pairing_problems
from tools import Tool, ToolResult, Workspace, default_tools

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "agent" / "scenarios"

# A small window as in agent/demo.py: window pressure is resolved by compaction.
SMALL = replace(DEFAULT_SETTINGS, context_window=16_000, keep_recent_tokens=2_000,
                soft_trim_ratio=0.85, hard_clear_ratio=0.95,
                aggregate_min_keep_chars=1_000_000, retry_min_delay=0.0, retry_max_delay=0.0)
# A large window: nothing compacts unless the model overflows.
LARGE = replace(DEFAULT_SETTINGS, context_window=200_000, keep_recent_tokens=500,
                retry_min_delay=0.0, retry_max_delay=0.0)


@pytest.fixture(autouse=True)
def _no_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    logging.getLogger("agent.window").setLevel(logging.ERROR)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


# --- helpers


def scenario(*turns: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "test", "turns": list(turns), **top}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


class Checked:
    """Wraps a model: every request must be valid for the API; requests are kept."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.provider = inner.provider
        self.model_id = inner.model_id
        self.context_window = inner.context_window
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, **kwargs: Any) -> dict[str, Any]:
        assert pairing_problems(request.messages) == []
        self.requests.append(request)
        return self.inner.complete(request, **kwargs)


class Watch:
    """A runner observer that checks the file as events arrive: each turn and each tool
    result must already be in the session file when its event is emitted."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.events: list[RunnerEvent] = []

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.kind == kind]

    def __call__(self, event: RunnerEvent) -> None:
        self.events.append(event)
        if event.kind == "turn_end":
            ids = [e["id"] for e in load(self.session.path).entries]
            assert event.data["entry_id"] in ids, "the assistant turn is not in the file yet"
        elif event.kind == "tool_start":
            last = load(self.session.path).entries[-1]
            message = last.get("message") or {}
            assert message.get("role") in ("assistant", "toolResult")
        elif event.kind == "tool_end":
            last = load(self.session.path).entries[-1]["message"]
            assert last["role"] == "toolResult"
            assert last["toolCallId"] == event.data["call_id"]


def messages_of(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["message"] for e in entries if e.get("type") == "message"]


def roles(entries: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages_of(entries)]


def call_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [b["id"] for m in messages if m["role"] == "assistant"
            for b in m["content"] if b.get("type") == "toolCall"]


def result_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["toolCallId"] for m in messages if m["role"] == "toolResult"]


def read_entries(path: str) -> list[dict[str, Any]]:
    """Entries of a session file, plain or gzip-compressed (archived by rotation)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [e for e in lines if e.get("type") != "session"]


def assert_file_ok(path: str) -> list[dict[str, Any]]:
    """The file reads cleanly and answers every tool call it holds, exactly once."""
    entries = read_entries(path)
    if not path.endswith(".gz"):
        assert load(path).diagnostics == []
    messages = messages_of(entries)
    calls, results = call_ids(messages), result_ids(messages)
    assert sorted(set(calls)) == sorted(calls), "a tool call id is used twice"
    assert sorted(results) == sorted(calls), "a tool call without exactly one result"
    return entries


def raw_problems(session: Session) -> list[str]:
    """`pairing_problems` of the raw projection of the active branch, except that a failed
    turn that produced nothing (stopReason error or aborted, no content: pi records those
    too) may stand before other messages; the sanitizer leaves such turns out of requests."""
    raw = session.context(raw=True).messages
    allowed = {f"messages[{i}]: assistant message has no content" for i, m in enumerate(raw)
               if m.get("role") == "assistant" and m.get("stopReason") in ("error", "aborted")}
    return [p for p in pairing_problems(raw) if p not in allowed]


def assert_journal_ok(session: Session) -> list[dict[str, Any]]:
    """The live file is sound and the projection of the active branch is valid, raw (see
    `raw_problems`) and as sent."""
    entries = assert_file_ok(session.path)
    assert raw_problems(session) == []
    assert pairing_problems(session.context().messages) == []
    return entries


def make_runner(session: Session, model: Any, workspace: Path, *, settings: Any = LARGE,
                tools: list[Tool] | None = None, **kwargs: Any) -> tuple[Runner, Watch]:
    watch = Watch(session)
    kwargs.setdefault("summarizer", ExtractiveSummarizer())
    runner = Runner(session, model, tools if tools is not None else default_tools(workspace),
                    settings=settings, workspace=str(workspace), on_event=watch, **kwargs)
    return runner, watch


def filler(label: str, lines: int) -> str:
    return "\n".join(f"{label} line {k}: " + "abcdefghij" * 5 for k in range(lines))


# --- plain runs


def test_short_scenario_runs_to_stop_and_persists_each_turn(tmp_path: Path,
                                                             workspace: Path) -> None:
    model = Checked(ScriptedModel.from_file(SCENARIOS / "short.json"))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace)
        result = runner.run(model.inner.prompt)
        entries = assert_journal_ok(session)

    assert (result.stop_reason, result.turns, result.compactions) == ("stop", 4, 0)
    assert result.final_text.startswith("Done: hello.py")
    assert (workspace / "hello.py").read_text() == 'print("Hello from the workspace")\n'
    assert roles(entries) == ["user", "assistant", "toolResult", "assistant", "toolResult",
                              "assistant", "toolResult", "assistant"]
    results = [m for m in messages_of(entries) if m["role"] == "toolResult"]
    assert not any(r["isError"] for r in results)
    assert "Hello from the workspace" in results[-1]["content"][0]["text"]
    assert [d["turn"] for d in watch.kinds("turn_end")] == [1, 2, 3, 4]
    assert [d["name"] for d in watch.kinds("tool_end")] == ["ls", "write", "bash"]
    assert len(model.requests) == 4
    # each request carries the whole history so far, results included
    assert [len(r.messages) for r in model.requests] == [1, 3, 5, 7]


def test_long_run_compacts_several_times_and_rotates(tmp_path: Path, workspace: Path) -> None:
    turns = []
    for i in range(14):
        turns += [
            {"text": f"Writing part {i}.",
             "tool_calls": [call("write", path=f"part_{i}.txt", content=filler(f"p{i}", 50))]},
            {"text": f"Reading part {i} back.",
             "tool_calls": [call("read", path=f"part_{i}.txt")]},
            {"text": f"Counting part {i}.",
             "tool_calls": [call("bash", command=f"wc -l < part_{i}.txt")]},
        ]
    turns.append({"text": "All fourteen parts are written and checked."})
    model = Checked(ScriptedModel(scenario(*turns)))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        first_file = session.path
        session.rotation_policy = RotationPolicy(max_bytes=32 * 1024, after_compaction=True)
        runner, watch = make_runner(session, model, workspace, settings=SMALL)
        result = runner.run("Write fourteen parts, read each back and count its lines.")
        live = session.path
        assert_journal_ok(session)

    assert (result.stop_reason, result.turns) == ("stop", 43)
    assert result.compactions >= 3
    assert sorted(p.name for p in workspace.iterdir()) == sorted(
        f"part_{i}.txt" for i in range(14))
    ends = watch.kinds("compaction_end")
    assert len(ends) == result.compactions and all(d["compacted"] for d in ends)
    assert all(d["reason"] == "threshold" and d["tokens_after"] < d["tokens_before"]
               for d in ends)
    # the session rotated: the lineage runs from the first (archived) file to the live one
    assert live != first_file
    chain = journal.lineage(live)
    assert len(chain) >= 2 and chain[-1] == live
    assert os.path.basename(chain[0]).removesuffix(".gz") == os.path.basename(first_file)
    compactions = 0
    for path in chain:
        entries = assert_file_ok(path)
        compactions += sum(e["type"] == "compaction" for e in entries)
    assert compactions >= result.compactions
    # every turn was persisted: the assistant turns across the lineage (copies carried into a
    # successor counted once) are all 43, and all 42 tool calls were answered
    seen: dict[str, dict[str, Any]] = {}
    for path in chain:
        for entry in read_entries(path):
            if entry.get("type") == "message":
                seen.setdefault(entry["id"], entry["message"])
    assistants = [m for m in seen.values() if m["role"] == "assistant"]
    assert len(assistants) == 43
    assert sorted(result_ids(list(seen.values()))) == sorted(call_ids(list(seen.values())))
    assert len(call_ids(list(seen.values()))) == 42
    # no request went over the window: the prompt stayed inside the budget
    budget = runner.budget.prompt
    assert max(model.inner.prompt_tokens(r) for r in model.requests) <= runner.budget.window
    assert model.inner.prompt_tokens(model.requests[-1]) <= budget


# --- overflow


def _busy_turns(n: int, lines: int = 30) -> list[dict[str, Any]]:
    return [{"text": f"Step {i}: writing notes_{i}.txt.",
             "tool_calls": [call("write", path=f"notes_{i}.txt", content=filler(f"n{i}", lines))]}
            for i in range(n)]


def test_overflow_injected_at_turn_n_is_recovered_by_compaction(tmp_path: Path,
                                                                workspace: Path) -> None:
    turns = _busy_turns(5)
    turns.append({"text": "Reading the last notes back.", "fail": "overflow",
                  "tool_calls": [call("read", path="notes_4.txt")]})
    turns.append({"text": "Five notes written and checked."})
    model = Checked(ScriptedModel(scenario(*turns)))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace)
        result = runner.run("Write five notes, then read the last one back.")
        entries = assert_journal_ok(session)

    assert (result.stop_reason, result.turns, result.compactions) == ("stop", 7, 1)
    assert model.inner.calls == 8  # the overflowing call was retried once
    start = watch.kinds("compaction_start")
    end = watch.kinds("compaction_end")
    assert [d["reason"] for d in start] == ["overflow"]
    assert end[0]["will_retry"] and end[0]["compacted"]
    compaction = [e for e in entries if e["type"] == "compaction"]
    assert len(compaction) == 1 and compaction[0]["details"]["reason"] == "overflow"
    # the failed request and its retry: the retry starts with the summary and is smaller
    failed, retry = model.requests[5], model.requests[6]
    assert retry.messages[0]["role"] == "compactionSummary"
    assert retry.messages[0]["summary"] == compaction[0]["summary"]
    assert model.inner.prompt_tokens(retry) < model.inner.prompt_tokens(failed)
    # the failed call left nothing in the file: 7 assistant turns, 6 answered calls
    assert roles(entries).count("assistant") == 7
    assert roles(entries).count("toolResult") == 6


def test_overflow_above_a_limit_is_recovered_each_time(tmp_path: Path, workspace: Path) -> None:
    turns = _busy_turns(16)
    turns.append({"text": "All sixteen notes are written."})
    limit = 4_000
    model = Checked(ScriptedModel(scenario(*turns, overflow_above=limit)))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace)
        result = runner.run("Write sixteen notes.")
        entries = assert_journal_ok(session)

    assert (result.stop_reason, result.turns) == ("stop", 17)
    assert result.compactions >= 2
    assert {d["reason"] for d in watch.kinds("compaction_start")} == {"overflow"}
    assert len(model.requests) == 17 + result.compactions
    # every request that succeeded was within the limit; every one above it was retried
    sizes = [model.inner.prompt_tokens(r) for r in model.requests]
    assert sum(size > limit for size in sizes) == result.compactions
    assert roles(entries).count("assistant") == 17
    assert len([e for e in entries if e["type"] == "compaction"]) == result.compactions


def test_overflow_that_nothing_fixes_stops_with_advice(tmp_path: Path, workspace: Path) -> None:
    turns = _busy_turns(3) + [{"text": "never reached"}]
    model = Checked(ScriptedModel(scenario(*turns)))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace)
        first = runner.run("Write three notes.")
        assert first.stop_reason == "stop"
        model.inner.overflow_above = 50  # below even the system prompt: nothing can fit
        result = runner.run("And now something that cannot fit.")
        entries = assert_journal_ok(session)

    assert result.stop_reason == "overflow"
    assert "Start a new session" in result.message
    # the first compaction compacts; the second finds nothing left to compact, so the ladder
    # goes on to truncation (which has nothing to cut) and gives up: no request is sent twice
    assert [d["reason"] for d in watch.kinds("compaction_start")] == ["overflow"] * 2
    assert len(watch.kinds("session_truncated")) == 1
    assert all(a != b for a, b in zip(model.requests, model.requests[1:], strict=False))
    # nothing of the failed turn was recorded: the history ends with the new prompt
    assert roles(entries)[-1] == "user"


# --- summarizer failures


class BrokenSummarizer:
    """Fails its first `failures` calls (all of them with None)."""

    def __init__(self, failures: int | None = None) -> None:
        self.failures = failures
        self.calls = 0
        self.inner = ExtractiveSummarizer()

    def summarize(self, messages: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.failures is None or self.calls <= self.failures:
            raise RuntimeError("summarizer exploded")
        return self.inner.summarize(messages, **kwargs)


@pytest.mark.parametrize(("failures", "level"), [(None, 3), (1, 1)])
def test_failing_summarizer_is_recovered_by_the_fallbacks(
    tmp_path: Path, workspace: Path, failures: int | None, level: int
) -> None:
    turns = _busy_turns(4)
    turns.append({"text": "Checking the notes.", "fail": "overflow",
                  "tool_calls": [call("ls")]})
    turns.append({"text": "Four notes written."})
    model = Checked(ScriptedModel(scenario(*turns)))
    summarizer = BrokenSummarizer(failures)
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, summarizer=summarizer)
        result = runner.run("Write four notes.")
        entries = assert_journal_ok(session)

    assert (result.stop_reason, result.compactions) == ("stop", 1)
    compaction = next(e for e in entries if e["type"] == "compaction")
    assert compaction["details"]["fallbackLevel"] == level
    if failures is None:  # no model at all: the plain text, and the work is still listed
        assert "Summary unavailable: " in compaction["summary"]
        assert summarizer.calls >= LARGE.summary_attempts
        assert "notes_0.txt" in compaction["summary"]
    else:  # one failure, then the retry worked
        assert "Summary unavailable" not in compaction["summary"]
        assert summarizer.calls >= 2
    assert model.requests[-1].messages[0]["summary"] == compaction["summary"]


class PickySummarizer:
    """Refuses (as a model whose prompt is too long would) any input with a huge message."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.refused = 0

    def summarize(self, messages: Any, **kwargs: Any) -> str:
        if len(json.dumps(list(messages))) > 50_000:
            self.refused += 1
            raise SummaryOverflow("prompt is too long (test)")
        return self.inner.summarize(messages, **kwargs)


def test_summarizer_refusing_an_oversized_message_leaves_it_out(tmp_path: Path,
                                                                workspace: Path) -> None:
    settings = replace(LARGE, context_window=64_000, keep_recent_tokens=2_000)
    model = Checked(ScriptedModel(scenario(
        {"text": "Noted; that is a lot of context."},
        {"text": "Writing the data file.",
         "tool_calls": [call("write", path="data.txt", content=filler("d", 160))]},
        {"text": "Written."},
        {"text": "Listing.", "tool_calls": [call("ls")]},
        {"text": "All there.", "fail": "overflow"},
    )))
    summarizer = PickySummarizer()
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, settings=settings,
                                summarizer=summarizer)
        assert runner.run("Context dump:\n" + "x" * 110_000).stop_reason == "stop"
        assert runner.run("Write the data file.").stop_reason == "stop"
        result = runner.run("Check it is there.")
        entries = assert_journal_ok(session)

    assert (result.stop_reason, result.compactions) == ("stop", 1)
    assert summarizer.refused >= 1
    compaction = next(e for e in entries if e["type"] == "compaction")
    assert compaction["details"]["fallbackLevel"] == 2
    assert "[Left out of this summary: a user message of about" in compaction["summary"]
    assert "x" * 1_000 not in compaction["summary"]


# --- interruptions


class InterruptingTool(Tool):
    """Stands for a tool running when the user presses Ctrl-C."""

    name = "slow"
    description = "Takes a long time."
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def execute(self, args: dict[str, Any]) -> ToolResult:
        raise KeyboardInterrupt


class AbortingTool(Tool):
    """Sets the abort event while it runs (an interrupt the loop sees between tools)."""

    name = "stop_button"
    description = "Presses the stop button."
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, workspace: Workspace, abort: threading.Event) -> None:
        super().__init__(workspace)
        self.abort = abort

    def execute(self, args: dict[str, Any]) -> ToolResult:
        self.abort.set()
        return ToolResult("pressed")


def test_ctrl_c_mid_tool_call_answers_every_call(tmp_path: Path, workspace: Path) -> None:
    model = Checked(ScriptedModel(scenario(
        {"text": "Three things at once.",
         "tool_calls": [call("ls"), call("slow"), call("ls")]},
        {"text": "Picking up where we stopped.", "tool_calls": [call("ls")]},
        {"text": "Done."},
    )))
    tools = [*default_tools(workspace), InterruptingTool(Workspace(workspace))]
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace, tools=tools)
        result = runner.run("Do three things.")
        entries = assert_journal_ok(session)
        assert (result.stop_reason, result.turns) == ("aborted", 1)
        assert result.message == "interrupted while a tool was running"
        assert roles(entries) == ["user", "assistant", "toolResult", "toolResult", "toolResult"]
        first, interrupted, never = messages_of(entries)[2:]
        assert not first["isError"]
        assert interrupted["isError"] and interrupted["details"] == {"interrupted": True}
        assert interrupted["content"][0]["text"] == "Interrupted by the user while running."
        assert never["isError"] and never["toolCallId"] == "call_0_2"
        assert [d["name"] for d in watch.kinds("tool_start")] == ["ls", "slow"]

        resumed = runner.run("Go on.")
        entries = assert_journal_ok(session)
    assert (resumed.stop_reason, resumed.final_text) == ("stop", "Done.")
    assert roles(entries)[5:] == ["user", "assistant", "toolResult", "assistant"]


def test_abort_between_tool_calls_marks_the_rest_not_run(tmp_path: Path,
                                                         workspace: Path) -> None:
    abort = threading.Event()
    model = Checked(ScriptedModel(scenario(
        {"text": "Pressing stop, then two more.",
         "tool_calls": [call("stop_button"), call("ls"), call("ls")]},
    )))
    tools = [*default_tools(workspace), AbortingTool(Workspace(workspace), abort)]
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)
        result = runner.run("Go.", abort=abort)
        entries = assert_journal_ok(session)

    assert result.stop_reason == "aborted"
    results = [m for m in messages_of(entries) if m["role"] == "toolResult"]
    assert [r["isError"] for r in results] == [False, True, True]
    assert all(r["content"][0]["text"] == "Not run: the user interrupted the agent."
               for r in results[1:])


def test_abort_mid_model_call_records_an_aborted_turn(tmp_path: Path, workspace: Path) -> None:
    text = "I will now explain the whole plan in some detail before doing anything."
    model = Checked(ScriptedModel(scenario(
        {"text": text, "fail": "abort", "tool_calls": [call("ls")]},
        {"text": "Done."},
    )))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace)
        result = runner.run("Explain, then list.")
        entries = assert_journal_ok(session)
        assert (result.stop_reason, result.turns) == ("aborted", 1)
        assistant = messages_of(entries)[-1]
        assert assistant["stopReason"] == "aborted"
        assert assistant["errorMessage"] == "Request was aborted"
        assert text.startswith(assistant["content"][0]["text"])
        assert len(assistant["content"][0]["text"]) < len(text)
        assert watch.kinds("turn_end")[0]["stop_reason"] == "aborted"

        resumed = runner.run("Please go on.")
        entries = assert_journal_ok(session)
    assert resumed.stop_reason == "stop"
    assert roles(entries) == ["user", "assistant", "user", "assistant", "toolResult",
                              "assistant"]


@pytest.mark.parametrize("on", ["text_delta", "tool_call"])
def test_abort_event_while_streaming(tmp_path: Path, workspace: Path, on: str) -> None:
    abort = threading.Event()
    model = Checked(ScriptedModel(scenario(
        {"text": "Let me look around the workspace first, carefully.",
         "tool_calls": [call("ls"), call("ls", path=".")]},
    )))

    def press(event: ModelEvent) -> None:
        if event.kind == on:
            abort.set()

    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, on_model_event=press)
        result = runner.run("Look around.", abort=abort)
        entries = assert_journal_ok(session)

    assert result.stop_reason == "aborted"
    assistant = messages_of(entries)[1]
    assert assistant["stopReason"] == "aborted"
    recorded_calls = call_ids([assistant])
    if on == "text_delta":  # stopped in the first chunk of text: no call was streamed
        assert recorded_calls == [] and roles(entries) == ["user", "assistant"]
    else:  # the first call had streamed: it is recorded, with an error result
        assert recorded_calls == ["call_0_0"]
        result_message = messages_of(entries)[2]
        assert result_message["isError"]
        assert "interrupted before it finished" in result_message["content"][0]["text"]


def test_every_injected_failure_is_recorded_and_the_run_resumes(tmp_path: Path,
                                                                workspace: Path) -> None:
    model = Checked(ScriptedModel.from_file(SCENARIOS / "failures.json"))
    outcomes = []
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace)
        result = runner.run(model.inner.prompt)
        outcomes.append(result.stop_reason)
        while result.stop_reason != "stop" and len(outcomes) < 10:
            result = runner.run(None)
            outcomes.append(result.stop_reason)
            assert_journal_ok(session)
        entries = assert_journal_ok(session)

    # overloaded, timeout (small context: no compaction), abort, then overflow (the context is
    # too small to compact or truncate: the ladder gives up rather than send the same request
    # again; the next run plays the turn), then the final turn's error
    assert outcomes == ["error", "error", "aborted", "overflow", "error", "stop"]
    assert result.final_text == "The note says: remember the milk."
    stops = [m["stopReason"] for m in messages_of(entries) if m["role"] == "assistant"]
    assert stops == ["error", "toolUse", "error", "toolUse", "aborted", "toolUse", "toolUse",
                     "error", "stop"]
    assert (workspace / "note.txt").read_text() == "remember the milk\n"


def test_a_tool_that_crashes_still_gets_a_result(tmp_path: Path, workspace: Path) -> None:
    class Crashing(Tool):
        name = "crash"
        description = "Has a bug."
        input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

        def execute(self, args: dict[str, Any]) -> ToolResult:
            raise RuntimeError("bug in the tool")

    model = Checked(ScriptedModel(scenario(
        {"text": "Trying the buggy tool.", "tool_calls": [call("crash"), call("ls")]},
        {"text": "It failed; noted."},
    )))
    tools = [*default_tools(workspace), Crashing(Workspace(workspace))]
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)
        result = runner.run("Use the buggy tool.")
        entries = assert_journal_ok(session)

    assert result.stop_reason == "stop"
    crashed = messages_of(entries)[2]
    assert crashed["isError"] and "bug in the tool" in crashed["content"][0]["text"]
    assert not messages_of(entries)[3]["isError"]


# --- a real agent process killed with SIGKILL, repaired, resumed


SLOW_CALL = call("bash", command="echo $$ > slow.pid; exec sleep 60", timeout=120)
"""A command that writes its pid to `slow.pid` and runs for a minute."""


def ends(pid: int, within: float = 10.0) -> bool:
    """Whether the process `pid` ends within `within` seconds (killed after, if not: a test
    leaves nothing running)."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        return False
    return True


def started_slow(workspace: Path, child: subprocess.Popen[bytes]) -> None:
    """Wait until the agent `child` runs the command that writes `slow.pid`."""
    deadline = time.monotonic() + 30
    while not (workspace / "slow.pid").exists():
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)


def agent_process(tmp_path: Path, workspace: Path, scenario_file: Path,
                  prompt: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A new session, and a real `journal-agent run` process replaying `scenario_file` on it
    (a process group of its own, as a service manager would start it)."""
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        path = session.path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", prompt, "--session", path,
         "--model", f"scripted:{scenario_file}", "--workspace", str(workspace), "--quiet"],
        env=env, cwd=str(tmp_path), start_new_session=True,
    )
    return path, child


def test_agent_killed_mid_tool_call_is_repaired_and_resumed(tmp_path: Path,
                                                            workspace: Path) -> None:
    scenario_file = tmp_path / "crash.json"
    prompt = "Run the slow check."
    scenario_file.write_text(json.dumps(scenario(
        {"text": "Starting the slow check.",
         "tool_calls": [SLOW_CALL]},
        {"text": "Running a quick check instead.",
         "tool_calls": [call("bash", command="echo quick-check-done")]},
        {"text": "The quick check passed."},
        prompt=prompt,
    )))
    path, child = agent_process(tmp_path, workspace, scenario_file, prompt)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            entries = load(path).entries
            if entries and call_ids(messages_of(entries[-1:])) and (
                    workspace / "slow.pid").exists():
                break
            assert child.poll() is None, "the agent ended before its tool call ran"
            time.sleep(0.05)
        else:
            pytest.fail("the agent never started its tool call")
        # the agent hands the command's group to its watcher just after starting it (a
        # kill before that, within a scheduling slice, leaves the command running)
        time.sleep(0.3)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
    assert child.returncode == -signal.SIGKILL

    # the shell command the agent left running (in a process group of its own) was ended by
    # the tool's watcher, not left to run on
    assert ends(int((workspace / "slow.pid").read_text())), "the command outlived the agent"

    # the file now ends with a call that has no result
    messages = messages_of(load(path).entries)
    assert call_ids(messages) == ["call_0_0"] and result_ids(messages) == []
    check = journal.repair(path, dry_run=True)  # a note: pi answers it when it sends
    assert not check.changed and check.counts == {} and check.note_counts == {
        "missing_result": 1}
    report = journal.repair(path, strict=True)
    assert report.changed
    snap = load(path)
    assert snap.diagnostics == []
    assert result_ids(messages_of(snap.entries)) == ["call_0_0"]
    assert journal.repair(path, dry_run=True).changed is False

    model = Checked(ScriptedModel.from_file(scenario_file))
    with Session.open(path) as session:
        assert pairing_problems(session.context(raw=True).messages) == []
        continue_scripted(model.inner, session)
        assert model.inner.turn == 1  # the killed turn was played already
        runner, _ = make_runner(session, model, workspace)
        result = runner.run(None)
        entries = assert_journal_ok(session)
    assert (result.stop_reason, result.final_text) == ("stop", "The quick check passed.")
    assert roles(entries) == ["user", "assistant", "toolResult", "assistant", "toolResult",
                              "assistant"]
    assert "quick-check-done" in messages_of(entries)[4]["content"][0]["text"]


# --- the sanitized context the runner sends equals journal.sanitize of the raw one


def _random_history_step(rng: random.Random, session: Session, step: int) -> None:
    """Append something: mostly well-formed turns, sometimes a break the sanitizer must fix
    (a reused call id, a missing, misplaced or orphan result, a blank text), sometimes a
    compaction or a move to another branch."""

    def assistant(ids: list[str], stop: str) -> None:
        content: list[dict[str, Any]] = [{"type": "text", "text": f"step {step}"}]
        content += [{"type": "toolCall", "id": i, "name": "ls", "arguments": {}} for i in ids]
        session.append_message({"role": "assistant", "content": content, "api": "x",
                                "provider": "x", "model": "x", "stopReason": stop,
                                "timestamp": step})

    def result(call_id: str) -> None:
        session.append_message({"role": "toolResult", "toolCallId": call_id, "toolName": "ls",
                                "content": [{"type": "text", "text": "a.txt"}],
                                "isError": False, "timestamp": step})

    roll = rng.random()
    if roll < 0.30:
        text = " " if rng.random() < 0.03 else rng.choice(["next please", "ok", "go on"])
        session.append_message({"role": "user", "content": [{"type": "text", "text": text}],
                                "timestamp": step})
    elif roll < 0.75:  # a well-formed turn
        ids = [f"u{step}_{k}" for k in range(rng.randrange(0, 3))]
        assistant(ids, "toolUse" if ids else "stop")
        for i in ids:
            result(i)
    elif roll < 0.83:  # a turn with something wrong in it
        ids = [f"c{rng.randrange(6)}" for _ in range(rng.randrange(1, 3))]
        assistant(ids, rng.choice(["toolUse", "aborted", "error"]))
        answered = [i for i in ids if rng.random() < 0.7]
        if rng.random() < 0.3:
            answered.reverse()
        if rng.random() < 0.2:
            session.append_message({"role": "user", "content": "meanwhile", "timestamp": step})
        for i in answered:
            result(i)
    elif roll < 0.87:
        result(f"c{rng.randrange(6)}")
    elif roll < 0.95:
        branch = session.get_branch()
        if len(branch) > 6:
            kept = branch[-rng.randrange(2, 7)]
            with contextlib.suppress(BadKeptEntry):  # refused: it kept a result, not its call
                session.append_compaction(f"summary {step}", kept["id"], 100)
    else:
        branch = session.get_branch()
        if len(branch) > 2:
            session.branch(branch[rng.randrange(len(branch) - 1)]["id"])


@pytest.mark.parametrize("seed", range(12))
def test_request_messages_equal_a_full_sanitize(tmp_path: Path, workspace: Path,
                                                seed: int) -> None:
    """The runner re-sanitizes only what was appended while the history stays valid; what it
    sends must be what a full `journal.sanitize` of the raw projection gives, always."""
    rng = random.Random(seed)
    model = ScriptedModel(scenario({"text": "unused"}))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        session.append_message({"role": "user", "content": "start", "timestamp": 0})
        runner, _ = make_runner(session, model, workspace)
        for step in range(1, 120):
            _random_history_step(rng, session, step)
            if rng.random() < 0.7:
                expected, _ = journal.sanitize(session.context(raw=True).messages)
                sent = runner._request().messages
                assert sent == expected
                assert pairing_problems(sent) == []


def test_ctrl_c_during_the_model_call_records_an_aborted_turn(tmp_path: Path,
                                                              workspace: Path) -> None:
    class Interrupting(ScriptedModel):
        def complete(self, request, **kwargs):  # type: ignore[override]
            raise KeyboardInterrupt

    model = Interrupting.from_file(SCENARIOS / "short.json")
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace)
        result = runner.run("hello")
        entries = assert_journal_ok(session)
    assert result.stop_reason == "aborted"
    assert roles(entries) == ["user", "assistant"]
    assert messages_of(entries)[-1]["stopReason"] == "aborted"


def test_agent_stopped_by_sigterm_mid_tool_call_answers_the_call_and_exits_143(
        tmp_path: Path, workspace: Path) -> None:
    """A service manager's stop (SIGTERM) while a tool runs: the shell command is killed, the
    call gets its result ("Stopped by SIGTERM"), as after Ctrl-C, so the session needs no
    repair before the next request; exit 143. The call was left without a result."""
    scenario_file = tmp_path / "slow.json"
    prompt = "Run the slow check."
    scenario_file.write_text(json.dumps(scenario(
        {"text": "Starting the slow check.",
         "tool_calls": [SLOW_CALL]},
        {"text": "Done."},
        prompt=prompt,
    )))
    path, child = agent_process(tmp_path, workspace, scenario_file, prompt)
    try:
        started_slow(workspace, child)
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == 143
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert ends(int((workspace / "slow.pid").read_text())), "the command outlived the agent"
    with Session.open(path) as session:
        entries = assert_journal_ok(session)
    result = messages_of(entries)[-1]
    assert result["role"] == "toolResult" and result["isError"]
    assert "Stopped by SIGTERM" in result["content"][0]["text"]


def test_a_scenario_resumed_twice_goes_on_after_its_last_played_turn(tmp_path: Path,
                                                                    workspace: Path) -> None:
    """A replay stopped, resumed with its prompt, stopped again and resumed again plays each
    turn once: the second resume counted turns from the latest prompt and played a finished
    turn again (its call ids twice: `repair --check` then found duplicate call ids). Any task
    resumes it, not only the prompt."""
    prompt = "Do the chores."
    scenario_file = tmp_path / "chores.json"
    scenario_file.write_text(json.dumps(scenario(
        *({"text": f"Chore {k}.", "tool_calls": [call("bash", command=f"echo chore-{k}")]}
          for k in range(5)),
        {"text": "All chores done."},
        prompt=prompt,
    )))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        for task, turns in ((prompt, 2), (prompt, 1), ("go on", 10)):
            model = ScriptedModel.from_file(scenario_file)
            continue_scripted(model, session)
            runner, _ = make_runner(session, model, workspace, max_turns=turns)
            runner.run(task)
        entries = assert_journal_ok(session)
    said = [m["content"][0]["text"] for m in messages_of(entries) if m["role"] == "assistant"]
    assert said == [f"Chore {k}." for k in range(5)] + ["All chores done."]
    assert len(set(call_ids(messages_of(entries)))) == 5


def test_what_an_ended_command_left_running_ends_with_an_agent_killed_outright(
        tmp_path: Path, workspace: Path) -> None:
    """A command that started something in the background and ended (`sleep 60 &`): what it
    started runs on between commands, and ends with the agent when the agent is killed
    outright (it ran on as an orphan: only a command still running was watched)."""
    scenario_file = tmp_path / "background.json"
    prompt = "Start the helper, then the slow check."
    scenario_file.write_text(json.dumps(scenario(
        {"text": "Starting the helper.",
         "tool_calls": [call("bash", command="sleep 60 >/dev/null 2>&1 & echo $! > bg.pid")]},
        {"text": "Now the slow check.",
         "tool_calls": [SLOW_CALL]},
        {"text": "Done."},
        prompt=prompt,
    )))
    path, child = agent_process(tmp_path, workspace, scenario_file, prompt)
    try:
        started_slow(workspace, child)
        time.sleep(0.3)  # handed to the watcher just after it started (as above)
        helper = int((workspace / "bg.pid").read_text())
        assert alive(helper)  # running on after its command ended
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert ends(helper), "what the ended command started outlived the agent"


def test_a_scenario_whose_turns_repeat_their_text_resumes_at_the_next_one(
        tmp_path: Path, workspace: Path) -> None:
    """Two text-only turns with the same words: a session holding the first resumes at the
    turn after it, not after the later one (the search from the last turn back matched the
    later one, and the turns between were skipped)."""
    scenario_file = tmp_path / "repeat.json"
    scenario_file.write_text(json.dumps(scenario(
        {"text": "OK."}, {"text": "Now step two."}, {"text": "OK."}, {"text": "Last."},
        prompt="go")))
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        first = ScriptedModel.from_file(scenario_file)
        runner, _ = make_runner(session, first, workspace, max_turns=1)
        runner.run("go")
        model = ScriptedModel.from_file(scenario_file)
        continue_scripted(model, session)
    assert model.turn == 1
