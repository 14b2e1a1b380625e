"""Overflow recovery: truncated copies of oversized tool results on a new journal branch."""

from __future__ import annotations

from pathlib import Path

import pytest

import journal
import journal.validate
from agent.overflow import MARKER_TYPE, plan_truncation, truncate_session_tool_results
from agent.settings import ContextSettings
from agent.truncate import max_result_chars, result_text

WINDOW = 32_000
CAP = max_result_chars(WINDOW)  # 16,000 chars


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(text=None, calls=()):
    content = ([{"type": "text", "text": text}] if text else []) + list(calls)
    return {"role": "assistant", "content": content, "provider": "anthropic",
            "model": "claude-sonnet-4-5", "stopReason": "toolUse" if calls else "stop",
            "timestamp": 2}


def call(call_id):
    return {"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": "ls"}}


def result(call_id, text):
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "bash",
            "content": [{"type": "text", "text": text}], "isError": False, "timestamp": 3}


HUGE = "line of build output\n" * 5_000 + "FAILED: 3 errors\n"  # ~105k chars, important tail


@pytest.fixture
def session(tmp_path):
    s = journal.Session.create(tmp_path / "s.jsonl", cwd=str(tmp_path))
    yield s
    if not s.closed:
        s.close()


def add(session, messages):
    return [session.append_message(m) for m in messages]


def conversation():
    return [user("build it"), assistant(calls=[call("a")]), result("a", HUGE),
            assistant("it failed"), user("try again"), assistant(calls=[call("b")]),
            result("b", "small output"), assistant("ok")]


def test_oversized_result_is_copied_truncated_on_a_new_branch(session):
    ids = add(session, conversation())
    before = session.context(raw=True).messages
    data = Path(session.path).read_bytes()

    report = truncate_session_tool_results(session, WINDOW)

    assert report.changed and report.truncated == 1
    assert report.old_leaf_id == ids[-1] and report.new_leaf_id == session.leaf_id
    assert report.branched_from == ids[1]  # the entry before the first oversized result
    assert report.copied == 6
    assert list(report.replaced) == [ids[2]]
    # nothing committed was edited: the file only grew
    assert Path(session.path).read_bytes().startswith(data)
    # the originals are still there, on a dead branch
    assert session.get_entry(ids[2])["message"]["content"][0]["text"] == HUGE
    assert session.get_branch(ids[-1])[-1]["id"] == ids[-1]

    after = session.context(raw=True).messages
    assert len(after) == len(before)
    new_text = result_text(after[2])
    assert len(new_text) <= CAP and new_text.endswith("FAILED: 3 errors\n")
    assert report.chars_cut == len(HUGE) - len(new_text)
    assert [m for i, m in enumerate(after) if i != 2] == [m for i, m in enumerate(before)
                                                          if i != 2]
    assert journal.validate.pairing_problems(after) == []

    marker = session.get_branch()[-1]
    assert marker["type"] == "custom" and marker["customType"] == MARKER_TYPE
    assert marker["data"]["oldLeafId"] == ids[-1]
    assert marker["data"]["replaced"] == list(report.replaced)
    assert marker["data"]["charsCut"] == report.chars_cut


def test_reopened_session_continues_on_the_new_branch(session, tmp_path):
    add(session, conversation())
    report = truncate_session_tool_results(session, WINDOW)
    expected = session.context(raw=True).messages
    path = session.path
    session.close()
    with journal.Session.open(path) as again:
        assert again.leaf_id == report.new_leaf_id
        assert again.context(raw=True).messages == expected


def test_nothing_oversized_writes_nothing(session):
    ids = add(session, conversation()[3:])
    size = Path(session.path).stat().st_size
    report = truncate_session_tool_results(session, WINDOW)
    assert not report.changed and report.chars_cut == 0
    assert report.new_leaf_id == report.old_leaf_id == ids[-1]
    assert Path(session.path).stat().st_size == size


def test_max_chars_and_aggregate_budget(session):
    add(session, [user("go"), assistant(calls=[call("a"), call("b")]), result("a", "x" * 9_000),
                  result("b", "y" * 9_000), assistant("done")])
    plan = plan_truncation(session.get_branch(), WINDOW)
    assert plan == {}  # both under the 16k cap
    plan = plan_truncation(session.get_branch(), WINDOW, budget_chars=12_000)
    assert sorted(plan) == [3]  # the newest of two equal results, cut by the excess only
    assert plan[3][1] == 6_000
    report = truncate_session_tool_results(session, WINDOW, max_chars=5_000)
    assert report.truncated == 2 and report.branched_from == session.get_branch()[1]["id"]
    texts = [result_text(m) for m in session.context(raw=True).messages
             if m["role"] == "toolResult"]
    assert all(len(t) <= 5_000 for t in texts)


def test_compaction_among_the_copies_keeps_its_kept_part(session):
    ids = add(session, conversation())
    session.append_compaction("SUMMARY", ids[1], 50_000)
    add(session, [user("and now?"), assistant("fine")])
    before = session.context(raw=True).messages
    assert before[0]["role"] == "compactionSummary" and result_text(before[2]) == HUGE

    report = truncate_session_tool_results(session, WINDOW)
    assert report.truncated == 1 and report.branched_from == ids[1]
    branch = session.get_branch()
    compaction = next(e for e in branch if e["type"] == "compaction")
    assert compaction["firstKeptEntryId"] == ids[1] == branch[1]["id"]  # still on the path
    after = session.context(raw=True).messages
    assert len(after) == len(before) and after[0]["summary"] == "SUMMARY"
    assert len(result_text(after[2])) <= CAP
    assert after[3:] == before[3:]
    assert journal.validate.pairing_problems(after) == []


def test_results_before_the_kept_boundary_are_left_alone(session):
    ids = add(session, conversation())
    session.append_compaction("SUMMARY", ids[4], 50_000)
    add(session, [user("next"), assistant(calls=[call("c")]), result("c", HUGE[:20_000]),
                  assistant("done")])
    report = truncate_session_tool_results(session, WINDOW)
    assert report.truncated == 1
    assert list(report.replaced) != [ids[2]]
    compaction = next(e for e in session.get_branch() if e["type"] == "compaction")
    assert compaction["firstKeptEntryId"] == ids[4]  # not copied: it is before the branch


def test_window_defaults_from_settings(session):
    add(session, conversation())
    report = truncate_session_tool_results(session, settings=ContextSettings(
        context_window=WINDOW))
    assert report.truncated == 1


def test_a_failed_write_leaves_the_leaf_where_it_was(session, monkeypatch):
    ids = add(session, conversation())
    size = Path(session.path).stat().st_size

    def refuse(entries):
        raise journal.WriteFailed(session.path, size, "disk full")

    monkeypatch.setattr(session, "append_many", refuse)
    with pytest.raises(journal.WriteFailed):
        truncate_session_tool_results(session, WINDOW)
    assert session.leaf_id == ids[-1]
    assert Path(session.path).stat().st_size == size
