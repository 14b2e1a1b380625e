"""What repair would do to a Claude Code transcript, worked out in memory.

The file stays in Claude Code's own format: no pi header, no record of ours, and every line
that needs no change is written back byte for byte. The damage repaired, each reported once
as a `Problem` (a `kind` below, or a byte-level kind from `journal.salvage`):

- a last record with no line end (`missing_newline`): the line is ended;
- bytes that hold no record: torn and glued lines, NUL runs, trailing garbage, blank lines,
  values that are not records (`not_a_record`); invalid UTF-8 replaced with U+FFFD;
- `nul_in_text`: NUL characters (`\\u0000`) in a message, which break the API request body;
  removed from the message's strings;
- `duplicate_record`: a record written twice (same uuid, same content); the copy goes;
- `missing_parent`, `parent_cycle`: a `parentUuid` that names no earlier record (lost, never
  written, or later in the file, which is how a cycle starts); the record is re-attached along
  its `logicalParentUuid` if that names an earlier record, else to the nearest earlier record
  of its chain (main chain, or the same subagent's sidechain);
  `missing_logical_parent`: a compact boundary's `logicalParentUuid` likewise;
- on the chain Claude Code resumes (from the last main-chain user or assistant record up to
  the latest compact boundary), as the API will see it (consecutive records of one role make
  one message): `orphan_result` and `duplicate_result`, `tool_result` blocks that answer no
  call of the message before them or answer one twice, are removed (a record left empty goes,
  its children re-attached to its parent); `unpaired_tool_use`, calls with no result in the
  next message, get the interrupted-tool record Claude Code itself writes
  (`journal.claude.synthetic`), placed right after the calls, the next record re-parented
  onto it.

Records of types repair does not know are kept as they are.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from .. import codec
from ..codec import Line
from ..progress import Meter, Progress
from ..quarantine import Quarantined
from ..repair_report import Problem
from ..salvage import salvage_line
from ..storage import as_storage
from .synthetic import interrupted_result

NOT_A_RECORD = "not_a_record"
NUL_IN_TEXT = "nul_in_text"
MISSING_NEWLINE = "missing_newline"
DUPLICATE_RECORD = "duplicate_record"
MISSING_PARENT = "missing_parent"
PARENT_CYCLE = "parent_cycle"
MISSING_LOGICAL_PARENT = "missing_logical_parent"
ORPHAN_RESULT = "orphan_result"
DUPLICATE_RESULT = "duplicate_result"
UNPAIRED_TOOL_USE = "unpaired_tool_use"
REPARENTED = "reparented"
_NUL_RE = re.compile(rb"\\u0000")
_MESSAGE_TYPES = ("user", "assistant")


@dataclass(slots=True)
class Rec:
    """One record of the transcript being rebuilt; `raw` is its original line while unchanged."""

    value: dict[str, Any]
    raw: bytes | memoryview | None
    line: int | None
    offset: int | None
    original: bytes | None = None
    reason: str = ""
    dropped: bool = False

    def edit(self, reason: str) -> dict[str, Any]:
        """The record's value, to be changed: its original bytes are kept for the quarantine."""
        if self.raw is not None:
            self.original, self.raw = bytes(self.raw), None
            self.value = dict(self.value)
            self.reason = reason
        return self.value

    @property
    def uuid(self) -> str | None:
        value = self.value.get("uuid")
        return value if isinstance(value, str) and "parentUuid" in self.value else None

    @property
    def parent(self) -> Any:
        return self.value.get("parentUuid")

    def bytes_now(self) -> bytes:
        return bytes(self.raw) if self.raw is not None else codec.dumps(self.value)


@dataclass
class MendPlan:
    """The records of the repaired transcript, with every problem and every dropped range."""

    path: str
    records: list[Rec]
    problems: list[Problem] = field(default_factory=list)
    dropped: list[Quarantined] = field(default_factory=list)
    consequences: list[Problem] = field(default_factory=list)
    meter: Meter = field(default_factory=lambda: Meter(None, 0))

    def problem(self, kind: str, action: str, rec: Rec | None = None, *,
                consequence: bool = False, **kw: Any) -> None:
        if rec is not None:
            kw.setdefault("line", rec.line)
            kw.setdefault("offset", rec.offset)
            kw.setdefault("entry_id", rec.uuid)
        (self.consequences if consequence else self.problems).append(Problem(kind, action, **kw))

    def drop(self, rec: Rec, kind: str, detail: str) -> None:
        rec.dropped = True
        data = rec.original if rec.original is not None else (
            bytes(rec.raw) if rec.raw is not None else None)
        if data is not None:
            self.dropped.append(Quarantined(self.path, rec.offset or 0, data, kind, detail))

    def kept(self) -> list[Rec]:
        return [r for r in self.records if not r.dropped]

    def render(self) -> bytes:
        """The repaired file's bytes: kept lines as they were, changed ones re-encoded."""
        parts: list[bytes | memoryview] = []
        for rec in self.records:
            if rec.dropped:
                continue
            if rec.raw is not None:
                parts.append(rec.raw)
                parts.append(b"\n")
            else:
                parts.append(codec.dumps(rec.value, orjson.OPT_APPEND_NEWLINE))
        return b"".join(parts)

    def rewritten(self) -> list[Quarantined]:
        """The original bytes of every kept line the repair rewrote."""
        return [Quarantined(self.path, r.offset or 0, r.original, r.reason or "rewritten",
                            "original bytes of a line the repair rewrote")
                for r in self.records if r.original is not None and not r.dropped]


def plan_claude(path: str, progress: Progress | None = None) -> MendPlan:
    """What repair would do to the Claude Code transcript at `path` (nothing is written)."""
    with as_storage(path).open_reader() as reader:
        data = reader.stream.read()
    return plan_bytes(data, path, progress)


def plan_bytes(data: bytes, path: str = "<memory>",
               progress: Progress | None = None) -> MendPlan:
    """What repair would do to a transcript held in `data`."""
    meter = Meter(progress, 2 * len(data))
    with codec.bulk_parsing():
        p = MendPlan(path, [], meter=meter)
        _salvage(p, data)
    _fix_nuls(p, [m.start() for m in _NUL_RE.finditer(data)])
    _fix_duplicates(p)
    _fix_chains(p)
    _fix_pairing(p)
    return p


# bytes


def _lines(data: bytes, meter: Meter) -> Iterator[tuple[int, int, memoryview | None]]:
    """(offset, line number, bytes) of each line; None as bytes for a last line with no end."""
    pos, number, size = 0, 1, len(data)
    view = memoryview(data)
    while pos < size:
        meter.advance_to(pos)
        nl = data.find(b"\n", pos)
        if nl < 0:
            yield pos, number, None
            return
        yield pos, number, view[pos:nl]
        pos, number = nl + 1, number + 1


def _salvage(p: MendPlan, data: bytes) -> None:
    loads = orjson.loads
    for offset, number, raw in _lines(data, p.meter):
        if raw is None:
            if _complete_last_line(p, data, offset, number):
                return
            p.dropped.append(Quarantined(p.path, offset, data[offset:], codec.TORN_TAIL,
                                         "no newline at end of file"))
            p.problem(codec.TORN_TAIL, "quarantined", line=number, offset=offset,
                      detail="no newline at end of file")
            return
        try:
            value = loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            _take(p, value, raw, number, offset, exact=True)
            continue
        salvaged = salvage_line(Line(offset, number, bytes(raw)))
        for d in salvaged.dropped:
            p.dropped.append(Quarantined(p.path, d.offset, d.data, d.reason, d.detail))
            p.problem(d.reason, "quarantined", line=number, offset=d.offset, detail=d.detail)
        for kind, action in salvaged.notes:
            p.problem(kind, action, line=number, offset=offset)
        for piece in salvaged.pieces:
            if not piece.exact:
                p.problem(codec.INVALID_UTF8, "replaced invalid bytes", line=number,
                          offset=piece.offset, detail=piece.note)
            _take(p, piece.value, piece.raw, number, piece.offset, exact=piece.exact)


def _complete_last_line(p: MendPlan, data: bytes, offset: int, number: int) -> bool:
    """A whole record that only lacks its line end (Claude Code's next append would glue onto
    it): kept, and the line ended."""
    try:
        value = orjson.loads(data[offset:])
    except orjson.JSONDecodeError:
        return False
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return False
    p.problem(MISSING_NEWLINE, "ended the last line (a whole record)", line=number,
              offset=offset)
    _take(p, value, data[offset:], number, offset, exact=True)
    return True


def _take(p: MendPlan, value: Any, raw: bytes | memoryview, number: int, offset: int, *,
          exact: bool) -> None:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        what = type(value).__name__ if not isinstance(value, dict) else "an object with no type"
        p.dropped.append(Quarantined(p.path, offset, bytes(raw), NOT_A_RECORD, what))
        p.problem(NOT_A_RECORD, "quarantined", line=number, offset=offset, detail=what)
        return
    rec = Rec(value, raw if exact else None, number, offset)
    if not exact:
        rec.original, rec.reason = bytes(raw), codec.INVALID_UTF8
    p.records.append(rec)


# records


def _fix_nuls(p: MendPlan, at: list[int]) -> None:
    """`at`: where the file holds a NUL escape; only records holding one are looked at."""
    for rec in p.records:
        if rec.raw is not None:
            start = rec.offset or 0
            near = bisect_left(at, start)
            if near == len(at) or at[near] >= start + len(rec.raw):
                continue
        message = rec.value.get("message")
        if message is None or not _has_nul(message):
            continue
        value = rec.edit(NUL_IN_TEXT)
        value["message"] = codec.map_strings(message, lambda s: s.replace("\x00", ""))
        p.problem(NUL_IN_TEXT, "removed NUL characters from the message", rec)


def _has_nul(value: Any) -> bool:
    found = False

    def look(text: str) -> str:
        nonlocal found
        found = found or "\x00" in text
        return text

    codec.map_strings(value, look)
    return found


def _fix_duplicates(p: MendPlan) -> None:
    first: dict[str, Rec] = {}
    for rec in p.records:
        key = rec.uuid
        if key is None:
            continue
        earlier = first.get(key)
        if earlier is None:
            first[key] = rec
        elif earlier.value == rec.value:
            p.drop(rec, DUPLICATE_RECORD, f"a second copy of record {key}")
            p.problem(DUPLICATE_RECORD, "quarantined the copy", rec)


def _chain_key(value: dict[str, Any]) -> tuple[bool, Any]:
    sidechain = value.get("isSidechain") is True
    return sidechain, value.get("agentId") if sidechain else None


def _fix_chains(p: MendPlan) -> None:
    everywhere = {r.uuid for r in p.kept() if r.uuid is not None}
    seen: set[str] = set()
    last: dict[tuple[bool, Any], str] = {}
    for rec in p.kept():
        key = rec.uuid
        if key is None:
            continue
        chain = _chain_key(rec.value)
        parent = rec.parent
        if parent is not None and (not isinstance(parent, str) or parent not in seen):
            kind = PARENT_CYCLE if parent == key or parent in everywhere else MISSING_PARENT
            logical = rec.value.get("logicalParentUuid")
            target = logical if isinstance(logical, str) and logical in seen else last.get(chain)
            rec.edit(kind)["parentUuid"] = target
            where = "its logicalParentUuid" if target == logical else (
                "the nearest earlier record of its chain" if target else "none: now a root")
            p.problem(kind, f"re-attached to {target or 'nothing'} ({where})", rec,
                      detail=f"parentUuid was {parent!r}")
        if rec.value.get("subtype") == "compact_boundary":
            logical = rec.value.get("logicalParentUuid")
            if logical is not None and (not isinstance(logical, str) or logical not in seen):
                target = last.get(chain)
                rec.edit(MISSING_LOGICAL_PARENT)["logicalParentUuid"] = target
                p.problem(MISSING_LOGICAL_PARENT,
                          f"logicalParentUuid now {target or 'null'} (the nearest earlier "
                          "record of its chain)", rec, detail=f"was {logical!r}")
        seen.add(key)
        last[chain] = key


# pairing on the chain Claude Code resumes


def active_chain(records: list[Rec]) -> list[Rec]:
    """The records Claude Code resumes, root first: from the last main-chain user or
    assistant record (in a subagent's file, the last one of any chain) up its parents to the
    first record with none (the latest compact boundary, or the start)."""
    by_uuid: dict[str, Rec] = {}
    leaf = side_leaf = None
    for rec in records:
        key = rec.uuid
        if key is None:
            continue
        by_uuid.setdefault(key, rec)
        if rec.value.get("type") in _MESSAGE_TYPES:
            if rec.value.get("isSidechain") is True:
                side_leaf = rec
            else:
                leaf = rec
    current = leaf or side_leaf
    chain: list[Rec] = []
    visited: set[str] = set()
    while current is not None:
        chain.append(current)
        visited.add(current.uuid or "")
        parent = current.parent
        if not isinstance(parent, str) or parent in visited:
            break
        current = by_uuid.get(parent)
    chain.reverse()
    return chain


def _groups(chain: list[Rec], records: list[Rec]) -> list[tuple[str, list[Rec]]]:
    """The chain's messages as the API gets them: consecutive records of one role merged, and
    the results of parallel calls that hang beside the chain (each on the line of its own
    call, as Claude Code writes them) gathered into the message after their calls."""
    on_chain = {id(r) for r in chain}
    beside: dict[str, list[Rec]] = {}
    for rec in records:
        if (id(rec) not in on_chain and rec.value.get("type") == "user"
                and isinstance(rec.parent, str) and _result_ids(rec)):
            beside.setdefault(rec.parent, []).append(rec)
    out: list[tuple[str, list[Rec]]] = []
    gathered: list[Rec] = []
    for rec in chain:
        role = rec.value.get("type")
        if role not in _MESSAGE_TYPES or not isinstance(rec.value.get("message"), dict):
            continue
        if role == "user" and gathered:
            out.append(("user", gathered))
            gathered = []
        if out and out[-1][0] == role:
            out[-1][1].append(rec)
        else:
            out.append((str(role), [rec]))
        if role == "assistant" and rec.uuid in beside:
            calls = set(_tool_ids([rec]))
            gathered.extend(r for r in beside[rec.uuid] if calls & set(_result_ids(r)))
    if gathered:
        out.append(("user", gathered))
    merged: list[tuple[str, list[Rec]]] = []
    for role, group in out:
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(group)
        else:
            merged.append((role, group))
    return merged


def _result_ids(rec: Rec) -> list[Any]:
    message = rec.value.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return []
    return [b.get("tool_use_id") for b in message["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"]


def _blocks(rec: Rec) -> list[Any]:
    content = rec.value["message"].get("content")
    return content if isinstance(content, list) else []


def _tool_ids(group: list[Rec]) -> list[str]:
    return [b["id"] for rec in group for b in _blocks(rec)
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str)]


def _fix_pairing(p: MendPlan) -> None:
    for _ in range(len(p.records) + 1):  # each pass that removes something removes a block
        if not _remove_bad_results(p):
            break
    _answer_open_calls(p)


def _remove_bad_results(p: MendPlan) -> bool:
    records = p.kept()
    groups = _groups(active_chain(records), records)
    answered: set[str] = set()
    removed = False
    for index, (role, group) in enumerate(groups):
        if role != "user":
            continue
        expected = set(_tool_ids(groups[index - 1][1])) if index > 0 else set()
        got: set[str] = set()
        for rec in group:
            keep, bad = [], []
            for block in _blocks(rec):
                if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                    keep.append(block)
                    continue
                tool_id = block.get("tool_use_id")
                if tool_id in expected and tool_id not in got:
                    got.add(tool_id)
                    keep.append(block)
                else:
                    kind = (DUPLICATE_RESULT if tool_id in got or tool_id in answered
                            else ORPHAN_RESULT)
                    bad.append((kind, tool_id))
            if not bad:
                continue
            removed = True
            for kind, tool_id in bad:
                what = ("answers a call already answered" if kind == DUPLICATE_RESULT
                        else "answers no call of the message before it")
                p.problem(kind, "removed the tool_result block" if keep else
                          "quarantined the record (it held nothing else)", rec,
                          detail=f"tool_use_id {tool_id!r} {what}")
            if keep:
                value = rec.edit(bad[0][0])
                value["message"] = {**value["message"], "content": keep}
            else:
                _remove_record(p, rec, bad[0][0])
        answered |= got
    return removed


def _remove_record(p: MendPlan, rec: Rec, kind: str) -> None:
    p.drop(rec, kind, "a record holding only tool results that answer no call")
    key, parent = rec.uuid, rec.parent
    for other in p.kept():
        if key is not None and other.parent == key:
            other.edit(other.reason or REPARENTED)["parentUuid"] = parent
            p.problem(REPARENTED, f"re-attached to {parent}", other, consequence=True,
                      detail=f"its parent {key} was removed")
        if key is not None and other.value.get("logicalParentUuid") == key:
            other.edit(other.reason or REPARENTED)["logicalParentUuid"] = parent
            p.problem(REPARENTED, f"logicalParentUuid now {parent}", other, consequence=True,
                      detail=f"record {key} was removed")


def _answer_open_calls(p: MendPlan) -> None:
    records = p.kept()
    chain = active_chain(records)
    groups = _groups(chain, records)
    on_chain = {id(r) for r in chain}
    taken = {r.uuid for r in records if r.uuid is not None}
    template = next((r.value for r in records if r.value.get("type") == "user"
                     and r.uuid is not None), None)
    block_template = next((b for r in records if r.value.get("type") == "user"
                           and isinstance(r.value.get("message"), dict)
                           for b in _blocks(r)
                           if isinstance(b, dict) and b.get("type") == "tool_result"), None)
    for index, (role, group) in enumerate(groups):
        if role != "assistant":
            continue
        calls = _tool_ids(group)
        if not calls:
            continue
        following = groups[index + 1][1] if index + 1 < len(groups) else []
        got = {b.get("tool_use_id") for rec in following for b in _blocks(rec)
               if isinstance(b, dict) and b.get("type") == "tool_result"}
        missing = [c for c in calls if c not in got]
        if not missing:
            continue
        caller = next(r for r in reversed(group) if set(_tool_ids([r])) & set(missing))
        after = next((r for r in following if id(r) in on_chain), None)
        parent = after.parent if after is not None else chain[-1].uuid
        record = interrupted_result(caller.value, str(parent), missing, taken=taken,
                                    template=template, block_template=block_template)
        taken.add(record["uuid"])
        added = Rec(record, None, None, None, reason="synthetic")
        where = p.records.index(after) if after is not None else (
            p.records.index(chain[-1]) + 1)
        p.records.insert(where, added)
        p.problem(UNPAIRED_TOOL_USE,
                  f"added the interrupted-tool result record {record['uuid']}", caller,
                  detail=f"no tool_result for {', '.join(missing)}")
        if after is not None:
            after.edit(after.reason or REPARENTED)["parentUuid"] = record["uuid"]
            p.problem(REPARENTED, f"re-attached to {record['uuid']}", after, consequence=True,
                      detail="the record after the unanswered calls")


__all__ = ["MendPlan", "Rec", "active_chain", "plan_bytes", "plan_claude"]
