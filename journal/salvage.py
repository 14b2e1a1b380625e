"""Byte-level salvage for repair: turn each raw line into usable entries plus quarantined bytes.

Unlike the reader, which only reports, salvage tries to rescue what a damaged line still holds:
the complete record after a torn one glued onto the same line, the record between NUL runs left
by a power loss, the record whose strings hold invalid UTF-8. Whatever it cannot use, it hands
back byte for byte with its offset, so the caller can quarantine it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import codec
from .codec import Diagnostic, Line

NUL_RUN_RE = re.compile(rb"\x00+")
MAX_CANDIDATES = 1000

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


def salvage_line(line: Line) -> SalvagedLine:
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
        _salvage_around_nuls(raw, line.offset, out)
    else:
        _salvage_segment(raw, line.offset, out, value.reason)
    return out


def _salvage_around_nuls(raw: bytes, base: int, out: SalvagedLine) -> None:
    start = 0
    for match in NUL_RUN_RE.finditer(raw):
        if match.start() > start:
            _salvage_segment(raw[start : match.start()], base + start, out, codec.INVALID_JSON)
        out.dropped.append(Dropped(base + match.start(), match.group(), codec.NUL_RUN,
                                   f"{len(match.group()):,} NUL bytes"))
        start = match.end()
    if start < len(raw):
        _salvage_segment(raw[start:], base + start, out, codec.INVALID_JSON)


def _loads(segment: bytes) -> Any:
    body = segment[:-1] if segment.endswith(b"\r") else segment
    return orjson.loads(body)


def _is_entry_like(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and (
        "id" in value or "message" in value or value.get("type") == "session"
    )


def _salvage_segment(segment: bytes, base: int, out: SalvagedLine, reason: str) -> None:
    if not segment.strip(b" \t\r"):
        out.dropped.append(Dropped(base, segment, BLANK, "whitespace"))
        return
    try:
        out.pieces.append(Piece(_loads(segment), base, segment))
        return
    except orjson.JSONDecodeError:
        pass
    if _salvage_utf8(segment, base, out):
        return
    if _salvage_glued(segment, base, out):
        return
    if _salvage_prefix(segment, base, out):
        return
    detail = "not valid JSON"
    if reason == codec.INVALID_UTF8:
        detail = "invalid UTF-8 and not recoverable"
    out.dropped.append(Dropped(base, segment, reason, detail))


def _salvage_utf8(segment: bytes, base: int, out: SalvagedLine) -> bool:
    try:
        segment.decode("utf-8")
        return False
    except UnicodeDecodeError:
        pass
    text = segment.decode("utf-8", errors="replace")
    try:
        value = orjson.loads(text.encode("utf-8").rstrip(b"\r"))
    except orjson.JSONDecodeError:
        return False
    # The original bytes are quarantined once, as the line the repair rewrites.
    out.pieces.append(Piece(value, base, segment, exact=False,
                            note="invalid UTF-8 bytes replaced with U+FFFD"))
    return True


def _salvage_glued(segment: bytes, base: int, out: SalvagedLine) -> bool:
    """A torn record followed by a complete one: keep the complete one."""
    candidates = 0
    for match in re.finditer(rb'\{"type"\s*:', segment):
        start = match.start()
        if start == 0:
            continue
        candidates += 1
        if candidates > MAX_CANDIDATES:
            break
        try:
            value = _loads(segment[start:])
        except orjson.JSONDecodeError:
            continue
        if _is_entry_like(value):
            first = _complete_entry(segment[:start])
            if first is not None:
                out.pieces.append(Piece(first, base, segment[:start]))
                out.notes.append((GLUED, "two complete records on one line: split in two"))
            else:
                out.dropped.append(Dropped(base, segment[:start], GLUED,
                                           "torn record glued in front of a complete one"))
            out.pieces.append(Piece(value, base + start, segment[start:]))
            return True
    return False


def _complete_entry(segment: bytes) -> Any:
    try:
        value = orjson.loads(segment)
    except orjson.JSONDecodeError:
        return None
    return value if _is_entry_like(value) else None


def _salvage_prefix(segment: bytes, base: int, out: SalvagedLine) -> bool:
    """A complete record followed by garbage on the same line: keep the record."""
    try:
        text = segment.decode("utf-8")
        value, end = json.JSONDecoder().raw_decode(text)
    except (UnicodeDecodeError, ValueError):
        return False
    if not _is_entry_like(value):
        return False
    cut = len(text[:end].encode("utf-8"))
    try:
        value = orjson.loads(segment[:cut])
    except orjson.JSONDecodeError:
        return False
    out.pieces.append(Piece(value, base, segment[:cut]))
    out.dropped.append(Dropped(base + cut, segment[cut:], TRAILING,
                               "bytes after a complete record on the same line"))
    return True
