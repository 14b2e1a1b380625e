"""`journal.repair` on a corpus of damaged files, and the `journal repair` command.

The corpus is made here from the real pi fixtures (version 1: large-session.jsonl and
before-compaction.jsonl; version 3: all-types.jsonl; not in this repository, so the cases built
on them skip when they are absent, see third_party.py), from sessions made by
bench/gen_session.py and from small hand-built sessions: one case per kind of damage, plus
combinations. Each case states the exact problems repair must report (`report.counts`) and
checks the fix it made; `corruption.check_repair` checks on every case that a second repair
changes nothing, that the result is valid (clean load, sound tree, a context that pairs up for
the API) and that no original byte is lost. `test_corpus_agrees_with_pi` loads every repaired
file in pi (skipped without node and pi) and compares the contexts.

Known bugs are `xfail(strict=True)` tests at the end, each with a minimal reproduction.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import (
    PI_NAME,
    PI_NAME_ID,
    PI_NAME_TIME,
    Outcome,
    Session,
    active_path,
    assert_listed,
    call,
    check_repair,
    context_of,
    delete_lines,
    drop_result,
    edit_entry,
    entry_of,
    find_line,
    fixture_bytes,
    generated_bytes,
    glue_torn,
    insert_lines,
    invalid_utf8,
    invalid_utf8_in_text,
    is_role,
    join_lines,
    last_single_call,
    line_offset,
    move_line,
    nul_line,
    nul_prefix,
    parity_module,
    read_records,
    replace_line,
    reused_id,
    split_lines,
    text,
    torn_tail,
    user_before_result,
)

import journal
import journal.validate
from journal.cli import main as cli_main
from journal.cli import repair_main
from journal.pairing import INTERRUPTED_TEXT, classify, sanitize

# ---------------------------------------------------------------------------------------
# sources


@dataclass
class Sources:
    """The undamaged inputs: the three pi fixtures and two generated sessions.

    The pi fixtures are read when a case first asks for one, so that only the cases built on
    them skip when the files are not available; the generated ones always run.
    """

    gen: bytes
    gen2: bytes

    @cached_property
    def all_types(self) -> bytes:
        return fixture_bytes("all-types.jsonl")

    @cached_property
    def large(self) -> bytes:
        return fixture_bytes("large-session.jsonl")

    @cached_property
    def before(self) -> bytes:
        return fixture_bytes("before-compaction.jsonl")


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    directory = tmp_path_factory.mktemp("sources")
    return Sources(
        gen=generated_bytes(directory, 7, 150_000),
        gen2=generated_bytes(directory, 12, 150_000),
    )


# what repair reports on the undamaged sources (their active branches need pairing fixes)
# The pi files as pi wrote them hold no damage, only notes (states pi handles itself when it
# sends a request), which a repair leaves in the file unless strict.
ALL_TYPES: dict[str, int] = {}
LARGE: dict[str, int] = {}
ALL_TYPES_NOTES = {"missing_result": 1}  # the leaf, a branch summary, hangs under a tool call
LARGE_NOTES = {"empty_message": 15, "unexecuted_call": 18}  # aborted turns, as pi wrote them


def plus(*counts: dict[str, int], **more: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in (*counts, more):
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


# ---------------------------------------------------------------------------------------
# the corpus

@dataclass
class Case:
    id: str
    build: Callable[[Sources], bytes]
    counts: dict[str, int]
    check: Callable[[Outcome, Sources], None] | None = None
    name: str = "session.jsonl"
    migrate: bool = False
    bug: str | None = None
    strict: bool = False


CASES: list[Case] = []


def case(id: str, counts: dict[str, int], *, name: str = "session.jsonl", migrate: bool = False,
         bug: str | None = None, strict: bool = False) -> Callable[[Any], Any]:
    """Register a corpus case: the decorated function builds the damaged bytes; an optional
    `<function>.check` attribute checks the fix. `strict` cases are repaired with
    `strict=True`, and their counts include the notes that fixes."""

    def register(build: Callable[[Sources], bytes]) -> Callable[[Sources], bytes]:
        CASES.append(Case(id, build, counts, getattr(build, "check", None), name, migrate, bug,
                          strict))
        return build

    return register


def checked(check: Callable[[Outcome, Sources], None]) -> Callable[[Any], Any]:
    def attach(build: Any) -> Any:
        build.check = check
        return build

    return attach


def only_kinds(outcome: Outcome, kind: str) -> list[journal.Problem]:
    """The problems of one kind, with the notes (fixed too when strict) and the consequences of
    dropped ranges."""
    report = outcome.report
    return [p for p in [*report.problems, *report.notes, *report.consequences] if p.kind == kind]


def records_of(outcome: Outcome, reason: str) -> list[dict[str, Any]]:
    return [r for r in outcome.records if r["reason"] == reason]


def out_lines(outcome: Outcome) -> list[bytes]:
    return split_lines(outcome.output)


def out_entries(outcome: Outcome) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out_lines(outcome)[1:]]


def by_id(outcome: Outcome) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in out_entries(outcome)}


def path_ids(outcome: Outcome) -> list[str]:
    return [orjson.loads(split_lines(outcome.output)[i])["id"]
            for i in active_path(outcome.output)]


# -- torn tail


def _torn_at(outcome: Outcome, keep: int) -> None:
    [record] = records_of(outcome, "torn_tail")
    assert record["offset"] == len(outcome.original) - keep
    assert record["data"] == outcome.original[-keep:]
    [problem] = only_kinds(outcome, "torn_tail")
    assert problem.offset == record["offset"]
    assert problem.line == len(split_lines(outcome.original)) + 1


@case("torn-tail/all-types", {"torn_tail": 1})
@checked(lambda o, s: (_torn_at(o, 40),
                       # the leaf, the branch summary, is gone: the rest is as it was
                       _equal(o.output, join_lines(split_lines(s.all_types)[:-1]))))
def _(s: Sources) -> bytes:
    return torn_tail(s.all_types, 40)


@case("torn-tail/generated", {"torn_tail": 1})
@checked(lambda o, s: (_torn_at(o, 77),
                       _equal(o.output, join_lines(split_lines(s.gen)[:-1]))))
def _(s: Sources) -> bytes:
    return torn_tail(s.gen, 77)


@case("torn-tail/large-session", plus(LARGE, torn_tail=1))
def _(s: Sources) -> bytes:
    return torn_tail(s.large, 1)  # only the line's first byte


# what repair should find on before-compaction.jsonl: its context (after the second
# compaction) has an unanswered call, an aborted turn and four empty assistant messages
BEFORE: dict[str, int] = {}
BEFORE_NOTES = {"missing_result": 1, "unexecuted_call": 1, "empty_message": 4}


@case("torn-tail/before-compaction", plus(BEFORE, torn_tail=1))
def _(s: Sources) -> bytes:
    return torn_tail(s.before, 500)


def _equal(a: bytes, b: bytes) -> None:
    assert a == b


# -- NUL runs


def _nul_dropped(outcome: Outcome, line: int, count: int, alone: bool) -> None:
    [record] = records_of(outcome, "nul_run")
    assert record["data"] == b"\x00" * count
    assert record["offset"] == line_offset(outcome.original, line)
    [problem] = only_kinds(outcome, "nul_run")
    assert (problem.line, problem.offset) == (line + 1, record["offset"])
    if not alone:  # the record behind the NULs is kept byte for byte
        behind = split_lines(outcome.original)[line][count:]
        assert behind in out_lines(outcome)


@case("nul-line/all-types", plus(ALL_TYPES, nul_run=1))
@checked(lambda o, s: _nul_dropped(o, 6, 4096, alone=True))
def _(s: Sources) -> bytes:
    return nul_line(s.all_types, 6)


@case("nul-prefix/all-types", plus(ALL_TYPES, nul_run=1))
@checked(lambda o, s: _nul_dropped(o, 6, 512, alone=False))
def _(s: Sources) -> bytes:
    return nul_prefix(s.all_types, 6)


@case("nul-line/generated", {"nul_run": 1})
@checked(lambda o, s: (_nul_dropped(o, 40, 4096, alone=True), _equal(o.output, s.gen)))
def _(s: Sources) -> bytes:
    return nul_line(s.gen, 40)


@case("nul-prefix/generated", {"nul_run": 1})
@checked(lambda o, s: (_nul_dropped(o, 40, 512, alone=False), _equal(o.output, s.gen)))
def _(s: Sources) -> bytes:
    return nul_prefix(s.gen, 40)


@case("nul-line/large-session", plus(LARGE, nul_run=1))
@checked(lambda o, s: _nul_dropped(o, 100, 4096, alone=True))
def _(s: Sources) -> bytes:
    return nul_line(s.large, 100)


@case("nul-prefix/large-session", plus(LARGE, nul_run=1))
@checked(lambda o, s: _nul_dropped(o, 100, 512, alone=False))
def _(s: Sources) -> bytes:
    return nul_prefix(s.large, 100)


@case("nul-prefix/header", {"nul_run": 1})
@checked(lambda o, s: (_nul_dropped(o, 0, 512, alone=False), _equal(o.output, s.gen)))
def _(s: Sources) -> bytes:
    return nul_prefix(s.gen, 0)


# -- a torn record with a complete one after it on the same line


def _glued(outcome: Outcome, line: int, keep: int) -> None:
    original = split_lines(outcome.original)[line]
    [record] = records_of(outcome, "glued_record")
    assert record["data"] == original[:keep]
    assert record["offset"] == line_offset(outcome.original, line)
    assert original[keep:] in out_lines(outcome)  # the complete record is kept as it was
    [problem] = only_kinds(outcome, "glued_record")
    assert problem.line == line + 1


def _glued_v3(outcome: Outcome, line: int, keep: int, synthetic: bool = False) -> None:
    """The torn entry is lost, so the complete one (its child) now hangs under the entry
    before the torn one; apart from its parentId it is kept as it was."""
    original = split_lines(outcome.original)[line]
    [record] = records_of(outcome, "glued_record")
    assert record["data"] == original[:keep]
    assert record["offset"] == line_offset(outcome.original, line)
    [problem] = only_kinds(outcome, "missing_parent")
    assert problem.line == line + 1
    kept = entry_of(original[keep:])
    child = by_id(outcome)[problem.entry_id]
    assert {**child, "parentId": kept["parentId"]} == kept
    before = entry_of(split_lines(outcome.original)[line - 1])["id"]
    if synthetic:  # the torn entry was a tool result: a synthetic one stands between them
        assert by_id(outcome)[child["parentId"]]["parentId"] == before
    else:
        assert child["parentId"] == before
    assert [r["offset"] for r in records_of(outcome, "missing_parent")] == [
        record["offset"] + keep]


@case("glued/all-types", plus(ALL_TYPES, glued_record=1))  # its child: a consequence
@checked(lambda o, s: _glued_v3(o, 6, 60))
def _(s: Sources) -> bytes:
    # line 6 (a bashExecution) torn after 60 bytes, the custom entry under it glued on
    return glue_torn(s.all_types, 6, 60)


@case("glued/generated", {"glued_record": 1, "missing_result": 1},
      strict=True)
@checked(lambda o, s: _glued_v3(o, last_single_call(s.gen)[1], 45, synthetic=True))
def _(s: Sources) -> bytes:
    # a tool result on the active branch, torn, with its child glued on: the call has no
    # result any more, so it gets a synthetic one
    return glue_torn(s.gen, last_single_call(s.gen)[1], 45)


@case("glued/large-session", plus(LARGE, glued_record=1))
@checked(lambda o, s: _glued(o, _large_user(s), 30))
def _(s: Sources) -> bytes:
    # a user message torn (nothing hangs on it in a linear file), the next line glued on
    return glue_torn(s.large, _large_user(s), 30)


def _large_user(s: Sources) -> int:
    return find_line(split_lines(s.large), is_role("user"), 100)


@case("trailing-garbage/generated", {"trailing_garbage": 1})
@checked(lambda o, s: _equal(o.output, s.gen))
def _(s: Sources) -> bytes:
    lines = split_lines(s.gen)
    return replace_line(s.gen, 20, lines[20] + b'{"type":"mess')


# -- invalid UTF-8


def _utf8_kept(outcome: Outcome, line: int, where: str) -> None:
    damaged = split_lines(outcome.original)[line]
    problems = only_kinds(outcome, "invalid_utf8")
    assert {p.action for p in problems} == {"replaced invalid bytes"}
    assert {p.line for p in problems} == {line + 1}
    assert all(r["data"] == damaged for r in records_of(outcome, "invalid_utf8"))
    assert records_of(outcome, "invalid_utf8")
    entry = entry_of(out_lines(outcome)[line])
    assert "\ufffd\ufffd" + where in orjson.dumps(entry).decode()


@case("utf8-in-string/all-types", plus(ALL_TYPES, invalid_utf8=1))
@checked(lambda o, s: _utf8_kept(o, 1, "Read a.ts"))
def _(s: Sources) -> bytes:
    return invalid_utf8(s.all_types, 1, b"Read a.ts")


@case("utf8-in-string/large-session", plus(LARGE, invalid_utf8=1))
@checked(lambda o, s: _utf8_kept(o, 1, "/mode"))
def _(s: Sources) -> bytes:
    return invalid_utf8(s.large, 1, b"/mode")


@case("utf8-in-structure/generated",
      {"invalid_utf8": 1, "missing_result": 1}, strict=True)
@checked(lambda o, s: _equal(
    [r["data"] for r in records_of(o, "invalid_utf8")],
    [split_lines(o.original)[last_single_call(s.gen)[1]]]))
def _(s: Sources) -> bytes:
    # bytes outside any string: the entry (a tool result on the active branch) cannot be read
    return invalid_utf8(s.gen, last_single_call(s.gen)[1], b'"parentId"', b"\xc3")


# -- lines that are not objects, or lack required fields


NOT_OBJECTS = (b"[1,2]", b"42", b'"text"', b"null", b"true")
NOT_JSON = (b"hello world", b"{", b"}{")


@case("not-objects/all-types", plus(ALL_TYPES, not_object=5, invalid_json=3))
@checked(lambda o, s: (
    _equal(sorted(r["data"] for r in o.records if r["reason"] in ("not_object", "invalid_json")),
           sorted(NOT_OBJECTS + NOT_JSON)),
    _equal(sorted(p.line for p in o.report.problems if p.kind in ("not_object", "invalid_json")),
           list(range(4, 12)))))
def _(s: Sources) -> bytes:
    return insert_lines(s.all_types, 3, *NOT_OBJECTS, *NOT_JSON)


@case("not-objects/large-session", plus(LARGE, not_object=5))
def _(s: Sources) -> bytes:
    return insert_lines(s.large, 50, *NOT_OBJECTS)


def _entry_without(**changes: Any) -> bytes:
    entry = {"type": "message", "id": "f0000001", "parentId": None,
             "timestamp": "2026-01-15T09:00:00.000Z",
             "message": {"role": "user", "content": "x", "timestamp": 1}}
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return orjson.dumps(entry)


MISSING_FIELDS = (
    _entry_without(type=None),
    _entry_without(id=None),
    _entry_without(parentId=None),
    _entry_without(id=""),
    _entry_without(parentId=7),
    _entry_without(message=None),
    _entry_without(message="not an object"),
    b'{"type":"model_change","id":"f0000002","parentId":null,"provider":"anthropic"}',
    b'{"type":"label","id":"f0000003","parentId":null}',
)


@case("missing-fields/generated", {"missing_field": len(MISSING_FIELDS)})
@checked(lambda o, s: (
    _equal(o.output, s.gen),
    _equal([r["data"] for r in records_of(o, "missing_field")], list(MISSING_FIELDS))))
def _(s: Sources) -> bytes:
    return insert_lines(s.gen, 30, *MISSING_FIELDS)


@case("missing-field/all-types",
      plus(ALL_TYPES, missing_field=1))
@checked(lambda o, s: _equal(by_id(o)["772d9d5e"]["parentId"], "3344ce43"))
def _(s: Sources) -> bytes:
    # the thinking level change loses its level: the assistant under it hangs one level up
    return edit_entry(s.all_types, 3, lambda e: e.pop("thinkingLevel"))


@case("missing-field/large-session", plus(LARGE, missing_field=1))
def _(s: Sources) -> bytes:
    return edit_entry(s.large, _large_user(s), lambda e: e.pop("message"))


@case("missing-field/large-session/assistant", plus(LARGE, missing_field=1, orphan_result=3))
def _(s: Sources) -> bytes:
    # an assistant message lost: the results of its three calls are left without a call
    return edit_entry(s.large, 5, lambda e: e.pop("message"))


# -- header missing, late, or twice


def _synthesized(outcome: Outcome, session_id: str | None, version: int | None) -> None:
    header = entry_of(out_lines(outcome)[0])
    assert header["type"] == "session"
    assert header.get("version") == version
    if session_id is not None:
        assert (header["id"], header["timestamp"]) == (session_id, PI_NAME_TIME)
    else:
        first = entry_of(split_lines(outcome.original)[0])
        assert header["timestamp"] == first["timestamp"]
        assert len(header["id"]) == 36 and header["id"][14] == "7"  # a UUID v7
    [problem] = only_kinds(outcome, "missing_header")
    assert (problem.line, problem.offset) == (1, 0)
    assert header["id"] in problem.detail
    assert out_lines(outcome)[1:] == split_lines(outcome.original)


@case("missing-header/generated/pi-name", {"missing_header": 1}, name=PI_NAME)
@checked(lambda o, s: _synthesized(o, PI_NAME_ID, 3))
def _(s: Sources) -> bytes:
    return delete_lines(s.gen, 0)


@case("missing-header/generated", {"missing_header": 1})
@checked(lambda o, s: _synthesized(o, None, 3))
def _(s: Sources) -> bytes:
    return delete_lines(s.gen, 0)


@case("missing-header/large-session/pi-name", plus(LARGE, missing_header=1), name=PI_NAME)
@checked(lambda o, s: _equal(entry_of(out_lines(o)[0]).get("version"), None))
def _(s: Sources) -> bytes:
    return delete_lines(s.large, 0)


@case("missing-header/all-types", plus(ALL_TYPES, missing_header=1), name=PI_NAME)
def _(s: Sources) -> bytes:
    return delete_lines(s.all_types, 0)


def _header_first(outcome: Outcome, source: bytes) -> None:
    assert outcome.output.startswith(split_lines(source)[0] + b"\n")
    [problem] = only_kinds(outcome, "header_not_first")
    assert problem.line == 3


@case("header-late/generated", {"header_not_first": 1})
@checked(lambda o, s: (_header_first(o, s.gen), _equal(o.output, s.gen)))
def _(s: Sources) -> bytes:
    return move_line(s.gen, 0, 2)


@case("header-late/all-types", plus(ALL_TYPES, header_not_first=1))
@checked(lambda o, s: _header_first(o, s.all_types))
def _(s: Sources) -> bytes:
    return move_line(s.all_types, 0, 2)


@case("header-late/large-session", plus(LARGE, header_not_first=1))
@checked(lambda o, s: _header_first(o, s.large))
def _(s: Sources) -> bytes:
    return move_line(s.large, 0, 2)


def _concatenated(outcome: Outcome, first: bytes, second: bytes) -> None:
    [record] = records_of(outcome, "extra_header")
    assert (record["offset"], record["data"]) == (len(first), split_lines(second)[0])
    # the second session's root now hangs under the first session's last entry
    root = entry_of(split_lines(second)[1])
    [problem] = only_kinds(outcome, "concatenated_root")
    assert problem.entry_id == root["id"]
    assert by_id(outcome)[root["id"]]["parentId"] == entry_of(split_lines(first)[-1])["id"]


@case("second-header/generated+generated", {"extra_header": 1, "concatenated_root": 1})
@checked(lambda o, s: _concatenated(o, s.gen, s.gen2))
def _(s: Sources) -> bytes:
    return s.gen + s.gen2


# the generated session has compactions: the all-types part is out of the context
@case("second-header/all-types+generated", {"extra_header": 1, "concatenated_root": 1})
@checked(lambda o, s: _concatenated(o, s.all_types, s.gen))
def _(s: Sources) -> bytes:
    return s.all_types + s.gen


@case("second-header/same-session-twice", {"extra_header": 1, "duplicate_id": 75})
def _(s: Sources) -> bytes:
    return s.gen + s.gen  # `cat a a`: every entry of the copy gets a new id


# one linear history; the copy's tool call ids are renamed, each with its result
@case("second-header/large-session+large-session",
      plus(LARGE, LARGE, extra_header=1, duplicate_call_id=373))
def _(s: Sources) -> bytes:
    return s.large + s.large


# -- duplicate ids


def _collision_fixed(outcome: Outcome, s: Sources) -> None:
    [problem] = only_kinds(outcome, "duplicate_id")
    new = problem.action.removeprefix("renamed to ")
    assert problem.line == 5 and problem.entry_id == "e02"
    entries = out_entries(outcome)
    assert [e["id"] for e in entries] == ["e01", "e02", "e03", new, "e05", "e06", "e07"]
    assert entries[2]["parentId"] == "e02"  # before the rename: still the first e02
    assert entries[4]["parentId"] == new  # after it: follows the rename
    assert entries[5]["targetId"] == new
    assert {r["offset"] for r in records_of(outcome, "duplicate_id")} == {
        line_offset(outcome.original, k) for k in (4, 5, 6)}


@case("duplicate-id/collision", {"duplicate_id": 1})
@checked(_collision_fixed)
def _(s: Sources) -> bytes:
    return reused_id().bytes()


def _copied_line(outcome: Outcome, s: Sources) -> None:
    [problem] = only_kinds(outcome, "duplicate_id")
    new = problem.action.removeprefix("renamed to ")
    copy = by_id(outcome)[new]
    original = entry_of(split_lines(s.gen)[30])
    assert {**copy, "id": original["id"]} == original
    after = entry_of(out_lines(outcome)[32])  # the next entry now hangs under the copy
    assert after["parentId"] == new


@case("duplicate-id/line-written-twice", {"duplicate_id": 1})
@checked(_copied_line)
def _(s: Sources) -> bytes:
    return insert_lines(s.gen, 31, split_lines(s.gen)[30])


# -- parents missing or after their child


def _reattached(outcome: Outcome, kind: str, line: int) -> None:
    [problem] = only_kinds(outcome, kind)
    assert problem.line == line + 1
    entry = by_id(outcome)[problem.entry_id]
    previous = entry_of(split_lines(outcome.original)[line - 1])
    assert entry["parentId"] == previous["id"]
    assert [r["offset"] for r in records_of(outcome, kind)] == [problem.offset]


@case("missing-parent/generated", {"missing_parent": 1})
@checked(lambda o, s: _reattached(o, "missing_parent", 30))
def _(s: Sources) -> bytes:
    return edit_entry(s.gen, 30, lambda e: e.update(parentId="deadbeef"))


@case("self-parent/generated", {"self_parent": 1})
@checked(lambda o, s: _reattached(o, "self_parent", 30))
def _(s: Sources) -> bytes:
    return edit_entry(s.gen, 30, lambda e: e.update(parentId=e["id"]))


def _parent_late() -> bytes:
    s = Session()
    s.turn("a")
    s.user("b")
    s.add("custom", customType="note", data={"n": 1})
    s.assistant(text("b answer"))
    return move_line(s.bytes(), 5, 7)  # the user message "b" now after its child


@case("parent-after-child/built", {"parent_after_child": 1})
@checked(lambda o, s: (_reattached(o, "parent_after_child", 5),
                       # the leaf is still the last line, e05; e06 and e07 are a side branch
                       _equal(path_ids(o), ["e01", "e02", "e03", "e04", "e05"]),
                       _equal(by_id(o)["e06"]["parentId"], "e04")))
def _(s: Sources) -> bytes:
    return _parent_late()


# -- pairing on the active branch (hand-built)


def _missing_result() -> bytes:
    s = Session()
    s.user("q")
    s.assistant(text("reading"), call("c1"))
    s.user("next")  # the process died before the result was written
    s.assistant(text("done"))
    return s.bytes()


def _synthetic_fixed(outcome: Outcome, s: Sources) -> None:
    [problem] = only_kinds(outcome, "missing_result")
    assert (problem.entry_id, problem.line) == ("e02", 3)
    entries = out_entries(outcome)
    synthetic = entries[2]  # right after the assistant, in the file and on the branch
    assert synthetic["parentId"] == "e02"
    message = synthetic["message"]
    assert (message["role"], message["toolCallId"], message["isError"]) == ("toolResult", "c1",
                                                                           True)
    assert message["content"] == [text(INTERRUPTED_TEXT)]
    assert entries[3]["id"] == "e03" and entries[3]["parentId"] == synthetic["id"]
    assert [r["offset"] for r in outcome.records] == [line_offset(outcome.original, 3)]


@case("missing-result/built", {"missing_result": 1}, strict=True)
@checked(_synthetic_fixed)
def _(s: Sources) -> bytes:
    return _missing_result()


def _moved_result() -> bytes:
    s = Session()
    s.user("q")
    s.assistant(text("reading"), call("c1"))
    s.user("typed while the tool ran")  # e03 under the assistant
    s.result("c1")  # e04 under the user message
    s.assistant(text("done"))  # e05
    return s.bytes()


def _moved_fixed(outcome: Outcome, s: Sources) -> None:
    [problem] = only_kinds(outcome, "moved_result")
    assert (problem.entry_id, problem.line) == ("e04", 5)
    assert path_ids(outcome) == ["e01", "e02", "e04", "e03", "e05"]
    assert [e["id"] for e in out_entries(outcome)] == ["e01", "e02", "e04", "e03", "e05"]


@case("moved-result/built", {"moved_result": 1})
@checked(_moved_fixed)
def _(s: Sources) -> bytes:
    return _moved_result()


def _orphan_result() -> bytes:
    s = Session()
    s.turn("a")
    s.user("b")  # e05
    s.result("no-such-call")  # e06
    s.assistant(text("b answer"))  # e07
    return s.bytes()


@case("orphan-result/built", {"orphan_result": 1})
@checked(lambda o, s: (
    _equal([(p.entry_id, p.line) for p in o.report.problems], [("e06", 7)]),
    _equal(path_ids(o), ["e01", "e02", "e03", "e04", "e05", "e07"]),
    # the orphan stays in the file, as it was, on a side branch
    _equal(out_lines(o)[6], split_lines(o.original)[6])))
def _(s: Sources) -> bytes:
    return _orphan_result()


@case("orphan-result/at-the-end", {"orphan_result": 1, "leaf_pinned": 1})
@checked(lambda o, s: (
    _equal(out_lines(o)[:-1], split_lines(o.original)),
    _equal(entry_of(out_lines(o)[-1])["customType"], "journal.repair"),
    _equal(entry_of(out_lines(o)[-1])["parentId"], "e04")))
def _(s: Sources) -> bytes:
    s_ = Session()
    s_.turn("a")
    s_.result("no-such-call")  # the last line: the leaf would be this orphan
    return s_.bytes()


def _duplicate_result() -> bytes:
    s = Session()
    s.user("q")
    s.assistant(text("reading"), call("c1"))
    s.result("c1", "first")  # e03
    s.result("c1", "again")  # e04
    s.assistant(text("done"))  # e05
    return s.bytes()


@case("duplicate-result/built", {"duplicate_result": 1})
@checked(lambda o, s: (
    _equal([(p.entry_id, p.line) for p in o.report.problems], [("e04", 5)]),
    _equal(path_ids(o), ["e01", "e02", "e03", "e05"])))
def _(s: Sources) -> bytes:
    return _duplicate_result()


def _failed_turn(stop: str, *blocks: dict[str, Any]) -> bytes:
    s = Session()
    s.user("q")
    s.assistant(*blocks, stop=stop)  # e02: the stream failed before the call ran
    s.user("try again")  # e03
    s.assistant(text("done"))
    return s.bytes()


@case("aborted-with-calls/built", {"unexecuted_call": 1}, strict=True)
@checked(lambda o, s: (
    _equal(by_id(o)["e02"]["message"]["content"], [text("partial")]),
    _equal([r["reason"] for r in o.records], ["pairing"])))
def _(s: Sources) -> bytes:
    return _failed_turn("aborted", text("partial"), call("c1"))


@case("error-only-calls/built", {"unexecuted_call": 2, "empty_message": 1}, strict=True)
@checked(lambda o, s: _equal(path_ids(o), ["e01", "e03", "e04"]))
def _(s: Sources) -> bytes:
    return _failed_turn("error", call("c1"), call("c2"))


def _duplicate_call_ids() -> bytes:
    s = Session()
    s.turn("a")  # calls call_a_0
    s.user("b")  # e05
    s.assistant(text("again"), call("call_a_0"))  # e06: a provider reused the id
    s.result("call_a_0")  # e07
    s.assistant(text("b answer"))
    return s.bytes()


@case("duplicate-call-id/built", {"duplicate_call_id": 1})
@checked(lambda o, s: (
    _equal(by_id(o)["e06"]["message"]["content"][1]["id"], "call_a_0_dup2"),
    _equal(by_id(o)["e07"]["message"]["toolCallId"], "call_a_0_dup2"),
    _equal(by_id(o)["e02"], entry_of(split_lines(o.original)[2]))))
def _(s: Sources) -> bytes:
    return _duplicate_call_ids()


def _empty_texts() -> bytes:
    s = Session()
    s.user("q")
    s.assistant(text(""), text("answer"))  # e02: one empty block
    s.message({"role": "user", "content": [text("   ")]})  # e03: nothing but a blank block
    s.user("more")
    s.assistant(text("done"))
    return s.bytes()


@case("empty-text-blocks/built", {"empty_text_block": 2, "empty_message": 1}, strict=True)
@checked(lambda o, s: (
    _equal(by_id(o)["e02"]["message"]["content"], [text("answer")]),
    _equal(path_ids(o), ["e01", "e02", "e04", "e05"])))
def _(s: Sources) -> bytes:
    return _empty_texts()


@case("signed-thinking-of-a-changed-turn/built",
      {"empty_text_block": 1, "thinking_dropped": 1}, strict=True)
@checked(lambda o, s: _equal(by_id(o)["e02"]["message"]["content"], [text("answer")]))
def _(s: Sources) -> bytes:
    s_ = Session()
    s_.user("q")
    s_.assistant({"type": "thinking", "thinking": "hm", "thinkingSignature": "sig"},
                 text(" "), text("answer"))
    s_.user("more")
    s_.assistant(text("done"))
    return s_.bytes()


# -- pairing on the active branch of a generated session


@case("missing-result/generated", {"missing_result": 1}, strict=True)
@checked(lambda o, s: _equal(
    [p.entry_id for p in o.report.notes],
    [entry_of(split_lines(s.gen)[last_single_call(s.gen)[0]])["id"]]))
def _(s: Sources) -> bytes:
    return drop_result(s.gen, last_single_call(s.gen)[1])


def _gen_moved(outcome: Outcome, s: Sources) -> None:
    a, r = last_single_call(s.gen)
    assistant, result = (entry_of(split_lines(s.gen)[k])["id"] for k in (a, r))
    [problem] = outcome.report.problems
    assert problem.entry_id == result
    ids = path_ids(outcome)
    k = ids.index(assistant)
    assert ids[k + 1 : k + 3] == [result, "u0000001"]


@case("moved-result/generated", {"moved_result": 1})
@checked(_gen_moved)
def _(s: Sources) -> bytes:
    return user_before_result(s.gen, last_single_call(s.gen)[1])


def _gen_orphan(outcome: Outcome, s: Sources) -> None:
    a, r = (entry_of(split_lines(s.gen)[k])["id"] for k in last_single_call(s.gen))
    assert [(p.kind, p.entry_id) for p in outcome.report.problems] == [("orphan_result", r)]
    assert [(n.kind, n.entry_id) for n in outcome.report.notes] == [("missing_result", a)]
    ids = path_ids(outcome)
    assert r not in ids  # off the branch, but still in the file as it was
    assert split_lines(outcome.original)[last_single_call(s.gen)[1]] in out_lines(outcome)
    # the call the orphan stood under stays without a result (a note, left as it was)
    after = by_id(outcome)[ids[ids.index(a) + 1]]
    assert after["parentId"] == a and after["message"]["role"] != "toolResult"
    assert outcome.report.notes_left


@case("orphan-result/generated", {"orphan_result": 1})
@checked(_gen_orphan)
def _(s: Sources) -> bytes:
    a, r = last_single_call(s.gen)
    return edit_entry(s.gen, r, lambda e: e["message"].update(toolCallId="toolu_gone"))


@case("duplicate-result/generated", {"duplicate_result": 1})
@checked(lambda o, s: (
    _equal([p.entry_id for p in o.report.problems], ["d0000001"]),
    _equal("d0000001" in path_ids(o), False),
    _equal(entry_of(split_lines(s.gen)[last_single_call(s.gen)[1]])["id"] in path_ids(o),
           True)))
def _(s: Sources) -> bytes:
    a, r = last_single_call(s.gen)
    lines = split_lines(s.gen)
    copy = entry_of(lines[r])
    copy["id"], copy["parentId"] = "d0000001", copy["id"]
    data = insert_lines(s.gen, r + 1, orjson.dumps(copy))
    child = active_path(s.gen)[active_path(s.gen).index(r) + 1]
    return edit_entry(data, child + 1, lambda e: e.update(parentId="d0000001"))


# -- combinations


@case("combined/generated", {
    "torn_tail": 1, "moved_result": 1, "invalid_utf8": 1, "not_object": 1,
    "duplicate_id": 1, "nul_run": 2, "glued_record": 1, "missing_parent": 1,
})
@checked(lambda o, s: _equal(journal.load(o.report.path).entries[-1]["id"],
                             entry_of(split_lines(s.gen)[-1])["id"]))
def _(s: Sources) -> bytes:
    """Damage of every kind in one generated file, applied from the end backwards so that
    each line number refers to the undamaged file."""
    lines = split_lines(s.gen)
    path = active_path(s.gen)
    a, r = last_single_call(s.gen)
    a2, r2 = last_single_call(join_lines(lines[: path[path.index(a) - 2] + 1]))
    user = find_line(lines, is_role("user"), 5)
    assert 4 < user < r2 < r
    data = s.gen + b'{"type":"message","id":"zz'  # torn tail
    data = user_before_result(data, r)  # a user message before the last single result
    data = drop_result(data, r2)  # an earlier result never written
    data = invalid_utf8_in_text(data, user)  # a user's text with bad bytes
    data = insert_lines(data, user, b"[]")
    data = insert_lines(data, 4, split_lines(data)[3])  # line 3 written twice
    data = nul_prefix(data, 3)
    data = nul_line(data, 3)
    return glue_torn(data, 1, 20)  # the first entry torn, the next one glued on


@case("combined/built-no-header", {"missing_header": 1, "duplicate_id": 1, "nul_run": 1},
      name=PI_NAME)
@checked(lambda o, s: (
    _equal([(p.kind, p.line) for p in o.report.problems],
           [("nul_run", 2), ("missing_header", 1), ("duplicate_id", 4)]),
    _equal([(n.kind, n.line) for n in o.report.notes], [("missing_result", 3)]),
    _equal(entry_of(out_lines(o)[0])["id"], PI_NAME_ID)))
def _(s: Sources) -> bytes:
    data = _missing_result()
    data = insert_lines(data, 3, split_lines(data)[1])
    data = nul_line(data, 2, 100)
    return delete_lines(data, 0)


@case("combined/large-session", plus(LARGE, torn_tail=1, nul_run=1, not_object=1,
                                     invalid_utf8=1, header_not_first=1))
def _(s: Sources) -> bytes:
    data = torn_tail(s.large, 10)
    data = nul_line(data, 200)
    data = insert_lines(data, 300, b"0")
    data = invalid_utf8_in_text(data, 400, b"\xc3")
    return move_line(data, 0, 1)


# -- version 1 (large-session) migrated on the way


@case("migrate/large-session", plus(LARGE, migrated=1), migrate=True)
@checked(lambda o, s: _migrated(o))
def _(s: Sources) -> bytes:
    return s.large


@case("migrate/large-session-damaged", plus(LARGE, migrated=1, torn_tail=1, nul_run=1),
      migrate=True)
@checked(lambda o, s: _migrated(o))
def _(s: Sources) -> bytes:
    return nul_line(torn_tail(s.large, 10), 3)


def _migrated(outcome: Outcome) -> None:
    header, *entries = (entry_of(line) for line in out_lines(outcome))
    assert header["version"] == 3 and header["id"] == entry_of(outcome.original.split(b"\n")[0])[
        "id"]
    parent = None
    for entry in entries:
        assert entry["parentId"] == parent
        parent = entry["id"]


@case("pristine/before-compaction", BEFORE)
def _(s: Sources) -> bytes:
    return s.before


def _params() -> list[Any]:
    out = []
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=c.bug)] if c.bug else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


@pytest.mark.parametrize("c", _params())
def test_corpus(c: Case, src: Sources, tmp_path: Path) -> None:
    path = tmp_path / c.name
    path.write_bytes(c.build(src))
    outcome = check_repair(path, migrate=c.migrate, strict=c.strict)
    assert outcome.counts == c.counts, [(p.kind, p.line, p.entry_id) for p in
                                        outcome.report.problems]
    if c.check is not None:
        c.check(outcome, src)


def test_corpus_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------
# (4) pi agrees


def test_corpus_agrees_with_pi(src: Sources, tmp_path: Path) -> None:
    parity = parity_module()
    node, pi_dir = parity.find_node(), parity.find_pi_dir()
    missing = parity.pi_missing(node, pi_dir)
    if missing:
        pytest.skip(f"needs node and pi: {missing}")
    paths = []
    for n, c in enumerate(x for x in CASES if x.bug is None):
        directory = tmp_path / f"{n:02d}"
        directory.mkdir()
        path = directory / c.name
        path.write_bytes(c.build(src))
        journal.repair(path, migrate=c.migrate)
        paths.append(path)
    results = parity.check_files(paths, node, pi_dir)
    failed = [(c.id, r) for c, r in zip([x for x in CASES if x.bug is None], results,
                                        strict=True) if not r.equal]
    assert not failed, "\n".join(f"{cid}: {r.error or r.problems}" for cid, r in failed)


# ---------------------------------------------------------------------------------------
# the undamaged, versions, backups


def test_clean_file_is_left_alone(src: Sources, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(src.gen)
    report = journal.repair(path)
    assert not report.changed and report.problems == [] and report.counts == {}
    assert report.backup is None and report.quarantine is None
    assert path.read_bytes() == src.gen
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        "s.jsonl"]


def test_version_1_stays_version_1_without_migrate(src: Sources, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(nul_line(torn_tail(src.large, 10), 3))
    report = journal.repair(path)
    assert report.changed and report.version == 1
    header, *entries = (entry_of(line) for line in split_lines(path.read_bytes()))
    assert "version" not in header
    assert all("id" not in e and "parentId" not in e for e in entries)
    assert journal.load(path).version == 1


def test_migrated_context_equals_unmigrated(src: Sources, tmp_path: Path) -> None:
    kept, migrated = tmp_path / "kept.jsonl", tmp_path / "migrated.jsonl"
    kept.write_bytes(src.large)
    migrated.write_bytes(src.large)
    journal.repair(kept)
    journal.repair(migrated, migrate=True)
    assert context_of(kept)[2] == context_of(migrated)[2]
    assert journal.load(migrated).version == 3


def test_only_one_backup_is_kept(src: Sources, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    first = nul_line(src.gen, 3)
    path.write_bytes(first)
    journal.repair(path)
    second = nul_line(path.read_bytes(), 7)
    path.write_bytes(second)
    report = journal.repair(path)
    assert Path(report.backup or "").read_bytes() == second
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert names == ["s.jsonl", "s.jsonl.bak", "s.jsonl.quarantine"]
    # both repairs' bytes are in the one quarantine file
    assert [r["offset"] for r in read_records(path)] == [line_offset(first, 3),
                                                         line_offset(second, 7)]


def test_dry_run_writes_nothing(src: Sources, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    damaged = nul_line(torn_tail(src.gen, 5), 3)
    path.write_bytes(damaged)
    report = journal.repair(path, dry_run=True)
    assert report.changed and report.dry_run and report.counts == {"torn_tail": 1, "nul_run": 1}
    assert report.backup is None and report.quarantine is None
    assert path.read_bytes() == damaged
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_not_a_session(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\x00\x00\x00\nhello\n")
    with pytest.raises(journal.NotASession):
        journal.repair(path)
    assert path.read_bytes() == b"\x00\x00\x00\nhello\n"


# ---------------------------------------------------------------------------------------
# the command


def _damaged_dir(src: Sources, root: Path) -> dict[str, bytes]:
    files = {
        "a.jsonl": nul_line(src.gen, 3),
        "sub/b.jsonl": torn_tail(_missing_result(), 9),
        "sub/deeper/c.jsonl": _moved_result(),
        "clean.jsonl": src.gen2,
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "notes.txt").write_text("not a session")
    return files


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_cli_dry_run_writes_nothing(src: Sources, tmp_path: Path, capsys: Any) -> None:
    _damaged_dir(src, tmp_path)
    before = _tree(tmp_path)
    assert cli_main(["repair", "--dry-run", str(tmp_path)]) == 0
    assert _tree(tmp_path) == before
    assert "would fix" in capsys.readouterr().out


def test_cli_check(src: Sources, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(nul_line(src.gen, 3))
    assert cli_main(["repair", "--check", str(path)]) == 1
    assert path.read_bytes() == nul_line(src.gen, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]
    assert "needs repair (nul_run 1)" in capsys.readouterr().out
    assert cli_main(["repair", str(path)]) == 0
    capsys.readouterr()
    assert cli_main(["repair", "--check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "clean"


def test_cli_check_directory(src: Sources, tmp_path: Path, capsys: Any) -> None:
    _damaged_dir(src, tmp_path)
    before = _tree(tmp_path)
    assert cli_main(["repair", "--check", "--json", str(tmp_path)]) == 1
    assert _tree(tmp_path) == before
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {Path(r["path"]).name: r["changed"] for r in reports} == {
        "a.jsonl": True, "b.jsonl": True, "c.jsonl": True, "clean.jsonl": False}


def test_cli_missing_file_exits_2(tmp_path: Path, capsys: Any) -> None:
    missing = str(tmp_path / "nope.jsonl")
    assert cli_main(["repair", "--check", missing]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli_main(["repair", "--dry-run", missing]) == 2
    assert list(tmp_path.iterdir()) == []
    assert cli_main(["repair", missing]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not os.path.exists(missing)


def test_repair_of_a_missing_file_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(journal.NotASession):
        journal.repair(tmp_path / "nope.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_cli_held_lock_exits_2(src: Sources, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_missing_result())
    with journal.Session.open(path):
        assert cli_main(["repair", "--lock-timeout", "0.2", str(path)]) == 2
        assert "locked by" in capsys.readouterr().err
        assert path.read_bytes() == _missing_result()
    assert cli_main(["repair", "--lock-timeout", "0.2", str(path)]) == 0


def test_cli_json_report(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(nul_line(_missing_result(), 2, 10))
    assert cli_main(["repair", "--json", "--strict", str(path)]) == 0
    [report] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert report["path"] == str(path)
    assert report["changed"] is True and report["strict"] is True
    assert report["counts"] == {"nul_run": 1}
    assert report["noteCounts"] == {"missing_result": 1}
    assert report["backup"] == str(path) + ".bak"
    assert report["quarantine"] == str(path) + ".quarantine"
    [nul], [missing] = report["problems"], report["notes"]
    assert nul == {"kind": "nul_run", "action": "quarantined", "line": 3,
                   "offset": line_offset(nul_line(_missing_result(), 2, 10), 2),
                   "entryId": None, "detail": "10 NUL bytes"}
    assert (missing["kind"], missing["line"], missing["entryId"]) == ("missing_result", 4, "e02")
    assert set(missing) == {"kind", "action", "line", "offset", "entryId", "detail"}


def test_cli_directory(src: Sources, tmp_path: Path, capsys: Any) -> None:
    files = _damaged_dir(src, tmp_path)
    assert cli_main(["repair", "--json", str(tmp_path)]) == 0
    reports = {Path(r["path"]).relative_to(tmp_path).as_posix(): r for r in
               (json.loads(line) for line in capsys.readouterr().out.splitlines())}
    assert sorted(reports) == sorted(files)
    assert {name: r["counts"] for name, r in reports.items()} == {
        "a.jsonl": {"nul_run": 1},
        "sub/b.jsonl": {"torn_tail": 1},
        "sub/deeper/c.jsonl": {"moved_result": 1},
        "clean.jsonl": {},
    }
    assert (tmp_path / "clean.jsonl").read_bytes() == src.gen2
    assert not (tmp_path / "clean.jsonl.bak").exists()
    for name in files:
        assert_valid_file(tmp_path / name)
    # a second run finds nothing, and does not take the side files for sessions
    assert cli_main(["repair", "--check", str(tmp_path)]) == 0


def assert_valid_file(path: Path) -> None:
    snap, tree, messages = context_of(path)
    assert snap.diagnostics == [] and tree.issues == []
    assert classify(messages, sanitize(messages)[1])[1] == []


def test_cli_migrate(src: Sources, tmp_path: Path, capsys: Any) -> None:
    kept, migrated = tmp_path / "kept.jsonl", tmp_path / "migrated.jsonl"
    kept.write_bytes(src.large)
    migrated.write_bytes(src.large)
    assert cli_main(["repair", "--json", str(kept)]) == 0
    assert cli_main(["repair", "--json", "--migrate", str(migrated)]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["version"], second["version"]) == (1, 1)
    assert second["counts"] == plus(LARGE, migrated=1)
    assert "version" not in entry_of(split_lines(kept.read_bytes())[0])
    assert entry_of(split_lines(migrated.read_bytes())[0])["version"] == 3
    assert all("id" in entry_of(line) for line in split_lines(migrated.read_bytes()))
    assert (tmp_path / "migrated.jsonl.bak").read_bytes() == src.large


def test_journal_repair_entry_point(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_moved_result())
    assert repair_main(["--check", str(path)]) == 1
    assert repair_main([str(path)]) == 0
    assert "fixed 1 problem(s): moved_result 1" in capsys.readouterr().out
    assert repair_main(["--check", str(path)]) == 0
    assert repair_main([str(tmp_path / "nope.jsonl")]) == 2


def test_cli_text_report(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(_missing_result())
    assert cli_main(["repair", "--strict", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: fixed 1 problem(s): missing_result 1" in out
    assert f"backup: {path}.bak" in out and f"quarantine: {path}.quarantine" in out


# ---------------------------------------------------------------------------------------
# known bugs (xfail, strict: each turns red once fixed, so the mark can go)


V1_WITH_COMPACTION = b"".join(orjson.dumps(e) + b"\n" for e in [
    {"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"},
    {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z",
     "message": {"role": "user", "content": "one", "timestamp": 1}},
    {"type": "message", "timestamp": "2025-01-01T00:00:02.000Z",
     "message": {"role": "assistant", "content": [text("a")], "stopReason": "stop",
                 "timestamp": 2}},
    {"type": "message", "timestamp": "2025-01-01T00:00:03.000Z",
     "message": {"role": "user", "content": "two", "timestamp": 3}},
    {"type": "compaction", "timestamp": "2025-01-01T00:00:04.000Z", "summary": "s",
     "firstKeptEntryIndex": 3, "tokensBefore": 10},
    {"type": "message", "timestamp": "2025-01-01T00:00:05.000Z",
     "message": {"role": "assistant", "content": [call("t1")], "stopReason": "toolUse",
                 "timestamp": 5}},
    {"type": "message", "timestamp": "2025-01-01T00:00:06.000Z",
     "message": {"role": "user", "content": "three", "timestamp": 6}},
])


def test_v1_compaction_with_pairing_fix_keeps_every_line(tmp_path: Path) -> None:
    """Was a bug (fixed in 4680338): the lines before the kept boundary were dropped."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(V1_WITH_COMPACTION)
    outcome = check_repair(path, strict=True)
    assert outcome.counts == {"missing_result": 1}
    lines = out_lines(outcome)
    assert lines[:5] == split_lines(V1_WITH_COMPACTION)[:5]
    messages = context_of(path)[2]
    assert [m.get("content") for m in messages[1:2]] == ["two"]


@pytest.mark.parametrize("build", [_missing_result, _moved_result, _duplicate_call_ids,
                                   lambda: reused_id().bytes()],
                         ids=["missing-result", "moved-result", "duplicate-call-id",
                              "duplicate-id"])
def test_report_lists_every_rewritten_line(build: Callable[[], bytes], tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(build())
    before = len(read_records(path))
    report = journal.repair(path)
    assert_listed(report, read_records(path)[before:], strict=True)


def test_two_complete_records_on_one_line_are_both_kept(tmp_path: Path) -> None:
    s = Session()
    s.turn("a")
    lines = s.lines()
    path = tmp_path / "s.jsonl"
    path.write_bytes(join_lines(lines[:3] + [lines[3] + lines[4]] + lines[5:]))
    report = journal.repair(path)
    assert path.read_bytes() == s.bytes()
    assert report.counts == {"glued_record": 1}


def test_invalid_utf8_line_is_quarantined_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(invalid_utf8(_missing_result(), 1, b'q"}]', b'\xff'))
    journal.repair(path)
    assert [r["reason"] for r in read_records(path)].count("invalid_utf8") == 1


def test_load_reports_a_null_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(insert_lines(_moved_result(), 2, b"null"))
    assert [d.reason for d in journal.load(path).diagnostics] == ["not_object"]


def test_repair_finds_a_null_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(insert_lines(_missing_result(), 2, b"null"))
    outcome = check_repair(path)
    assert outcome.counts == {"not_object": 1}
    assert outcome.report.note_counts == {"missing_result": 1}


def test_pairing_region_behind_compaction(tmp_path: Path) -> None:
    """A compaction's kept range that starts at a dropped result moves to the next entry."""
    s = Session()
    s.turn("a")
    s.user("b")
    s.assistant(text("b"), call("cb"))
    first_kept = s.result("cb")  # e07: its call is left out of the kept range
    s.assistant(text("b done"))
    s.add("compaction", summary="S", firstKeptEntryId=first_kept, tokensBefore=5)
    s.turn("c")
    path = tmp_path / "s.jsonl"
    path.write_bytes(s.bytes())
    outcome = check_repair(path)
    assert outcome.counts == {"orphan_result": 1, "compaction_boundary": 1}
    compaction = by_id(outcome)["e09"]
    assert compaction["firstKeptEntryId"] == "e08"
    assert os.path.exists(str(path) + ".bak")


def test_v1_compaction_with_invalid_utf8_is_repaired(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        b'{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}\n'
        b'{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user",'
        b'"content":"one","timestamp":1}}\n'
        b'{"type":"compaction","timestamp":"2025-01-01T00:00:02.000Z","summary":"caf\xe9",'
        b'"firstKeptEntryIndex":1,"tokensBefore":10}\n'
        b'{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user",'
        b'"content":"two","timestamp":3}}\n')
    assert cli_main(["repair", "--check", str(path)]) == 1
    assert check_repair(path).counts == {"invalid_utf8": 1}


def test_header_that_lost_its_version_stays_version_3(tmp_path: Path) -> None:
    s = Session()
    s.turn("a")
    fork = s.leaf
    s.turn("b")
    s.leaf = fork
    s.turn("c")  # the active branch: a, c
    path = tmp_path / "s.jsonl"
    path.write_bytes(invalid_utf8(s.bytes(), 0, b'rsion"', b"\xff"))
    check_repair(path)
    assert journal.load(path).version == 3
    users = [m["content"][0]["text"] for m in context_of(path)[2] if m["role"] == "user"]
    assert users == ["a: question", "c: question"]


def test_moved_result_leaves_later_side_branches_in_place(tmp_path: Path) -> None:
    s = Session()
    s.user("q")
    s.assistant(text("x"), call("c1"))
    s.user("typed while the tool ran")  # e03
    s.result("c1")  # e04, under e03
    end = s.assistant(text("done"))  # e05
    s.user("side")  # e06: a side branch from e05, written before the branch that is active
    s.assistant(text("side answer"))
    s.leaf = end
    s.user("main")  # e08
    s.assistant(text("main answer"))  # e09, the leaf
    path = tmp_path / "s.jsonl"
    path.write_bytes(s.bytes())
    outcome = check_repair(path)
    assert outcome.counts == {"moved_result": 1}
    assert [e["id"] for e in out_entries(outcome)] == [
        "e01", "e02", "e04", "e03", "e05", "e06", "e07", "e08", "e09"]


def _lone(entry_line: bytes, header: bool = True) -> bytes:
    s = Session()
    return (s.lines()[0] + b"\n" if header else b"") + entry_line + b"\n"


NOTHING_VALID_LEFT = {
    # header + one orphan tool result: reported, but the file is left as it was
    "orphan-result": _lone(b'{"type":"message","id":"e01","parentId":null,"timestamp":'
                           b'"2026-01-15T09:00:01.000Z","message":{"role":"toolResult",'
                           b'"toolCallId":"nope","toolName":"read","content":[{"type":"text",'
                           b'"text":"ok"}],"isError":false,"timestamp":1}}'),
    # header + one user message with only a blank text block: the same
    "blank-user-message": _lone(b'{"type":"message","id":"e01","parentId":null,"timestamp":'
                                b'"2026-01-15T09:00:01.000Z","message":{"role":"user",'
                                b'"content":[{"type":"text","text":"  "}],"timestamp":1}}'),
    # no header, the orphan's parent lost: repair raises "repair left invalid tool pairing"
    "orphan-result-no-header": _lone(b'{"type":"message","id":"e05","parentId":"e04",'
                                     b'"timestamp":"2026-01-15T09:00:01.000Z","message":{"role":'
                                     b'"toolResult","toolCallId":"nope","toolName":"read",'
                                     b'"content":[],"isError":false,"timestamp":1}}',
                                     header=False),
}


@pytest.mark.parametrize("name", sorted(NOTHING_VALID_LEFT))
def test_branch_with_nothing_valid_left(name: str, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(NOTHING_VALID_LEFT[name])
    check_repair(path, strict=True)
    assert context_of(path)[2] == []


def _v1_message(role: str, text_: str, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": [text(text_)], "timestamp": n}
    if role == "assistant":
        message["stopReason"] = "stop"
    return {"type": "message", "timestamp": f"2025-01-01T00:00:0{n}.000Z", "message": message}


V1_SECOND_HEADER = b"".join(orjson.dumps(e) + b"\n" for e in [
    {"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"},
    _v1_message("user", "u1", 1),
    _v1_message("assistant", "a1", 2),
    {"type": "session", "id": "s2", "timestamp": "2025-01-01T00:00:03.000Z", "cwd": "/"},
    _v1_message("user", "u2", 4),
    _v1_message("assistant", "a2", 5),
    # index 3 names the second header: it resolves to nothing, for pi as for us, so the
    # context is the summary, u3 and a3
    {"type": "compaction", "timestamp": "2025-01-01T00:00:06.000Z", "summary": "S",
     "firstKeptEntryIndex": 3, "tokensBefore": 1},
    _v1_message("user", "u3", 7),
    _v1_message("assistant", "a3", 8),
])


# the user message that index 1 names has lost its "message" key (a damaged byte): repair
# drops it, and index 1 then names the tool result, whose call is gone with it
V1_DROPPED_LINE = b"".join(orjson.dumps(e) + b"\n" for e in [
    {"type": "session", "id": "s1", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/"},
    {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "mess\ufffdage": {}},
    _v1_message("assistant", "a1", 2),
    {"type": "compaction", "timestamp": "2025-01-01T00:00:03.000Z", "summary": "S",
     "firstKeptEntryIndex": 1, "tokensBefore": 1},
    _v1_message("user", "u2", 4),
])


@pytest.mark.parametrize("data", [V1_SECOND_HEADER, V1_DROPPED_LINE],
                         ids=["second-header", "unusable-line"])
def test_v1_compaction_index_naming_a_dropped_line(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    before = [m for m in context_of(path)[2] if m["role"] != "compactionSummary"]
    repaired = check_repair(path)
    assert set(repaired.counts) <= {"extra_header", "missing_field", "renumbered"}
    assert repaired.counts.get("renumbered") == 1
    after = [m for m in context_of(path)[2] if m["role"] != "compactionSummary"]
    assert after == before
