"""The follow state machine: every followed file, re-synced when it changes under the reader.

`Follower.poll()` does one wake-up's reading (see `journal.tail` for what it does when a file
is truncated, replaced, rotated or deleted). On top of `SourceReader`'s per-file reading it
holds what spans files: the start modes, re-sync after truncation and replacement, rotation
(following the chain `journal.tail.chain` finds to the live file, however many rotations happened
between two reads), deletion, directory mode (new sessions, joined to the lineage of a
followed file they continue, and the directory's own deletion), and what the waker needs (the
storages and places to wait on).

It knows no file system: every byte of a followed session is read through a `Storage`'s
reader (`journal.tail.source`), a replacement or deletion is noticed through `Storage.mark`,
and where sessions live (the followed folder, its sessions, archives and successors) is asked
of the catalog (`journal.tail.chain.FileCatalog`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Hashable, Iterator

from ..claude import check_dialect
from ..errors import ArchiveElsewhere, GenerationGone, NotASession, UnknownEntry, Unreachable
from ..lineage import MAX_HOPS
from ..pg.url import is_database_url
from ..seal import last_copied
from ..storage import Storage
from .chain import Catalog, FileCatalog, FollowTargets, is_session_name
from .source import (
    DELETED,
    ENDED,
    NEW_SESSION,
    REPLACED,
    ROTATED,
    TRUNCATED,
    Delivered,
    Source,
    SourceReader,
    TailEvent,
    open_regular,
)

__all__ = ["Follower", "is_session_name"]

# logged under the public module's name, which is what callers configure
log = logging.getLogger("journal.tail")
# how many times a follower opens a session that keeps being replaced under it as it starts
OPEN_TRIES = 3


def catalog_for(path: str | os.PathLike[str],
                open_storage: Callable[[str], Storage] | None = None) -> Catalog:
    """The catalog of the backend `path` names: a database session URL, or files."""
    if is_database_url(path):
        from .dbchain import DatabaseCatalog

        return DatabaseCatalog()
    return FileCatalog(open_storage)


class Follower(SourceReader):
    """The follow state machine, without any waiting: `open()`, then `poll()` per wake-up.

    `follow_events` drives it with a waker; tests (or a caller with its own event loop) may
    call `poll()` themselves, for example between changes made to the files.
    `cross_seals=False` reads each file as named: at a seal, the `ROTATED` event, and the
    file is followed no further (its successor is not read; a one-shot tail).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, from_start: bool = False,
        last: int | None = None, since_id: str | None = None, grace: float = 10.0,
        open_storage: Callable[[str], Storage] | None = None, dialect: str | None = None,
        catalog: Catalog | None = None, cross_seals: bool = True,
    ) -> None:
        if sum((bool(from_start), last is not None, since_id is not None)) > 1:
            raise ValueError("choose at most one of from_start, last and since_id")
        if last is not None and last < 0:
            raise ValueError("last must be 0 or more")
        self.catalog: Catalog = catalog if catalog is not None else catalog_for(
            path, open_storage)
        self.path = self.catalog.canonical(path)
        self.from_start = from_start
        self.last = last
        self.since_id = since_id
        self.dialect = check_dialect(dialect)
        self.grace = grace
        self.cross_seals = cross_seals
        self.root: str | None = None
        self.sources: list[Source] = []
        self.retired: dict[str, Hashable] = {}
        self.done = False
        self._root_gone: float | None = None
        self._unreachable: float | None = None  # since when the store cannot be reached
        self._causes: set[str] = set()  # why it cannot, as said while that lasts

    # starting

    def open(self) -> None:
        """Open the file(s) and place each offset where the start mode says."""
        self.root, paths = self.catalog.resolve(self.path)
        found = False
        for path in paths:
            src = self._open_source(path, None)
            if src is None:
                if self.root is None:
                    raise NotASession(path, "no such file")
                continue
            for attempt in range(1, OPEN_TRIES + 1):
                try:
                    found = self._placed(src, found)
                    break
                except GenerationGone:
                    # replaced twice as it was opened (a database session): open it again
                    reopened = open_regular(src.storage)
                    if attempt == OPEN_TRIES or reopened is None:
                        raise
                    src.close()
                    src.reader = reopened
                    self.restart(src)
        if self.since_id is not None and not found:
            error = UnknownEntry(self.since_id)
            error.args = (f"{self.path}: no entry with id {self.since_id!r}",)
            raise error
        if self.root is None and not self.sources:
            self.done = True

    def _placed(self, src: Source, found: bool) -> bool:
        """Place a newly opened source's offset where the start mode says; whether the
        entry `since_id` was found in it or in one placed before (`found`)."""
        if self.since_id is not None and not found:
            return self.seek_since(src)
        if self.since_id is not None:
            self.seek_end(src)
        elif self.from_start:
            self.seek_start(src)
        elif self.last:
            self.seek_last(src, self.last)
        else:
            self.seek_end(src)
        return found

    def _open_source(self, path: str, delivered: Delivered | None) -> Source | None:
        storage = self.catalog.storage(path)
        reader = open_regular(storage)
        if reader is None:
            return None
        if delivered is None:
            ancestor = self._tracked_ancestor(path)
            delivered = ancestor.delivered if ancestor is not None else Delivered()
        src = Source(path, delivered, storage, reader)
        self.sources.append(src)
        return src

    # one wake-up

    def poll(self) -> Iterator[TailEvent]:
        """Read whatever is new in every followed file, and act on what happened to them.
        While the store cannot be reached (a database server restarting), nothing: a warning,
        again only when the cause changes (shutting down, then refused), and the next
        wake-up tries again (what was not read yet is read then)."""
        try:
            for src in list(self.sources):
                if src.reader is not None and src in self.sources:
                    yield from self._check(src)
            if self.root is not None:
                yield from self._discover()
            elif not self.sources:
                self.done = True
        except Unreachable as e:
            self._unreached(str(e))
            return
        if self._unreachable is not None:
            log.warning("%s: reachable again after %.0fs; reading on", self.path,
                        time.monotonic() - self._unreachable)
            self._unreachable = None
            self._causes.clear()

    def _unreached(self, cause: str) -> None:
        """Say why the store cannot be reached: at first, and when the cause changes to one
        not said yet while this lasts (once each, however often the tries alternate)."""
        now = time.monotonic()
        if self._unreachable is None:
            self._unreachable = now
        if cause in self._causes:
            return
        self._causes.add(cause)
        if len(self._causes) == 1:
            log.warning("%s; reading on once it can be reached", cause)
        else:
            log.warning("%s (unreachable for %.0fs); reading on once it can be reached", cause,
                        now - self._unreachable)

    def _check(self, src: Source) -> Iterator[TailEvent]:
        assert src.reader is not None
        # Look at the session's mark before reading: whatever was written to our generation
        # before it was renamed, deleted or replaced (a rotation marker, say) is then read
        # before acting.
        mark = src.storage.mark()
        try:
            size = src.reader.extent()
            # a session gone with nothing left to read (a database session's row deleted:
            # no rows) is said gone below, not truncated; a file moved away keeps its bytes
            gone = mark is None and size == 0
            if not gone and (size < src.position or not self.unchanged(src)):
                yield from self._truncated(src, size)
            yield from self.drain(src)
        except ArchiveElsewhere as e:
            yield from self._elsewhere(src, e)
            return
        except GenerationGone as e:
            # the rows of the generation read are gone: read the current one, as after any
            # replacement
            yield from self._replaced(src, e.why)
            return
        if src.marker is not None:
            yield from self._follow_seals(src)
        elif mark is None:
            yield from self._gone(src)
        elif mark.generation != src.generation:
            yield from self._replaced(src, "replaced by another file")
        elif src.gone_since is not None:
            log.info("%s: is back", src.path)
            src.gone_since = None
            src.announced = False

    # what happened to a file

    def _truncated(self, src: Source, size: int) -> Iterator[TailEvent]:
        if size >= src.offset and self.unchanged(src, pending=False):
            detail = (f"an incomplete last line ({src.pending_len:,} bytes) was cut away; "
                      "it was never delivered")
            src.pending_head, src.pending_len = b"", 0
        else:
            detail = (f"rewritten in place or truncated (from {src.position:,} to {size:,} "
                      "bytes); re-read, delivering only entries not delivered yet")
            self.restart(src)
        log.warning("%s: %s", src.path, detail)
        yield TailEvent(TRUNCATED, src.path, None, detail)

    def _replaced(self, src: Source, why: str) -> Iterator[TailEvent]:
        try:
            opened = open_regular(src.storage)
        except ArchiveElsewhere as e:  # the current generation is in a file not here
            yield from self._elsewhere(src, e)
            return
        if opened is None:
            return
        src.close()
        src.reader = opened
        self.restart(src)
        src.gone_since, src.announced = None, False
        detail = f"{why}; re-read, delivering only entries not delivered yet"
        log.info("%s: %s", src.path, detail)
        yield TailEvent(REPLACED, src.path, None, detail)
        yield from self.drain(src)

    def _elsewhere(self, src: Source, error: ArchiveElsewhere) -> Iterator[TailEvent]:
        """The session was moved out of the database, while followed, to a file that is not
        here: what it got after what was delivered cannot be read here; go on in its
        successor (the error stands when there is none)."""
        successor = self.catalog.successor(src)
        if successor is None:
            raise error
        log.warning("%s: moved out of the database to %s, which is not here: what it got after "
                    "byte %s is not read; following its successor %s", src.path, error.path,
                    f"{src.position:,}", successor[0])
        yield TailEvent(ROTATED, src.path, None, successor[0])
        yield from self._switch(src, *successor)
        yield from self._follow_seals(src)

    def _gone(self, src: Source) -> Iterator[TailEvent]:
        now = time.monotonic()
        if src.gone_since is None:
            src.gone_since = now
        if not src.announced:
            src.announced = True
            detail = f"deleted; waiting up to {self.grace:g}s for it to return or a successor"
            log.info("%s: %s", src.path, detail)
            yield TailEvent(DELETED, src.path, None, detail)
        successor = self.catalog.successor(src)
        if successor is not None and successor[0] == src.path:
            detail = f"replaced, then moved to {successor[1]}; re-read, delivering only " \
                "entries not delivered yet"
            log.info("%s: %s", src.path, detail)
            yield TailEvent(REPLACED, src.path, None, detail)
            yield from self._switch(src, *successor)
            yield from self._follow_seals(src)
        elif successor is not None:
            detail = f"continued in {successor[0]} (its header names {os.path.basename(src.path)})"
            log.info("%s: %s", src.path, detail)
            yield TailEvent(ROTATED, src.path, None, successor[0])
            yield from self._switch(src, *successor)
            yield from self._follow_seals(src)
        elif now - src.gone_since >= self.grace:
            yield from self._end(src, f"gone for {self.grace:g}s; no longer followed")

    def _follow_seals(self, src: Source) -> Iterator[TailEvent]:
        """From a sealed file on to the live one, through every rotation since the last read
        (the files between may already be archived, and compressed)."""
        for _ in range(MAX_HOPS):
            if src.marker is None or src not in self.sources:
                return
            reader = src.reader
            yield from self._rotate(src)
            if src.reader is reader:
                return

    def _rotate(self, src: Source) -> Iterator[TailEvent]:
        marker = src.marker
        assert marker is not None
        named = self.catalog.named_successor(src)
        if not src.announced:
            src.announced = True
            src.gone_since = time.monotonic()
            log.info("%s: sealed; continued in %s", src.path, named)
            yield TailEvent(ROTATED, src.path, marker, named or "")
        if not self.cross_seals:
            self._retire(src)  # read as named: the successor is not this file's
            return
        successor = self.catalog.successor(src)
        if successor is not None:
            yield from self._switch(src, *successor)
        elif time.monotonic() - (src.gone_since or 0.0) >= self.grace:
            yield from self._end(src, f"sealed, and its successor {named} did not appear "
                                      f"within {self.grace:g}s")

    def _end(self, src: Source, detail: str) -> Iterator[TailEvent]:
        # following one file this ends the follow: a warning; in a directory, routine
        log.log(logging.INFO if self.root else logging.WARNING, "%s: %s", src.path, detail)
        self._retire(src)
        yield TailEvent(ENDED, src.path, None, detail)

    def _switch(self, src: Source, name: str, found: str) -> Iterator[TailEvent]:
        """Continue `src`'s lineage in the file named `name` in the folder, now at `found`
        (the name itself, or its archived copy), from its first entry."""
        if any(other.path == name for other in self.sources if other is not src):
            self._retire(src)
            return
        for where in self.catalog.copies(found, name):
            opened = open_regular(self.catalog.storage(where))
            if opened is not None:
                break
        else:
            return
        self._retire(src)
        if name != src.path:  # a successor (not this file replaced, then archived)
            src.delivered.moved_on(last_copied(src.marker))
        src.path = name
        src.storage = self.catalog.storage(name)
        src.reader = opened
        src.marker, src.announced, src.gone_since = None, False, None
        self.restart(src)
        self.sources.append(src)
        if self.catalog.compressed(where):
            yield from self.read_compressed(src)
        else:
            yield from self.drain(src)

    def _retire(self, src: Source) -> None:
        self.retired[src.path] = src.generation
        src.close()
        if src in self.sources:
            self.sources.remove(src)

    # finding files

    def _tracked_ancestor(self, path: str) -> Source | None:
        """The followed file that `path` continues (through archived files between), if any."""
        return self.catalog.continues(path, self.sources)

    def _discover(self) -> Iterator[TailEvent]:
        """Start following session files that appeared in the directory."""
        assert self.root is not None
        if not self.catalog.exists(self.root):
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
        for path in self.catalog.sessions(self.root):
            if any(src.path == path for src in self.sources):
                continue
            generation = self.catalog.generation(path)
            if generation is None:
                continue
            if self.retired.get(path) == generation or not self.catalog.complete(path):
                continue
            ancestor = self._tracked_ancestor(path)
            if ancestor is not None:
                # A successor of a followed file: read that file (and follow its seals, which
                # may lead here) before anything the successor repeats from it.
                yield from self._check(ancestor)
                if any(src.path == path for src in self.sources):
                    continue
            src = self._open_source(path, ancestor.delivered if ancestor is not None else None)
            if src is None:
                continue
            if ancestor is None:
                header = self.catalog.header(path) or {}
                yield TailEvent(NEW_SESSION, path, None, f"session {header.get('id')}")
            yield from self.drain(src)

    # for the waker

    def targets(self) -> FollowTargets:
        """What to wait on: every followed session's storage, and where new ones may appear."""
        return self.catalog.targets(self.sources, self.root)

    def close(self) -> None:
        for src in self.sources:
            src.close()
        self.sources = []
