"""The pairing sanitizer: one focused case per rule, then properties over random histories."""

from __future__ import annotations

import copy
import doctest
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal.pairing
from journal.pairing import (
    INTERRUPTED_TEXT,
    RULES,
    Fix,
    is_synthetic_result,
    sanitize,
    synthetic_result,
)
from journal.validate import api_pairing_problems, pairing_problems

MISSING = object()  # leaves a key out of a generated block


def call(cid: Any = "c1", name: Any = "ls", args: Any = MISSING) -> dict:
    block = {"type": "toolCall", "id": cid, "name": name, "arguments": {"path": "."}}
    if args is not MISSING:
        block["arguments"] = args
    return block


def asst(*blocks: Any, stop: str = "toolUse", ts: int = 10) -> dict:
    return {"role": "assistant", "content": list(blocks), "stopReason": stop, "timestamp": ts}


def res(cid: str, out: str = "ok", name: str = "ls", ts: int = 11) -> dict:
    return {"role": "toolResult", "toolCallId": cid, "toolName": name,
            "content": [{"type": "text", "text": out}], "isError": False, "timestamp": ts}


def user(content: Any = "hi") -> dict:
    return {"role": "user", "content": content, "timestamp": 1}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def thinking(t: str = "hmm", sig: str | None = None) -> dict:
    block = {"type": "thinking", "thinking": t}
    if sig is not None:
        block["thinkingSignature"] = sig
    return block


def synth(cid: str, name: str = "ls", ts: int = 10) -> dict:
    return {"role": "toolResult", "toolCallId": cid, "toolName": name,
            "content": [{"type": "text", "text": INTERRUPTED_TEXT}], "isError": True,
            "details": {"synthetic": True, "reason": "missing_result"}, "timestamp": ts}


def run(messages: list) -> tuple[list, list[Fix]]:
    before = copy.deepcopy(messages)
    out, report = sanitize(messages)
    assert messages == before, "input was mutated"
    assert pairing_problems(out) == []
    again, report2 = sanitize(out)
    assert again == out and not report2.changed and report2.fixes == []
    assert report.changed == bool(report.fixes)
    assert report.counts == {r: sum(f.rule == r for f in report.fixes)
                             for r in {f.rule for f in report.fixes}}
    return out, report.fixes


def rules(fixes: list[Fix]) -> list[tuple[str, int, str | None]]:
    return [(f.rule, f.index, f.call_id) for f in fixes]


# -- valid input is left alone -------------------------------------------------------------

def test_valid_history_is_returned_as_the_same_objects():
    msgs = [user(), asst(thinking(sig="s"), text("look"), call("a"), call("b", "read")),
            res("a"), res("b", name="read"), asst(text("done"), stop="stop"), user("thanks")]
    out, report = sanitize(msgs)
    assert out == msgs and all(a is b for a, b in zip(out, msgs, strict=True))
    assert report.fixes == [] and report.counts == {} and not report.changed


def test_empty_history():
    assert sanitize([]) == ([], sanitize([])[1])
    assert not sanitize([])[1].changed


# -- results follow their calls ------------------------------------------------------------

def test_missing_result_gets_a_synthetic_error_result():
    msgs = [user(), asst(call("a"), call("b", "read"), ts=42), res("a"), user("next")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[2], synth("b", "read", ts=42), msgs[3]]
    assert out[2] is msgs[2]
    assert rules(fixes) == [("missing_result", 1, "b")]


def test_missing_result_at_the_end_of_the_history():
    msgs = [user(), asst(call("a"))]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], synth("a")]
    assert rules(fixes) == [("missing_result", 1, "a")]


def test_result_after_a_user_message_is_moved_back():
    msgs = [user(), asst(call("a")), user("wait"), res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[3], msgs[2]]
    assert out[2] is msgs[3]
    assert rules(fixes) == [("moved_result", 3, "a")]


def test_results_are_put_in_call_order():
    msgs = [user(), asst(call("a"), call("b"), call("c")), res("c"), res("a"), res("b")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[3], msgs[4], msgs[2]]
    assert rules(fixes) == [("moved_result", 2, "c"), ("moved_result", 3, "a"),
                            ("moved_result", 4, "b")]


def test_result_after_a_later_plain_assistant_message_is_moved_back():
    msgs = [user(), asst(call("a")), user("hm"), asst(text("thinking..."), stop="stop"),
            res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[4], msgs[2], msgs[3]]
    assert rules(fixes) == [("moved_result", 4, "a")]


def test_late_result_of_an_earlier_turn_is_moved_back_when_its_id_is_unambiguous():
    msgs = [user(), asst(call("a")), user("go on"), asst(call("b")), res("b"), res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[5], msgs[2], msgs[3], msgs[4]]
    assert rules(fixes) == [("moved_result", 5, "a")]


def test_other_roles_end_a_result_run():
    bash = {"role": "bashExecution", "command": "ls", "output": "x", "exitCode": 0,
            "cancelled": False, "truncated": False, "timestamp": 5}
    summary = {"role": "compactionSummary", "summary": "s", "tokensBefore": 1, "timestamp": 5}
    msgs = [user(), asst(call("a"), call("b")), res("a"), bash, res("b"), summary]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[2], msgs[4], bash, summary]
    assert rules(fixes) == [("moved_result", 4, "b")]


# -- orphans and duplicates ----------------------------------------------------------------

def test_result_with_no_call_is_dropped():
    msgs = [user(), res("ghost"), asst(text("hi"), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2]]
    assert rules(fixes) == [("orphan_result", 1, "ghost")]


def test_result_for_a_call_of_another_turn_that_is_already_answered_is_dropped():
    msgs = [user(), asst(call("a")), res("a"), asst(call("b")), res("b"), res("a", "again")]
    out, fixes = run(msgs)
    assert out == msgs[:5]
    assert rules(fixes) == [("duplicate_result", 5, "a")]


def test_result_without_an_id_is_dropped():
    bad = res("a")
    del bad["toolCallId"]
    msgs = [user(), asst(call("a")), bad]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], synth("a")]
    assert rules(fixes) == [("missing_result", 1, "a"), ("orphan_result", 2, None)]


def test_result_before_its_call_is_an_orphan():
    msgs = [user(), res("a"), asst(call("a")), res("a", "real")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2], msgs[3]]
    assert rules(fixes) == [("orphan_result", 1, "a")]


def test_second_result_for_the_same_call_is_dropped():
    msgs = [user(), asst(call("a")), res("a", "first"), res("a", "second"), user("x")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[2], msgs[4]]
    assert rules(fixes) == [("duplicate_result", 3, "a")]


def test_recorded_result_replaces_an_earlier_synthetic_one():
    msgs = [user(), asst(call("a")), synth("a"), user("x"), res("a", "late but real")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[4], msgs[3]]
    assert rules(fixes) == [("duplicate_result", 2, "a"), ("moved_result", 4, "a")]


def test_synthetic_result_never_replaces_a_recorded_one():
    msgs = [user(), asst(call("a")), res("a"), synth("a")]
    out, fixes = run(msgs)
    assert out == msgs[:3]
    assert rules(fixes) == [("duplicate_result", 3, "a")]


def test_result_whose_id_is_shared_by_two_earlier_open_calls_is_dropped():
    # both calls named "a" are still open when the stray result arrives: its owner is unknown
    msgs = [user(), asst(call("a")), user("1"), asst(call("a")), user("2"),
            asst(call("b")), res("b"), res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], synth("a"), msgs[2], {**msgs[3], "content": [
        call("a_dup2")]}, synth("a_dup2"), msgs[4], msgs[5], msgs[6]]
    assert rules(fixes) == [("missing_result", 1, "a"), ("duplicate_call_id", 3, "a"),
                            ("missing_result", 3, "a"), ("orphan_result", 7, "a")]


# -- failed turns --------------------------------------------------------------------------

def test_unanswered_calls_of_an_aborted_turn_are_removed():
    msgs = [user(), asst(text("let me look"), call("a"), call("b"), stop="aborted"), res("a"),
            user("stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [text("let me look"), call("a")]},
                   msgs[2], msgs[3]]
    assert rules(fixes) == [("unexecuted_call", 1, "b")]


def test_errored_turn_left_empty_is_dropped():
    msgs = [user(), asst(call("a"), stop="error"), user("retry"), asst(text("ok"), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2], msgs[3]]
    assert rules(fixes) == [("unexecuted_call", 1, "a"), ("empty_message", 1, None)]


def test_errored_final_turn_left_empty_is_kept_as_an_empty_prefill():
    msgs = [user(), asst(call("a"), stop="error")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": []}]
    assert rules(fixes) == [("unexecuted_call", 1, "a")]


# -- calls that could never run ------------------------------------------------------------

def test_non_executable_calls_are_removed_with_their_results():
    no_id = call(None)
    no_name = call("n", "")
    no_args = call("x", args=None)
    missing_args = call("y")
    del missing_args["arguments"]
    msgs = [user(), asst(text("try"), no_id, no_name, no_args, missing_args, call("ok")),
            res("n"), res("ok"), res("x")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [text("try"), call("ok")]}, msgs[3]]
    assert rules(fixes) == [
        ("non_executable_call", 1, None), ("non_executable_call", 1, "n"),
        ("non_executable_call", 1, "x"), ("non_executable_call", 1, "y"),
        ("non_executable_result", 2, "n"), ("non_executable_result", 4, "x"),
    ]
    assert [f.detail for f in fixes[:4]] == [
        "no id", "no name", "arguments missing or not an object",
        "arguments missing or not an object"]


def test_message_with_only_non_executable_calls_is_dropped():
    msgs = [user(), asst(call("a", None)), user("?")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2]]
    assert rules(fixes) == [("non_executable_call", 1, "a"), ("empty_message", 1, None)]


def test_duplicate_call_ids_are_renamed_with_their_results():
    msgs = [user(), asst(call("a")), res("a", "one"), asst(call("a"), call("a")),
            res("a", "two"), res("a", "three")]
    out, fixes = run(msgs)
    assert out == [
        msgs[0], msgs[1], msgs[2],
        {**msgs[3], "content": [call("a_dup2"), call("a_dup3")]},
        {**msgs[4], "toolCallId": "a_dup2"}, {**msgs[5], "toolCallId": "a_dup3"},
    ]
    assert rules(fixes) == [("duplicate_call_id", 3, "a"), ("duplicate_call_id", 3, "a")]
    assert [f.detail for f in fixes] == ["renamed to a_dup2", "renamed to a_dup3"]


def test_renaming_skips_names_already_in_use():
    msgs = [user(), asst(call("a"), call("a_dup2")), res("a"), res("a_dup2"), asst(call("a")),
            res("a")]
    out, fixes = run(msgs)
    assert out[4] == {**msgs[4], "content": [call("a_dup3")]}
    assert out[5] == {**msgs[5], "toolCallId": "a_dup3"}
    assert rules(fixes) == [("duplicate_call_id", 4, "a")]


def test_removed_calls_do_not_cause_renames():
    msgs = [user(), asst(call("a"), stop="aborted"), user("again"), asst(call("a")), res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2], msgs[3], msgs[4]]
    assert rules(fixes) == [("unexecuted_call", 1, "a"), ("empty_message", 1, None)]


# -- empty text and empty messages ---------------------------------------------------------

def test_blank_text_blocks_and_empty_messages_are_dropped():
    tool_out = res("a")
    tool_out["content"] = [text("  "), {"type": "image", "data": "x", "mimeType": "image/png"}]
    msgs = [user(" \n"), user([text(""), text("real")]), asst(text(" "), call("a")), tool_out,
            user([text("\t")]), {"role": "custom", "customType": "x", "content": "",
                                 "display": True, "timestamp": 1},
            asst(text("fine"), stop="stop"), user("bye")]
    out, fixes = run(msgs)
    assert out == [
        {**msgs[1], "content": [text("real")]},
        {**msgs[2], "content": [call("a")]},
        {**tool_out, "content": [tool_out["content"][1]]},
        msgs[6], msgs[7],
    ]
    assert rules(fixes) == [
        ("empty_message", 0, None), ("empty_text_block", 1, None), ("empty_text_block", 2, None),
        ("empty_text_block", 3, "a"), ("empty_text_block", 4, None), ("empty_message", 4, None),
        ("empty_message", 5, None),
    ]


def test_tool_result_left_empty_still_answers_its_call():
    blank = res("a", " ")
    msgs = [user(), asst(call("a")), blank]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], {**blank, "content": []}]
    assert rules(fixes) == [("empty_text_block", 2, "a")]


def test_final_assistant_message_is_never_dropped():
    msgs = [user(), asst(text("  "), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": []}]
    assert rules(fixes) == [("empty_text_block", 1, None)]
    # already empty: nothing to do
    assert sanitize(out)[0] == out


def test_empty_assistant_before_a_user_message_is_dropped():
    msgs = [user(), asst(stop="stop"), asst(text(""), stop="stop"), user("hello?")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[3]]
    assert rules(fixes) == [("empty_message", 1, None), ("empty_text_block", 2, None),
                            ("empty_message", 2, None)]


def test_only_the_last_of_trailing_empty_assistants_is_kept():
    msgs = [user(), asst(stop="stop"), user(""), asst(stop="aborted")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[3]]
    assert rules(fixes) == [("empty_message", 1, None), ("empty_message", 2, None)]


# -- thinking ------------------------------------------------------------------------------

def test_changed_turn_with_signed_thinking_loses_its_thinking_blocks():
    plain = thinking("plain")
    msgs = [user(), asst(thinking("t", "sig"), plain, text(" "), text("see"), call("a")),
            res("a"), asst(text("done"), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [text("see"), call("a")]}, msgs[2], msgs[3]]
    assert rules(fixes) == [("empty_text_block", 1, None), ("thinking_dropped", 1, None)]
    assert fixes[1].detail == "2 thinking block(s) of a changed turn"


def test_redacted_thinking_counts_as_signed():
    redacted = {"type": "redactedThinking", "data": "opaque"}
    msgs = [user(), asst(redacted, call("a"), call(None)), res("a"), user("more"),
            asst(text("ok"), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [call("a")]}, msgs[2], msgs[3], msgs[4]]
    assert rules(fixes) == [("non_executable_call", 1, None), ("thinking_dropped", 1, None)]


def test_changed_turn_with_only_unsigned_thinking_keeps_it():
    msgs = [user(), asst(thinking("t"), text(""), call("a")), res("a"), user("more")]
    out, fixes = run(msgs)
    assert out[1] == {**msgs[1], "content": [thinking("t"), call("a")]}
    assert out[1]["content"][0] is msgs[1]["content"][0]
    assert rules(fixes) == [("empty_text_block", 1, None)]


def test_unchanged_turn_keeps_signed_thinking_even_when_its_results_move():
    msgs = [user(), asst(thinking("t", "sig"), call("a")), user("x"), res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[1], msgs[3], msgs[2]]
    assert out[1] is msgs[1]
    assert rules(fixes) == [("moved_result", 3, "a")]


def test_latest_assistant_keeps_its_thinking_when_it_must_change():
    signed = thinking("t", "sig")
    msgs = [user(), asst(signed, text(" "), call("a"), call("b", None), call("c")), res("a")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [signed, call("a"), call("c")]}, msgs[2],
                   synth("c")]
    assert out[1]["content"][0] is signed
    assert rules(fixes) == [("non_executable_call", 1, "b"), ("empty_text_block", 1, None),
                            ("missing_result", 1, "c")]


def test_turn_before_an_empty_latest_assistant_counts_as_latest():
    signed = thinking("t", "sig")
    msgs = [user(), asst(signed, text(""), call("a")), res("a"), asst(stop="aborted"), user("x")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [signed, call("a")]}, msgs[2], msgs[4]]
    assert rules(fixes) == [("empty_text_block", 1, None), ("empty_message", 3, None)]


def test_latest_aborted_assistant_keeps_thinking_and_stays_as_final():
    signed = thinking("t", "sig")
    msgs = [user(), asst(signed, call("a"), stop="aborted")]
    out, fixes = run(msgs)
    assert out == [msgs[0], {**msgs[1], "content": [signed]}]
    assert rules(fixes) == [("unexecuted_call", 1, "a")]


def test_changed_signed_turn_left_empty_is_dropped():
    msgs = [user(), asst(thinking("t", "sig"), call("a"), stop="aborted"), user("again"),
            asst(text("ok"), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2], msgs[3]]
    assert rules(fixes) == [("unexecuted_call", 1, "a"), ("thinking_dropped", 1, None),
                            ("empty_message", 1, None)]


# -- odds and ends -------------------------------------------------------------------------

def test_items_that_are_not_messages_are_dropped():
    msgs = [user(), None, "text", asst(text("hi"), stop="stop")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[3]]
    assert rules(fixes) == [("not_a_message", 1, None), ("not_a_message", 2, None)]


def test_blank_string_content_of_an_assistant():
    msgs = [user(), {"role": "assistant", "content": " ", "stopReason": "stop"}, user("x")]
    out, fixes = run(msgs)
    assert out == [msgs[0], msgs[2]]
    assert rules(fixes) == [("empty_text_block", 1, None), ("empty_message", 1, None)]


def test_synthetic_result_helper():
    r = synthetic_result(call("t9", "bash"), "2026-01-01T00:00:00Z")
    assert r == {
        "role": "toolResult", "toolCallId": "t9", "toolName": "bash",
        "content": [{"type": "text", "text": INTERRUPTED_TEXT}], "isError": True,
        "details": {"synthetic": True, "reason": "missing_result"},
        "timestamp": "2026-01-01T00:00:00Z",
    }
    assert is_synthetic_result(r) and not is_synthetic_result(res("t9"))
    assert synthetic_result({"id": "z"}, 0)["toolName"] == "unknown"


def test_report_counts_and_rule_names():
    msgs = [user(), asst(call("a"), call("b")), res("zz"), res("a"), res("a")]
    _, report = sanitize(msgs)
    assert report.counts == {"orphan_result": 1, "duplicate_result": 1, "missing_result": 1}
    assert report.changed
    assert all(f.rule in RULES for f in report.fixes)


# -- properties over random histories ------------------------------------------------------

IDS = ["a", "b", "c", "d", "a_dup2"]
TEXTS = ["", " ", "\n\t", "hello", "x y"]

text_block = st.builds(text, st.sampled_from(TEXTS))
thinking_block = st.one_of(
    st.builds(thinking, st.sampled_from(["", "why", "so"]),
              st.sampled_from([None, None, "", "sig1", "sig2"])),
    st.just(None).map(lambda _: {"type": "redactedThinking", "data": "opaque"}),
)


@st.composite
def call_block(draw: st.DrawFn) -> dict:
    cid = draw(st.sampled_from(IDS * 4 + [None, "", " ", MISSING]))
    name = draw(st.sampled_from(["ls", "read", "bash"] * 4 + ["", None, 3, MISSING]))
    args = draw(st.sampled_from(["obj"] * 8 + [None, "str", MISSING]))
    block: dict[str, Any] = {"type": "toolCall"}
    if cid is not MISSING:
        block["id"] = cid
    if name is not MISSING:
        block["name"] = name
    if args == "obj":
        block["arguments"] = {"n": draw(st.integers(0, 3))}
    elif args is not MISSING:
        block["arguments"] = args
    return block


@st.composite
def assistant_message(draw: st.DrawFn) -> dict:
    head = draw(st.lists(st.one_of(thinking_block, text_block), max_size=2))
    calls = draw(st.lists(call_block(), max_size=3))
    tail = draw(st.lists(text_block, max_size=1))
    stop = draw(st.sampled_from(["toolUse", "toolUse", "stop", "length", "error", "aborted"]))
    return {"role": "assistant", "content": head + calls + tail, "stopReason": stop,
            "timestamp": draw(st.integers(0, 99))}


@st.composite
def result_message(draw: st.DrawFn) -> dict:
    cid = draw(st.sampled_from(IDS * 3 + [None]))
    if draw(st.integers(0, 9)) == 0:
        message = synth(cid)
    else:
        message = res(cid, draw(st.sampled_from(TEXTS)))
    if cid is None:
        del message["toolCallId"]
    return message


user_message = st.one_of(
    st.builds(user, st.sampled_from(TEXTS)),
    st.builds(user, st.lists(text_block, max_size=2)),
)
other_message = st.sampled_from([
    {"role": "bashExecution", "command": "ls", "output": "", "exitCode": 0, "cancelled": False,
     "truncated": False, "timestamp": 1},
    {"role": "custom", "customType": "note", "content": " ", "display": True, "timestamp": 1},
    {"role": "custom", "customType": "note", "content": "n", "display": True, "timestamp": 1},
    {"role": "compactionSummary", "summary": "s", "tokensBefore": 9, "timestamp": 1},
    {"role": "branchSummary", "summary": "b", "fromId": "abcd1234", "timestamp": 1},
]).map(copy.deepcopy)

def numbered(messages: list) -> list:
    """Tag each message with its position, so a test can find where an output came from."""
    return [{**m, "seq": k} if isinstance(m, dict) else m for k, m in enumerate(messages)]


random_history = st.lists(
    st.one_of(user_message, assistant_message(), assistant_message(), result_message(),
              result_message(), other_message, st.sampled_from([None, 3])),
    max_size=14,
).map(numbered)


@st.composite
def perturbed_history(draw: st.DrawFn) -> list:
    """A coherent history, then results moved, duplicated or lost, and calls broken."""
    messages: list = []
    n = 0
    for _ in range(draw(st.integers(1, 5))):
        messages.append(draw(user_message))
        k = draw(st.integers(0, 3))
        ids = [f"t{n + j}" for j in range(k)]
        n += k
        blocks = [call(cid, args={}) for cid in ids]
        if draw(st.booleans()):
            blocks.insert(0, thinking("t", draw(st.sampled_from(["", "sig"]))))
        messages.append(asst(*blocks, text("said"), stop="toolUse" if k else "stop"))
        messages.extend(res(cid) for cid in ids)
    for _ in range(draw(st.integers(0, 6))):
        if not messages:
            break
        i = draw(st.integers(0, len(messages) - 1))
        action = draw(st.sampled_from(["move", "dup", "delete", "break", "reuse", "abort"]))
        m = messages[i]
        if action == "move":
            messages.insert(draw(st.integers(0, len(messages) - 1)), messages.pop(i))
        elif action == "dup" and m["role"] == "toolResult":
            messages.insert(draw(st.integers(0, len(messages))), copy.deepcopy(m))
        elif action == "delete":
            messages.pop(i)
        elif m["role"] == "assistant" and action in ("break", "reuse", "abort"):
            m = copy.deepcopy(m)
            calls = [b for b in m["content"] if b["type"] == "toolCall"]
            if action == "abort":
                m["stopReason"] = "aborted"
            elif calls and action == "break":
                calls[0]["arguments"] = None
            elif calls:
                calls[-1]["id"] = "t0"
            messages[i] = m
    return messages


def _thinking_ids(message: dict) -> list[int]:
    content = message.get("content")
    return [id(b) for b in content if isinstance(b, dict)
            and b.get("type") in ("thinking", "redactedThinking")] if isinstance(
        content, list) else []


def to_api(messages: list) -> list:
    """A small stand-in for pi's Anthropic conversion, enough to check the request shape."""
    api: list = []
    for m in messages:
        role = m["role"]
        if role == "toolResult":
            block = {"type": "tool_result", "tool_use_id": m["toolCallId"],
                     "content": m["content"], "is_error": m["isError"]}
            if api and api[-1].get("_results"):
                api[-1]["content"].append(block)
            else:
                api.append({"role": "user", "content": [block], "_results": True})
        elif role == "assistant":
            content = []
            for b in m["content"]:
                if b["type"] == "toolCall":
                    content.append({"type": "tool_use", "id": b["id"], "name": b["name"],
                                    "input": b["arguments"]})
                else:
                    content.append(b)
            api.append({"role": "assistant", "content": content})
        elif role in ("user", "custom"):
            api.append({"role": "user", "content": m["content"]})
        else:
            api.append({"role": "user", "content": [text(role)]})
    for m in api:
        m.pop("_results", None)
    return api


def check_properties(messages: list) -> None:
    before = copy.deepcopy(messages)
    out, report = sanitize(messages)
    assert messages == before, "input was mutated"
    assert pairing_problems(out) == [], (messages, out)
    assert api_pairing_problems(to_api(out)) == []
    again, report2 = sanitize(out)
    assert again == out and all(a is b for a, b in zip(again, out, strict=True))
    assert report2.fixes == [] and not report2.changed
    assert report.changed == bool(report.fixes)
    if pairing_problems(messages) == []:
        # the validator and the sanitizer agree: a valid history only gets its results sorted
        assert set(report.counts) <= {"moved_result"}
    assert report.changed == (len(out) != len(messages) or any(
        a is not b for a, b in zip(out, messages, strict=True)))
    # thinking blocks are never edited: every one in the output is an input block, as is
    input_thinking = {i for m in messages if isinstance(m, dict) for i in _thinking_ids(m)}
    assert all(i in input_thinking for m in out for i in _thinking_ids(m))
    # and the latest assistant turn, as the model will see it, keeps all of its thinking
    # blocks (the `seq` key tells which input message an output message came from)
    latest = [m for m in out if m.get("role") == "assistant"]
    if latest and "seq" in latest[-1]:
        source = next(m for m in messages if isinstance(m, dict)
                      and m.get("seq") == latest[-1]["seq"])
        assert _thinking_ids(latest[-1]) == _thinking_ids(source)
    last_in = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if last_in and _thinking_ids(last_in[-1]):
        assert latest and _thinking_ids(latest[-1]) == _thinking_ids(last_in[-1])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_history)
def test_properties_on_random_histories(messages):
    check_properties(messages)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(perturbed_history().map(numbered))
def test_properties_on_perturbed_histories(messages):
    check_properties(messages)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.data())
def test_coherent_histories_are_left_alone(rounds, data):
    messages: list = []
    for r in range(rounds):
        messages.append(user(f"u{r}"))
        ids = [f"r{r}c{j}" for j in range(data.draw(st.integers(0, 3)))]
        sig = data.draw(st.sampled_from([None, "sig"]))
        messages.append(asst(thinking("t", sig), *[call(cid) for cid in ids],
                             stop="toolUse" if ids else "stop"))
        messages.extend(res(cid) for cid in ids)
    out, report = sanitize(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True)) and len(out) == len(messages)
    assert report.fixes == [] and not report.changed


def test_docstring_examples_run():
    assert doctest.testmod(journal.pairing).failed == 0
