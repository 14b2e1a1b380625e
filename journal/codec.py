"""Bytes to entries and back: streaming line readers, parsing, and bad-line diagnostics.

Readers consume complete lines only (up to the last newline). Every byte range that cannot be
used becomes a `Diagnostic`; nothing is skipped silently and nothing here raises on bad content.
"""

from __future__ import annotations

import codecs
import dataclasses
import gc
import math
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

import orjson

from .errors import NonFiniteNumber, NotJson
from .model import CURRENT_VERSION, REQUIRED_FIELDS, Entry, bad_fields

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
BAD_FIELD = "bad_field"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A byte range of a session file that the reader could not use, and why."""

    offset: int
    length: int
    reason: str
    line: int | None = None
    detail: str = ""
    file: str | None = None
    """The file the range is in when it is not the one read but one read with it (a Claude
    Code transcript's subagent file); its offset and line are that file's."""

    def describe(self) -> str:
        where = f"line {self.line}, " if self.line is not None else ""
        extra = f": {self.detail}" if self.detail else ""
        inside = f"{self.file}: " if self.file is not None else ""
        return f"{inside}{where}byte {self.offset:,} (+{self.length:,}): {self.reason}{extra}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "offset": self.offset,
            "length": self.length,
            "reason": self.reason,
            "line": self.line,
            "detail": self.detail,
        }
        if self.file is not None:
            out["file"] = self.file
        return out


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
    On the way out the objects made meanwhile are moved to the oldest generation without
    being scanned (`gc.freeze` then `gc.unfreeze`): else the first young collection after it
    walks all of them, and the next ones again (about a third of a 100 MB load's time). They
    stay collectable; only the next full collection looks at them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def encode(entry: Entry) -> bytes:
    """One entry as a complete JSONL line; NonFiniteNumber for a NaN or infinity in it,
    NotJson for a value JSON cannot hold."""
    try:
        line = dumps(entry, orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError as e:
        raise NotJson(str(e)) from None
    if b"null" in line:  # orjson writes NaN and the infinities as null; else none is there
        _refuse_non_finite(entry)
    return line


def encode_many(entries: list[Entry]) -> bytes:
    return b"".join([encode(e) for e in entries])


def _refuse_non_finite(value: Any) -> None:
    """NonFiniteNumber, naming the field, for the first NaN or infinity in a JSON value."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise NonFiniteNumber(where or "the value", item)
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v)
                         for k, v in reversed(item.items()))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            # what orjson writes of one: its attributes (its slots), but for `_`-names
            names = (list(vars(item)) if hasattr(item, "__dict__")
                     else [f.name for f in dataclasses.fields(item)])
            stack.extend((f"{where}.{name}" if where else name, getattr(item, name))
                         for name in reversed(names) if not name.startswith("_"))


# Lone surrogates. JavaScript strings are UTF-16, so a writer that cuts a string in the middle
# of an emoji leaves half a surrogate pair, which JSON.stringify writes as an escape such as
# "\ud83d" and JSON.parse reads back. orjson refuses such escapes (they name no Unicode scalar)
# and cannot encode the resulting Python strings. Both directions go through orjson all the
# same: a lone surrogate escape is swapped for a placeholder that cannot occur in the line, and
# swapped back afterwards. Only lines orjson rejects for this reason take the slow path.

_ESCAPE_RE = re.compile(
    rb"\\(?:u([dD][89abAB][0-9a-fA-F]{2})(?:\\u([dD][c-fC-F][0-9a-fA-F]{2}))?"
    rb"|u([dD][c-fC-F][0-9a-fA-F]{2})|.)",
    re.DOTALL,
)
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_SURROGATE_TAG = "@lone-surrogate-"


def _placeholder_prefix(taken: Callable[[str], bool]) -> str:
    while True:
        prefix = f"{_SURROGATE_TAG}{secrets.token_hex(8)}-"
        if not taken(prefix):
            return prefix


def loads(raw: bytes | memoryview) -> Any:
    """Parse one JSON value as JavaScript's JSON.parse does, lone surrogate escapes included.

    Raises `orjson.JSONDecodeError` for anything that is not JSON.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "surrogate" not in str(e):
            raise
        original = e
    data = bytes(raw)
    prefix = _placeholder_prefix(lambda p: p.encode() in data)
    token = prefix.encode()
    found = False

    def swap(match: re.Match[bytes]) -> bytes:
        nonlocal found
        high, low, lone_low = match.group(1), match.group(2), match.group(3)
        if high is not None and low is None:
            found = True
            return token + high.lower()
        if lone_low is not None:
            found = True
            return token + lone_low.lower()
        return match.group(0)

    swapped = _ESCAPE_RE.sub(swap, data)
    if not found:
        raise original
    value = orjson.loads(swapped)
    pattern = re.compile(re.escape(prefix) + "([0-9a-f]{4})")
    return map_strings(value, lambda s: pattern.sub(lambda m: chr(int(m.group(1), 16)), s)
                       if prefix in s else s)


def dumps(value: Any, option: int = 0) -> bytes:
    """`value` as JSON bytes (orjson `option`s apply); a lone surrogate is written as its
    escape ("\\ud83d"), as JSON.stringify writes it."""
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError as e:
        if "surrogate" not in str(e):
            raise
    strings: list[str] = []

    def collect(text: str) -> str:
        strings.append(text)
        return text

    map_strings(value, collect)
    prefix = _placeholder_prefix(lambda p: any(p in s for s in strings))
    marked = map_strings(value, lambda s: _SURROGATE_RE.sub(
        lambda m: f"{prefix}{ord(m.group()):04x}", s))
    pattern = re.compile(re.escape(prefix.encode()) + rb"([0-9a-f]{4})")
    return pattern.sub(lambda m: b"\\u" + m.group(1), orjson.dumps(marked, option=option))


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """A copy of a parsed JSON value with every string (keys included) passed through `fn`.

    Iterative, so any nesting depth a parser accepted is handled without recursion.
    """
    root = [value]
    stack: list[tuple[list[Any] | dict[Any, Any], Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        item = parent[key]
        if isinstance(item, str):
            parent[key] = fn(item)
        elif isinstance(item, list):
            copy = list(item)
            parent[key] = copy
            stack.extend((copy, i) for i in range(len(copy)))
        elif isinstance(item, dict):
            mapped = {fn(k) if isinstance(k, str) else k: v for k, v in item.items()}
            parent[key] = mapped
            stack.extend((mapped, k) for k in mapped)
    return root[0]


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
        value = loads(raw)
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
    return INVALID_JSON if is_utf8(raw) else INVALID_UTF8


def is_utf8(data: bytes | memoryview, block: int = 1 << 20) -> bool:
    """Whether `data` is valid UTF-8, checked a block at a time (memory stays small)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for at in range(0, len(view), block):
            decoder.decode(view[at : at + block])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


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


def unreadable_as_written(entry: Entry) -> str | None:
    """Why a reader would set aside an entry about to be appended (None: it reads back as
    an entry): what `check_entry` refuses. The store refuses to write what its own readers
    would drop. A field of the wrong type is not among it: readers keep such an entry, as pi
    does, and name the field (`field_problem`)."""
    return check_entry(entry, CURRENT_VERSION)


def field_problem(entry: Entry) -> str | None:
    """A readable list of an entry's wrongly typed fields (see `model.bad_fields`), or None."""
    bad = bad_fields(entry)
    if not bad:
        return None
    return "; ".join(f"{name} is not {expected}" for name, expected in bad)


def last_newline_end(f: IO[bytes], offset: int, block: int = 1 << 16) -> int:
    """The offset just past the last newline before `offset` (0 if there is none).

    Given the file's size, the end of its last complete line; given an offset inside a line,
    where that line starts.
    """
    pos = offset
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        buf = f.read(pos - start)
        nl = buf.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0
