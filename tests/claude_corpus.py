"""The corruption corpus for Claude Code transcripts: one case per failure shape reported on
Claude Code's tracker, each with the exact fix repair must make.

Every case is a small transcript written here the way Claude Code writes one (compact JSON,
its key order, one content block per assistant line), damaged as the reports describe, with:

- `kinds`: the problems repair must report (kind -> count), and nothing else;
- `check(before, after)`: the exact expected result, on the records before and after;
- the four guarantees, checked on every case by tests/test_claude_repair.py.

Shapes (the reports they come from):
`tool_use ids were found without tool_result blocks immediately after` (a call whose result
was never written, mid-session or at the end), `unexpected tool_use_id found in tool_result
blocks` (a result left after a compaction cut its call away), a result written twice,
`parentUuid` chains broken by a second `/compact` or a rewind (parents that are not in the
file), cycles, NUL bytes (a crashed append's run of zeros, and NUL characters from a tool's
output), invalid UTF-8, torn and glued lines, a line written twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

SESSION = "4f0c2a9e-7b1d-4c3e-9a55-0d6b2e81c7f4"
CWD = "/home/dev/app"
VERSION = "2.0.76"
INTERRUPTED = "[Request interrupted by user for tool use]"

Records = list[dict[str, Any]]


def _uuid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _ts(n: int) -> str:
    return f"2026-02-03T10:{n // 60:02d}:{n % 60:02d}.000Z"


def _env(parent: str | None, n: int) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": CWD,
            "sessionId": SESSION, "version": VERSION, "gitBranch": "main"}


def user(n: int, parent: str | None, content: Any, **extra: Any) -> dict[str, Any]:
    rec = _env(parent, n)
    rec.update(type="user", message={"role": "user", "content": content}, uuid=_uuid(n),
               timestamp=_ts(n))
    rec.update(extra)
    return rec


def result(n: int, parent: str | None, tool_id: str, text: str = "ok") -> dict[str, Any]:
    block = {"tool_use_id": tool_id, "type": "tool_result", "content": text}
    return user(n, parent, [block], toolUseResult={"stdout": text, "stderr": ""})


def assistant(n: int, parent: str | None, block: dict[str, Any], mid: str) -> dict[str, Any]:
    rec = _env(parent, n)
    rec["message"] = {"model": "claude-sonnet-4-5-20250929", "id": mid, "type": "message",
                      "role": "assistant", "content": [block], "stop_reason": None,
                      "stop_sequence": None,
                      "usage": {"input_tokens": 3, "cache_creation_input_tokens": 0,
                                "cache_read_input_tokens": 12000, "output_tokens": 9}}
    rec.update(requestId=f"req_{mid}", type="assistant", uuid=_uuid(n), timestamp=_ts(n))
    return rec


def text(n: int, parent: str | None, words: str, mid: str) -> dict[str, Any]:
    return assistant(n, parent, {"type": "text", "text": words}, mid)


def call(n: int, parent: str | None, tool_id: str, mid: str) -> dict[str, Any]:
    return assistant(n, parent, {"type": "tool_use", "id": tool_id, "name": "Bash",
                                 "input": {"command": "ls"}}, mid)


def boundary(n: int, logical: str | None) -> dict[str, Any]:
    rec = {"parentUuid": None, "logicalParentUuid": logical, **{
        k: v for k, v in _env(None, n).items() if k != "parentUuid"}}
    rec.update(type="system", subtype="compact_boundary", content="Conversation compacted",
               level="info", compactMetadata={"trigger": "auto", "preTokens": 150000},
               isMeta=False, timestamp=_ts(n), uuid=_uuid(n))
    return rec


def summary(n: int, parent: str) -> dict[str, Any]:
    return user(n, parent, "This session is being continued from a previous conversation. "
                "Summary: the user is listing files.", isVisibleInTranscriptOnly=True,
                isCompactSummary=True)


def lines(records: Records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def base() -> Records:
    """A clean session: a prompt, a call and its result, an answer, a compaction, more."""
    return [
        user(1, None, "list the files"),
        text(2, _uuid(1), "Listing them.", "msg_a"),
        call(3, _uuid(2), "toolu_01", "msg_a"),
        result(4, _uuid(3), "toolu_01", "a.py\nb.py"),
        text(5, _uuid(4), "Two files.", "msg_b"),
        user(6, _uuid(5), "and the tests?"),
        call(7, _uuid(6), "toolu_02", "msg_c"),
        result(8, _uuid(7), "toolu_02", "tests/"),
        text(9, _uuid(8), "One folder.", "msg_d"),
    ]


@dataclass
class Case:
    name: str
    data: bytes
    kinds: dict[str, int]
    check: Callable[[Records, Records], None] = field(default=lambda before, after: None)
    report: str = ""
    """The tracker's words for this failure."""


def by_uuid(records: Records) -> dict[str, dict[str, Any]]:
    return {r["uuid"]: r for r in records if "uuid" in r}


def _added(before: Records, after: Records) -> Records:
    known = {r.get("uuid") for r in before}
    return [r for r in after if r.get("uuid") not in known]


def _interrupt_of(record: dict[str, Any], tool_id: str, parent: str) -> None:
    assert record["type"] == "user" and record["parentUuid"] == parent
    assert record["message"] == {"role": "user", "content": [
        {"tool_use_id": tool_id, "type": "tool_result", "content": INTERRUPTED,
         "is_error": True}]}
    assert record["toolUseResult"] == "Error: " + INTERRUPTED
    assert list(record) == ["parentUuid", "isSidechain", "userType", "cwd", "sessionId",
                            "version", "gitBranch", "type", "message", "uuid", "timestamp",
                            "toolUseResult"]


def _unpaired_mid() -> Case:
    # the result of toolu_02 was never written; the user typed on
    records = base()[:7] + [user(9, _uuid(7), "why did it stop?")]

    def check(before: Records, after: Records) -> None:
        (added,) = _added(before, after)
        _interrupt_of(added, "toolu_02", _uuid(7))
        assert after.index(added) == [r.get("uuid") for r in after].index(_uuid(7)) + 1
        assert by_uuid(after)[_uuid(9)]["parentUuid"] == added["uuid"]
        assert added["timestamp"] == "2026-02-03T10:00:07.001Z"

    return Case("unpaired_tool_use_mid", lines(records), {"unpaired_tool_use": 1}, check,
                "tool_use ids were found without tool_result blocks immediately after")


def _unpaired_end() -> Case:
    records = base()[:7]  # killed while toolu_02 ran

    def check(before: Records, after: Records) -> None:
        (added,) = _added(before, after)
        assert after[-1] is added
        _interrupt_of(added, "toolu_02", _uuid(7))

    return Case("unpaired_tool_use_end", lines(records), {"unpaired_tool_use": 1}, check,
                "resume after a crash mid-tool: tool_use without tool_result")


def _orphan_after_compaction() -> Case:
    records = base()[:7] + [
        boundary(10, _uuid(7)), summary(11, _uuid(10)),
        result(12, _uuid(11), "toolu_02", "tests/"),  # its call is before the boundary
        text(13, _uuid(12), "One folder.", "msg_e"),
    ]

    def check(before: Records, after: Records) -> None:
        got = by_uuid(after)
        assert _uuid(12) not in got
        assert got[_uuid(13)]["parentUuid"] == _uuid(11)
        assert len(after) == len(before) - 1

    return Case("orphan_result_after_compaction", lines(records), {"orphan_result": 1}, check,
                "unexpected tool_use_id found in tool_result blocks (after compaction)")


def _duplicate_result() -> Case:
    records = base()
    records.insert(8, result(20, _uuid(8), "toolu_02", "tests/"))
    records[9]["parentUuid"] = _uuid(20)

    def check(before: Records, after: Records) -> None:
        got = by_uuid(after)
        assert _uuid(20) not in got and got[_uuid(9)]["parentUuid"] == _uuid(8)

    return Case("duplicate_result", lines(records), {"duplicate_result": 1}, check,
                "each tool_use must have a single result: found multiple tool_result blocks")


def _duplicate_block() -> Case:
    records = base()
    block = records[7]["message"]["content"][0]
    records[7]["message"]["content"] = [block, dict(block)]

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(8)]["message"]["content"] == [block]

    return Case("duplicate_result_block", lines(records), {"duplicate_result": 1}, check,
                "a tool_result block written twice in one message")


def _second_compact() -> Case:
    records = base() + [
        boundary(10, _uuid(9)), summary(11, _uuid(10)),
        user(12, _uuid(11), "go on"), text(13, _uuid(12), "Going on.", "msg_e"),
        boundary(14, _uuid(13)), summary(15, _uuid(14)),
        # after the second /compact the next prompt names a record never written
        user(16, "7d3f0e4c-0000-4000-8000-00000000dead", "and now?"),
        text(17, _uuid(16), "Now this.", "msg_f"),
    ]

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(16)]["parentUuid"] == _uuid(15)
        assert len(after) == len(before)

    return Case("chain_broken_by_second_compact", lines(records), {"missing_parent": 1},
                check, "parentUuid chain broken after a second /compact: history lost")


def _rewind_logical() -> Case:
    records = base() + [boundary(10, "9a9a9a9a-0000-4000-8000-000000000000"),
                        summary(11, _uuid(10)), user(12, _uuid(11), "more")]

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(10)]["logicalParentUuid"] == _uuid(9)
        assert by_uuid(after)[_uuid(10)]["parentUuid"] is None

    return Case("boundary_logical_parent_lost", lines(records), {"missing_logical_parent": 1},
                check, "rewind then /compact: logicalParentUuid names a rewound record")


def _rewind_with_logical() -> Case:
    records = base()
    # a rewound branch whose first record lost its parent but kept the logical link
    records.append(user(12, "6b6b6b6b-0000-4000-8000-000000000000", "again",
                        logicalParentUuid=_uuid(5)))

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(12)]["parentUuid"] == _uuid(5)

    return Case("chain_broken_by_rewind", lines(records), {"missing_parent": 1}, check,
                "after a rewind most entries are unreachable (parentUuid names nothing)")


def _cycle() -> Case:
    records = base()
    records[4]["parentUuid"] = _uuid(9)  # 5 -> 9 -> 8 -> ... -> 5

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(5)]["parentUuid"] == _uuid(4)

    return Case("parent_cycle", lines(records), {"parent_cycle": 1}, check,
                "resume hangs: a parentUuid cycle")


def _forward_parent() -> Case:
    records = base()
    records[4]["parentUuid"] = _uuid(20)  # its parent was written after it
    records.append(dict(_env(_uuid(4), 20), type="system", subtype="turn_duration",
                        durationMs=1200, isMeta=False, timestamp=_ts(20), uuid=_uuid(20)))

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(5)]["parentUuid"] == _uuid(4)
        assert len(after) == len(before)

    return Case("forward_parent", lines(records), {"forward_parent": 1}, check,
                "a record whose parent is written after it (resume loses the turn)")


def _self_parent() -> Case:
    records = base()
    records[5]["parentUuid"] = _uuid(6)

    def check(before: Records, after: Records) -> None:
        assert by_uuid(after)[_uuid(6)]["parentUuid"] == _uuid(5)

    return Case("self_parent", lines(records), {"parent_cycle": 1}, check,
                "a record that is its own parent")


def _nul_run() -> Case:
    data = lines(base())
    cut = data.index(b"\n", data.index(_uuid(4).encode())) + 1
    data = data[:cut] + b"\x00" * 512 + b"\n" + data[cut:]

    def check(before: Records, after: Records) -> None:
        assert after == before

    return Case("nul_run_line", data, {"nul_run": 1}, check,
                "interrupted append left a run of NUL bytes; resume stops there")


def _nul_in_output() -> Case:
    records = base()
    records[3] = result(4, _uuid(3), "toolu_01", "a.py\x00\x00b.py")

    def check(before: Records, after: Records) -> None:
        got = by_uuid(after)[_uuid(4)]
        assert got["message"]["content"][0]["content"] == "a.pyb.py"
        assert got["toolUseResult"] == before[3]["toolUseResult"]

    return Case("nul_in_tool_output", lines(records), {"nul_in_text": 1}, check,
                "binary tool output with NUL bytes: the request body is not valid JSON")


def _invalid_utf8() -> Case:
    data = lines(base()).replace(b"Two files.", b"Two \xff\xfe files.")

    def check(before: Records, after: Records) -> None:
        block = by_uuid(after)[_uuid(5)]["message"]["content"][0]
        assert block["text"] == "Two \ufffd\ufffd files."

    return Case("invalid_utf8", data, {"invalid_utf8": 1}, check,
                "transcript with invalid UTF-8 bytes cannot be parsed")


def _torn_tail() -> Case:
    data = lines(base())
    torn = orjson.dumps(user(10, _uuid(9), "half a"))[:60]

    def check(before: Records, after: Records) -> None:
        assert after == before

    return Case("torn_tail", data + torn, {"torn_tail": 1}, check,
                "power loss mid-append: the last line is cut off")


def _glued() -> Case:
    data = lines(base())
    torn = orjson.dumps(user(10, _uuid(9), "lost prompt"))[:70]
    tail = orjson.dumps(text(11, _uuid(9), "Still here.", "msg_g")) + b"\n"

    def check(before: Records, after: Records) -> None:
        assert after[-1]["uuid"] == _uuid(11) and len(after) == 10

    return Case("glued_lines", data + torn + tail, {"glued_record": 1}, check,
                "two writers: a torn record glued to the next one on one line")


def _duplicate_line() -> Case:
    records = base()
    records.insert(5, dict(records[4]))

    def check(before: Records, after: Records) -> None:
        assert [r["uuid"] for r in after] == [_uuid(n) for n in range(1, 10)]

    return Case("duplicate_record", lines(records), {"duplicate_record": 1}, check,
                "the same message written twice after a resume")


def _empty_prompt() -> Case:
    records = base() + [user(10, _uuid(9), [{"type": "text", "text": ""}]),
                        text(11, _uuid(10), "Yes?", "msg_h")]

    def check(before: Records, after: Records) -> None:
        got = by_uuid(after)
        assert _uuid(10) not in got and got[_uuid(11)]["parentUuid"] == _uuid(9)

    return Case("empty_user_message", lines(records), {"empty_message": 1}, check,
                "messages: text content blocks must be non-empty (an empty prompt was saved)")


def _missing_newline() -> Case:
    data = lines(base())[:-1]

    def check(before: Records, after: Records) -> None:
        assert after == before

    return Case("missing_newline", data, {"missing_newline": 1}, check,
                "the last record has no line end; the next append would glue onto it")


def _no_message_and_lost_result() -> Case:
    # the first line of a response lost its `message` key (one byte of it is not UTF-8), and
    # the result of the first of its two parallel calls (both hanging on that line) is lost
    records = [user(1, None, "list the files"),
               text(2, _uuid(1), "Listing them.", "msg_a"),
               call(3, _uuid(2), "toolu_01", "msg_a"), call(4, _uuid(2), "toolu_02", "msg_a"),
               result(6, _uuid(4), "toolu_02", "tests/"),
               text(7, _uuid(6), "Two things.", "msg_b")]
    data = lines(records).replace(b'"message":{"model"', b'"mes\xffage":{"model"', 1)

    def check(before: Records, after: Records) -> None:
        # the unusable line goes as a lost line would; the calls' lines hang on in file order
        (added,) = _added(before, after)
        _interrupt_of(added, "toolu_01", _uuid(4))
        assert [r["uuid"] for r in after] == [_uuid(1), _uuid(3), _uuid(4), added["uuid"],
                                              _uuid(6), _uuid(7)]
        got = by_uuid(after)
        assert got[_uuid(3)]["parentUuid"] == _uuid(1)
        assert got[_uuid(4)]["parentUuid"] == _uuid(3)
        assert got[_uuid(6)]["parentUuid"] == added["uuid"]
        assert {k: v for k, v in got[_uuid(6)].items() if k != "parentUuid"} == {
            k: v for k, v in records[4].items() if k != "parentUuid"}
        assert got[_uuid(7)] == records[5]

    return Case("no_message_and_lost_result", data,
                {"invalid_utf8": 1, "no_message": 1, "missing_parent": 2,
                 "unpaired_tool_use": 1}, check,
                "a damaged line of a response and a lost result: tool_use ids were found "
                "without tool_result blocks immediately after")


def _text_key_lost() -> Case:
    # one byte of the `"text"` key of a response's first line is not UTF-8: its only block is
    # left without a text (the search found it in a generated transcript)
    records = base()
    data = lines(records).replace(b'"text":"Listing them."', b'"te\xfft":"Listing them."', 1)

    def check(before: Records, after: Records) -> None:
        # the line left with no content goes; the call's line hangs on its parent instead
        assert [r["uuid"] for r in after] == [_uuid(n) for n in (1, 3, 4, 5, 6, 7, 8, 9)]
        got = by_uuid(after)
        assert got[_uuid(3)] == {**records[2], "parentUuid": _uuid(1)}
        assert [r for r in after if r["uuid"] != _uuid(3)] == \
            [r for r in records if r["uuid"] not in (_uuid(2), _uuid(3))]

    return Case("text_block_without_text", data,
                {"invalid_utf8": 1, "empty_text_block": 1}, check,
                "messages: text content blocks must be non-empty (a damaged line's text)")


CASES: list[Case] = [f() for f in (
    _unpaired_mid, _unpaired_end, _orphan_after_compaction, _duplicate_result,
    _duplicate_block, _second_compact, _rewind_logical, _rewind_with_logical, _cycle,
    _forward_parent, _self_parent, _nul_run, _nul_in_output, _invalid_utf8, _torn_tail, _glued,
    _duplicate_line, _empty_prompt, _missing_newline, _no_message_and_lost_result,
    _text_key_lost)]
