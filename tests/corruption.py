"""Damaged session files for the repair tests, and the checks every repair must pass.

Three parts:

* sources: the real pi fixtures (outside the repository: a test that reads one skips when it is
  absent, see ``third_party.py``), sessions from ``bench/gen_session.py``, and a small builder
  (`Session`) for hand-made version 3 sessions whose tool calls and results are easy to break;
* damage: functions that take the bytes of a session and return damaged bytes (each one kind
  of damage, so that a test knows exactly what repair has to find);
* checks: `check_repair` runs `journal.repair` and asserts the guarantees (idempotent, valid,
  nothing lost); `to_api` turns a pi-shaped context into an Anthropic request's messages.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from third_party import pi_bytes

import journal
from journal.context import to_model_messages
from journal.pairing import classify, sanitize
from journal.repair import RepairReport
from journal.validate import api_pairing_problems, pairing_problems

ROOT = Path(__file__).resolve().parents[1]

V1_FIXTURES = ("large-session.jsonl", "before-compaction.jsonl")
V3_FIXTURE = "all-types.jsonl"
# a name pi would give a session file: the synthesized header takes its id and time from it
PI_NAME = "2026-01-15T09-00-00-000Z_0190a3c4-1111-7222-8333-444455556666.jsonl"
PI_NAME_ID = "0190a3c4-1111-7222-8333-444455556666"
PI_NAME_TIME = "2026-01-15T09:00:00.000Z"


# ---------------------------------------------------------------------------------------
# sources


def fixture_bytes(name: str) -> bytes:
    """One of the real pi session files; the calling test skips when it is not available."""
    return pi_bytes(name)


def _bench_module(name: str, file: str) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def gen_session_module() -> Any:
    return _bench_module("bench_gen_session", "gen_session.py")


def parity_module() -> Any:
    return _bench_module("bench_parity", "parity.py")


_GENERATED: dict[tuple[int, int, bool], bytes] = {}


def generated_bytes(directory: Path, seed: int, size: int, *, compactions: bool = True) -> bytes:
    """A generated v3 session (branches, compactions, every entry kind); cached per process."""
    key = (seed, size, compactions)
    if key not in _GENERATED:
        path = directory / f"gen-{seed}-{size}.jsonl"
        gen_session_module().generate(
            path, target_bytes=size, seed=seed, branch_every=3,
            compaction_every_bytes=size // 3 if compactions else None,
        )
        _GENERATED[key] = path.read_bytes()
        path.unlink()
    return _GENERATED[key]


def _ts(n: int) -> str:
    return f"2026-01-15T09:{n // 60 % 60:02d}:{n % 60:02d}.000Z"


class Session:
    """Hand-made v3 session: ids e01, e02, ...; each method appends one entry to the leaf."""

    def __init__(self, session_id: str = "0190a3c4-aaaa-7bbb-8ccc-ddddeeeeffff") -> None:
        self.header: dict[str, Any] = {"type": "session", "version": 3, "id": session_id,
                                       "timestamp": _ts(0), "cwd": "/home/u/proj"}
        self.entries: list[dict[str, Any]] = []
        self.leaf: str | None = None

    def add(self, kind: str, parent: Any = ..., **fields: Any) -> str:
        entry_id = f"e{len(self.entries) + 1:02d}"
        entry = {"type": kind, "id": entry_id,
                 "parentId": self.leaf if parent is ... else parent,
                 "timestamp": _ts(len(self.entries) + 1), **fields}
        self.entries.append(entry)
        self.leaf = entry_id
        return entry_id

    def message(self, message: dict[str, Any], parent: Any = ...) -> str:
        message.setdefault("timestamp", 1768467600000 + len(self.entries) * 1000)
        return self.add("message", parent, message=message)

    def user(self, text: str = "hello", parent: Any = ...) -> str:
        return self.message({"role": "user", "content": [{"type": "text", "text": text}]},
                            parent)

    def assistant(self, *blocks: dict[str, Any], stop: str | None = None,
                  parent: Any = ...) -> str:
        content = list(blocks) or [text("done")]
        has_calls = any(b.get("type") == "toolCall" for b in content)
        return self.message({
            "role": "assistant", "content": content, "api": "anthropic-messages",
            "provider": "anthropic", "model": "claude-sonnet-4-5",
            "stopReason": stop or ("toolUse" if has_calls else "stop"),
        }, parent)

    def result(self, call_id: str, output: str = "ok", parent: Any = ...) -> str:
        return self.message({"role": "toolResult", "toolCallId": call_id, "toolName": "read",
                             "content": [text(output)], "isError": False}, parent)

    def turn(self, tag: str, calls: int = 1) -> str:
        """A user question, an assistant calling `calls` tools, the results, a final answer."""
        self.user(f"{tag}: question")
        ids = [f"call_{tag}_{k}" for k in range(calls)]
        if ids:
            self.assistant(text(f"{tag}: looking"), *(call(i) for i in ids))
            for i in ids:
                self.result(i, f"{tag}: output of {i}")
        return self.assistant(text(f"{tag}: answer"))

    def lines(self) -> list[bytes]:
        return [orjson.dumps(self.header)] + [orjson.dumps(e) for e in self.entries]

    def bytes(self) -> bytes:
        return join_lines(self.lines())


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def reused_id() -> Session:
    """e04 reuses the id "e02" (line 5); e05 (after it) points at "e02", meaning e04, as does
    a label after it."""
    s = Session()
    s.user("one")
    s.assistant(text("first e02"))
    s.user("two")
    s.assistant(text("second, reusing e02"))
    s.entries[-1]["id"] = "e02"
    s.leaf = "e02"
    s.user("three")
    s.add("label", targetId="e02", label="the second")
    s.assistant(text("end"))
    return s


def call(call_id: str, name: str = "read") -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": {"path": "a.ts"}}


# ---------------------------------------------------------------------------------------
# damage


def split_lines(data: bytes) -> list[bytes]:
    """The complete lines of a file (without their newline); a torn tail is not included."""
    return data.split(b"\n")[:-1]


def join_lines(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def line_offset(data: bytes, index: int) -> int:
    """The byte offset of line `index` (0-based) of `data`."""
    offset = 0
    for _ in range(index):
        offset = data.index(b"\n", offset) + 1
    return offset


def entry_of(line: bytes) -> dict[str, Any]:
    return orjson.loads(line)


def find_line(lines: list[bytes], predicate: Callable[[dict[str, Any]], bool],
              start: int = 1) -> int:
    """The index of the first line from `start` whose entry satisfies `predicate`."""
    for i in range(start, len(lines)):
        try:
            value = orjson.loads(lines[i])
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and predicate(value):
            return i
    raise LookupError("no such line")


def is_role(role: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("type") == "message" and e["message"].get("role") == role


def active_path(data: bytes) -> list[int]:
    """The line indices of a well-formed v3 file's active branch, root first."""
    lines = split_lines(data)
    at = {orjson.loads(line)["id"]: i for i, line in enumerate(lines[1:], start=1)}
    out, index = [], len(lines) - 1
    while index is not None:
        out.append(index)
        index = at.get(orjson.loads(lines[index])["parentId"])
    out.reverse()
    return out


def split_tail(data: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines, and the torn tail after the last newline (b"" if none)."""
    *lines, tail = data.split(b"\n")
    return lines, tail


def torn_tail(data: bytes, keep: int) -> bytes:
    """The file cut inside its last line: `keep` bytes of that line remain, no newline."""
    lines = split_lines(data)
    return join_lines(lines[:-1]) + lines[-1][:keep]


def _edit_lines(data: bytes, change: Callable[[list[bytes]], None]) -> bytes:
    """`data` with its complete lines changed in place by `change`; a torn tail stays last."""
    lines, tail = split_tail(data)
    change(lines)
    return join_lines(lines) + tail


def nul_line(data: bytes, at: int, count: int = 4096) -> bytes:
    """A run of NULs alone on a line, inserted before line `at` (as a lost page leaves)."""
    return _edit_lines(data, lambda lines: lines.insert(at, b"\x00" * count))


def nul_prefix(data: bytes, at: int, count: int = 512) -> bytes:
    """A run of NULs in front of the record on line `at`, on the same line."""

    def change(lines: list[bytes]) -> None:
        lines[at] = b"\x00" * count + lines[at]

    return _edit_lines(data, change)


def glue_torn(data: bytes, at: int, keep: int) -> bytes:
    """Line `at` torn after `keep` bytes, with line `at + 1` written right after it."""

    def change(lines: list[bytes]) -> None:
        lines[at : at + 2] = [lines[at][:keep] + lines[at + 1]]

    return _edit_lines(data, change)


def invalid_utf8(data: bytes, at: int, needle: bytes, bad: bytes = b"\xff\xfe") -> bytes:
    """Invalid UTF-8 bytes written into line `at`, just before `needle`."""

    def change(lines: list[bytes]) -> None:
        k = lines[at].index(needle)
        lines[at] = lines[at][:k] + bad + lines[at][k:]

    return _edit_lines(data, change)


def invalid_utf8_in_text(data: bytes, at: int, bad: bytes = b"\xff\xfe") -> bytes:
    """Invalid UTF-8 bytes at the start of the first text string of line `at`."""
    needle = b'"text":"'
    lines, _ = split_tail(data)
    k = lines[at].index(needle) + len(needle)
    return invalid_utf8(data, at, lines[at][k:], bad)


def replace_line(data: bytes, at: int, new: bytes) -> bytes:
    def change(lines: list[bytes]) -> None:
        lines[at] = new

    return _edit_lines(data, change)


def insert_lines(data: bytes, at: int, *new: bytes) -> bytes:
    def change(lines: list[bytes]) -> None:
        lines[at:at] = new

    return _edit_lines(data, change)


def delete_lines(data: bytes, *indices: int) -> bytes:
    def change(lines: list[bytes]) -> None:
        for i in sorted(indices, reverse=True):
            del lines[i]

    return _edit_lines(data, change)


def move_line(data: bytes, source: int, target: int) -> bytes:
    """Line `source` taken out and put back so that it becomes line `target`."""
    return _edit_lines(data, lambda lines: lines.insert(target, lines.pop(source)))


def edit_entry(data: bytes, at: int, change: Callable[[dict[str, Any]], Any]) -> bytes:
    """Line `at` parsed, changed in place by `change`, and written back."""

    def edit(lines: list[bytes]) -> None:
        entry = orjson.loads(lines[at])
        change(entry)
        lines[at] = orjson.dumps(entry)

    return _edit_lines(data, edit)


def last_single_call(data: bytes) -> tuple[int, int]:
    """(assistant line, result line): the last assistant on the active branch that made exactly
    one tool call, its result right after it on the branch and something after that."""
    lines = split_lines(data)
    path = active_path(data)
    for k in range(len(path) - 3, 0, -1):
        entry = orjson.loads(lines[path[k]])
        message = entry.get("message") or {}
        calls = [b for b in message.get("content") or () if isinstance(b, dict)
                 and b.get("type") == "toolCall"] if message.get("role") == "assistant" else []
        if len(calls) == 1:
            return path[k], path[k + 1]
    raise LookupError("no assistant with a single tool call on the active branch")


def drop_result(data: bytes, at: int) -> bytes:
    """The tool result on line `at` was never written: gone, its children hang on its parent."""

    def change(lines: list[bytes]) -> None:
        result = orjson.loads(lines[at])
        for i in range(at + 1, len(lines)):
            entry = orjson.loads(lines[i])
            if entry.get("parentId") == result["id"]:
                entry["parentId"] = result["parentId"]
                lines[i] = orjson.dumps(entry)
        del lines[at]

    return _edit_lines(data, change)


def user_before_result(data: bytes, at: int, user_id: str = "u0000001") -> bytes:
    """A user message typed while the tool ran: written under the assistant, and the tool
    result on line `at` written after it, under it (so the result follows a user message)."""

    def change(lines: list[bytes]) -> None:
        result = orjson.loads(lines[at])
        user = {"type": "message", "id": user_id, "parentId": result["parentId"],
                "timestamp": result["timestamp"],
                "message": {"role": "user", "content": [text("typed while the tool ran")],
                            "timestamp": 1768467600000}}
        result["parentId"] = user_id
        lines[at : at + 1] = [orjson.dumps(user), orjson.dumps(result)]

    return _edit_lines(data, change)


# ---------------------------------------------------------------------------------------
# checks


def to_api(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pi-shaped messages as an Anthropic request's `messages` (a stand-in for pi's conversion).

    Summaries, custom and shell messages become user text (`to_model_messages`); tool calls
    become `tool_use` blocks; a run of tool results becomes one user message of `tool_result`
    blocks.
    """
    api: list[dict[str, Any]] = []
    results_open = False
    for m in to_model_messages(messages):
        role = m["role"]
        content = m.get("content")
        if role == "toolResult":
            block = {"type": "tool_result", "tool_use_id": m.get("toolCallId"),
                     "content": content, "is_error": bool(m.get("isError"))}
            if results_open:
                api[-1]["content"].append(block)
            else:
                api.append({"role": "user", "content": [block]})
                results_open = True
            continue
        results_open = False
        if role == "assistant" and isinstance(content, list):
            content = [
                {"type": "tool_use", "id": b.get("id"), "name": b.get("name"),
                 "input": b.get("arguments")} if isinstance(b, dict)
                and b.get("type") == "toolCall" else b
                for b in content
            ]
        api.append({"role": role, "content": content})
    return api


def context_of(path: Path | str) -> tuple[journal.Snapshot, journal.Tree, list[dict[str, Any]]]:
    snap = journal.load(path)
    tree = journal.Tree(snap.entries)
    tree.finish_forward_check()
    return snap, tree, journal.build_context(tree, tree.leaf_id).messages


def assert_valid(path: Path | str, *, strict: bool = False) -> None:
    """Guarantee 2: the file loads cleanly, its tree is sound, its context has no pairing
    damage (strict: no pairing problem at all), and what a model is sent pairs up."""
    snap, tree, messages = context_of(path)
    assert snap.diagnostics == [], [d.describe() for d in snap.diagnostics]
    assert tree.issues == [], tree.issues
    found = sanitize(messages)
    assert classify(messages, found[1])[1] == []
    if strict:
        assert pairing_problems(messages) == []
        assert api_pairing_problems(to_api(messages)) == []
    assert pairing_problems(found[0]) == []
    assert api_pairing_problems(to_api(found[0])) == []


@dataclass
class Outcome:
    """One repair and what it left behind."""

    report: RepairReport
    original: bytes
    output: bytes
    records: list[dict[str, Any]] = field(default_factory=list)  # new quarantine records

    @property
    def counts(self) -> dict[str, int]:
        """What was fixed: the damage, and the notes too when the repair was strict."""
        if not self.report.strict:
            return self.report.counts
        return dict(Counter(self.report.counts) + Counter(self.report.note_counts))

    def reasons(self) -> Counter[str]:
        return Counter(r["reason"] for r in self.records)


def read_records(path: Path) -> list[dict[str, Any]]:
    q = Path(str(path) + ".quarantine")
    return list(journal.read_quarantine(str(q))) if q.exists() else []


def check_repair(path: Path, *, migrate: bool = False, listed: bool = True,
                 strict: bool = False) -> Outcome:
    """Repair `path` and assert guarantees 1-3; returns what happened for exact assertions.

    `listed=False` skips the check that the report names every quarantined range (kept apart
    so that a known gap there does not hide the other checks).
    """
    original = path.read_bytes()
    before = len(read_records(path))
    report = journal.repair(path, migrate=migrate, strict=strict)
    output = path.read_bytes()
    records = read_records(path)[before:]
    outcome = Outcome(report, original, output, records)
    assert report.changed == (output != original)
    if report.changed:
        assert Path(str(path) + ".bak").read_bytes() == original
        assert report.backup == str(path) + ".bak"
        # the quarantine is named when this repair wrote records to it, and only then
        assert report.quarantine == (str(path) + ".quarantine" if records else None)
    # (1) idempotent
    again = journal.repair(path, migrate=migrate, strict=strict)
    assert not again.changed, again.problems
    assert again.problems == [], again.problems
    assert path.read_bytes() == output
    # (2) valid
    assert_valid(path, strict=strict)
    # (3) nothing lost
    assert_accounted(original, output, records, migrated=migrate and report.changed)
    if listed:
        assert_listed(report, records)
    return outcome


def assert_accounted(original: bytes, output: bytes, records: list[dict[str, Any]],
                     *, migrated: bool = False) -> None:
    """Every original line is in the output as is, or its bytes are quarantined at its offset
    (the parts of it that were kept being whole output lines); with `migrated`, lines that were
    rewritten only to migrate them are in the backup (checked by the caller)."""
    for record in records:
        offset, data = record["offset"], record["data"]
        assert original[offset : offset + len(data)] == data, (
            f"quarantine record at {offset} ({record['reason']}) does not hold the original bytes")
    available = Counter(output.split(b"\n"))
    pieces = original.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    offset = 0
    unaccounted = []
    by_offset: dict[int, list[bytes]] = {}
    for record in records:
        by_offset.setdefault(record["offset"], []).append(record["data"])
    for line in pieces:
        if not line:  # a blank line: accounted for only by a record at its offset
            if offset not in by_offset:
                unaccounted.append((offset, line))
            offset += 1
            continue
        for gap in _uncovered(offset, line, records):
            if available[gap] > 0:
                available[gap] -= 1
            elif not migrated:
                unaccounted.append((offset, gap[:80]))
        offset += len(line) + 1
    assert not unaccounted, f"original bytes neither kept nor quarantined: {unaccounted[:5]}"


def _uncovered(offset: int, line: bytes, records: list[dict[str, Any]]) -> list[bytes]:
    """The parts of a line (at `offset`) that no quarantine record covers."""
    end = offset + len(line)
    spans = sorted((r["offset"], r["offset"] + len(r["data"])) for r in records
                   if r["offset"] < end and r["offset"] + len(r["data"]) > offset)
    gaps, at = [], offset
    for start, stop in spans:
        if start > at:
            gaps.append(line[at - offset : start - offset])
        at = max(at, stop)
    if at < end:
        gaps.append(line[at - offset :])
    return gaps


def assert_listed(report: RepairReport, records: list[dict[str, Any]],
                  strict: bool = False) -> None:
    """The report names each quarantined byte range: a problem, or a rewritten line (what a
    fix touched: a re-parented child, a renamed result, a reference to a renamed id)."""
    offsets = ({p.offset for p in [*report.problems, *report.notes, *report.consequences]}
               | {r.offset for r in report.rewritten})
    missing = [(r["offset"], r["reason"]) for r in records if r["offset"] not in offsets]
    assert not missing, f"quarantined but not in the report: {missing}"
