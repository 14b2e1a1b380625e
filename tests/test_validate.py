"""The strict pairing validator, on pi-shaped messages and on Anthropic request payloads."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

import journal.validate
from journal.errors import JournalError
from journal.validate import (
    InvalidPairing,
    api_pairing_problems,
    assert_valid_pairing,
    pairing_problems,
)


def call(cid: Any = "c1", name: Any = "ls", args: Any = None) -> dict:
    return {"type": "toolCall", "id": cid, "name": name,
            "arguments": {"path": "."} if args is None else args}


def asst(*blocks: Any, stop: str = "toolUse") -> dict:
    return {"role": "assistant", "content": list(blocks), "stopReason": stop, "timestamp": 1}


def res(cid: Any, out: Any = "ok") -> dict:
    content = out if isinstance(out, list) else [{"type": "text", "text": out}]
    return {"role": "toolResult", "toolCallId": cid, "toolName": "ls", "content": content,
            "isError": False, "timestamp": 2}


def user(content: Any = "hi") -> dict:
    return {"role": "user", "content": content, "timestamp": 0}


def text(t: str) -> dict:
    return {"type": "text", "text": t}


# -- pi-shaped messages ----------------------------------------------------------------------

def test_valid_history_has_no_problems():
    msgs = [user(), asst(text("look"), call("a"), call("b")), res("b"), res("a"),
            asst(text("done"), stop="stop"), user([text("ok")]),
            {"role": "bashExecution", "command": "ls", "output": "", "timestamp": 3}]
    assert pairing_problems(msgs) == []
    assert_valid_pairing(msgs)


def test_unanswered_call():
    assert pairing_problems([user(), asst(call("a")), user("?")]) == [
        "messages[1]: tool call 'a' has no result right after its message"]
    assert pairing_problems([user(), asst(call("a"))]) == [
        "messages[1]: tool call 'a' has no result right after its message"]


def test_result_separated_from_its_call():
    assert pairing_problems([user(), asst(call("a")), user("x"), res("a")]) == [
        "messages[1]: tool call 'a' has no result right after its message",
        "messages[3]: tool result 'a' does not follow an assistant message with tool calls "
        "(or another message came in between)",
    ]


def test_other_roles_end_the_result_run():
    summary = {"role": "branchSummary", "summary": "s", "fromId": "x", "timestamp": 1}
    problems = pairing_problems([user(), asst(call("a"), call("b")), res("a"), summary,
                                 res("b")])
    assert problems == [
        "messages[1]: tool call 'b' has no result right after its message",
        "messages[4]: tool result 'b' does not follow an assistant message with tool calls "
        "(or another message came in between)",
    ]


def test_result_for_a_call_of_an_earlier_assistant():
    msgs = [user(), asst(call("a")), res("a"), asst(call("b")), res("a"), res("b")]
    assert pairing_problems(msgs) == [
        "messages[4]: tool result 'a' matches no call of messages[3] (its call is at "
        "messages[1])"]


def test_orphan_and_duplicate_results():
    assert pairing_problems([user(), res("z")]) == [
        "messages[1]: tool result 'z' does not follow an assistant message with tool calls "
        "(or another message came in between)"]
    assert pairing_problems([user(), asst(call("a")), res("a"), res("z")]) == [
        "messages[3]: tool result 'z' matches no call of messages[1]"]
    assert pairing_problems([user(), asst(call("a")), res("a"), res("a")]) == [
        "messages[3]: second result for tool call 'a'"]


def test_duplicate_call_ids():
    msgs = [user(), asst(call("a")), res("a"), asst(call("a")), res("a")]
    assert pairing_problems(msgs) == [
        "messages[3].content[0]: tool call id 'a' is already used at messages[1]"]
    same_message = [user(), asst(call("a"), call("a")), res("a"), res("a")]
    assert pairing_problems(same_message) == [
        "messages[1].content[1]: tool call id 'a' is already used at messages[1]",
        "messages[3]: second result for tool call 'a'",
    ]


def test_malformed_calls():
    no_args = call("c")
    del no_args["arguments"]
    msgs = [user(), asst(call(None), call("b", ""), no_args, call("d", "ls", "text")),
            res("b"), res("c"), res("d")]
    assert pairing_problems(msgs) == [
        "messages[1].content[0]: tool call has no id",
        "messages[1].content[1]: tool call has no name",
        "messages[1].content[2]: tool call arguments are missing or not an object",
        "messages[1].content[3]: tool call arguments are missing or not an object",
    ]


def test_blank_text_and_empty_messages():
    msgs = [user(""), user(" "), user([]), user([text("a"), text("\n")]),
            asst(text(""), stop="stop"), asst(stop="stop"), res("x", "  "),
            {"role": "custom", "customType": "c", "content": [], "timestamp": 1},
            user("end")]
    assert pairing_problems(msgs) == [
        "messages[0]: user message has no content",
        "messages[1]: content is only whitespace",
        "messages[2]: user message has no content",
        "messages[3].content[1]: text block is empty or blank",
        "messages[4].content[0]: text block is empty or blank",
        "messages[5]: assistant message has no content",
        "messages[6]: tool result 'x' does not follow an assistant message with tool calls "
        "(or another message came in between)",
        "messages[6].content[0]: text block is empty or blank",
        "messages[7]: custom message has no content",
    ]


def test_final_assistant_may_be_empty_but_not_blank():
    assert pairing_problems([user(), asst(stop="stop")]) == []
    assert pairing_problems([user(), {"role": "assistant", "content": ""}]) == []
    assert pairing_problems([user(), asst(text(" "), stop="stop")]) == [
        "messages[1].content[0]: text block is empty or blank"]


def test_tool_result_may_have_empty_content():
    assert pairing_problems([user(), asst(call("a")), res("a", [])]) == []


def test_not_a_message():
    assert pairing_problems([user(), 7]) == ["messages[1]: not a message object"]


def test_assert_valid_pairing_raises_with_every_problem():
    with pytest.raises(InvalidPairing) as caught:
        assert_valid_pairing([user(), asst(call("a")), res("b")])
    err = caught.value
    assert isinstance(err, JournalError) and isinstance(err, AssertionError)
    assert err.problems == [
        "messages[2]: tool result 'b' matches no call of messages[1]",
        "messages[1]: tool call 'a' has no result right after its message",
    ]
    assert str(err).startswith("2 tool pairing problem(s):\n  messages[2]")
    assert "journal.pairing.sanitize" in str(err)


def test_long_problem_lists_are_shortened_in_the_message():
    msgs = [user()] + [res(f"r{i}") for i in range(25)]
    with pytest.raises(InvalidPairing) as caught:
        assert_valid_pairing(msgs)
    assert len(caught.value.problems) == 25
    assert str(caught.value).count("\n  messages[") == 20
    assert "... and 5 more" in str(caught.value)


# -- Anthropic request payloads --------------------------------------------------------------

def use(uid: Any = "t1", name: Any = "ls", inp: Any = None) -> dict:
    return {"type": "tool_use", "id": uid, "name": name, "input": {} if inp is None else inp}


def result(uid: Any = "t1", content: Any = "ok") -> dict:
    return {"type": "tool_result", "tool_use_id": uid, "content": content}


def test_api_valid_request():
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "x",
                                           "signature": "s"}, use("t1"), use("t2")]},
        {"role": "user", "content": [result("t2"), result("t1"), text("and now?")]},
        {"role": "user", "content": "consecutive user messages are fine"},
        {"role": "assistant", "content": "sure"},
        {"role": "assistant", "content": []},
    ]
    assert api_pairing_problems(msgs) == []


def test_api_unanswered_and_misplaced_results():
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use("t1")]},
        {"role": "user", "content": "wait"},
        {"role": "user", "content": [result("t1")]},
    ]
    assert api_pairing_problems(msgs) == [
        "messages[1]: tool_use 't1' has no result right after its message",
        "messages[3].content[0]: tool_result 't1' is not in the message right after its "
        "tool_use (messages[1])",
    ]


def test_api_assistant_after_tool_use():
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use("t1")]},
            {"role": "assistant", "content": "hm"}]
    assert api_pairing_problems(msgs) == [
        "messages[1]: tool_use 't1' has no result right after its message"]
    assert api_pairing_problems(msgs[:2]) == [
        "messages[1]: tool_use 't1' has no result right after its message"]


def test_api_unknown_duplicate_and_late_tool_results():
    msgs = [
        {"role": "user", "content": [result("nope")]},
        {"role": "assistant", "content": [use("t1")]},
        {"role": "user", "content": [result("t1"), result("t1"), text("x"), result("zz")]},
    ]
    assert api_pairing_problems(msgs) == [
        "messages[0].content[0]: tool_result 'nope' does not follow an assistant message with "
        "tool_use blocks",
        "messages[2].content[1]: second tool_result for tool_use 't1'",
        "messages[2].content[3]: tool_result after another kind of block",
        "messages[2].content[3]: tool_result 'zz' names no tool_use of messages[1]",
    ]


def test_api_block_placement_and_ids():
    msgs = [
        {"role": "user", "content": [use("u")]},
        {"role": "assistant", "content": [use("t1"), use("t1"), use(None), use("t3", ""),
                                          use("t4", "ls", "str"), result("t1")]},
        {"role": "user", "content": [result("t1"), result("t3"), result("t4")]},
    ]
    assert api_pairing_problems(msgs) == [
        "messages[0].content[0]: tool_use outside an assistant message",
        "messages[1].content[1]: tool_use id 't1' is already used at messages[1]",
        "messages[1].content[2]: tool_use has no id",
        "messages[1].content[3]: tool_use has no name",
        "messages[1].content[4]: tool_use input is missing or not an object",
        "messages[1].content[5]: tool_result outside a user message",
        "messages[1].content[5]: tool_result 't1' is not in the message right after its "
        "tool_use (messages[1])",
    ]


def test_api_empty_content_and_blank_text():
    msgs = [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": []},
        {"role": "user", "content": [text(" ")]},
        {"role": "assistant", "content": [use("t1")]},
        {"role": "user", "content": [result("t1", [text("")])]},
        {"role": "system", "content": "x"},
        "oops",
    ]
    assert api_pairing_problems(msgs) == [
        "messages[0]: user message has no content",
        "messages[1]: assistant message has no content",
        "messages[2].content[0]: text block is empty or blank",
        "messages[4].content[0].content[0]: text block is empty or blank",
        "messages[5]: role 'system' is neither 'user' nor 'assistant'",
        "messages[6]: not a message object",
    ]


def test_api_tool_result_content_may_be_empty():
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use("t1")]},
            {"role": "user", "content": [result("t1", "")]}]
    assert api_pairing_problems(msgs) == []


def test_docstring_examples_run():
    assert doctest.testmod(journal.validate).failed == 0
