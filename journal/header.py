"""The header of a session file: the one reader of a file's first line.

A header is a `session` object on a complete first line (its newline written), as the loader
reads it: a UTF-8 byte order mark and a carriage return before the newline are allowed. At
most `HEADER_LIMIT` bytes are read: a longer first line is no header, and reading it costs
no more. Only a regular file is opened (a FIFO or device is never waited on), and a
`.gz` archive is read through `archivegz`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, TypeGuard

from . import archivegz, codec
from .archivegz import is_compressed
from .codec import Line
from .errors import JournalError
from .files import open_regular
from .model import Entry

HEADER_LIMIT = 1 << 20


@dataclass(frozen=True)
class FirstLine:
    """What a file's first line says.

    `complete` is False while the first line has no newline yet (or the file could not be
    read): more bytes could still make it a header. `end` is the offset just past the
    header's newline, where the entries start (0 without a header).
    """

    complete: bool
    header: Entry | None = None
    end: int = 0


def first_line(fd: int, limit: int = HEADER_LIMIT) -> FirstLine:
    """The first line of an open file, read with `pread` (the file offset does not move)."""
    pieces: list[bytes] = []
    pos, size = 0, 4096
    while pos < limit:
        chunk = os.pread(fd, min(size, limit - pos), pos)
        if not chunk:
            return FirstLine(False)
        cut = chunk.find(b"\n")
        if cut >= 0:
            pieces.append(chunk[:cut])
            return _decide(b"".join(pieces))
        pieces.append(chunk)
        pos += len(chunk)
        size = min(size * 2, 1 << 16)
    return FirstLine(True)


def stream_first_line(stream: IO[bytes], limit: int = HEADER_LIMIT) -> FirstLine:
    """The first line of a seekable binary stream (a storage reader's, or a gzip archive's).

    The stream is left positioned after what was read.
    """
    stream.seek(0)
    line = stream.readline(limit)
    if line.endswith(b"\n"):
        return _decide(line[:-1])
    return FirstLine(len(line) >= limit)


def peek(path: str, limit: int = HEADER_LIMIT) -> FirstLine:
    """The first line of the file at `path`; a file that cannot be read says nothing."""
    try:
        fd = open_regular(path)
    except (OSError, JournalError):
        return FirstLine(False)
    try:
        if not is_compressed(path):
            return first_line(fd, limit)
        with os.fdopen(fd, "rb", closefd=False) as raw, archivegz.reader(raw) as f:
            return stream_first_line(f, limit)
    except archivegz.UNREADABLE:
        return FirstLine(False)
    finally:
        os.close(fd)


def is_header(value: object) -> TypeGuard[Entry]:
    """Whether a parsed line is a session header (wherever in a file it stands)."""
    return isinstance(value, dict) and value.get("type") == "session"


def read_header(path: str) -> Entry | None:
    """The session header of the file at `path`, or None."""
    return peek(path).header


def _decide(raw: bytes) -> FirstLine:
    value = codec.parse_line(Line(0, 1, raw))
    if is_header(value):
        return FirstLine(True, value, len(raw) + 1)
    return FirstLine(True)
