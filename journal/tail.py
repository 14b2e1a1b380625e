"""Live tail: follow a session file, or a directory of them, as entries are committed.

`watchfiles` events are only hints: many appends coalesce into one event, and its polling mode
can miss appends made within the same second. So the follower keeps its own byte offset per
file and, on every wake-up (an event, or `timeout` seconds without one), reads from that offset
to the end, holding back an incomplete last line until its newline arrives. Each wake-up also
checks the file itself:

- truncation (the size fell below the offset, or the bytes just before the offset changed):
  re-read the file and deliver only entries whose id was not delivered yet; a warning is logged;
- replacement (the path now names another inode, as after a repair's `os.replace`): read the
  old inode to its end, then re-read the new file the same way;
- rotation (a `custom` entry of type `journal.successor` whose `data.successor` names the
  successor file): continue with the successor from its first entry, skipping the kept entries
  it repeats (they keep their ids);
- deletion: wait up to `grace` seconds for the path to come back or for a successor (a file
  whose header `parentSession` names the old file), then end.

Ids are remembered per lineage (a file and its successors): an entry is never delivered twice,
and none is skipped when a file is rewritten under the follower. Readers never lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import watchfiles

from . import codec
from .codec import Diagnostic, Line
from .errors import JournalError, NotASession, UnknownEntry
from .lineage import is_seal
from .model import CURRENT_VERSION, Entry, header_version, migrate
from .snapshot import last_newline_end

log = logging.getLogger(__name__)

ENTRY = "entry"
ROTATED = "rotated"
REPLACED = "replaced"
TRUNCATED = "truncated"
DELETED = "deleted"
NEW_SESSION = "new_session"
ENDED = "ended"

DEFAULT_GRACE = 10.0
"""Seconds a deleted file (or a missing successor) is waited for before giving up on it."""

# watchfiles wakes up `STEP_MS` after the first change, or at most `DEBOUNCE_MS` after it when
# changes keep coming; together they bound the delivery latency with inotify.
STEP_MS = 5
DEBOUNCE_MS = 20
# Polling mode: watchfiles stats the directory every POLL_DELAY_MS, and the follower re-reads
# every POLL_INTERVAL whatever watchfiles saw (its mtime checks miss same-second appends).
POLL_DELAY_MS = 50
POLL_INTERVAL = 0.05
# watchfiles returns at least this often, so the follower can honour its own deadlines and
# re-read once right after a watcher starts (appends made while it started sent no event).
_TICK_MS = 50

_CHUNK = 1 << 20
_CHECK = 64
_IGNORED_PARTS = (".quarantine", ".lock", ".bak", ".orig", ".tmp", ".swp", "~")

StopSignal = Any
"""A `threading.Event` / `asyncio.Event` (anything with `is_set()`), or a callable -> bool."""


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


def follow_events(
    path: str | os.PathLike[str],
    *,
    from_start: bool = False,
    last: int | None = None,
    since_id: str | None = None,
    stop: StopSignal = None,
    poll: bool | None = None,
    timeout: float = 1.0,
    grace: float = DEFAULT_GRACE,
) -> Generator[TailEvent, None, None]:
    """Follow a session file, or every session in a directory, yielding `TailEvent`s.

    Args:
        path: a session file, or a directory whose `*.jsonl` sessions are all followed
            (quarantine, lock, backup and hidden files are skipped; new sessions are picked up).
        from_start: first yield the entries already in the file(s). By default (none of
            from_start, last, since_id) only entries committed from now on are yielded.
        last: first yield the last `last` entries already in each file.
        since_id: first yield the entries after the entry with this id (in a directory, the
            file holding it starts there, the others at their end).
        stop: ends the follow when set (an Event) or when it returns True (a callable). If it
            is already set once the existing entries are yielded, nothing is watched: a one-shot
            tail. Closing the generator ends the follow too.
        poll: None picks inotify and falls back to polling if inotify cannot be set up (or
            polls if WATCHFILES_FORCE_POLLING is set); True forces polling (for file systems
            without inotify); False refuses to poll.
        timeout: the longest wait, in seconds, between two reads when no event arrives.
        grace: seconds to wait for a deleted file to come back or for its successor.

    The ids of the entries read are kept in memory for each lineage (about 100 bytes per
    entry), to skip the entries a successor or a rewritten file repeats.

    Raises:
        NotASession: the path is missing or neither a file nor a directory.
        UnknownEntry: no followed file holds `since_id`.
        ValueError: more than one of from_start, last and since_id.

    Example:
        >>> for event in follow_events("sessions/a.jsonl", last=5):  # doctest: +SKIP
        ...     print(event.kind, event.path, event.entry and event.entry["id"])
    """
    flag = _Stop(stop)
    follower = _Follower(path, from_start=from_start, last=last, since_id=since_id, grace=grace)
    waker = _Waker(flag, timeout, poll, follower.wants)
    try:
        follower.open()
        yield from follower.poll()
        while not follower.done and waker.wait(follower.watch_dirs()):
            yield from follower.poll()
    finally:
        waker.close()
        follower.close()


def follow(
    path: str | os.PathLike[str],
    *,
    from_start: bool = False,
    last: int | None = None,
    since_id: str | None = None,
    stop: StopSignal = None,
    poll: bool | None = None,
    timeout: float = 1.0,
    grace: float = DEFAULT_GRACE,
) -> Generator[Entry, None, None]:
    """Follow a session file or directory, yielding entries (dicts) as they are committed.

    The same as `follow_events` (see there for the arguments) keeping only the entries; use
    `follow_events` to learn which file each came from and about rotations and repairs.

    Example:
        >>> for entry in follow("sessions/a.jsonl", last=10):  # doctest: +SKIP
        ...     print(entry["id"], entry["type"])
    """
    events = follow_events(path, from_start=from_start, last=last, since_id=since_id,
                           stop=stop, poll=poll, timeout=timeout, grace=grace)
    with closing(events):
        for event in events:
            if event.kind == ENTRY and event.entry is not None:
                yield event.entry


async def afollow_events(
    path: str | os.PathLike[str],
    *,
    from_start: bool = False,
    last: int | None = None,
    since_id: str | None = None,
    stop: StopSignal = None,
    poll: bool | None = None,
    timeout: float = 1.0,
    grace: float = DEFAULT_GRACE,
) -> AsyncGenerator[TailEvent, None]:
    """The asyncio twin of `follow_events`, waiting with `watchfiles.awatch`.

    `stop` may also be an `asyncio.Event`. New bytes are read on the event loop (a wake-up
    reads only what was appended); a long backlog yields control every few hundred entries.
    Cancelling the consuming task, or closing the generator (`contextlib.aclosing`), ends it.

    Example:
        >>> async for event in afollow_events("sessions/a.jsonl"):  # doctest: +SKIP
        ...     print(event.kind, event.entry)
    """
    flag = _Stop(stop)
    follower = _Follower(path, from_start=from_start, last=last, since_id=since_id, grace=grace)
    waker = _AsyncWaker(flag, timeout, poll, follower.wants)
    try:
        follower.open()
        count = 0
        while True:
            for event in follower.poll():
                yield event
                count += 1
                if count % 256 == 0:
                    await asyncio.sleep(0)
            if follower.done or not await waker.wait(follower.watch_dirs()):
                return
    finally:
        await waker.aclose()
        follower.close()


async def afollow(
    path: str | os.PathLike[str],
    *,
    from_start: bool = False,
    last: int | None = None,
    since_id: str | None = None,
    stop: StopSignal = None,
    poll: bool | None = None,
    timeout: float = 1.0,
    grace: float = DEFAULT_GRACE,
) -> AsyncGenerator[Entry, None]:
    """The asyncio twin of `follow`: entries only.

    Example:
        >>> async for entry in afollow("sessions/a.jsonl", last=10):  # doctest: +SKIP
        ...     print(entry["id"])
    """
    events = afollow_events(path, from_start=from_start, last=last, since_id=since_id,
                            stop=stop, poll=poll, timeout=timeout, grace=grace)
    try:
        async for event in events:
            if event.kind == ENTRY and event.entry is not None:
                yield event.entry
    finally:
        await events.aclose()


def is_session_name(name: str) -> bool:
    """Whether a directory entry looks like a session file a directory follow should track."""
    if not name.endswith(".jsonl") or name.startswith("."):
        return False
    return not any(part in name for part in _IGNORED_PARTS)


# waiting


class _Stop:
    """The caller's `stop` as watchfiles wants it: `is_set()`, plus the `set()` awatch calls."""

    def __init__(self, stop: StopSignal) -> None:
        if stop is not None and not hasattr(stop, "is_set") and not callable(stop):
            raise TypeError("stop must be an Event (with is_set()) or a callable returning bool")
        self._stop = stop
        self._set = False

    def is_set(self) -> bool:
        if self._set:
            return True
        stop = self._stop
        if stop is None:
            return False
        check = getattr(stop, "is_set", None)
        return bool(check() if check is not None else stop())

    def set(self) -> None:
        self._set = True


class _WakerBase:
    """Chooses how to wait: inotify, watchfiles polling, or (if neither works) a plain timer."""

    def __init__(
        self, stop: _Stop, timeout: float, poll: bool | None,
        wants: Callable[[watchfiles.Change, str], bool],
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.stop = stop
        self.timeout = timeout
        self.may_fall_back = poll is None
        self.polling = _default_poll() if poll is None else poll
        self.timer_only = False
        self.wants = wants
        self.dirs: tuple[str, ...] = ()
        self.fresh = False

    @property
    def interval(self) -> float:
        return min(self.timeout, POLL_INTERVAL) if self.polling else self.timeout

    def options(self) -> dict[str, Any]:
        return {
            "watch_filter": None,
            "debounce": DEBOUNCE_MS,
            "step": STEP_MS,
            "stop_event": self.stop,
            "rust_timeout": min(_TICK_MS, max(1, int(self.interval * 1000))),
            "yield_on_timeout": True,
            "force_polling": self.polling,
            "poll_delay_ms": POLL_DELAY_MS,
            "recursive": False,
            "ignore_permission_denied": True,
        }

    def failed(self, error: BaseException) -> None:
        """A watcher could not start or broke: poll instead, or fall back to a timer."""
        where = ", ".join(self.dirs)
        if not self.polling and self.may_fall_back:
            log.warning("cannot watch %s with inotify (%s); polling instead", where, error)
            self.polling = True
            return
        if not self.polling:
            raise JournalError(f"cannot watch {where} ({error}); retry with polling") from error
        log.warning("cannot watch %s (%s); re-reading every %gs", where, error, self.interval)
        self.timer_only = True

    def woke(self, changes: set[tuple[watchfiles.Change, str]], deadline: float) -> bool:
        """Whether what watchfiles returned is worth a read: a change to a followed file, the
        first tick of a new watcher, or the end of the interval."""
        if (
            time.monotonic() >= deadline
            or (not changes and self.fresh)
            or any(self.wants(change, path) for change, path in changes)
        ):
            self.fresh = False
            return True
        return False


class _Waker(_WakerBase):
    """Blocks until something changed in a watched directory, or the interval passed."""

    _gen: Iterator[set[tuple[watchfiles.Change, str]]] | None = None

    def wait(self, dirs: tuple[str, ...]) -> bool:
        """Wait for a wake-up; False once `stop` is set."""
        if self.stop.is_set():
            return False
        if dirs != self.dirs:
            self.close()
            self.dirs = dirs
        deadline = time.monotonic() + self.interval
        while not self.timer_only and dirs:
            try:
                if self._gen is None:
                    self._gen = watchfiles.watch(*dirs, raise_interrupt=True, **self.options())
                    self.fresh = True
                changes = next(self._gen)
            except StopIteration:
                self._gen = None
                return False
            except (OSError, RuntimeError) as e:
                self.close()
                self.failed(e)
                continue
            if self.woke(changes, deadline):
                return True
        while (left := deadline - time.monotonic()) > 0:
            if self.stop.is_set():
                return False
            time.sleep(min(left, STEP_MS / 1000))
        return not self.stop.is_set()

    def close(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            gen.close()  # type: ignore[attr-defined]


class _AsyncWaker(_WakerBase):
    """`_Waker` for asyncio, on `watchfiles.awatch`."""

    _gen: AsyncIterator[set[tuple[watchfiles.Change, str]]] | None = None

    async def wait(self, dirs: tuple[str, ...]) -> bool:
        if self.stop.is_set():
            return False
        if dirs != self.dirs:
            await self.aclose()
            self.dirs = dirs
        deadline = time.monotonic() + self.interval
        while not self.timer_only and dirs:
            try:
                if self._gen is None:
                    self._gen = watchfiles.awatch(*dirs, **self.options())
                    self.fresh = True
                changes = await self._gen.__anext__()
            except StopAsyncIteration:
                self._gen = None
                return False
            except (OSError, RuntimeError) as e:
                await self.aclose()
                self.failed(e)
                continue
            if self.woke(changes, deadline):
                return True
        while (left := deadline - time.monotonic()) > 0:
            if self.stop.is_set():
                return False
            await asyncio.sleep(min(left, STEP_MS / 1000))
        return not self.stop.is_set()

    async def aclose(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            await gen.aclose()  # type: ignore[attr-defined]


# reading


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


class _Follower:
    """The follow state machine; `poll()` does one wake-up's reading. No waiting in here."""

    def __init__(
        self, path: str | os.PathLike[str], *, from_start: bool, last: int | None,
        since_id: str | None, grace: float,
    ) -> None:
        if sum((bool(from_start), last is not None, since_id is not None)) > 1:
            raise ValueError("choose at most one of from_start, last and since_id")
        if last is not None and last < 0:
            raise ValueError("last must be 0 or more")
        self.path = os.path.abspath(os.fspath(path))
        self.from_start = from_start
        self.last = last
        self.since_id = since_id
        self.grace = grace
        self.root: str | None = None
        self.sources: list[_Source] = []
        self.retired: dict[str, tuple[int, int]] = {}
        self.done = False
        self._root_gone: float | None = None

    # starting

    def open(self) -> None:
        """Open the file(s) and place each offset where the start mode says."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError as e:
            raise NotASession(self.path, "no such file or directory") from e
        except OSError as e:
            raise NotASession(self.path, e.strerror or str(e)) from e
        if stat.S_ISDIR(st.st_mode):
            self.root = self.path
            # oldest first, so a file is read before a successor that repeats its entries
            paths = sorted(self._session_files(self.root), key=self._created)
        elif stat.S_ISREG(st.st_mode):
            paths = [self.path]
        else:
            raise NotASession(self.path, "neither a session file nor a directory")
        found = False
        for path in paths:
            src = self._open_source(path, None)
            if src is None:
                if self.root is None:
                    raise NotASession(path, "no such file")
                continue
            if self.since_id is not None and not found:
                found = self._seek_since(src)
            elif self.since_id is not None:
                self._seek_end(src)
            elif self.from_start:
                src.unindexed = 0
            elif self.last:
                self._seek_last(src, self.last)
            else:
                self._seek_end(src)
        if self.since_id is not None and not found:
            error = UnknownEntry(self.since_id)
            error.args = (f"{self.path}: no entry with id {self.since_id!r}",)
            raise error
        if self.root is None and not self.sources:
            self.done = True

    def _open_source(self, path: str, lineage: _Lineage | None) -> _Source | None:
        opened = _open_regular(path)
        if opened is None:
            return None
        fd, ident = opened
        src = _Source(path, lineage or _Lineage(), fd, ident)
        if lineage is None and (parent := self._tracked_parent(path)) is not None:
            src.lineage = parent.lineage
            src.dedupe_end = os.fstat(fd).st_size
        self.sources.append(src)
        return src

    def _created(self, path: str) -> tuple[str, str]:
        header = self._header_of(path) or {}
        created = header.get("timestamp")
        return (created if isinstance(created, str) else "", path)

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

    # one wake-up

    def poll(self) -> Iterator[TailEvent]:
        """Read whatever is new in every followed file, and act on what happened to them."""
        for src in list(self.sources):
            if src.fd is not None:
                yield from self._check(src)
        if self.root is not None:
            yield from self._discover()
        elif not self.sources:
            self.done = True

    def _check(self, src: _Source) -> Iterator[TailEvent]:
        assert src.fd is not None
        # Look at the path before reading: whatever was written to our inode before it was
        # renamed, deleted or replaced (a rotation marker, say) is then read before acting.
        try:
            st: os.stat_result | None = os.stat(src.path)
        except OSError:
            st = None
        size = os.fstat(src.fd).st_size
        if size < src.position or not self._unchanged(src):
            yield from self._truncated(src, size)
        yield from self._drain(src)
        if src.marker is not None:
            yield from self._rotate(src)
        elif st is None or not stat.S_ISREG(st.st_mode):
            yield from self._gone(src)
        elif (st.st_dev, st.st_ino) != src.ident:
            yield from self._replaced(src, "replaced by another file")
        elif src.gone_since is not None:
            log.info("%s: is back", src.path)
            src.gone_since = None
            src.announced = False

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

    # what happened to a file

    def _truncated(self, src: _Source, size: int) -> Iterator[TailEvent]:
        if size >= src.offset and self._unchanged(src, pending=False):
            detail = (f"an incomplete last line ({src.pending_len:,} bytes) was cut away; "
                      "it was never delivered")
            src.pending, src.pending_len = [], 0
        else:
            detail = (f"rewritten in place or truncated (from {src.position:,} to {size:,} "
                      "bytes); re-read, delivering only entries not seen yet")
            self._index(src, limit=size)
            self._restart(src, size)
        log.warning("%s: %s", src.path, detail)
        yield TailEvent(TRUNCATED, src.path, None, detail)

    def _replaced(self, src: _Source, why: str) -> Iterator[TailEvent]:
        opened = _open_regular(src.path)
        if opened is None:
            return
        self._index(src)
        src.close()
        src.fd, src.ident = opened
        self._restart(src, os.fstat(src.fd).st_size)
        src.gone_since, src.announced = None, False
        detail = f"{why}; re-read, delivering only entries not seen yet"
        log.info("%s: %s", src.path, detail)
        yield TailEvent(REPLACED, src.path, None, detail)
        yield from self._drain(src)

    def _gone(self, src: _Source) -> Iterator[TailEvent]:
        now = time.monotonic()
        if src.gone_since is None:
            src.gone_since = now
        if not src.announced:
            src.announced = True
            detail = f"deleted; waiting up to {self.grace:g}s for it to return or a successor"
            log.info("%s: %s", src.path, detail)
            yield TailEvent(DELETED, src.path, None, detail)
        successor = self._find_successor(src)
        if successor is not None:
            detail = f"continued in {successor} (its header names {os.path.basename(src.path)})"
            log.info("%s: %s", src.path, detail)
            yield TailEvent(ROTATED, src.path, None, successor)
            yield from self._switch(src, successor)
        elif now - src.gone_since >= self.grace:
            yield from self._end(src, f"gone for {self.grace:g}s; no longer followed")

    def _rotate(self, src: _Source) -> Iterator[TailEvent]:
        marker = src.marker
        assert marker is not None
        named = _marker_successor(marker, src.path)
        if not src.announced:
            src.announced = True
            src.gone_since = time.monotonic()
            log.info("%s: sealed; continued in %s", src.path, named)
            yield TailEvent(ROTATED, src.path, marker, named or "")
        successor = self._find_successor(src)
        if successor is not None:
            yield from self._switch(src, successor)
        elif time.monotonic() - (src.gone_since or 0.0) >= self.grace:
            yield from self._end(src, f"sealed, and its successor {named} did not appear "
                                      f"within {self.grace:g}s")

    def _end(self, src: _Source, detail: str) -> Iterator[TailEvent]:
        # following one file this ends the follow: a warning; in a directory, routine
        log.log(logging.INFO if self.root else logging.WARNING, "%s: %s", src.path, detail)
        self._retire(src)
        yield TailEvent(ENDED, src.path, None, detail)

    def _switch(self, src: _Source, successor: str) -> Iterator[TailEvent]:
        """Continue `src`'s lineage in `successor`, from its first entry."""
        if any(other.path == successor for other in self.sources if other is not src):
            self._retire(src)
            return
        opened = _open_regular(successor)
        if opened is None:
            return
        self._index(src)
        self._retire(src)
        src.path = successor
        src.fd, src.ident = opened
        src.marker, src.announced, src.gone_since = None, False, None
        self._restart(src, os.fstat(src.fd).st_size)
        self.sources.append(src)
        yield from self._drain(src)

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

    def _retire(self, src: _Source) -> None:
        self.retired[src.path] = src.ident
        src.close()
        if src in self.sources:
            self.sources.remove(src)

    # finding files

    def _find_successor(self, src: _Source) -> str | None:
        """The marker's successor if it exists, else a file whose header names this one."""
        named = _marker_successor(src.marker, src.path) if src.marker is not None else None
        if named is not None and os.path.isfile(named):
            return named
        wanted_id = (src.marker or {}).get("data", {}).get("sessionId")
        if wanted_id is not None and wanted_id == (src.header or {}).get("id"):
            wanted_id = None
        dirs = {os.path.dirname(src.path)}
        if named is not None:
            dirs.add(os.path.dirname(named))
        for directory in sorted(dirs):
            for path in self._session_files(directory):
                if path == src.path:
                    continue
                header = self._header_of(path)
                if header is None:
                    continue
                if (wanted_id and header.get("id") == wanted_id) or _names(
                    header.get("parentSession"), src.path
                ):
                    return path
        return None

    def _tracked_parent(self, path: str) -> _Source | None:
        header = self._header_of(path)
        parent = header.get("parentSession") if header else None
        for src in self.sources:
            if _names(parent, src.path):
                return src
        return None

    @staticmethod
    def _header_of(path: str) -> Entry | None:
        return _first_line_header(path)[1]

    def _discover(self) -> Iterator[TailEvent]:
        """Start following session files that appeared in the directory."""
        assert self.root is not None
        if not os.path.isdir(self.root):
            now = time.monotonic()
            if self._root_gone is None:
                self._root_gone = now
                yield TailEvent(DELETED, self.root, None, f"directory deleted; waiting up to "
                                f"{self.grace:g}s for it to return")
            elif now - self._root_gone >= self.grace:
                self.done = True
                yield TailEvent(ENDED, self.root, None, f"directory gone for {self.grace:g}s")
            return
        self._root_gone = None
        tracked = {src.path for src in self.sources}
        for path in self._session_files(self.root):
            if path in tracked:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if self.retired.get(path) == ident or not _first_line_header(path)[0]:
                continue
            parent = self._tracked_parent(path)
            if parent is not None:
                # Everything the new file copied from its parent is in the parent already
                # (rotation holds the parent's writer lock): read that first, then skip copies.
                yield from self._drain(parent)
                self._index(parent)
            src = self._open_source(path, parent.lineage if parent is not None else None)
            if src is None:
                continue
            self._restart(src, os.fstat(src.fd).st_size if src.fd is not None else 0)
            if parent is None:
                header = self._header_of(path) or {}
                yield TailEvent(NEW_SESSION, path, None, f"session {header.get('id')}")
            yield from self._drain(src)

    @staticmethod
    def _session_files(directory: str) -> list[str]:
        try:
            with os.scandir(directory) as it:
                names = [e.name for e in it if is_session_name(e.name) and e.is_file()]
        except OSError:
            return []
        return [os.path.join(directory, name) for name in sorted(names)]

    # for the waker

    def watch_dirs(self) -> tuple[str, ...]:
        dirs = {os.path.dirname(src.path) for src in self.sources}
        if self.root is not None:
            dirs.add(self.root)
        for src in self.sources:
            named = _marker_successor(src.marker, src.path) if src.marker is not None else None
            if named is not None:
                dirs.add(os.path.dirname(named))
        return tuple(sorted(d for d in dirs if os.path.isdir(d)))

    def wants(self, change: watchfiles.Change, path: str) -> bool:
        """Whether a watchfiles change deserves a wake-up (other files' writes do not)."""
        if change != watchfiles.Change.modified:
            return True
        if self.root is not None and os.path.dirname(path) == self.root:
            return is_session_name(os.path.basename(path))
        return any(src.path == path for src in self.sources)

    def close(self) -> None:
        for src in self.sources:
            src.close()
        self.sources = []


# helpers


def _default_poll() -> bool:
    """Poll when WATCHFILES_FORCE_POLLING asks for it, as watchfiles itself does."""
    value = os.environ.get("WATCHFILES_FORCE_POLLING", "")
    return bool(value) and value.lower() not in ("false", "disable", "disabled")


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


def _marker_successor(marker: Entry | None, old_path: str) -> str | None:
    data = marker.get("data") if marker is not None else None
    successor = data.get("successor") if isinstance(data, dict) else None
    if isinstance(successor, str) and successor:
        return os.path.join(os.path.dirname(old_path), successor)
    name = data.get("file") if isinstance(data, dict) else None
    if isinstance(name, str) and name:
        return os.path.join(os.path.dirname(old_path), os.path.basename(name))
    return None


def _names(parent: Any, path: str) -> bool:
    """Whether a header's `parentSession` names `path`, where it is now or once archived."""
    if not isinstance(parent, str) or not parent:
        return False
    parent = parent.removesuffix(".gz")  # archives may be compressed after sealing
    return os.path.abspath(parent) == path or os.path.basename(parent) == os.path.basename(path)
