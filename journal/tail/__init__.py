"""Live tail: follow a session file, or a directory of them, as entries are committed.

`watchfiles` events are only hints: many appends coalesce into one event, and its polling mode
can miss appends made within the same second. So the follower keeps its own byte offset per
file and, on every wake-up (an event, or `timeout` seconds without one), reads from that offset
to the end, holding back an incomplete last line until its newline arrives. Each wake-up also
checks the file itself:

- truncation (the size fell below the offset, or the last line read changed): re-read the
  file from its start, delivering only entries not delivered yet; a warning is logged;
- replacement (the path now names another inode, as after a repair's `os.replace`): read the
  old inode to its end, then re-read the new file the same way;
- rotation (a `custom` entry of type `journal.successor` naming the successor file): continue
  with the successor from its first entry, skipping the kept entries it repeats (they keep
  their ids). When several rotations happened between two reads, the files between are read
  from the archive (compressed or not) on the way to the live one;
- deletion: wait up to `grace` seconds for the path to come back or for a successor (a file
  whose chain of `parentSession` headers leads back to the old file), then end.

What "delivered" means is exact, not inferred by re-reading a file (see
`journal.tail.source.Delivered`): each lineage (a file and its successors) keeps the ids it has
delivered, plus the ids of the entries the start mode placed before the start. An entry is
delivered when it is read from a file of the lineage and its id is not among them: every id
at most once, and every entry that stays in the lineage's files exactly once, whatever was
truncated, replaced or rotated between two reads. An entry cut away before a read saw it is
never delivered; an entry whose line changed after it was delivered is not delivered again.
A sealed file is followed to its successor as long as a chain of seals and archives leads to
one. Readers never lock.

This package's `__init__` is the public API (import from here). The machinery behind it:
`source` reads one session (offsets, incomplete last lines, entries, what was delivered) and
defines `TailEvent`; `follow` is the state machine over every followed session (re-sync,
rotation, directory mode); `chain` is the catalog, the only part that knows sessions are files
in folders (what the followed name is, a folder's sessions, where a file goes on through
seals, archives and `parentSession` chains); `wait` decides when to read again. Every byte of
a followed session is read through the storage seam (`journal.storage`: a `Storage`'s reader,
its `mark()` for replacements and deletions) and every wait goes through one standing `Watch`
(`Storage.open_watch`: for files, inotify, polling or a timer), so a second backend is
followed by this same logic. Nothing outside the package imports those modules.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import closing

from ..model import Entry
from ..storage import Storage
from .chain import marker_successor
from .follow import Follower, is_session_name
from .source import (
    DELETED,
    ENDED,
    ENTRY,
    NEW_SESSION,
    REPLACED,
    ROTATED,
    TRUNCATED,
    TailEvent,
)
from .wait import (
    DEBOUNCE_MS,
    POLL_DELAY_MS,
    POLL_INTERVAL,
    STEP_MS,
    AsyncWaker,
    Stop,
    StopSignal,
    Waker,
)

__all__ = [
    "DEBOUNCE_MS",
    "DEFAULT_GRACE",
    "DELETED",
    "ENDED",
    "ENTRY",
    "NEW_SESSION",
    "POLL_DELAY_MS",
    "POLL_INTERVAL",
    "REPLACED",
    "ROTATED",
    "STEP_MS",
    "TRUNCATED",
    "Follower",
    "StopSignal",
    "TailEvent",
    "afollow",
    "afollow_events",
    "follow",
    "follow_events",
    "is_session_name",
    "marker_successor",
]

DEFAULT_GRACE = 10.0
"""Seconds a deleted file (or a missing successor) is waited for before giving up on it."""


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
    open_storage: Callable[[str], Storage] | None = None,
    dialect: str | None = None,
) -> Generator[TailEvent, None, None]:
    """Follow a session file, or every session in a directory, yielding `TailEvent`s.

    Args:
        path: a session file, or a directory whose `*.jsonl` sessions are all followed
            (quarantine, lock, backup and hidden files are skipped; new sessions are picked up),
            or a database session (`postgresql://...?session=<id>`, `pg:<id>`: woken by
            LISTEN/NOTIFY, through rotations into successor sessions).
        from_start: first yield the entries already in the file(s). By default (none of
            from_start, last, since_id) only entries committed from now on are yielded.
        last: first yield the last `last` entries already in each file.
        since_id: first yield the entries after the entry with this id (in a directory, the
            file holding it starts there, the others at their end).
        stop: ends the follow when set (an Event) or when it returns True (a callable). If it
            is set from the start, the follow is a one-shot tail: the entries already in the
            file(s) named, nothing watched, and a sealed file's successor not read (the
            `ROTATED` event names it). If it is set once the existing entries are yielded,
            nothing is watched either. Closing the generator ends the follow too.
        poll: None picks inotify and falls back to polling if inotify cannot be set up (or
            polls if WATCHFILES_FORCE_POLLING is set); True forces polling (for file systems
            without inotify); False refuses to poll.
        timeout: the longest wait, in seconds, between two reads when no event arrives.
        grace: seconds to wait for a deleted file to come back or for its successor.
        dialect: read every file as "pi" or "claude" (a Claude Code transcript) instead of
            telling each from its records.
        open_storage: how a session file's path becomes the `Storage` it is read and
            watched through (`journal.storage.FileStorage` by default).

    The ids of the entries delivered, and of those before the start (read once, when the
    follow starts), are kept in memory for each lineage (about 100 bytes per entry), to skip
    the entries a successor or a rewritten file repeats.

    Raises:
        NotASession: the path is missing or neither a file nor a directory.
        UnknownEntry: no followed file holds `since_id`.
        ValueError: more than one of from_start, last and since_id.

    Example:
        >>> for event in follow_events("sessions/a.jsonl", last=5):  # doctest: +SKIP
        ...     print(event.kind, event.path, event.entry and event.entry["id"])
    """
    flag = Stop(stop)
    follower = Follower(path, from_start=from_start, last=last, since_id=since_id, grace=grace,
                        open_storage=open_storage, dialect=dialect,
                        cross_seals=not flag.is_set())
    waker = Waker(follower.catalog.open_watch(follower.path, flag, timeout, poll))
    try:
        follower.open()
        yield from follower.poll()
        while not follower.done and waker.wait(follower.targets()):
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
    open_storage: Callable[[str], Storage] | None = None,
    dialect: str | None = None,
) -> Generator[Entry, None, None]:
    """Follow a session file or directory, yielding entries (dicts) as they are committed.

    The same as `follow_events` (see there for the arguments) keeping only the entries; use
    `follow_events` to learn which file each came from and about rotations and repairs.

    Example:
        >>> for entry in follow("sessions/a.jsonl", last=10):  # doctest: +SKIP
        ...     print(entry["id"], entry["type"])
    """
    events = follow_events(path, from_start=from_start, last=last, since_id=since_id,
                           stop=stop, poll=poll, timeout=timeout, grace=grace,
                           open_storage=open_storage, dialect=dialect)
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
    open_storage: Callable[[str], Storage] | None = None,
    dialect: str | None = None,
) -> AsyncGenerator[TailEvent, None]:
    """The asyncio twin of `follow_events`, waiting with `watchfiles.awatch`.

    `stop` may also be an `asyncio.Event`. New bytes are read on the event loop (a wake-up
    reads only what was appended); a long backlog yields control every few hundred entries.
    Cancelling the consuming task, or closing the generator (`contextlib.aclosing`), ends it.

    Example:
        >>> async for event in afollow_events("sessions/a.jsonl"):  # doctest: +SKIP
        ...     print(event.kind, event.entry)
    """
    import asyncio  # only the asyncio twins need it; `import journal` stays light

    flag = Stop(stop)
    follower = Follower(path, from_start=from_start, last=last, since_id=since_id, grace=grace,
                        open_storage=open_storage, dialect=dialect,
                        cross_seals=not flag.is_set())
    waker = AsyncWaker(follower.catalog.open_watch(follower.path, flag, timeout, poll))
    try:
        follower.open()
        count = 0
        while True:
            for event in follower.poll():
                yield event
                count += 1
                if count % 256 == 0:
                    await asyncio.sleep(0)
            if follower.done or not await waker.wait(follower.targets()):
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
    open_storage: Callable[[str], Storage] | None = None,
    dialect: str | None = None,
) -> AsyncGenerator[Entry, None]:
    """The asyncio twin of `follow`: entries only.

    Example:
        >>> async for entry in afollow("sessions/a.jsonl", last=10):  # doctest: +SKIP
        ...     print(entry["id"])
    """
    events = afollow_events(path, from_start=from_start, last=last, since_id=since_id,
                            stop=stop, poll=poll, timeout=timeout, grace=grace,
                            open_storage=open_storage, dialect=dialect)
    try:
        async for event in events:
            if event.kind == ENTRY and event.entry is not None:
                yield event.entry
    finally:
        await events.aclose()
