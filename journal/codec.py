"""Bytes to entries and back: streaming line readers, parsing, and bad-line diagnostics.

Readers consume complete lines only (up to the last newline). Every byte range that cannot be
used becomes a `Diagnostic`; nothing is skipped silently and nothing here raises on bad content.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

import orjson

from .model import REQUIRED_FIELDS, Entry

CHUNK = 1 << 22
BOM = b"\xef\xbb\xbf"

TORN_TAIL = "torn_tail"
INVALID_JSON = "invalid_json"
INVALID_UTF8 = "invalid_utf8"
NUL_RUN = "nul_run"
NOT_OBJECT = "not_object"
MISSING_FIELD = "missing_field"
MISSING_HEADER = "missing_header"
EXTRA_HEADER = "extra_header"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A byte range of a session file that the reader could not use, and why."""

    offset: int
    length: int
    reason: str
    line: int | None = None
    detail: str = ""

    def describe(self) -> str:
        where = f"line {self.line}, " if self.line is not None else ""
        extra = f": {self.detail}" if self.detail else ""
        return f"{where}byte {self.offset:,} (+{self.length:,}): {self.reason}{extra}"

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "length": self.length,
            "reason": self.reason,
            "line": self.line,
            "detail": self.detail,
        }


class Line(NamedTuple):
    """One newline-terminated line: where it starts, its number, its bytes (no line end)."""

    offset: int
    number: int
    raw: bytes


@contextmanager
def bulk_parsing() -> Iterator[None]:
    """Pause the cyclic garbage collector while many parsed objects are created.

    Parsed JSON holds no reference cycles, so nothing is left for the collector; without this
    it re-scans the growing heap again and again during a large load (20-35% of the time).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def encode(entry: Entry) -> bytes:
    """One entry as a complete JSONL line."""
    return orjson.dumps(entry, option=orjson.OPT_APPEND_NEWLINE)


def encode_many(entries: list[Entry]) -> bytes:
    return b"".join([orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in entries])


def iter_lines(
    f: IO[bytes], start: int = 0, end: int | None = None, first_line: int = 1
) -> Iterator[Line | Diagnostic]:
    """Stream complete lines from `start`; a final fragment without newline is a torn tail.

    Memory stays proportional to the longest line: a partial line is kept as a list of pieces
    until its newline arrives.
    """
    f.seek(start)
    offset = start
    number = first_line
    pieces: list[bytes] = []
    remaining = end - start if end is not None else None
    while True:
        size = CHUNK if remaining is None else min(CHUNK, remaining)
        chunk = f.read(size) if size else b""
        if not chunk:
            break
        if remaining is not None:
            remaining -= len(chunk)
        lines = chunk.split(b"\n")
        if len(lines) > 1:
            if pieces:
                pieces.append(lines[0])
                lines[0] = b"".join(pieces)
                pieces = []
            for raw in lines[:-1]:
                yield Line(offset, number, raw)
                offset += len(raw) + 1
                number += 1
        elif lines[0]:
            pieces.append(lines[0])
            continue
        if lines[-1]:
            pieces.append(lines[-1])
    if pieces:
        tail = b"".join(pieces)
        yield Diagnostic(offset, len(tail), TORN_TAIL, number, "no newline at end of file")


def iter_lines_reverse(f: IO[bytes], end: int, block: int = 1 << 16) -> Iterator[Line]:
    """Yield complete lines backwards from `end`, which must sit just after a newline.

    Line numbers are unknown when reading backwards and are reported as 0.
    """
    if end <= 0:
        return
    pos = end - 1
    pieces: list[bytes] = []
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        buf = f.read(pos - start)
        hi = len(buf)
        while (nl := buf.rfind(b"\n", 0, hi)) >= 0:
            pieces.append(buf[nl + 1 : hi])
            yield Line(start + nl + 1, 0, b"".join(reversed(pieces)))
            pieces = []
            hi = nl
        pieces.append(buf[:hi])
        pos = start
    yield Line(0, 0, b"".join(reversed(pieces)))


def parse_line(line: Line) -> Any | Diagnostic | None:
    """The JSON value on a line, None for a blank line, or a Diagnostic saying why not."""
    raw = line.raw
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if line.offset == 0 and raw.startswith(BOM):
        raw = raw[len(BOM) :]
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if not raw.strip(b" \t"):
            return None
        return Diagnostic(line.offset, len(line.raw), _classify(raw), line.number, str(e))
    if value is None:  # the JSON literal null (a blank line fails to parse instead)
        return Diagnostic(line.offset, len(line.raw), NOT_OBJECT, line.number, "null")
    return value


def _classify(raw: bytes) -> str:
    if b"\x00" in raw:
        return NUL_RUN
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return INVALID_UTF8
    return INVALID_JSON


def check_entry(obj: Any, version: int) -> str | None:
    """What is wrong with a parsed entry for this format version, or None if it is usable."""
    if not isinstance(obj, dict):
        return f"{NOT_OBJECT}: {type(obj).__name__}"
    kind = obj.get("type")
    if not isinstance(kind, str):
        return f"{MISSING_FIELD}: type"
    if version >= 2:
        entry_id = obj.get("id")
        if not isinstance(entry_id, str) or not entry_id:
            return f"{MISSING_FIELD}: id"
        if "parentId" not in obj:
            return f"{MISSING_FIELD}: parentId"
        parent = obj["parentId"]
        if parent is not None and not isinstance(parent, str):
            return f"{MISSING_FIELD}: parentId is not a string or null"
    for field in REQUIRED_FIELDS.get(kind, ()):
        if field not in obj:
            return f"{MISSING_FIELD}: {field}"
    if kind == "message" and not isinstance(obj["message"], dict):
        return f"{MISSING_FIELD}: message is not an object"
    return None
