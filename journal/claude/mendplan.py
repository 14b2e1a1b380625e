"""What repair would do to a Claude Code transcript, worked out in memory.

The file stays in Claude Code's own format: no pi header, no record of ours, and every line
that needs no change is written back byte for byte. The damage repaired, each reported once
as a `Problem` (a `kind` below, or a byte-level kind from `journal.salvage`):

- a last record with no line end (`missing_newline`): the line is ended;
- bytes that hold no record: torn and glued lines, NUL runs, trailing garbage, blank lines,
  values that are not records (`not_a_record`); invalid UTF-8 replaced with U+FFFD;
- `no_message`: a user or assistant record whose `message` is not an object (a damaged
  key or value): every reader skips it (the projection makes no entry of it, Claude Code
  cannot send it), so it is quarantined as a lost line would be, and the records that hung on
  it are re-attached below (`missing_parent`), before the pairing is read;
- `nul_in_text`: NUL characters (`\\u0000`) in a message, which break the API request body;
  removed from the message's strings;
- `duplicate_record`: a record written twice (same uuid, same content); the copy goes;
  `duplicate_uuid`: a later, different record with an earlier one's uuid goes too (readers
  disagree on which of the two counts);
- `missing_parent`, `parent_cycle`, `forward_parent`: a `parentUuid` that names no earlier
  record (lost or never written; itself or a later record that leads back to it; a later
  record, which the store's readers, walking the file in order, cannot follow); the record is
  re-attached along
  its `logicalParentUuid` if that names an earlier record, else to the nearest earlier record
  of its chain (main chain, or the same subagent's sidechain);
  `missing_logical_parent`: a compact boundary's `logicalParentUuid` likewise;
- on the chain Claude Code resumes, read as the projection reads it
  (`journal.claude.mendpairs`): `orphan_result` and `duplicate_result`, `tool_result` blocks
  that answer no call of the response before them or answer one twice, are removed (a record
  left empty goes, its children re-attached to its parent); `unpaired_tool_use`, calls with
  no result right after their response, get the interrupted-tool record Claude Code itself
  writes (`journal.claude.synthetic`), placed right after the calls, the next record
  re-parented onto it.

Records of types repair does not know are kept as they are.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

import orjson

from .. import codec
from ..codec import Line
from ..progress import Meter, Progress
from ..quarantine import Quarantined
from ..salvage import salvage_line
from ..storage import as_storage
from .mendpairs import fix_pairing
from .mendrecs import MendPlan, Rec
from .records import is_whole_record

NOT_A_RECORD = "not_a_record"
NUL_IN_TEXT = "nul_in_text"
NO_MESSAGE = "no_message"
MISSING_NEWLINE = "missing_newline"
DUPLICATE_RECORD = "duplicate_record"
DUPLICATE_UUID = "duplicate_uuid"
MISSING_PARENT = "missing_parent"
PARENT_CYCLE = "parent_cycle"
FORWARD_PARENT = "forward_parent"
MISSING_LOGICAL_PARENT = "missing_logical_parent"
_NUL_RE = re.compile(rb"\\u0000")
_MESSAGE_TYPES = ("user", "assistant")
_ABSENT = object()


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
        p = MendPlan(path, [], meter=meter, size=len(data))
        _salvage(p, data)
    _fix_nuls(p, [m.start() for m in _NUL_RE.finditer(data)])
    _drop_messageless(p)
    _fix_duplicates(p)
    _fix_chains(p)
    _fix_duplicates(p)  # a re-attached record may now be the copy of the one before
    fix_pairing(p)
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
        salvaged = salvage_line(Line(offset, number, bytes(raw)), is_whole_record)
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


def _drop_messageless(p: MendPlan) -> None:
    """A user or assistant record without a message object goes, as if its line were lost:
    the readers skip it (its uuid names no entry), so what hangs on it is re-attached by
    `_fix_chains`, and the pairing is then read on the chain every reader sees."""
    for rec in p.records:
        if rec.uuid is None or rec.value.get("type") not in _MESSAGE_TYPES:
            continue
        message = rec.value.get("message", _ABSENT)
        if isinstance(message, dict):
            continue
        what = ("no message" if message is _ABSENT
                else f"a message that is {type(message).__name__}, not an object")
        p.drop(rec, NO_MESSAGE, f"a {rec.value['type']} record with {what}")
        p.problem(NO_MESSAGE, "quarantined the record (no reader can use it)", rec,
                  detail=f"a {rec.value['type']} record with {what}")


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
    for rec in p.kept():
        key = rec.uuid
        if key is None:
            continue
        earlier = first.get(key)
        if earlier is None:
            first[key] = rec
        elif earlier.value == rec.value:
            p.drop(rec, DUPLICATE_RECORD, f"a second copy of record {key}")
            p.problem(DUPLICATE_RECORD, "quarantined the copy", rec)
        else:
            # readers disagree on which one counts (the first, for the projection; the last,
            # for a map keyed by uuid): the first stays, the other is set aside
            p.drop(rec, DUPLICATE_UUID, f"a second, different record with uuid {key}")
            p.problem(DUPLICATE_UUID, "quarantined the later record", rec)


def _chain_key(value: dict[str, Any]) -> tuple[bool, Any]:
    sidechain = value.get("isSidechain") is True
    return sidechain, value.get("agentId") if sidechain else None


def _fix_chains(p: MendPlan) -> None:
    parent_of = {r.uuid: r.parent for r in p.kept() if r.uuid is not None}

    def in_cycle(key: str) -> bool:
        at: Any = parent_of.get(key)
        walked: set[str] = set()
        while isinstance(at, str) and at in parent_of and at not in walked:
            if at == key:
                return True
            walked.add(at)
            at = parent_of[at]
        return False

    seen: set[str] = set()
    last: dict[tuple[bool, Any], str] = {}
    for rec in p.kept():
        key = rec.uuid
        if key is None:
            continue
        chain = _chain_key(rec.value)
        parent = rec.parent
        if parent is not None and (not isinstance(parent, str) or parent not in seen):
            kind = (MISSING_PARENT if parent not in parent_of
                    else PARENT_CYCLE if in_cycle(key) else FORWARD_PARENT)
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


__all__ = ["MendPlan", "plan_bytes", "plan_claude"]
