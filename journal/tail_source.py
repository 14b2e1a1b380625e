"""Reading one followed file: its state, its offsets and its incomplete last line.

A `_Source` is a followed file: an open descriptor, the byte offset just past the last complete
line consumed, an incomplete last line held back until its newline arrives, and the bytes just
before the offset (to notice a rewrite in place). `_SourceReader` holds the follower's methods
that place the offset where a start mode says, read what was appended, turn lines into entries
(skipping ids the lineage already consumed) and re-read a file from its start. `TailEvent` and
its kinds live here too, as everything below the public API yields them.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import codec
from .codec import Diagnostic, Line
from .lineage import is_seal
from .model import CURRENT_VERSION, Entry, header_version, migrate
from .snapshot import last_newline_end

# logged under the public module's name, which is what callers configure
log = logging.getLogger("journal.tail")

ENTRY = "entry"
ROTATED = "rotated"
REPLACED = "replaced"
TRUNCATED = "truncated"
DELETED = "deleted"
NEW_SESSION = "new_session"
ENDED = "ended"

_CHUNK = 1 << 20
_CHECK = 64


@dataclass(frozen=True, slots=True)
class TailEvent:
    """Something the follower saw: an entry, or a change to the file it follows.

    `kind` is one of:
      - "entry": `entry` was committed to `path`;
      - "rotated": `path` was sealed; `detail` is the successor's path, `entry` the marker
        (None when the successor was found through its header after a deletion);
      - "replaced": `path` was replaced by another file and re-synced by entry id;
      - "truncated": `path` shrank or was rewritten in place and was re-synced (a warning);
      - "deleted": `path` disappeared; the follower waits up to its grace period;
      - "new_session": a new session file appeared in the followed directory;
      - "ended": `path` stayed gone for the grace period and is no longer followed (following
        a single file, the follow ends after this event).
    """

    kind: str
    path: str
    entry: Entry | None = None
    detail: str = ""


class _Lineage:
    """Ids already consumed from a file and its successors (delivered or skipped past)."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: set[str] = set()


@dataclass(eq=False)
class _Source:
    """One followed file: where it was read up to, and what is known about it."""

    path: str
    lineage: _Lineage
    fd: int | None = None
    ident: tuple[int, int] = (0, 0)
    offset: int = 0  # just past the last complete line consumed
    pending: list[bytes] = field(default_factory=list)  # an incomplete line read after offset
    pending_len: int = 0
    check: bytes = b""  # the bytes just before offset, to notice a rewrite in place
    unindexed: int = 0  # ids of the lines before this offset are not in lineage.seen yet
    dedupe_end: int = 0  # entries before this offset are skipped when their id was seen
    header: Entry | None = None
    header_done: bool = False
    version: int = CURRENT_VERSION
    marker: Entry | None = None
    announced: bool = False  # the rotation (or deletion) was reported
    gone_since: float | None = None

    @property
    def position(self) -> int:
        return self.offset + self.pending_len

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _SourceReader:
    """The follower's reading of one `_Source`: placing its offset, and reading from it."""

    since_id: str | None

    def _read_header(self, src: _Source) -> int:
        """Parse the header line; return where the body starts (0 if no header)."""
        assert src.fd is not None
        first = _first_line(src.fd)
        src.header_done = first is not None
        if first is None:
            return 0
        value = codec.parse_line(first)
        if isinstance(value, dict) and value.get("type") == "session":
            src.header = value
            src.version = header_version(value)
            return first.offset + len(first.raw) + 1
        return 0

    def _seek_end(self, src: _Source) -> None:
        with _file(src) as f:
            end = last_newline_end(f, os.fstat(f.fileno()).st_size)
            body = self._read_header(src)
        self._place(src, max(end, body) if src.header_done else 0, unindexed=True)

    def _seek_last(self, src: _Source, count: int) -> None:
        with _file(src) as f:
            end = last_newline_end(f, os.fstat(f.fileno()).st_size)
            body = self._read_header(src)
            start = body
            found = 0
            for line in codec.iter_lines_reverse(f, end):
                if line.offset < body:
                    break
                if _usable(codec.parse_line(line), src.version) is not None:
                    found += 1
                    start = line.offset
                    if found == count:
                        break
        self._place(src, start if src.header_done else 0, unindexed=True)

    def _seek_since(self, src: _Source) -> bool:
        with _file(src) as f:
            end = last_newline_end(f, os.fstat(f.fileno()).st_size)
            body = self._read_header(src)
            seen = src.lineage.seen
            for item in codec.iter_lines(f, body, end):
                if not isinstance(item, Line):
                    continue
                entry = _usable(codec.parse_line(item), src.version)
                entry_id = entry.get("id") if entry is not None else None
                if isinstance(entry_id, str):
                    seen.add(entry_id)
                    if entry_id == self.since_id:
                        self._place(src, item.offset + len(item.raw) + 1, unindexed=False)
                        return True
        self._place(src, end if src.header_done else 0, unindexed=False)
        return False

    def _place(self, src: _Source, offset: int, *, unindexed: bool) -> None:
        src.offset = offset
        src.unindexed = offset if unindexed else 0
        if offset and src.fd is not None:
            src.check = os.pread(src.fd, min(_CHECK, offset), offset - min(_CHECK, offset))

    def _unchanged(self, src: _Source, *, pending: bool = True) -> bool:
        """Whether the bytes before the offset (and the pending line) are still in place."""
        if src.fd is None:
            return True
        if src.check and os.pread(
            src.fd, len(src.check), src.offset - len(src.check)
        ) != src.check:
            return False
        if pending and src.pending:
            return os.pread(src.fd, src.pending_len, src.offset) == b"".join(src.pending)
        return True

    def _drain(self, src: _Source) -> Iterator[TailEvent]:
        """Deliver the complete lines after the offset; keep an incomplete last line pending."""
        while src.fd is not None:
            chunk = os.pread(src.fd, _CHUNK, src.position)
            if not chunk:
                return
            cut = chunk.rfind(b"\n") + 1
            if not cut:
                src.pending.append(chunk)
                src.pending_len += len(chunk)
                continue
            block = b"".join((*src.pending, chunk[:cut])) if src.pending else chunk[:cut]
            rest = chunk[cut:]
            events: list[TailEvent] = []
            start = src.offset
            for raw in block.split(b"\n")[:-1]:
                entry = self._entry(src, start, raw)
                if entry is not None:
                    events.append(TailEvent(ENTRY, src.path, entry))
                start += len(raw) + 1
            src.offset = start
            src.check = (src.check + block)[-_CHECK:] if len(block) < _CHECK else block[-_CHECK:]
            src.pending = [rest] if rest else []
            src.pending_len = len(rest)
            yield from events

    def _entry(self, src: _Source, offset: int, raw: bytes) -> Entry | None:
        value = codec.parse_line(Line(offset, 0, raw))
        if value is None:
            return None
        if isinstance(value, Diagnostic):
            log.warning("%s: byte %s: %s (%s); skipped", src.path, f"{offset:,}", value.reason,
                        value.detail)
            return None
        if not src.header_done:
            src.header_done = True
            if isinstance(value, dict) and value.get("type") == "session":
                src.header = value
                src.version = header_version(value)
                return None
        entry = _usable(value, src.version)
        if entry is None:
            log.warning("%s: byte %s: not a usable entry; skipped", src.path, f"{offset:,}")
            return None
        if src.version < CURRENT_VERSION:
            entry = migrate(src.header, [entry])[0] if src.version == 2 else entry
        entry_id = entry.get("id")
        if isinstance(entry_id, str):
            seen = src.lineage.seen
            if offset < src.dedupe_end and entry_id in seen:
                return None
            seen.add(entry_id)
        if is_seal(entry):
            src.marker = entry
        return entry

    def _restart(self, src: _Source, size: int) -> None:
        """Read the file again from its start, skipping entries whose id was seen."""
        src.offset, src.pending, src.pending_len, src.check = 0, [], 0, b""
        src.unindexed, src.dedupe_end = 0, size
        src.header, src.header_done, src.version = None, False, CURRENT_VERSION

    def _index(self, src: _Source, limit: int | None = None) -> None:
        """Add the ids of the lines before where following began, so no rewrite repeats them."""
        end = src.unindexed if limit is None else min(src.unindexed, limit)
        if src.fd is None or end <= 0:
            src.unindexed = 0
            return
        with _file(src) as f:
            end = last_newline_end(f, end)
            seen = src.lineage.seen
            for item in codec.iter_lines(f, 0, end):
                if isinstance(item, Line):
                    entry = _usable(codec.parse_line(item), src.version)
                    if entry is not None and isinstance(entry.get("id"), str):
                        seen.add(entry["id"])
        src.unindexed = 0


# helpers


def _open_regular(path: str) -> tuple[int, tuple[int, int]] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, (st.st_dev, st.st_ino)


def _file(src: _Source) -> Any:
    """A buffered file object over the source's descriptor, for the codec's line readers."""
    assert src.fd is not None
    return open(src.fd, "rb", closefd=False)  # noqa: SIM115 - closed by the caller's `with`


def _usable(value: Any, version: int) -> Entry | None:
    """The value if it is an entry of this format version (not a header), else None."""
    if isinstance(value, Diagnostic) or value is None:
        return None
    if isinstance(value, dict) and value.get("type") == "session":
        return None
    return value if codec.check_entry(value, version) is None else None


def _first_line(fd: int) -> Line | None:
    """The file's first line if it is complete (has its newline), else None."""
    pieces: list[bytes] = []
    pos, size = 0, 4096
    while chunk := os.pread(fd, size, pos):
        cut = chunk.find(b"\n")
        if cut >= 0:
            pieces.append(chunk[:cut])
            return Line(0, 1, b"".join(pieces))
        pieces.append(chunk)
        pos += len(chunk)
        size = min(size * 2, _CHUNK)
    return None


def _first_line_header(path: str) -> tuple[bool, Entry | None]:
    """(whether the first line is complete, the header on it if it is one)."""
    opened = _open_regular(path)
    if opened is None:
        return False, None
    try:
        first = _first_line(opened[0])
    finally:
        os.close(opened[0])
    if first is None:
        return False, None
    value = codec.parse_line(first)
    if isinstance(value, dict) and value.get("type") == "session":
        return True, value
    return True, None
