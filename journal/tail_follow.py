"""The follow state machine: every followed file, re-synced when it changes under the reader.

`_Follower.poll()` does one wake-up's reading (see `journal.tail` for what it does when a file
is truncated, replaced, rotated or deleted). On top of `_SourceReader`'s per-file reading it
holds what spans files: the start modes, re-sync after truncation, replacement, rotation and
deletion (switching a lineage to its successor), directory mode (new sessions, the directory's
own deletion), and what the waker needs (the directories to watch, the changes worth a read).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from typing import Any

import watchfiles

from .errors import NotASession, UnknownEntry
from .identity import real_path
from .model import Entry
from .tail_source import (
    DELETED,
    ENDED,
    NEW_SESSION,
    REPLACED,
    ROTATED,
    TRUNCATED,
    TailEvent,
    _first_line_header,
    _Lineage,
    _open_regular,
    _Source,
    _SourceReader,
)

# logged under the public module's name, which is what callers configure
log = logging.getLogger("journal.tail")

_IGNORED_PARTS = (".quarantine", ".lock", ".bak", ".orig", ".tmp", ".swp", "~")


def is_session_name(name: str) -> bool:
    """Whether a directory entry looks like a session file a directory follow should track."""
    if not name.endswith(".jsonl") or name.startswith("."):
        return False
    return not any(part in name for part in _IGNORED_PARTS)


class _Follower(_SourceReader):
    """The follow state machine; `poll()` does one wake-up's reading. No waiting in here."""

    def __init__(
        self, path: str | os.PathLike[str], *, from_start: bool, last: int | None,
        since_id: str | None, grace: float,
    ) -> None:
        if sum((bool(from_start), last is not None, since_id is not None)) > 1:
            raise ValueError("choose at most one of from_start, last and since_id")
        if last is not None and last < 0:
            raise ValueError("last must be 0 or more")
        self.path = real_path(path)  # a link is followed once, to the real file or folder
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
