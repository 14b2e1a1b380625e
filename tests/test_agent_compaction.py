"""Compaction: cut point, preparation, summarization pipeline, record, hooks, memory flush."""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
import unicodedata
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from third_party import pi_path

import journal
import journal.validate
from agent.compaction import (
    MERGE_INSTRUCTIONS,
    SPLIT_TURN_HEADING,
    TURN_PREFIX_INSTRUCTIONS,
    CompactionHooks,
    FallbackLevel,
    adaptive_chunk_ratio,
    backoff_delay,
    call_groups,
    chunk_budget,
    chunk_messages,
    compact,
    duplicate_prompts,
    estimate_branch_context,
    estimate_session_context,
    find_cut_point,
    flush_memory,
    is_oversized,
    prepare_compaction,
    projection,
    run_hook,
    summarize_messages,
)
from agent.compaction.summarize import (
    ExtractiveSummarizer,
    SummarizerError,
    SummaryAborted,
    SummaryOverflow,
    SummaryRejected,
    SummaryTimeout,
)
from agent.compaction.transcript import message_text
from agent.settings import ContextSettings
from agent.tokens import Estimator
from agent.window import prompt_budget

SMALL = ContextSettings(context_window=16_000)
MID = ContextSettings(context_window=64_000, keep_recent_tokens=1_200)
T0 = 1_768_467_600_000  # ms


# ---------------------------------------------------------------------------------------
# builders


def user(text, ts=T0):
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def call(call_id, name="bash", **arguments):
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}


def assistant(text=None, calls=(), ts=T0, usage=None):
    content = ([{"type": "text", "text": text}] if text else []) + list(calls)
    message = {"role": "assistant", "content": content, "api": "anthropic-messages",
               "provider": "anthropic", "model": "claude-sonnet-4-5",
               "stopReason": "toolUse" if calls else "stop", "timestamp": ts}
    if usage is not None:
        message["usage"] = {"input": usage, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    return message


def result(call_id, text, name="bash", error=False, ts=T0):
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name,
            "content": [{"type": "text", "text": text}], "isError": error, "timestamp": ts}


def entries(messages):
    out, parent = [], None
    for i, m in enumerate(messages):
        out.append({"type": "message", "id": f"e{i:07d}", "parentId": parent,
                    "timestamp": "2026-01-15T09:00:00.000Z", "message": m})
        parent = out[-1]["id"]
    return out


def six_messages():
    """user, assistant, user, assistant (+call), tool result, assistant: 100 tokens each."""
    big_call = call("c1", command="y" * (400 - len("bash") - len('{"command":""}')))
    return [user("a" * 400), assistant("b" * 400), user("c" * 400), assistant(calls=[big_call]),
            result("c1", "d" * 400), assistant("e" * 400)]


@pytest.fixture
def session(tmp_path):
    s = journal.Session.create(tmp_path / "s.jsonl", cwd=str(tmp_path))
    yield s
    if not s.closed:
        s.close()


def add(session, messages):
    return [session.append_message(m) for m in messages]


class Recorder:
    """A summarizer that records its calls; `fail(n, messages)` may return an error to raise."""

    unbounded_input = False

    def __init__(self, fail=None, text="SUMMARY"):
        self.calls = []
        self.fail = fail
        self.text = text

    def summarize(self, messages, *, previous_summary=None, focus=None, max_tokens=4096):
        self.calls.append({"messages": list(messages), "previous": previous_summary,
                           "focus": focus, "max_tokens": max_tokens})
        if self.fail is not None:
            error = self.fail(len(self.calls), messages)
            if error is not None:
                raise error
        return f"{self.text} #{len(self.calls)}"


class Never:
    unbounded_input = False

    def summarize(self, *args, **kwargs):
        raise AssertionError("no model call was expected")


def no_sleep(delays):
    return delays.append


# ---------------------------------------------------------------------------------------
# the cut point


def test_required_cut_points_for_six_messages_of_100_tokens():
    es = entries(six_messages())
    estimator = Estimator()
    assert [estimator.estimate_message(e["message"]) for e in es] == [100] * 6

    cut = find_cut_point(es, 0, 6, 150, estimator)
    assert (cut.first_kept_index, cut.is_split_turn, cut.turn_start_index) == (5, True, 2)
    assert cut.kept_tokens == 100

    cut = find_cut_point(es, 0, 6, 250, estimator)
    assert (cut.first_kept_index, cut.is_split_turn, cut.turn_start_index) == (3, True, 2)
    assert cut.kept_tokens == 300


def test_accumulation_rule_is_inclusive_and_moves_forward():
    es = entries(six_messages())
    # The total reaches 200 exactly at the tool result (>=): the cut moves forward to 5.
    assert find_cut_point(es, 0, 6, 200).first_kept_index == 5
    assert find_cut_point(es, 0, 6, 100).first_kept_index == 5
    assert find_cut_point(es, 0, 6, 300).first_kept_index == 3
    # Reaching the threshold at a user message keeps it and splits no turn.
    cut = find_cut_point(es, 0, 6, 400)
    assert (cut.first_kept_index, cut.is_split_turn, cut.turn_start_index) == (2, False, None)
    cut = find_cut_point(es, 0, 6, 500)
    assert (cut.first_kept_index, cut.is_split_turn) == (1, True)
    assert cut.turn_start_index == 0
    # Never reached: keep everything.
    assert find_cut_point(es, 0, 6, 601).first_kept_index == 0


def test_prepare_on_a_session_gives_history_and_turn_prefix(session):
    ids = add(session, six_messages())
    prep = prepare_compaction(session, SMALL, keep_recent_tokens=150)
    assert prep.first_kept_entry_id == ids[5]
    assert prep.is_split_turn
    assert [m["role"] for m in prep.messages_to_summarize] == ["user", "assistant"]
    assert prep.message_ids == tuple(ids[:2])
    assert prep.turn_prefix_ids == tuple(ids[2:5])

    prep = prepare_compaction(session, SMALL, keep_recent_tokens=250)
    assert prep.first_kept_entry_id == ids[3]
    assert prep.message_ids == tuple(ids[:2])
    assert prep.turn_prefix_ids == (ids[2],)


def test_never_cuts_between_a_call_and_its_results():
    # A user message typed while the tool ran sits between the call and its result.
    text = "z" * 400
    es = entries([user(text), assistant(calls=[call("a", command="ls")]), user(text),
                  result("a", text), assistant(text)])
    cut = find_cut_point(es, 0, 5, 250)  # reaches 300 at the interjected user (index 2)
    assert cut.first_kept_index == 4
    cut = find_cut_point(es, 0, 5, 301)  # reaches 305 at the call (index 1): valid
    assert cut.first_kept_index == 1


def test_cut_moves_back_when_nothing_valid_follows():
    es = entries([user("u" * 400), assistant(calls=[call("a", command="cat big")]),
                  result("a", "r" * 40_000)])
    cut = find_cut_point(es, 0, 3, 1_000)
    assert cut.first_kept_index == 1  # the call and its result are kept together
    assert cut.kept_tokens == Estimator().estimate_messages(e["message"] for e in es[1:])


def test_cut_is_never_a_tool_result_nor_inside_a_call_group():
    rng = random.Random(7)
    messages, n = [], 0
    for _ in range(30):
        messages.append(user("q" * rng.randint(10, 2_000)))
        for _ in range(rng.randint(0, 3)):
            ids = [f"t{n + k}" for k in range(rng.randint(1, 3))]
            n += len(ids)
            messages.append(assistant(calls=[call(i, command="x" * rng.randint(1, 300))
                                             for i in ids]))
            messages += [result(i, "o" * rng.randint(0, 5_000)) for i in ids]
        messages.append(assistant("a" * rng.randint(10, 1_000)))
    es = entries(messages)
    open_spans = []
    for i, m in enumerate(messages):
        if m["role"] == "toolResult":
            start = max(j for j in range(i) if messages[j]["role"] == "assistant")
            open_spans.append((start, i))
    estimator = Estimator()
    for keep in range(0, 60_000, 250):
        cut = find_cut_point(es, 0, len(es), keep, estimator).first_kept_index
        assert messages[cut]["role"] != "toolResult"
        assert not any(a < cut <= b for a, b in open_spans)


def test_custom_message_and_branch_summary_entries_are_cut_points_and_turn_starts():
    es = entries([user("a" * 400), assistant("b" * 400)])
    es.append({"type": "custom_message", "customType": "note", "content": "c" * 400,
               "display": True, "id": "cm", "parentId": es[-1]["id"],
               "timestamp": "2026-01-15T09:00:01.000Z"})
    es.append({"type": "message", "id": "last", "parentId": "cm",
               "timestamp": "2026-01-15T09:00:02.000Z", "message": assistant("d" * 400)})
    cut = find_cut_point(es, 0, 4, 200)
    assert (cut.first_kept_index, cut.is_split_turn) == (2, False)
    cut = find_cut_point(es, 0, 4, 100)
    assert (cut.first_kept_index, cut.turn_start_index) == (3, 2)


def test_keep_recent_tokens_is_clamped_to_a_share_of_the_budget(session):
    add(session, six_messages())
    prep = prepare_compaction(session, SMALL)
    assert prep.keep_recent_tokens == int(prompt_budget(16_000, SMALL) * 0.5)
    roomy = ContextSettings(context_window=200_000)
    assert prepare_compaction(session, roomy).keep_recent_tokens == 20_000


def test_nothing_to_summarize_makes_no_model_call(session):
    add(session, six_messages())
    size = Path(session.path).stat().st_size
    assert compact(session, Never(), SMALL) is None  # 600 tokens < keep
    assert Path(session.path).stat().st_size == size
    prep = prepare_compaction(session, SMALL)
    assert prep is not None and not prep.has_work


# ---------------------------------------------------------------------------------------
# compact, record, chained compactions


def turn(i, size=2_000, path=None, ts=T0):
    """A user request, a tool call and its result, and a reply: about size/4 tokens each."""
    args = {"path": path} if path else {"command": f"step {i}"}
    name = "edit" if path else "bash"
    return [user(f"request {i} " + "u" * size, ts), assistant(calls=[call(f"c{i}", name, **args)]),
            result(f"c{i}", "o" * size, name), assistant(f"done {i} " + "a" * size)]


def test_compact_records_the_entry_and_the_settings_after_it(session):
    add(session, turn(0, path="src/a.py") + turn(1) + turn(2))
    summarizer = Recorder()
    settings = MID
    res = compact(session, summarizer, settings, sleep=no_sleep([]))
    assert res is not None and res.fallback_level == FallbackLevel.FULL
    branch = session.get_branch()
    kinds = [e["type"] for e in branch[-3:]]
    assert kinds == ["compaction", "model_change", "thinking_level_change"]
    entry = branch[-3]
    assert entry["id"] == res.entry_id
    assert entry["firstKeptEntryId"] == res.first_kept_entry_id
    assert entry["tokensBefore"] == res.tokens_before
    assert entry["details"]["modifiedFiles"] == ["src/a.py"]
    assert entry["details"]["reason"] == "threshold"
    assert entry["summary"].startswith("SUMMARY #1")
    assert "<modified-files>\nsrc/a.py\n</modified-files>" in entry["summary"]
    assert res.tokens_after < res.tokens_before
    context = session.context(raw=True)
    assert context.messages[0]["role"] == "compactionSummary"
    assert journal.validate.pairing_problems(context.messages) == []


def test_chained_compaction_summarizes_from_the_previous_kept_boundary(session):
    add(session, turn(0) + turn(1) + turn(2))
    settings = MID
    first = compact(session, Recorder(text="FIRST"), settings)
    kept_first = first.first_kept_entry_id
    add(session, turn(3) + turn(4))
    prep = prepare_compaction(session, settings)
    branch = session.get_branch()
    assert branch[prep.summarize_from]["id"] == kept_first
    assert prep.message_ids[0] == kept_first  # what was kept last time is summarized now
    assert prep.previous_summary == first.summary

    second_summarizer = Recorder(text="SECOND")
    second = compact(session, second_summarizer, settings)
    first_call = second_summarizer.calls[0]
    assert first_call["previous"] == first.summary
    assert first_call["messages"][0] is session.get_entry(kept_first)["message"]
    assert second.first_kept_entry_id != kept_first
    context = session.context(raw=True)
    assert context.messages[0]["summary"] == second.summary


def test_files_are_cumulative_across_compactions(session):
    add(session, turn(0, path="src/a.py"))
    add(session, [user("look"), assistant(calls=[call("r1", "read", path="docs/x.md")]),
                  result("r1", "text", "read"), assistant("ok " + "a" * 2_000)])
    add(session, turn(1) + turn(2))
    settings = MID
    compact(session, Recorder(), settings)
    add(session, [user("read b " + "u" * 2_000),
                  assistant(calls=[call("r2", "read", path="src/b.py")]),
                  result("r2", "o" * 2_000, "read"),
                  assistant(calls=[call("r3", "read", path="src/a.py")]),
                  result("r3", "o" * 2_000, "read"), assistant("fine " + "a" * 2_000)])
    add(session, turn(3) + turn(4))
    res = compact(session, Recorder(), settings)
    assert res.details["modifiedFiles"] == ["src/a.py"]
    assert res.details["readFiles"] == ["docs/x.md", "src/b.py"]  # a.py: modified, not read


def test_tool_failures_section_is_deduplicated_capped_and_short(session):
    failures = []
    for i in range(10):
        failures += [assistant(calls=[call(f"f{i}", command=f"run {i}")]),
                     result(f"f{i}", f"error {i}: " + "boom " * 200, error=True)]
    failures += [assistant(calls=[call("g", command="run 0")]),
                 result("g", "error 0: " + "boom " * 200, error=True)]  # same line again
    add(session, [user("start " + "u" * 2_000)] + failures + turn(1) + turn(2))
    settings = MID
    res = compact(session, Recorder(), settings)
    section = res.summary.split("## Tool failures\n", 1)[1].split("\n\n", 1)[0]
    lines = section.splitlines()
    assert len(lines) == 9 and lines[-1] == "- ...and 2 more"
    assert lines[0].startswith("- bash: error 0: boom")
    assert all(len(line) <= 2 + len("bash: ") + 160 for line in lines)


def test_missing_identifiers_are_appended_verbatim(session):
    ids = ["3f9a2c1d7e", "https://ci.example.com/build/1234?x=1", "/srv/app/config.toml",
           "localhost:8443"]
    add(session, [user("deploy " + " ".join(ids) + " " + "u" * 2_000),
                  assistant("ok " + "a" * 2_000)] + turn(1) + turn(2))
    settings = MID
    res = compact(session, Recorder(text="a summary naming /srv/app/config.toml only"),
                  settings)
    section = res.summary.split("## Exact identifiers\n", 1)[1]
    for value in ids:
        assert value in res.summary
    assert "/srv/app/config.toml" not in section


def test_split_turn_summary_gets_its_own_call_and_section(session):
    ids = add(session, six_messages())
    summarizer = Recorder()
    settings = dataclasses.replace(MID, keep_recent_tokens=150)
    res = compact(session, summarizer, settings, focus="the parser")
    assert res.is_split_turn and res.first_kept_entry_id == ids[5]
    assert len(summarizer.calls) == 2
    history, prefix = summarizer.calls
    assert history["focus"] == "the parser"
    assert prefix["focus"].startswith(TURN_PREFIX_INSTRUCTIONS) and "the parser" in prefix["focus"]
    assert prefix["previous"] is None
    assert len(prefix["messages"]) == 3
    assert prefix["max_tokens"] < history["max_tokens"]
    assert f"{SPLIT_TURN_HEADING}\n\nSUMMARY #2" in res.summary


def test_estimate_ignores_usage_reported_before_the_compaction(session):
    add(session, [user("u" * 4_000), assistant("a" * 4_000, usage=150_000),
                  user("v" * 4_000), assistant("b" * 4_000, usage=151_000)])
    assert estimate_branch_context(session.get_branch()).tokens == 151_000
    settings = dataclasses.replace(SMALL, keep_recent_tokens=1_500)
    res = compact(session, Recorder(), settings)
    after = estimate_branch_context(session.get_branch())
    assert not after.from_usage and after.tokens == res.tokens_after < 10_000
    assert estimate_session_context(session) == after
    # a usage reported after the compaction is trusted again
    add(session, [user("w" * 400), assistant("c" * 400, usage=7_000), user("x" * 400)])
    fresh = estimate_session_context(session)
    assert fresh.from_usage and fresh.tokens == 7_000 + 100
    assert estimate_branch_context(session.get_branch()) == fresh


def test_projection_matches_the_journal(session):
    add(session, turn(0) + turn(1))
    session.append_custom_message_entry("note", "remember this", True)
    session.append_compaction("S", session.get_branch()[4]["id"], 10)
    add(session, turn(2))
    messages, ids, live = projection(session.get_branch())
    context = session.context(raw=True)
    assert messages == context.messages
    assert ids[1:] == context.entry_ids[1:]
    assert messages[live - 1]["role"] == "custom"


# ---------------------------------------------------------------------------------------
# duplicate prompts


def test_duplicate_prompts_fold_whitespace_nfc_and_case():
    text = "Please re-run the café benchmark suite now"
    decomposed = unicodedata.normalize("NFD", text.upper()).replace(" ", "   \n")
    messages = [user(text), assistant("failed"), user(decomposed), user(text), user("short"),
                user("short")]
    times = [0, 1_000, 30_000, 89_000, 90_000, 91_000]
    assert duplicate_prompts(messages, times) == {2, 3}  # 3: 59 s after its latest repeat
    assert duplicate_prompts(messages, [0, 1, 61_000, 200_000, 0, 1]) == set()
    assert duplicate_prompts(messages, [None] * 6) == set()


def test_duplicate_prompts_count_once_in_what_is_summarized(session):
    prompt = "Summarize the failing tests in the parser module please"
    add(session, [user(prompt, T0), assistant("error", ts=T0 + 1), user(prompt, T0 + 20_000),
                  user(prompt.upper(), T0 + 40_000), assistant("ok " + "a" * 2_000)]
        + turn(1) + turn(2))
    settings = MID
    summarizer = Recorder()
    res = compact(session, summarizer, settings)
    assert res.duplicates_dropped == 2
    sent = [m for c in summarizer.calls for m in c["messages"] if m["role"] == "user"]
    assert sum(prompt.lower() in message_text(m).lower() for m in sent) == 1


# ---------------------------------------------------------------------------------------
# chunking, staging


def test_call_groups_and_chunks_keep_a_call_with_its_results():
    messages = [user("a"), assistant(calls=[call("1"), call("2")]), result("1", "x"),
                result("2", "y"), assistant("b"), user("c")]
    assert call_groups(messages) == [(0, 1), (1, 4), (4, 5), (5, 6)]
    chunks = chunk_messages(messages, [10, 10, 10, 10, 10, 10], 25)
    assert [len(c) for c in chunks] == [1, 3, 2]
    # an oversized message is alone in its chunk
    chunks = chunk_messages([user("a"), user("b"), user("c")], [10, 100, 10], 25)
    assert [len(c) for c in chunks] == [1, 1, 1]
    chunks = chunk_messages([user(str(i)) for i in range(6)], [10] * 6, 15, max_chunks=2)
    assert [len(c) for c in chunks] == [1, 5]


def test_adaptive_chunk_ratio():
    window = 100_000
    assert adaptive_chunk_ratio([], window) == 0.4
    assert adaptive_chunk_ratio([8_000] * 3, window) == 0.4  # 9.6% of the window
    assert adaptive_chunk_ratio([8_500] * 3, window) == pytest.approx(0.4 - 0.204)  # 10.2%
    assert adaptive_chunk_ratio([30_000], window) == pytest.approx(0.15)
    assert chunk_budget([100], window) == 40_000 - 4_096
    assert chunk_budget([30_000], window) == 15_000 - 4_096
    assert is_oversized(41_667, window) and not is_oversized(41_666, window)


def test_chunks_fill_to_budget_over_1_2_and_roll_the_summary():
    messages = [user(f"m{i} " + "w" * 1_900) for i in range(4)]  # 478 tokens each
    summarizer = Recorder()
    settings = ContextSettings(context_window=16_000, summarization_overhead_tokens=5_200)
    sizes = [Estimator().count_text(message_text(m)) for m in messages]
    assert sizes == [478] * 4
    budget = chunk_budget(sizes, 16_000, settings)
    assert budget == 6_400 - 5_200 and int(budget / 1.2) == 1_000
    out = summarize_messages(messages, summarizer, settings, previous_summary="OLD")
    assert out.level == FallbackLevel.FULL
    # total 1912 > budget 1200 -> staged: two halves of two messages...
    assert len(summarizer.calls) == 3
    assert [len(c["messages"]) for c in summarizer.calls[:2]] == [2, 2]
    assert [c["previous"] for c in summarizer.calls[:2]] == [None, None]
    merge = summarizer.calls[2]
    assert merge["focus"].startswith(MERGE_INSTRUCTIONS) and merge["previous"] == "OLD"
    assert "SUMMARY #1" in merge["messages"][0]["content"]
    assert "oldest" in merge["messages"][0]["content"]
    assert "most recent" in merge["messages"][1]["content"]
    # ...each half (956 tokens) fits budget / 1.2 (1000): one call each.

    summarizer = Recorder()
    messages = [user(f"m{i} " + "w" * 1_900) for i in range(3)]  # 3 < 4: no staging
    summarize_messages(messages, summarizer, settings, previous_summary="OLD")
    assert [len(c["messages"]) for c in summarizer.calls] == [2, 1]
    assert [c["previous"] for c in summarizer.calls] == ["OLD", "SUMMARY #1"]


def test_staged_merge_keeps_the_focus():
    messages = [user(f"m{i} " + "w" * 1_990) for i in range(8)]
    summarizer = Recorder()
    settings = ContextSettings(context_window=16_000, summarization_overhead_tokens=5_200)
    summarize_messages(messages, summarizer, settings, focus="keep the API names")
    merge = summarizer.calls[-1]
    assert merge["focus"].startswith(MERGE_INSTRUCTIONS)
    assert merge["focus"].endswith("keep the API names")
    assert all(c["focus"] == "keep the API names" for c in summarizer.calls[:-1])


# ---------------------------------------------------------------------------------------
# fallback levels, retries


def big_history():
    """A user message too large to summarize (> 50% of a 16k window) among small ones."""
    return [user("small one " + "s" * 400), assistant("ok " + "a" * 400),
            user("HUGE " + "h" * 40_000), assistant("fine " + "b" * 400),
            user("small two " + "t" * 400), assistant("done " + "c" * 400)]


def refuse_huge(n, messages):
    if any("HUGE" in message_text(m) for m in messages):
        return SummaryOverflow("prompt is too long")
    return None


def test_level_1_full():
    out = summarize_messages(big_history()[:2], Recorder(), SMALL)
    assert (out.level, out.text, out.calls) == (FallbackLevel.FULL, "SUMMARY #1", 1)


def test_level_2_leaves_out_oversized_messages_with_a_note():
    summarizer = Recorder(fail=refuse_huge)
    delays = []
    out = summarize_messages(big_history(), summarizer, SMALL, sleep=no_sleep(delays))
    assert out.level == FallbackLevel.PARTIAL and out.oversized == 1
    assert "[Left out of this summary: a user message of about 10,00" in out.text
    assert delays == []  # an overflow is not retried
    last = summarizer.calls[-1]["messages"]
    assert len(last) == 5 and not any("HUGE" in message_text(m) for m in last)


def test_level_3_plain_text_keeps_the_previous_summary():
    summarizer = Recorder(fail=lambda n, m: SummaryRejected("401"))
    out = summarize_messages(big_history(), summarizer, SMALL, previous_summary="EARLIER")
    assert out.level == FallbackLevel.PLAIN
    assert out.text.startswith("Summary unavailable: 6 earlier message(s) could not be "
                               "summarized (1 of them too large to summarize)")
    assert out.text.endswith("EARLIER")
    assert len(summarizer.calls) == 2  # level 1 once, level 2 once, no retries


def test_each_level_through_compact(session):
    add(session, big_history() + turn(1) + turn(2))
    settings = dataclasses.replace(SMALL, keep_recent_tokens=1_200)
    res = compact(session, Recorder(fail=refuse_huge), settings, sleep=no_sleep([]))
    assert res.fallback_level == FallbackLevel.PARTIAL
    assert session.get_branch()[-3]["details"]["fallbackLevel"] == 2
    add(session, turn(3) + turn(4))
    res = compact(session, Recorder(fail=lambda n, m: SummarizerError("down")), settings,
                  sleep=no_sleep([]))
    assert res.fallback_level == FallbackLevel.PLAIN
    assert "could not be summarized" in res.summary


def test_retries_with_backoff_then_success():
    delays = []
    summarizer = Recorder(fail=lambda n, m: SummarizerError("overloaded") if n < 3 else None)
    out = summarize_messages([user("hello")], summarizer, SMALL, sleep=no_sleep(delays),
                             rng=random.Random(1))
    assert (out.level, out.text, out.attempts, out.calls) == (FallbackLevel.FULL,
                                                              "SUMMARY #3", 3, 1)
    assert len(delays) == 2
    assert 0.5 <= delays[0] <= 0.6 and 0.8 <= delays[1] <= 1.2


def test_retries_stop_after_three_attempts_per_call():
    delays = []
    summarizer = Recorder(fail=lambda n, m: RuntimeError("flaky"))
    out = summarize_messages(big_history(), summarizer, SMALL, sleep=no_sleep(delays))
    assert out.level == FallbackLevel.PLAIN
    assert len(summarizer.calls) == 6  # 3 at level 1, 3 at level 2
    assert len(delays) == 4


def test_no_retry_on_timeout_and_abort_stops_everything(session):
    summarizer = Recorder(fail=lambda n, m: SummaryTimeout("slow"))
    out = summarize_messages([user("x")], summarizer, SMALL, sleep=no_sleep([]))
    assert out.level == FallbackLevel.PLAIN and len(summarizer.calls) == 1

    summarizer = Recorder(fail=lambda n, m: SummaryAborted("stop"))
    with pytest.raises(SummaryAborted):
        summarize_messages(big_history(), summarizer, SMALL)
    assert len(summarizer.calls) == 1

    add(session, turn(0) + turn(1) + turn(2))
    size = Path(session.path).stat().st_size
    settings = MID
    with pytest.raises(SummaryAborted):
        compact(session, summarizer, settings)
    abort = threading.Event()
    abort.set()
    with pytest.raises(SummaryAborted):
        compact(session, Recorder(), settings, abort=abort)
    assert Path(session.path).stat().st_size == size


def test_backoff_delay_bounds():
    rng = random.Random(3)
    for attempt in range(1, 12):
        for _ in range(50):
            delay = backoff_delay(attempt, rng=rng)
            expected = min(5.0, 0.5 * 2 ** (attempt - 1))
            assert max(0.5, expected * 0.8) <= delay <= min(5.0, expected * 1.2)
    assert backoff_delay(1, retry_after=2.0) == 2.0
    assert backoff_delay(1, retry_after=60.0) == 5.0
    assert backoff_delay(1, retry_after=0.0) == 0.5


# ---------------------------------------------------------------------------------------
# hooks, memory flush


def test_hooks_that_raise_or_hang_cannot_break_or_block_compaction(session, caplog):
    add(session, turn(0) + turn(1) + turn(2))
    release = threading.Event()
    seen = []

    def before(prep):
        seen.append(("before", len(prep.messages_to_summarize)))
        raise ValueError("hook bug")

    def after(res):
        seen.append(("after", res.entry_id))
        release.wait(30)

    settings = MID
    hooks = CompactionHooks(before, after, timeout=0.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agent.compaction"):
        res = compact(session, Recorder(), settings, hooks=hooks)
    elapsed = time.monotonic() - started
    release.set()
    assert res is not None and elapsed < 2.0
    assert seen[0][0] == "before" and seen[0][1] > 0 and seen[1] == ("after", res.entry_id)
    assert "before_compaction hook failed" in caplog.text
    assert "after_compaction hook still running" in caplog.text


def test_hook_that_hangs_before_is_bounded_too():
    release = threading.Event()
    started = time.monotonic()
    assert run_hook("before_compaction", lambda _: release.wait(30), None, 0.1) is False
    assert time.monotonic() - started < 1.0
    release.set()
    assert run_hook("x", lambda _: None, None, 1.0) is True
    assert run_hook("x", None, None, 1.0) is True


def test_memory_flush_appends_facts_and_never_rewrites(tmp_path):
    now = datetime(2026, 1, 15, 9, 30, tzinfo=timezone(timedelta(hours=1)))
    target = tmp_path / "memory" / "2026-01-15.md"
    target.parent.mkdir()
    target.write_text("# my notes\nkeep me\n")
    messages = [user("Deploy build 3f9a2c1d7e to https://staging.example.com"),
                assistant(calls=[call("e", "edit", path="src/app.py")]),
                result("e", "ok", "edit"),
                assistant("Decided to use port 8443 because 443 is taken.")]
    path = flush_memory(tmp_path, messages, session_id="abc", reason="overflow", now=now)
    assert path == target
    text = target.read_text()
    assert text.startswith("# my notes\nkeep me\n\n"
                           "## 09:30:00 compaction (overflow) of session abc")
    for fact in ("3f9a2c1d7e", "https://staging.example.com", "src/app.py", "port 8443"):
        assert fact in text
    flush_memory(tmp_path, [user("second flush with another request")], now=now)
    again = target.read_text()
    assert again.startswith(text) and again.count("## 09:30:00") == 2
    assert flush_memory(tmp_path, [], now=now) is None


def test_memory_flush_runs_before_compacting(session, tmp_path):
    add(session, turn(0, path="src/flushed.py") + turn(1) + turn(2))
    settings = dataclasses.replace(MID, memory_flush=True)
    workspace = tmp_path / "ws"
    order = []
    hooks = CompactionHooks(before_compaction=lambda p: order.append(
        list((workspace / "memory").glob("*.md"))))
    res = compact(session, Recorder(), settings, workspace=workspace, hooks=hooks)
    files = list((workspace / "memory").glob("*.md"))
    assert order == [[]] and len(files) == 1 and res.memory_file == str(files[0])
    assert "src/flushed.py" in files[0].read_text()
    # without the option, nothing is written
    add(session, turn(3) + turn(4))
    compact(session, Recorder(), dataclasses.replace(settings, memory_flush=False),
            workspace=workspace)
    assert files[0].read_text().count("## ") == 1


# ---------------------------------------------------------------------------------------
# real pi sessions


def copy_to_v3(source: Path, directory: Path) -> journal.Session:
    """Copy a pi v1 fixture into a new v3 session, pointing compactions at the copied ids."""
    snapshot = journal.load(source)
    target = journal.Session.create(directory / "copy.jsonl", cwd=str(directory))
    mapping, pending, originals = {}, [], []

    def flush():
        mapping.update(zip(originals, target.append_many(pending), strict=True))
        pending.clear()
        originals.clear()

    for entry in snapshot.entries:
        fields = {k: v for k, v in entry.items() if k not in ("id", "parentId", "timestamp")}
        if entry["type"] == "compaction" and entry.get("firstKeptEntryId"):
            flush()
            fields["firstKeptEntryId"] = mapping[entry["firstKeptEntryId"]]
        pending.append(fields)
        originals.append(entry["id"])
    flush()
    return target


def problems_by_message(messages):
    out = set()
    for problem in journal.validate.pairing_problems(messages):
        where, _, what = problem.partition(": ")
        out.add((id(messages[int(where[len("messages["):-1])]), what))
    return out


@pytest.mark.parametrize("name", ["large-session.jsonl", "before-compaction.jsonl"])
def test_compacting_real_pi_sessions(name, tmp_path):
    session = copy_to_v3(pi_path(name), tmp_path)
    try:
        settings = ContextSettings(context_window=64_000)
        before = session.context(raw=True).messages
        assert projection(session.get_branch())[0] == before
        all_modified = set()
        for m in before:
            if m.get("role") == "assistant" and isinstance(m.get("content"), list):
                all_modified |= {b["arguments"]["path"] for b in m["content"]
                                 if b.get("type") == "toolCall" and b["name"] in ("write", "edit")}
        assert all_modified

        res = compact(session, ExtractiveSummarizer(), settings)
        assert res is not None and res.fallback_level == FallbackLevel.FULL
        entry = session.get_entry(res.entry_id)
        assert entry["type"] == "compaction" and entry["firstKeptEntryId"]
        budget = prompt_budget(64_000, settings)
        assert res.tokens_after <= budget < res.tokens_before

        assert estimate_session_context(session).tokens == res.tokens_after
        after = session.context(raw=True).messages
        assert journal.validate.pairing_problems(journal.sanitize(after)[0]) == []
        assert journal.validate.pairing_problems(session.context().messages) == []
        # the raw projection gains no pairing problem: any left come from kept messages
        assert problems_by_message(after) <= problems_by_message(before)

        kept_modified = set()
        for m in after[1:]:
            if m.get("role") == "assistant" and isinstance(m.get("content"), list):
                kept_modified |= {b["arguments"]["path"] for b in m["content"]
                                  if b.get("type") == "toolCall" and b["name"] in ("write", "edit")}
        assert all_modified <= set(entry["details"]["modifiedFiles"]) | kept_modified
        for path in entry["details"]["modifiedFiles"]:
            assert path in entry["summary"]
    finally:
        session.close()


def test_before_compaction_fixture_resumes_from_its_last_compaction(tmp_path):
    session = copy_to_v3(pi_path("before-compaction.jsonl"), tmp_path)
    try:
        branch = session.get_branch()
        last = max(i for i, e in enumerate(branch) if e["type"] == "compaction")
        kept = next(i for i, e in enumerate(branch) if e["id"] == branch[last]["firstKeptEntryId"])
        prep = prepare_compaction(session, ContextSettings(context_window=64_000))
        assert prep.summarize_from == kept
        assert prep.previous_summary == branch[last]["summary"]
        assert prep.message_ids[0] == branch[kept]["id"]
    finally:
        session.close()
