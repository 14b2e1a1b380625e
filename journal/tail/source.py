"""Reading one followed session: its state, its offsets and its incomplete last line.

A `Source` is a followed session: its `Storage` (the seam: every byte is read through a
`Reader` of it, every replacement or deletion is noticed through its `mark()`), an open
reader, the byte offset just past the last complete line consumed, an incomplete last line
held back until its newline arrives, and both ends of the last complete line before the
offset (to notice a rewrite in place). `Delivered` is what a lineage has delivered, by id:
the follower's precise notion of "delivered" (see there). `SourceReader` holds the
follower's methods that place the offset where a start mode says (counting what lies before
it as delivered), read what was appended, turn lines into entries (skipping delivered ids),
read a compressed archive, and re-read a session from its start. `TailEvent` and its kinds
live here too, as everything below the public API yields them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from .. import archivegz, codec
from ..claude import CLAUDE, PI, Translator, detect_stream
from ..claude.detect import record_dialect
from ..codec import Diagnostic, Line
from ..errors import NotASession
from ..header import is_header, stream_first_line
from ..model import CURRENT_VERSION, Entry, header_version, migrate
from ..seal import is_seal
from ..snapshot import last_newline_end
from ..storage import Reader, Storage, as_storage

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
_HEAD = 128
MAX_LINE = 256 << 20  # longer lines are skipped: a line that never ends costs no memory
_HEAD_SEARCH = 1 << 16
# an entry line that starts with its type and id, neither holding a quote or backslash
_ID_FIRST = re.compile(rb'\{"type":"([^"\\]*)","id":"([^"\\]*)"')


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


class Delivered:
    """What a lineage (a file and its successors) has delivered, by entry id.

    The follower's one notion of "delivered", kept exactly rather than inferred by re-reading
    a file. `ids` holds the id of every entry read from the file being followed: those
    yielded to the caller, those skipped as repeats, and those the start mode placed before
    the start (the *baseline*: with the default start, everything already in the file; with
    `last=N`, all but the last N; with `since_id`, everything up to that id), gathered once
    when following begins. `before` holds the ids of the file the followed one continues. Then:

    - an entry is delivered if and only if its id is in neither set: each id at most once;
    - after a truncation or an in-place rewrite, the file is read again from its start: the
      entries appended since (whether or not the follower woke up in between) are delivered,
      the ones already delivered are not repeated, and the ones cut away before the follower
      saw them are gone and never delivered;
    - after a replacement (a new inode under the same name, as after a repair), likewise: an
      entry whose id was delivered is not delivered again even if its line changed; an entry
      with a new id is delivered;
    - after a rotation (`moved_on`), the successor and any files between (archived, even
      compressed, when several rotations happened between two reads) are read from their
      start, each against the ids of the file before it: the kept entries rotation copied
      from that file are skipped, everything else is delivered. Only the file before counts,
      since rotation copies from it alone. Rotation writes what it copies first, and its seal
      names the last entry copied (`lastCopied`, format.md § 8.1): once that entry is read,
      `before` is dropped, so a later entry whose writer drew an id of the file before (one
      that does not check that file, or not yet) is still delivered. A seal without it (of
      an earlier version) keeps `before` for the whole file.

    Entries without an id (version 1 files) cannot be told apart: they are delivered as read.
    """

    __slots__ = ("before", "copied_until", "ids")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.before: set[str] = set()
        self.copied_until: str | None = None

    def first_time(self, entry_id: str) -> bool:
        """Record `entry_id` as read from the followed file; whether it is to be delivered."""
        new = entry_id not in self.ids and entry_id not in self.before
        self.ids.add(entry_id)
        if entry_id == self.copied_until:
            self.before, self.copied_until = set(), None  # past what rotation copied
        return new

    def moved_on(self, copied_until: str | None = None) -> None:
        """The lineage goes on in the file that continues the one read so far, into which
        rotation copied the entries up to `copied_until` (None: not known)."""
        self.before, self.ids = self.ids, set()
        self.copied_until = copied_until


@dataclass(eq=False)
class Source:
    """One followed file: where it was read up to, and what is known about it.

    `path` is the file's name in its session folder, even once it has been moved into the
    archive, and `storage` the session under that name (whose `mark()` tells whether it was
    replaced or deleted); `reader` keeps reading the generation it opened (the same inode, or
    the archived copy) until the follower moves on.
    """

    path: str
    delivered: Delivered
    storage: Storage
    reader: Reader | None = None
    offset: int = 0  # just past the last complete line consumed
    # an incomplete line after offset: its length and first bytes (the rest stays on disk
    # until its newline arrives, so a line that never ends costs no memory)
    pending_head: bytes = b""
    pending_len: int = 0
    check: bytes = b""  # the bytes just before offset, to notice a rewrite in place
    head: bytes = b""  # the start of the last complete line before offset, at head_at
    head_at: int = 0
    header: Entry | None = None
    header_done: bool = False
    version: int = CURRENT_VERSION
    translator: Translator | None = None  # a Claude Code transcript's, one entry per record
    marker: Entry | None = None
    announced: bool = False  # the rotation (or deletion) was reported
    gone_since: float | None = None

    @property
    def position(self) -> int:
        return self.offset + self.pending_len

    @property
    def generation(self) -> Hashable:
        """The generation being read (None once closed)."""
        return self.reader.generation if self.reader is not None else None

    def read(self, offset: int, length: int) -> bytes:
        assert self.reader is not None
        return self.reader.read(offset, length)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None


class SourceReader:
    """The follower's reading of one `Source`: placing its offset, and reading from it.

    What the follower calls: `seek_start`, `seek_end`, `seek_last` and `seek_since` place the
    offset where a start mode says; `drain` (and `read_compressed` for a gzip archive) reads
    what was appended; `unchanged` tells whether the bytes already read are still in place;
    `restart` makes the next read start from the top of the file.
    """

    since_id: str | None
    dialect: str | None = None  # forced: "pi" or "claude"; None tells each file by its records

    def _read_header(self, src: Source) -> int:
        """Parse the header line; return where the body starts (0 if no header)."""
        assert src.reader is not None
        first = stream_first_line(src.reader.stream)
        src.header_done = first.complete
        if self.dialect == CLAUDE or (self.dialect is None and first.header is None
                                      and detect_stream(src.reader.stream) == CLAUDE):
            src.translator = Translator(merge=False)
            src.header_done = True
            return 0
        if first.header is not None:
            src.header = first.header
            src.version = header_version(first.header)
        return first.end

    def seek_end(self, src: Source) -> None:
        """Place the offset at the end: only entries appended from now on are delivered."""
        end = last_newline_end(_stream(src), _extent(src))
        body = self._read_header(src)
        start = max(end, body) if src.header_done else 0
        self._baseline(src, body, start)
        self._place(src, start)

    def seek_last(self, src: Source, count: int) -> None:
        """Place the offset before the last `count` entries."""
        end = last_newline_end(_stream(src), _extent(src))
        body = self._read_header(src)
        start = body
        found = 0
        if src.translator is not None:  # a record may give no entry: count forward
            start = self._last_records(src, body, end, count)
        for line in _reader(src).lines_backward(end) if src.translator is None else ():
            if line.offset < body:
                break
            if self._counts(src, codec.parse_line(line)):
                found += 1
                start = line.offset
                if found == count:
                    break
        start = start if src.header_done else 0
        self._baseline(src, body, start)
        self._place(src, start)

    @staticmethod
    def _last_records(src: Source, body: int, end: int, count: int) -> int:
        """Where the records giving a Claude Code transcript's last `count` entries start.

        Not every record with a uuid gives an entry (a duplicate uuid, a message that is not
        an object), and records without one (`summary`, `ai-title`) give none: the records
        are read forward through a translator of their own, as the tail will read them.
        """
        counter = Translator(merge=False)
        giving: list[tuple[int, int]] = []  # (offset of a record, entries it gives)
        for item in _reader(src).lines(body, end):
            if isinstance(item, Line):
                value = codec.parse_line(item)
                if isinstance(value, dict) and (given := len(counter.feed(value))):
                    giving.append((item.offset, given))
        start, found = body, 0
        for offset, given in reversed(giving):
            if found >= count:
                break
            start, found = offset, found + given
        return start

    def seek_since(self, src: Source) -> bool:
        """Place the offset just after the entry `since_id`; False (at the end) if absent."""
        end = last_newline_end(_stream(src), _extent(src))
        body = self._read_header(src)
        ids = src.delivered.ids
        for item in _reader(src).lines(body, end):
            if not isinstance(item, Line):
                continue
            for entry in self._read_entries(src, codec.parse_line(item)):
                entry_id = entry.get("id")
                if isinstance(entry_id, str):
                    ids.add(entry_id)
                    if entry_id == self.since_id:
                        self._place(src, item.offset + len(item.raw) + 1)
                        return True
        self._place(src, end if src.header_done else 0)
        return False

    def seek_start(self, src: Source) -> None:
        """Place the offset at the first entry: everything in the file is to be delivered."""
        body = self._read_header(src)
        self._place(src, body if src.header_done else 0)

    def _baseline(self, src: Source, body: int, start: int) -> None:
        """Count the entries before the start as delivered (see `Delivered`); a seal among
        them still leads on to the successor.

        This reads every line before the start once. A line that opens with its type and id
        (the key order pi and this library write) and has no other "id" anywhere is not
        parsed: its id can only be that one. Any other line is parsed.
        """
        ids = src.delivered.ids
        fast = src.version == CURRENT_VERSION and src.translator is None
        for item in _reader(src).lines(body, start):
            if not isinstance(item, Line):
                continue
            raw = item.raw
            if fast and (known := _ID_FIRST.match(raw)) is not None and raw.count(b'"id"') == 1:
                kind, entry_id = known.groups()
                if kind not in (b"custom", b"session"):
                    ids.add(entry_id.decode())
                    src.marker = None
                    continue
            for entry in self._read_entries(src, codec.parse_line(item)):
                if isinstance(entry.get("id"), str):
                    ids.add(entry["id"])
                src.marker = entry if is_seal(entry) else None

    def _place(self, src: Source, offset: int) -> None:
        src.offset = offset
        src.check, src.head, src.head_at = b"", b"", 0
        if offset and src.reader is not None:
            src.check = src.read(offset - min(_CHECK, offset), min(_CHECK, offset))
            before = src.read(offset - min(_HEAD_SEARCH, offset), min(_HEAD_SEARCH, offset))
            cut = before.rfind(b"\n", 0, len(before) - 1) + 1
            if cut or len(before) == offset:
                src.head_at = offset - len(before) + cut
                src.head = before[cut:cut + _HEAD]

    def unchanged(self, src: Source, *, pending: bool = True) -> bool:
        """Whether the bytes before the offset (and the pending line) are still in place.

        Both ends of the last complete line are compared: its start holds the entry's id, so
        a different entry of the same length ending at the same offset is still noticed.
        """
        if src.reader is None:
            return True
        if src.check and src.read(src.offset - len(src.check), len(src.check)) != src.check:
            return False
        if src.head and src.read(src.head_at, len(src.head)) != src.head:
            return False
        if pending and src.pending_head:
            return src.read(src.offset, len(src.pending_head)) == src.pending_head
        return True

    def drain(self, src: Source) -> Iterator[TailEvent]:
        """Deliver the complete lines after the offset; keep an incomplete last line pending.

        A pending line is not held in memory: when its newline arrives it is read back from
        the file, unless it is longer than `MAX_LINE`, in which case it is skipped with a
        warning (`journal show` still reports it).
        """
        while src.reader is not None:
            chunk = src.reader.read(src.position, _CHUNK)
            if not chunk:
                return
            cut = chunk.rfind(b"\n") + 1
            if not cut:
                src.pending_head = (src.pending_head + chunk)[:_HEAD]
                src.pending_len += len(chunk)
                continue
            start = src.offset
            if not src.pending_len:
                block = chunk[:cut]
            elif src.pending_len + chunk.find(b"\n") + 1 > MAX_LINE:
                skipped = src.pending_len + chunk.find(b"\n") + 1
                log.warning("%s: byte %s: a line of %s bytes is longer than the tail reads "
                            "(%s); skipped", src.path, f"{start:,}", f"{skipped:,}",
                            f"{MAX_LINE:,}")
                start += skipped
                block = chunk[chunk.find(b"\n") + 1:cut]
            else:
                block = src.reader.read(src.offset, src.pending_len) + chunk[:cut]
            events: list[TailEvent] = []
            raws = block.split(b"\n")[:-1]
            begin = start
            for raw in raws:
                events.extend(TailEvent(ENTRY, src.path, entry)
                              for entry in self._entries(src, start, raw))
                start += len(raw) + 1
            src.offset = start
            src.check = (src.check + block)[-_CHECK:] if len(block) < _CHECK else block[-_CHECK:]
            if raws:
                src.head_at = start - len(raws[-1]) - 1
                src.head = raws[-1][:_HEAD]
            else:
                src.head, src.head_at = b"", begin
            rest = chunk[cut:]
            src.pending_head, src.pending_len = rest[:_HEAD], len(rest)
            yield from events

    def read_compressed(self, src: Source) -> Iterator[TailEvent]:
        """Deliver the entries of a compressed archive (sealed: it no longer changes)."""
        size = _extent(src)
        offset = 0
        with archivegz.reader(_stream(src)) as f:
            try:
                for line in f:
                    if line.endswith(b"\n"):
                        for entry in self._entries(src, offset, line[:-1]):
                            yield TailEvent(ENTRY, src.path, entry)
                    offset += len(line)
            except archivegz.UNREADABLE as e:
                log.warning("%s: compressed archive unreadable at byte %s of its data (%s)",
                            src.path, f"{offset:,}", e)
        src.offset, src.pending_head, src.pending_len = size, b"", 0
        src.check, src.head, src.head_at = b"", b"", 0

    def _entries(self, src: Source, offset: int, raw: bytes) -> list[Entry]:
        """The entries of one line not delivered yet (a Claude Code record may make several,
        or none: metadata)."""
        value = codec.parse_line(Line(offset, 0, raw))
        if value is None:
            return []
        if isinstance(value, Diagnostic):
            log.warning("%s: byte %s: %s (%s); skipped", src.path, f"{offset:,}", value.reason,
                        value.detail)
            return []
        if not src.header_done:
            src.header_done = True
            if is_header(value):
                src.header = value
                src.version = header_version(value)
                return []
            if self.dialect != PI and record_dialect(value) == CLAUDE:
                src.translator = Translator(merge=False)
        if src.translator is not None:
            if not isinstance(value, dict):
                log.warning("%s: byte %s: not a record; skipped", src.path, f"{offset:,}")
                return []
            found = src.translator.feed(value)
        else:
            entry = self._migrated(src, _usable(value, src.version))
            if entry is None:
                log.warning("%s: byte %s: not a usable entry; skipped", src.path,
                            f"{offset:,}")
                return []
            found = [entry]
        out = []
        for entry in found:
            if is_seal(entry):
                src.marker = entry
            entry_id = entry.get("id")
            if isinstance(entry_id, str) and not src.delivered.first_time(entry_id):
                continue
            out.append(entry)
        return out

    def _read_entries(self, src: Source, value: Any) -> list[Entry]:
        """The entries a parsed line holds, read before the start (nothing is delivered)."""
        if src.translator is not None:
            return src.translator.feed(value) if isinstance(value, dict) else []
        entry = self._migrated(src, _usable(value, src.version))
        return [] if entry is None else [entry]

    @staticmethod
    def _counts(src: Source, value: Any) -> bool:
        """Whether a parsed line makes an entry (for `last=N`)."""
        if src.translator is not None:
            return isinstance(value, dict) and isinstance(value.get("uuid"), str)
        return _usable(value, src.version) is not None

    @staticmethod
    def _migrated(src: Source, entry: Entry | None) -> Entry | None:
        if entry is not None and src.version == 2:
            return migrate(src.header, [entry])[0]
        return entry

    def restart(self, src: Source) -> None:
        """Read the file again from its start (entries already delivered are skipped)."""
        src.offset, src.pending_head, src.pending_len = 0, b"", 0
        src.check, src.head, src.head_at = b"", b"", 0
        src.header, src.header_done, src.version = None, False, CURRENT_VERSION
        src.translator = None


# helpers


def open_regular(storage: Storage | str) -> Reader | None:
    """A reader of the session now, or None if there is none yet (or it is not a session:
    for a file, a folder or FIFO is never opened in a way that could block)."""
    try:
        return as_storage(storage).open_reader()
    except (OSError, NotASession):
        return None


def _reader(src: Source) -> Reader:
    assert src.reader is not None
    return src.reader


def _extent(src: Source) -> int:
    return _reader(src).extent()


def _stream(src: Source) -> BinaryIO:
    """The reader's stream, for the line readers that need one (the reader owns it)."""
    return _reader(src).stream


def _usable(value: Any, version: int) -> Entry | None:
    """The value if it is an entry of this format version (not a header), else None."""
    if isinstance(value, Diagnostic) or value is None:
        return None
    if is_header(value):
        return None
    return value if codec.check_entry(value, version) is None else None
