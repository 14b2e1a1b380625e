"""Byte-level salvage for repair: turn each raw line into usable entries plus quarantined bytes.

Unlike the reader, which only reports, salvage tries to rescue what a damaged line still holds:
the complete record after a torn one glued onto the same line, the record between NUL runs left
by a power loss, the record whose strings hold invalid UTF-8. Whatever it cannot use, it hands
back byte for byte with its offset, so the caller can quarantine it.

One damaged range is one problem: pieces of a line that cannot be used and touch each other
(the unreadable halves of a record that a NUL run cut in two, and the run itself) are handed
back as one dropped range, named after its worst damage (a NUL run first).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import codec
from .codec import Diagnostic, Line

NUL_RUN_RE = re.compile(rb"\x00+")

# kinds of problem found at the byte level
BLANK = "blank_line"
GLUED = "glued_record"
TRAILING = "trailing_garbage"


@dataclass(slots=True)
class Piece:
    """A rescued JSON value and where its bytes were; `exact` if they can be written back as is."""

    value: Any
    offset: int
    raw: bytes
    exact: bool = True
    note: str = ""


@dataclass
class Dropped:
    offset: int
    data: bytes
    reason: str
    detail: str = ""


@dataclass
class SalvagedLine:
    line: int
    offset: int
    pieces: list[Piece] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    """Problems fixed without dropping bytes: (kind, what was done)."""


IsRecord = Callable[[Any], bool]
"""Whether a JSON value found beside damaged bytes is a whole record of the file's dialect
(not a piece of a torn one): only such a value is kept."""


def salvage_line(line: Line, is_record: IsRecord | None = None) -> SalvagedLine:
    """Split a damaged line into the whole records it still holds and the bytes to drop.

    `is_record` tells a whole record (default: a pi entry, `is_entry_like`; a Claude Code
    transcript's repair passes its own rule, `journal.claude.records.is_whole_record`).
    """
    is_record = is_record or is_entry_like
    out = SalvagedLine(line.number, line.offset)
    raw = line.raw
    if not raw.strip(b" \t\r"):
        out.dropped.append(Dropped(line.offset, raw, BLANK, "blank line"))
        return out
    value = codec.parse_line(line)
    if not isinstance(value, Diagnostic):
        out.pieces.append(Piece(value, line.offset, raw))
        return out
    if b"\x00" in raw:
        _salvage_around_nuls(raw, line.offset, out, is_record)
    else:
        _salvage_segment(raw, line.offset, out, value.reason, is_record, known_bad=True)
    out.dropped = merge_adjacent(out.dropped)
    return out


def merge_adjacent(dropped: list[Dropped]) -> list[Dropped]:
    """Ranges that touch each other joined into one, named by the first NUL run among them
    (or else by the first range), so that one damaged stretch of bytes is one problem."""
    merged: list[list[Dropped]] = []
    for d in sorted(dropped, key=lambda d: d.offset):
        last = merged[-1][-1] if merged else None
        if last is not None and last.offset + len(last.data) == d.offset:
            merged[-1].append(d)
        else:
            merged.append([d])
    return [group[0] if len(group) == 1 else _joined(group) for group in merged]


def _joined(group: list[Dropped]) -> Dropped:
    named = next((d for d in group if d.reason == codec.NUL_RUN), group[0])
    data = b"".join(d.data for d in group)
    detail = f"{named.detail} in {len(data):,} damaged bytes" if named.detail else ""
    return Dropped(group[0].offset, data, named.reason, detail)


def _salvage_around_nuls(raw: bytes, base: int, out: SalvagedLine, is_record: IsRecord) -> None:
    start = 0
    for match in NUL_RUN_RE.finditer(raw):
        if match.start() > start:
            _salvage_segment(raw[start : match.start()], base + start, out, codec.INVALID_JSON,
                             is_record)
        out.dropped.append(Dropped(base + match.start(), match.group(), codec.NUL_RUN,
                                   f"{len(match.group()):,} NUL bytes"))
        start = match.end()
    if start < len(raw):
        _salvage_segment(raw[start:], base + start, out, codec.INVALID_JSON, is_record)


def _loads(segment: bytes | memoryview) -> Any:
    if len(segment) and segment[-1] == 0x0D:
        segment = segment[:-1]
    return codec.loads(segment)


def is_entry_like(value: Any) -> bool:
    """A pi entry (or header): an object with a string `type` and an id or a message."""
    return isinstance(value, dict) and isinstance(value.get("type"), str) and (
        "id" in value or "uuid" in value or "message" in value or value.get("type") == "session"
    )


def _salvage_segment(segment: bytes, base: int, out: SalvagedLine, reason: str,
                     is_record: IsRecord, known_bad: bool = False) -> None:
    """Rescue what a segment holds; `known_bad` when it was just parsed and failed (a parse
    of a line hundreds of megabytes long is worth skipping)."""
    if not segment.strip(b" \t\r"):
        out.dropped.append(Dropped(base, segment, BLANK, "whitespace"))
        return
    if not known_bad:
        try:
            out.pieces.append(Piece(_loads(segment), base, segment))
            return
        except orjson.JSONDecodeError:
            pass
    if _salvage_utf8(segment, base, out):
        return
    if _salvage_glued(segment, base, out, is_record):
        return
    if _salvage_prefix(segment, base, out, is_record):
        return
    detail = "not valid JSON"
    if reason == codec.INVALID_UTF8:
        detail = "invalid UTF-8 and not recoverable"
    out.dropped.append(Dropped(base, segment, reason, detail))


def _salvage_utf8(segment: bytes, base: int, out: SalvagedLine) -> bool:
    if codec.is_utf8(segment):
        return False
    text = segment.decode("utf-8", errors="replace")
    try:
        value = orjson.loads(text.encode("utf-8").rstrip(b"\r"))
    except orjson.JSONDecodeError:
        return False
    # The original bytes are quarantined once, as the line the repair rewrites.
    out.pieces.append(Piece(value, base, segment, exact=False,
                            note="invalid UTF-8 bytes replaced with U+FFFD"))
    return True


def _salvage_glued(segment: bytes, base: int, out: SalvagedLine, is_record: IsRecord) -> bool:
    """A torn record followed by a complete one: keep the complete one.

    Only one place can start a complete record that ends the line: the opening brace that
    matches the line's last closing brace, found by `last_value_start` in one linear pass.
    Trying every `{"type":` candidate in turn instead costs a full parse per candidate.
    """
    start = last_value_start(segment)
    if start is None or start == 0 or not _CANDIDATE_RE.match(segment, start):
        return False
    view = memoryview(segment)
    try:
        value = _loads(view[start:])
    except orjson.JSONDecodeError:
        return False
    if not is_record(value):
        return False
    first = _complete_entry(view[:start], is_record)
    if first is not None:
        out.pieces.append(Piece(first, base, segment[:start]))
        out.notes.append((GLUED, "two complete records on one line: split in two"))
    else:
        out.dropped.append(Dropped(base, segment[:start], GLUED,
                                   "torn record glued in front of a complete one"))
    out.pieces.append(Piece(value, base + start, segment[start:]))
    return True


def _complete_entry(segment: bytes | memoryview, is_record: IsRecord) -> Any:
    try:
        value = orjson.loads(segment)
    except orjson.JSONDecodeError:
        return None
    return value if is_record(value) else None


def _salvage_prefix(segment: bytes, base: int, out: SalvagedLine, is_record: IsRecord) -> bool:
    """A complete record followed by garbage on the same line: keep the record."""
    cut = first_value_end(segment)
    if cut is None or cut >= len(segment):
        return False
    try:
        value = orjson.loads(memoryview(segment)[:cut])
    except orjson.JSONDecodeError:
        return False
    if not is_record(value):
        return False
    out.pieces.append(Piece(value, base, segment[:cut]))
    out.dropped.append(Dropped(base + cut, segment[cut:], TRAILING,
                               "bytes after a complete record on the same line"))
    return True


# Structure scans. Both are single passes over the bytes with an explicit stack bounded by
# the deepest nesting a parser accepts, so neither recursion nor a long line can exhaust them.
# A quote is a string delimiter when it is not escaped; escapes and quotes exist only inside
# strings, so `_TOKEN_RE` (escape pairs first) finds the delimiters from any starting point.
# No escape ends in `{`: a record torn just after a backslash keeps the brace of the record
# glued after it.

_TOKEN_RE = re.compile(rb'\\[^{]|["{}\[\]]')
# a record starts with its type (pi's entries, Claude Code's bookkeeping records) or, in a
# Claude Code transcript, with its parentUuid (user, assistant, system, progress, attachment)
_CANDIDATE_RE = re.compile(rb'\{"(?:type|parentUuid)"\s*:')
_OPENS = {ord("}"): ord("{"), ord("]"): ord("[")}
_OPEN_BYTES = frozenset(b"{[")
MAX_DEPTH = 1024  # orjson's limit: nothing deeper parses anyway


def first_value_end(data: bytes) -> int | None:
    """The offset just past the first JSON object or array in `data` (which starts with it,
    after any blanks), judged by its brackets alone; None if it never closes."""
    depth = 0
    inside = False
    for match in _TOKEN_RE.finditer(data):
        token = data[match.start()]
        if token == 0x5C:  # an escape pair
            continue
        if token == 0x22:
            inside = not inside
        elif inside:
            continue
        elif token in _OPEN_BYTES:
            depth += 1
            if depth > MAX_DEPTH:
                return None
        else:
            depth -= 1
            if depth == 0:
                return match.end()
            if depth < 0:
                return None
    return None


def last_value_start(data: bytes) -> int | None:
    """Where the JSON object or array that ends `data` (before trailing blanks) begins.

    String boundaries are counted from the end of the line, where a complete record ends
    outside any string: a torn record before it cannot shift them. Brackets are matched
    going forwards; the opening bracket that the last closing one matches is the answer.
    """
    quotes = sum(1 for m in _TOKEN_RE.finditer(data) if data[m.start()] == 0x22)
    end = len(data.rstrip(b" \t\r"))
    stack: deque[tuple[int, int]] = deque(maxlen=MAX_DEPTH + 1)
    seen = 0
    start: int | None = None
    for match in _TOKEN_RE.finditer(data, 0, end):
        at = match.start()
        token = data[at]
        if token == 0x5C:
            continue
        if token == 0x22:
            seen += 1
            continue
        if (quotes - seen) % 2:
            continue  # inside a string, as seen from the end of the line
        if token in _OPEN_BYTES:
            stack.append((token, at))
            continue
        if stack and stack[-1][0] == _OPENS[token]:
            _, opened = stack.pop()
            start = opened if match.end() == end else None
        else:
            stack.clear()
            start = None
    return start
