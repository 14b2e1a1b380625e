"""Issue 17, the context-engine half: the gaps a review against the context-management design
found, each tested through the real run loop (`Runner`) with the scripted model, and where the
wire matters with the Anthropic model over the mock transport.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from anthropic_mock import (
    MockAPI,
    end,
    error_response,
    redacted_block,
    start,
    stream_response,
    text_block,
    thinking_block,
    tool_block,
)
from test_runner import Checked, assert_journal_ok, call, filler, make_runner, scenario

from agent.compaction import (
    CompactionHooks,
    CompactionPreparation,
    ExtractiveSummarizer,
    agents_rules,
)
from agent.compaction.staged import drop_oldest_history
from agent.models import ContextOverflow
from agent.models.payload import drop_replayed_thinking, to_api_messages
from agent.models.scripted import ScriptedModel
from agent.overflow import RUNG_TYPE, OverflowLadder, RungOutcome
from agent.prune import limit_history_turns
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.tokens import Estimator, message_parts
from agent.truncate import aggregate_budget_chars, tail_looks_important, truncate_text
from agent.window import run_settings, run_window
from journal import Session
from journal.cli.tail import describe
from journal.render import describe_entry
from tools import Tool, ToolResult, Workspace, default_tools

FAST = replace(DEFAULT_SETTINGS, retry_min_delay=0.0, retry_max_delay=0.0)


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


def busy(n: int, lines: int = 30, prefix: str = "") -> list[dict[str, Any]]:
    return [{"text": f"Step {i}: writing {prefix}notes_{i}.txt.",
             "tool_calls": [call("write", path=f"{prefix}notes_{i}.txt",
                                 content=filler(f"n{i}", lines))]}
            for i in range(n)]


# --- 2. one window for the whole run


def test_the_model_objects_window_is_the_one_window_of_the_run(tmp_path: Path,
                                                                 workspace: Path) -> None:
    """The issue's case: the model object says 40,000, its id ("claude-...") says 200,000 in
    the table. The runner and compaction must both plan with 40,000 (compaction used to keep
    20,000 tokens, 85% of the 40,000-token window's prompt budget)."""
    turns = busy(5, lines=200)  # ~15,000 tokens: fits 40,000, more than 11,808 to keep
    turns.append({"text": "Reading back.", "fail": "overflow",
                  "tool_calls": [call("read", path="notes_4.txt")]})
    turns.append({"text": "Done."})
    model = Checked(ScriptedModel(scenario(*turns, model="claude-sonnet-4-6"),
                                  context_window=40_000))
    prepared: list[CompactionPreparation] = []
    hooks = CompactionHooks(before_compaction=prepared.append)
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, settings=FAST,
                                compaction_hooks=hooks)
        result = runner.run("Write five notes and read the last back.")
        assert_journal_ok(session)
    assert result.stop_reason == "stop" and result.compactions == 1
    assert runner.budget.window == 40_000
    assert [p.window for p in prepared] == [40_000]
    # the kept share is computed from the 40,000-token prompt budget (half of 23,616)
    assert prepared[0].keep_recent_tokens == (40_000 - 16_384) // 2


def test_run_window_order() -> None:
    class M:
        model_id = "claude-sonnet-4-6"
        context_window: int | None = 40_000

    m = M()
    assert run_window(m) == 40_000
    assert run_window(m, ContextSettings(context_window=50_000)) == 50_000
    m.context_window = None
    assert run_window(m) == 200_000
    assert run_settings(m).context_window == 200_000
    assert run_settings(None).context_window == DEFAULT_SETTINGS.default_context_window


# --- 6. important tails


@pytest.mark.parametrize("ending", [
    "  File 'x.py', line 3\nstack trace follows above",
    "[Errno 28] No space left on device",
    "open: errno=13",
    "Build done in 3.2s",
    "migration complete",
    "Indexing completed",
    "All jobs finished.",
    "Summary: all good",
    "Result: ok",
])
def test_tail_words_of_the_design_are_known(ending: str) -> None:
    body = "".join(f"reading chunk {i} of the document body\n" for i in range(2_000))
    assert tail_looks_important(body + ending)
    text, cut = truncate_text(body + ending, 4_000)
    assert cut and text.endswith(ending)


def test_a_long_tool_output_ending_in_done_keeps_its_tail_in_the_run(tmp_path: Path,
                                                                     workspace: Path) -> None:
    verdict = "build finished: 0 problems"
    body = "".join(f"compiling unit {i} of the project tree\n" for i in range(20_000))

    class Build(Tool):
        name = "build"
        description = "Builds the project."
        input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

        def execute(self, args: dict[str, Any]) -> ToolResult:
            return ToolResult(body + verdict)

    model = Checked(ScriptedModel(scenario({"text": "Building.", "tool_calls": [call("build")]},
                                           {"text": "Built."})))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, settings=FAST,
                                tools=[*default_tools(workspace), Build(Workspace(str(workspace)))])
        assert runner.run("Build it.").stop_reason == "stop"
        assert_journal_ok(session)
    sent = [m for m in model.requests[-1].messages if m["role"] == "toolResult"][0]
    text = sent["content"][0]["text"]
    assert "characters truncated" in text and text.endswith(verdict)


# --- 4. hard clear staged after soft trim


class Measured(Checked):
    """Also records the runner's context estimate at each request."""

    runner: Any = None

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.estimates: list[int] = []

    def complete(self, request: Any, **kwargs: Any) -> dict[str, Any]:
        self.estimates.append(self.runner.current_tokens())
        return super().complete(request, **kwargs)


def test_between_50_and_55_percent_the_run_only_trims(tmp_path: Path, workspace: Path) -> None:
    for i in range(24):
        (workspace / f"f{i}.txt").write_text(
            "".join(f"file {i} line {k:03d} abcdefghijklmnop\n" for k in range(180)))
    turns: list[dict[str, Any]] = [{"text": f"Reading f{i}.",
                                    "tool_calls": [call("read", path=f"f{i}.txt")]}
                                   for i in range(24)]
    turns.append({"text": "Read them all."})
    model = Measured(ScriptedModel(scenario(*turns), context_window=40_000))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, settings=FAST)
        model.runner = runner
        assert runner.run("Read every file.").stop_reason == "stop"
        assert_journal_ok(session)
    assert runner.compactions == 0
    hard = 20_000  # 50% of 40,000; compaction would start at the 23,616-token budget
    staged = 0
    for estimate, request in zip(model.estimates, model.requests, strict=True):
        texts = [m["content"][0]["text"] for m in request.messages if m["role"] == "toolResult"]
        cleared = sum(t.startswith("[old tool result cleared") for t in texts)
        trimmed = sum("characters cut from this old tool result" in t for t in texts)
        if hard <= estimate < 22_000:  # 50% to 55%: trimming old results saves far more
            staged += 1
            assert trimmed and not cleared, (estimate, trimmed, cleared)
    assert staged >= 2


# --- 3. no signed thinking replayed from before the latest compaction


def _thinking_tool_reply(sig: str, call_id: str, path: str) -> Any:
    return stream_response([start(100), *thinking_block(0, f"thinking {sig}", sig),
                            *text_block(1, f"Reading {path}."),
                            *tool_block(2, call_id, "read", {"path": path}), *end("tool_use")])


def _signatures(body: dict[str, Any]) -> list[str]:
    return [b.get("signature") or b.get("data") for m in body["messages"]
            if m["role"] == "assistant" for b in m["content"]
            if b["type"] in ("thinking", "redacted_thinking")]


def test_anthropic_request_carries_no_thinking_from_before_the_compaction(
        tmp_path: Path, workspace: Path) -> None:
    api = MockAPI()
    for name in ("a", "b", "c"):
        (workspace / f"{name}.txt").write_text(
            "\n".join(f"{name} row {k}: " + "0123456789" * 7 for k in range(100)))
    too_long = error_response(400, "invalid_request_error",
                              "prompt is too long: 210034 tokens > 200000 maximum")
    api.queue(
        _thinking_tool_reply("sig_a", "toolu_a", "a.txt"),
        _thinking_tool_reply("sig_b", "toolu_b", "b.txt"),
        _thinking_tool_reply("sig_c", "toolu_c", "c.txt"),
        too_long,
        _thinking_tool_reply("sig_d", "toolu_d", "a.txt"),
        stream_response([start(100), *redacted_block(0, "opaque_e"),
                         *text_block(1, "Read them."), *end()]),
    )
    settings = replace(FAST, keep_recent_tokens=1_000)
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, api.model(), workspace, settings=settings)
        result = runner.run("Read a.txt, b.txt and c.txt, then a.txt again.")
        assert_journal_ok(session)
        kept_turn = [m for m in session.context().messages if m["role"] == "assistant"][0]
    assert (result.stop_reason, result.compactions) == ("stop", 1)
    assert api.problems == [] and api.replies == []
    # before the compaction every turn's signed thinking is replayed as it came
    assert _signatures(api.bodies[2]) == ["sig_a", "sig_b"]
    assert _signatures(api.bodies[3]) == ["sig_a", "sig_b", "sig_c"]
    # after it: the kept turn (toolu_c, written before the compaction) is sent without its
    # thinking, while the journal keeps it; the turn after the compaction keeps its signature
    retry, last = api.bodies[4], api.bodies[5]
    assert _signatures(retry) == []
    assert any(b.get("id") == "toolu_c" for m in retry["messages"] for b in m["content"]
               if isinstance(b, dict))
    assert kept_turn["content"][0]["thinkingSignature"] == "sig_c"
    assert _signatures(last) == ["sig_d"]
    after = [b for m in last["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert {"type": "thinking", "thinking": "thinking sig_d", "signature": "sig_d"} in after
    assert "thinking sig_c" not in json.dumps(last)


def test_drop_replayed_thinking_keeps_readable_thinking_of_a_thinking_only_turn() -> None:
    signed = {"type": "thinking", "thinking": "why", "thinkingSignature": "s1"}
    redacted = {"type": "redactedThinking", "data": "opaque"}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [signed, redacted, {"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [signed, redacted]},
        {"role": "assistant", "content": [signed, {"type": "text", "text": "new"}]},
    ]
    out = drop_replayed_thinking(messages, 3)
    assert out[1]["content"] == [{"type": "text", "text": "hi"}]
    assert out[2]["content"] == [{"type": "thinking", "thinking": "why"}]
    assert out[3] is messages[3] and messages[1]["content"][0] is signed
    assert to_api_messages([out[2]])[0]["content"] == [{"type": "text", "text": "why"}]
    assert drop_replayed_thinking(messages, 0) is messages


# --- 1. the overflow ladder never sends the same request twice


def rungs(session: Session) -> list[tuple[str, str]]:
    return [(e["data"]["rung"], e["data"]["outcome"]) for e in session.get_branch()
            if e.get("type") == "custom" and e.get("customType") == RUNG_TYPE]


def test_a_model_that_always_overflows_gets_no_identical_request(tmp_path: Path,
                                                                  workspace: Path) -> None:
    """The issue's case: with a model that overflows every time we saw compact, two no-op
    compactions, truncation, then failure: five calls, four of them identical."""
    model = Checked(ScriptedModel(scenario(*busy(3), {"text": "never reached"})))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace,
                                settings=replace(FAST, keep_recent_tokens=500))
        assert runner.run("Write three notes.").stop_reason == "stop"
        sent = len(model.requests)
        model.inner.overflow_above = 50
        result = runner.run("Now something that cannot fit.")
        assert_journal_ok(session)
        notes = rungs(session)
        shown = [describe_entry(e) for e in session.get_branch() if e["type"] == "custom"]
        tailed = ["".join(t for t, _ in describe(e)[2]) for e in session.get_branch()
                  if e["type"] == "custom"]
    assert result.stop_reason == "overflow" and "Start a new session" in result.message
    failing = model.requests[sent:]
    assert len(failing) == 2  # the first request, and the one after the compaction
    assert failing[0] != failing[1]
    assert notes == [("compact", "compacted"), ("compact", "nothing to compact"),
                     ("truncate", "nothing to truncate"), ("give_up", "gave up")]
    assert shown[0].startswith(f"custom {RUNG_TYPE}: overflow rung 1: compact: compacted")
    assert tailed[1] == f"{RUNG_TYPE}: overflow rung 2: compact: nothing to compact"


def test_a_compaction_in_the_attempt_is_not_followed_by_another(tmp_path: Path,
                                                                workspace: Path) -> None:
    """The request was built after a threshold compaction and still overflows: the ladder
    does not compact again at once; it counts that compaction and truncates first."""
    settings = replace(FAST, context_window=16_000, keep_recent_tokens=2_000,
                       soft_trim_ratio=0.85, hard_clear_ratio=0.95,
                       aggregate_min_keep_chars=1_000_000)
    for i in range(3):
        (workspace / f"big{i}.txt").write_text(filler(f"b{i}", 240))  # ~14,000 chars each
    turns = [{"text": f"Reading big{i}.", "tool_calls": [call("read", path=f"big{i}.txt")]}
             for i in range(3)]
    turns.append({"text": "All read."})
    model = Checked(ScriptedModel(scenario(*turns)))
    compactions: list[str] = []
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace, settings=settings)
        original = runner.model.complete

        def overflow_after_threshold(request: Any, **kwargs: Any) -> dict[str, Any]:
            compactions.extend(d["reason"] for d in watch.kinds("compaction_start")
                               [len(compactions):])
            if compactions == ["threshold"] and not rungs(session):
                raise ContextOverflow("prompt is too long")
            return original(request, **kwargs)

        runner.model.complete = overflow_after_threshold  # type: ignore[method-assign]
        result = runner.run("Read the three big files.")
        assert_journal_ok(session)
        notes = rungs(session)
    assert notes[0] == ("compact", "skipped")
    assert notes[1][0] == "truncate"
    assert all(a != b for a, b in zip(model.requests, model.requests[1:], strict=False))
    assert result.stop_reason in ("stop", "overflow")


def test_anthropic_overflow_with_nothing_to_compact_is_not_resent(tmp_path: Path,
                                                                  workspace: Path) -> None:
    api = MockAPI()
    too_long = error_response(400, "invalid_request_error",
                              "prompt is too long: 210034 tokens > 200000 maximum")
    api.queue(too_long)
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, api.model(), workspace, settings=FAST)
        result = runner.run("Hello.")
        assert_journal_ok(session)
        notes = rungs(session)
    assert result.stop_reason == "overflow"
    assert len(api.bodies) == 1 and api.replies == []
    assert notes == [("compact", "nothing to compact"), ("truncate", "nothing to truncate"),
                     ("give_up", "gave up")]


# --- 5. the 0.75 input headroom of aggregate truncation


def test_aggregate_budget_leaves_a_quarter_of_the_window() -> None:
    messages = [{"role": "user", "content": "u" * 1_000},
                {"role": "toolResult", "toolCallId": "a", "content": "r" * 50_000}]
    assert aggregate_budget_chars(messages, 100_000) == 300_000 - 1_000
    assert aggregate_budget_chars(messages, 100_000,
                                  replace(FAST, aggregate_input_headroom=0.5)) == 199_000


def test_a_request_over_budget_is_cut_to_the_input_headroom(tmp_path: Path,
                                                            workspace: Path) -> None:
    """With a 100,000-token window the prompt budget is 83,616 tokens (84%): cutting tool
    results only by what is over it would send more than the design's 75%."""
    for i in range(14):
        (workspace / f"f{i}.txt").write_text(
            "".join(f"file {i} row {k:04d} " + "x" * 40 + "\n" for k in range(480)))
    turns: list[dict[str, Any]] = [{"text": f"Reading f{i}.",
                                    "tool_calls": [call("read", path=f"f{i}.txt")]}
                                   for i in range(14)]
    turns.append({"text": "Read them all."})
    settings = replace(FAST, soft_trim_ratio=0.99, hard_clear_ratio=0.995)
    model = Measured(ScriptedModel(scenario(*turns), context_window=100_000))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, settings=settings)
        model.runner = runner
        assert runner.run("Read every file.").stop_reason == "stop"
        assert_journal_ok(session)
    over = [r for e, r in zip(model.estimates, model.requests, strict=True)
            if e > runner.budget.prompt]
    assert over, "no request went over the prompt budget"
    for request in over:
        sent = sum(len(t) for m in request.messages for t in message_parts(m)[0])
        assert sent <= 300_000


# --- 5. the history-turn limit


def test_history_turn_limit_sends_the_last_user_turns(tmp_path: Path, workspace: Path) -> None:
    turns = [{"text": "Writing.", "tool_calls": [call("write", path="a.txt", content="a")]},
             {"text": "One."}, {"text": "Two."},
             {"text": "Listing.", "tool_calls": [call("ls")]}, {"text": "Three."}]
    model = Checked(ScriptedModel(scenario(*turns)))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace,
                                settings=replace(FAST, history_turn_limit=2))
        for prompt in ("first", "second", "third"):
            assert runner.run(prompt).stop_reason == "stop"
        assert_journal_ok(session)
        assert [m["role"] for m in session.context().messages].count("user") == 3
    last = model.requests[-1].messages
    users = [m["content"][0]["text"] for m in last if m["role"] == "user"]
    assert users == ["second", "third"]
    assert last[0]["role"] == "user" and last[-1]["role"] == "toolResult"
    first = model.requests[1].messages  # within the first turn nothing is cut
    assert [m["role"] for m in first] == ["user", "assistant", "toolResult"]


def test_history_turn_limit_keeps_the_summary_in_front() -> None:
    messages = [{"role": "compactionSummary", "summary": "s"},
                {"role": "user", "content": "a"}, {"role": "assistant", "content": []},
                {"role": "user", "content": "b"}, {"role": "assistant", "content": []}]
    assert limit_history_turns(messages, 1) == [messages[0], *messages[3:]]
    assert limit_history_turns(messages, 0) is messages
    assert limit_history_turns(messages, 2) is messages


# --- 5. history-share pruning in compaction


class Recording:
    """An extractive summarizer that keeps each call's messages and previous summary."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.calls: list[tuple[list[dict[str, Any]], str | None, str]] = []

    def summarize(self, messages: Any, **kwargs: Any) -> str:
        text = self.inner.summarize(messages, **kwargs)
        self.calls.append((list(messages), kwargs.get("previous_summary"), text))
        return text


def test_history_over_half_the_budget_is_summarized_oldest_half_first(
        tmp_path: Path, workspace: Path) -> None:
    summarizer = Recording()
    results: list[Any] = []
    hooks = CompactionHooks(after_compaction=results.append)
    turns: list[dict[str, Any]] = []
    for turn in busy(9, lines=200):
        turns += [turn, {"text": "Written."}]
    model = Checked(ScriptedModel(scenario(*turns), context_window=40_000))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace,
                                settings=replace(FAST, keep_recent_tokens=2_000),
                                summarizer=summarizer, compaction_hooks=hooks)
        for i in range(9):
            assert runner.run(f"Write note {i}.").stop_reason == "stop"
        assert_journal_ok(session)
    assert results, "nothing compacted"
    first = results[0]
    budget = (40_000 - 16_384) // 2  # half the prompt budget
    assert first.details["historyDropped"] > 0
    older, newer = summarizer.calls[0], summarizer.calls[1]
    # the oldest part goes first (the run's prompt is in it), then the rest, with the oldest
    # part's summary as its previous summary
    assert older[0][0]["role"] == "user" and "Write note 0." in str(older[0][0])
    assert newer[1] == older[2]
    assert all(m not in newer[0] for m in older[0])
    estimator = runner.estimator
    assert estimator.estimate_messages(newer[0]) <= budget
    for messages, _, _ in summarizer.calls[:2]:  # pairing re-checked after each drop
        called = {b["id"] for m in messages if m["role"] == "assistant"
                  for b in m["content"] if b["type"] == "toolCall"}
        assert {m["toolCallId"] for m in messages if m["role"] == "toolResult"} <= called


# --- 5. AGENTS.md rules carried into summaries


AGENTS = """# Project agents

Intro text that is not a rule.

## Session Startup
- Read docs/architecture.md first.

### Details of startup
- Then run the tests.

## Style
- irrelevant styling note

## Red Lines
- Never push to main.
"""


def test_a_compaction_summary_carries_the_agents_md_rules(tmp_path: Path,
                                                          workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text(AGENTS)
    turns = busy(4)
    turns.append({"text": "Reading back.", "fail": "overflow",
                  "tool_calls": [call("read", path="notes_3.txt")]})
    turns.append({"text": "Done."})
    model = Checked(ScriptedModel(scenario(*turns)))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace,
                                settings=replace(FAST, keep_recent_tokens=500))
        assert runner.run("Write four notes.").stop_reason == "stop"
        assert_journal_ok(session)
        compaction = [e for e in session.get_branch() if e["type"] == "compaction"][-1]
    summary = compaction["summary"]
    assert "Never push to main." in summary and "Read docs/architecture.md first." in summary
    assert "Then run the tests." in summary
    assert "irrelevant styling note" not in summary and "Intro text" not in summary
    retry = model.requests[5].messages[0]
    assert retry["role"] == "compactionSummary" and "Never push to main." in retry["summary"]


def test_agents_rules_fall_back_to_the_opening_and_are_capped(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Always write tests.\n" + "x" * 5_000)
    rules = agents_rules(tmp_path, replace(FAST, agents_facts_chars=100))
    assert rules.startswith("Always write tests.") and len(rules) < 200
    assert agents_rules(tmp_path / "missing") == ""
    assert agents_rules(tmp_path, replace(FAST, agents_file="")) == ""


# --- 5. a threshold for the memory flush


def test_memory_is_flushed_once_per_cycle_before_compaction_is_needed(
        tmp_path: Path, workspace: Path) -> None:
    turns: list[dict[str, Any]] = [*busy(14, lines=100), {"text": "Done."}]
    model = Measured(ScriptedModel(scenario(*turns), context_window=40_000))
    seen: list[tuple[int, int, int]] = []  # (estimate, compactions, flushed blocks)
    memory = workspace / "memory"

    def blocks() -> int:
        return sum(f.read_text().count(" compaction (") for f in memory.glob("*.md"))

    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace,
                                settings=replace(FAST, memory_flush=True,
                                                 keep_recent_tokens=2_000))
        model.runner = runner
        original = model.complete

        def watching(request: Any, **kwargs: Any) -> dict[str, Any]:
            reply = original(request, **kwargs)
            seen.append((model.estimates[-1], runner.compactions, blocks()))
            return reply

        model.complete = watching  # type: ignore[method-assign]
        assert runner.run("Write the notes.").stop_reason == "stop"
        assert_journal_ok(session)
    threshold = (40_000 - 16_384) - 4_000
    assert runner.compactions >= 1
    # flushed before the first compaction, at the first request past the soft threshold
    first = next(i for i, (e, _, _) in enumerate(seen) if e >= threshold)
    assert all(b == 0 for _, _, b in seen[:first])
    assert seen[first][1] == 0 and seen[first][2] == 1
    # one block per compaction cycle: the compaction did not flush the same cycle again
    assert blocks() <= runner.compactions + 1
    assert all(b <= c + 1 for _, c, b in seen)


def test_a_rung_whose_request_is_unchanged_climbs_on(tmp_path: Path) -> None:
    """A rung may change the session without changing what is sent (say, it cut a result
    the history limit leaves out): the identical request is not sent; the next rung runs."""
    ran: list[str] = []

    def compact() -> RungOutcome:
        ran.append("compact")
        return RungOutcome(True, "compacted")

    def truncate() -> RungOutcome:
        ran.append("truncate")
        return RungOutcome(False, "nothing to truncate")

    with Session.create(str(tmp_path / "s"), cwd=str(tmp_path)) as session:
        ladder = OverflowLadder(session, replace(FAST, overflow_compactions=1),
                                compact=compact, truncate=truncate)
        request = {"messages": ["same"]}
        assert ladder.overflowed(request, "too long", False)
        assert not ladder.repeats({"messages": ["other"]})
        assert ladder.repeats(dict(request)) and ladder.gave_up
        assert ran == ["compact", "truncate"]
        assert rungs(session) == [("compact", "compacted"), ("compact", "request unchanged"),
                                  ("truncate", "nothing to truncate"), ("give_up", "gave up")]
        assert "Start a new session" in ladder.advice()


def test_history_share_drop_moves_orphaned_results_with_their_call() -> None:
    def assistant(call_id: str) -> dict[str, Any]:
        return {"role": "assistant", "content": [
            {"type": "toolCall", "id": call_id, "name": "ls", "arguments": {}},
            {"type": "text", "text": "x" * 4_000}]}

    def result(call_id: str) -> dict[str, Any]:
        return {"role": "toolResult", "toolCallId": call_id, "content": "r"}

    # a result separated from its call by a user message (as a broken history may be)
    messages = [{"role": "user", "content": "a" * 4_000}, assistant("c1"),
                {"role": "user", "content": "b" * 4_000}, result("c1"),
                assistant("c2"), result("c2")]
    kept, dropped = drop_oldest_history(messages, 1_500, Estimator())
    assert kept and dropped and len(kept) + len(dropped) == len(messages)
    assert messages[3] in dropped  # went with its call
    called = {b["id"] for m in kept if m["role"] == "assistant" for b in m["content"]
              if b["type"] == "toolCall"}
    assert {m["toolCallId"] for m in kept if m["role"] == "toolResult"} <= called
