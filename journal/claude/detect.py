"""Which dialect a session file is written in: pi's session format or Claude Code's.

Decided per file, from its records: the first JSON object with a string `type` names it. A pi
file starts with its `session` header and its entries carry `id`/`parentId`; a Claude Code
transcript has no header, its records carry `uuid`/`parentUuid`, and their types (`user`,
`assistant`, `summary`, ...) are none of pi's. Damaged or blank leading lines are skipped.

A line with a Claude Code type but none of its keys (`{"type": "assistant"}`) is weak
evidence: it names the dialect only when no later scanned line tells. A pi file whose damaged
header says `"type": "assistant"` is still read as pi's, from its entries.
"""

from __future__ import annotations

import os
from typing import IO, Any

import orjson

from ..model import ENTRY_TYPES
from ..storage import FileStorage
from .records import RECORD_TYPES

PI = "pi"
CLAUDE = "claude"
DIALECTS = (PI, CLAUDE)

_PI_TYPES = frozenset({"session", *ENTRY_TYPES})
_SCAN_LINES = 64
_SCAN_BYTES = 4 << 20
_BLOCK = 1 << 16
_CLAUDE_KEYS = ("parentUuid", "leafUuid", "isSidechain", "messageId")


def record_dialect(value: Any) -> str | None:
    """The dialect one parsed line belongs to, or None when it does not tell."""
    found, _ = _told(value)
    return found


def _told(value: Any) -> tuple[str | None, bool]:
    """The dialect one parsed line names, and whether it names it firmly (see the module's
    docstring for the weak case)."""
    if not isinstance(value, dict):
        return None, False
    kind = value.get("type")
    if not isinstance(kind, str):
        return None, False
    if kind in _PI_TYPES:
        return PI, True
    if "id" in value and "uuid" not in value and "parentUuid" not in value:
        return PI, True  # pi's ids on a line whose type was damaged (Claude records have a uuid)
    if any(key in value for key in _CLAUDE_KEYS):
        return CLAUDE, True
    if kind in RECORD_TYPES:
        return CLAUDE, False
    return None, False


def _decide(lines: list[bytes], weak: list[str]) -> str | None:
    """The first firm answer among `lines`; a weak one is appended to `weak` for the caller
    to fall back on."""
    for raw in lines:
        raw = raw.strip().removeprefix(b"\xef\xbb\xbf")
        if not raw:
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        found, firm = _told(value)
        if found is not None and firm:
            return found
        if found is not None:
            weak.append(found)
    return None


def detect_bytes(data: bytes) -> str:
    """The dialect of a file whose first bytes are `data` (pi when nothing tells)."""
    weak: list[str] = []
    return _decide(data.split(b"\n")[:_SCAN_LINES], weak) or (weak[0] if weak else PI)


def detect_stream(f: IO[bytes]) -> str:
    """The dialect of an open file (read from its start, a block at a time, until a line
    tells; the position is put back). A pi file is told by its first line; a file whose
    lines tell nothing is pi's."""
    return stated_dialect(f) or PI


def stated_dialect(f: IO[bytes]) -> str | None:
    """The dialect the records of an open file state, as `detect_stream` reads them; None
    when no line tells (an empty file, or one holding only damaged lines)."""
    where = f.tell()
    try:
        f.seek(0)
        pending = b""
        seen = read = 0
        weak: list[str] = []
        while seen < _SCAN_LINES and read < _SCAN_BYTES:
            block = f.read(_BLOCK)
            read += len(block)
            if not block:
                return _decide([pending], weak) or (weak[0] if weak else None)
            *lines, pending = (pending + block).split(b"\n")
            lines = lines[:_SCAN_LINES - seen]
            seen += len(lines)
            found = _decide(lines, weak)
            if found is not None:
                return found
        return weak[0] if weak else None
    finally:
        f.seek(where)


def dialect_of(path: str | os.PathLike[str]) -> str:
    """The dialect of the session file at `path`: "pi" or "claude".

    Reads at most the first 4 MB, never writes. Only a regular file is opened (anything
    else raises `NotASession`); an empty or unreadable one is "pi" (the pi readers then
    report why).

    Example:
        >>> dialect_of("~/.claude/projects/p/1c0b....jsonl")  # doctest: +SKIP
        'claude'
    """
    with FileStorage(os.fspath(path)).open_stream() as f:
        return detect_stream(f)


def check_dialect(dialect: str | None) -> str | None:
    """Validate a forced dialect (None: detect)."""
    if dialect is not None and dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    return dialect
