"""The follow state machine: every followed file, re-synced when it changes under the reader.

`Follower.poll()` does one wake-up's reading (see `journal.tail` for what it does when a file
is truncated, replaced, rotated or deleted). On top of `SourceReader`'s per-file reading it
holds what spans files: the start modes, re-sync after truncation and replacement, rotation
(following a chain of seals and archives to the live file, however many rotations happened
between two reads), deletion, directory mode (new sessions, which are joined to the lineage
of a followed file they continue, and the directory's own deletion), and what the waker needs
(the directories to watch, the changes worth a read).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import watchfiles

from .errors import NotASession, UnknownEntry
from .lineage import MAX_HOPS, archived_copies, read_header
from .model import Entry
from .tail_source import (
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
    first_line_header,
    open_regular,
)

# logged under the public module's name, which is what callers configure
log = logging.getLogger("journal.tail")

_IGNORED_PARTS = (".quarantine", ".lock", ".bak", ".orig", ".tmp", ".swp", "~")


def is_session_name(name: str) -> bool:
    """Whether a directory entry looks like a session file a directory follow should track."""
    if not name.endswith(".jsonl") or name.startswith("."):
        return False
    return not any(part in name for part in _IGNORED_PARTS)


@dataclass(frozen=True)
class _Hop:
    """A file of a lineage found through a `parentSession` pointer."""

    name: str  # its name in the session folder (where it was live)
    path: str | None  # where it is now (the name, or an archived copy), None if not found
    session_id: str | None
    pointer: str  # the `parentSession` text that led here


class Follower(SourceReader):
    """The follow state machine, without any waiting: `open()`, then `poll()` per wake-up.

    `follow_events` drives it with a waker; tests (or a caller with its own event loop) may
    call `poll()` themselves, for example between changes made to the files.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, from_start: bool = False,
        last: int | None = None, since_id: str | None = None, grace: float = 10.0,
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
        self.sources: list[Source] = []
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
                body = self._read_header(src)
                self._place(src, body if src.header_done else 0)
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

    def _open_source(self, path: str, delivered: Delivered | None) -> Source | None:
        opened = open_regular(path)
        if opened is None:
            return None
        fd, ident = opened
        if delivered is None:
            ancestor = self._tracked_ancestor(path)
            delivered = ancestor.delivered if ancestor is not None else Delivered()
        src = Source(path, delivered, fd, ident)
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
            if src.fd is not None and src in self.sources:
                yield from self._check(src)
        if self.root is not None:
            yield from self._discover()
        elif not self.sources:
            self.done = True

    def _check(self, src: Source) -> Iterator[TailEvent]:
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
            yield from self._follow_seals(src)
        elif st is None or not stat.S_ISREG(st.st_mode):
            yield from self._gone(src)
        elif (st.st_dev, st.st_ino) != src.ident:
            yield from self._replaced(src, "replaced by another file")
        elif src.gone_since is not None:
            log.info("%s: is back", src.path)
            src.gone_since = None
            src.announced = False

    # what happened to a file

    def _truncated(self, src: Source, size: int) -> Iterator[TailEvent]:
        if size >= src.offset and self._unchanged(src, pending=False):
            detail = (f"an incomplete last line ({src.pending_len:,} bytes) was cut away; "
                      "it was never delivered")
            src.pending, src.pending_len = [], 0
        else:
            detail = (f"rewritten in place or truncated (from {src.position:,} to {size:,} "
                      "bytes); re-read, delivering only entries not delivered yet")
            self._restart(src)
        log.warning("%s: %s", src.path, detail)
        yield TailEvent(TRUNCATED, src.path, None, detail)

    def _replaced(self, src: Source, why: str) -> Iterator[TailEvent]:
        opened = open_regular(src.path)
        if opened is None:
            return
        src.close()
        src.fd, src.ident = opened
        self._restart(src)
        src.gone_since, src.announced = None, False
        detail = f"{why}; re-read, delivering only entries not delivered yet"
        log.info("%s: %s", src.path, detail)
        yield TailEvent(REPLACED, src.path, None, detail)
        yield from self._drain(src)

    def _gone(self, src: Source) -> Iterator[TailEvent]:
        now = time.monotonic()
        if src.gone_since is None:
            src.gone_since = now
        if not src.announced:
            src.announced = True
            detail = f"deleted; waiting up to {self.grace:g}s for it to return or a successor"
            log.info("%s: %s", src.path, detail)
            yield TailEvent(DELETED, src.path, None, detail)
        successor = self._find_successor(src)
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
            ident = src.ident
            yield from self._rotate(src)
            if src.ident == ident:
                return

    def _rotate(self, src: Source) -> Iterator[TailEvent]:
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
        for where in (found, name, *archived_copies(name)):
            # the archived copy may be compressed (and the plain one removed) meanwhile
            opened = open_regular(where)
            if opened is not None:
                break
        else:
            return
        self._retire(src)
        src.path = name
        src.fd, src.ident = opened
        src.marker, src.announced, src.gone_since = None, False, None
        self._restart(src)
        self.sources.append(src)
        if where.endswith(".gz"):
            yield from self._read_compressed(src)
        else:
            yield from self._drain(src)

    def _retire(self, src: Source) -> None:
        self.retired[src.path] = src.ident
        src.close()
        if src in self.sources:
            self.sources.remove(src)

    # finding files

    def _find_successor(self, src: Source) -> tuple[str, str] | None:
        """(its name in the folder, where it is now) of the file that continues `src`.

        First the file the seal names, where it is or in the archive; else a session in the
        folder whose chain of `parentSession` headers leads back to `src` (the file after
        `src` on that chain, even if archived since), or whose header has the id the seal
        names.
        """
        for name in _marker_successors(src.marker, src.path):
            for candidate in (name, *archived_copies(name)):
                if os.path.isfile(candidate):
                    return name, candidate
        named = _marker_successor(src.marker, src.path)
        wanted = (src.marker or {}).get("data", {}).get("sessionId")
        own_id = (src.header or {}).get("id")
        if wanted == own_id:
            wanted = None
        dirs = {os.path.dirname(src.path)}
        if named is not None:
            dirs.add(os.path.dirname(named))
        for directory in sorted(dirs):
            for path in self._session_files(directory):
                if path == src.path:
                    continue
                header = self._header_of(path)
                if header is None or (own_id is not None and header.get("id") == own_id):
                    continue
                chain = [_Hop(path, path, header.get("id"), path), *_ancestors(path)]
                for k, hop in enumerate(chain):
                    if wanted is not None and hop.session_id == wanted and hop.path:
                        return hop.name, hop.path
                    if k and _is_source(hop, src):
                        if hop.path is not None and _identity(hop.path) != src.ident:
                            # our file, replaced (by a repair, say) before it was archived:
                            # read that version, whose seal then leads on
                            return src.path, hop.path
                        nearer = chain[k - 1]
                        if nearer.path is not None:
                            return nearer.name, nearer.path
                        break
        return None

    def _tracked_ancestor(self, path: str) -> Source | None:
        """The followed file that `path` continues (through archived files between), if any."""
        for hop in _ancestors(path):
            for src in self.sources:
                if _is_source(hop, src):
                    return src
        return None

    @staticmethod
    def _header_of(path: str) -> Entry | None:
        return first_line_header(path)[1]

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
        for path in self._session_files(self.root):
            if any(src.path == path for src in self.sources):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if self.retired.get(path) == ident or not first_line_header(path)[0]:
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


def _marker_successors(marker: Entry | None, old_path: str) -> list[str]:
    """Where a seal says the successor is, most trusted first: its name in the old file's
    folder (rotation always puts it there, and a copied folder stays self-contained), then the
    path it gives (relative to the folder, or absolute: only a hint)."""
    data = marker.get("data") if marker is not None else None
    if not isinstance(data, dict):
        return []
    folder = os.path.dirname(old_path)
    out: list[str] = []
    name, successor = data.get("file"), data.get("successor")
    if isinstance(name, str) and name:
        out.append(os.path.join(folder, os.path.basename(name)))
    if isinstance(successor, str) and successor:
        out.append(os.path.join(folder, successor))
    return list(dict.fromkeys(os.path.normpath(p) for p in out))


def _marker_successor(marker: Entry | None, old_path: str) -> str | None:
    named = _marker_successors(marker, old_path)
    return named[0] if named else None


def _ancestors(path: str) -> list[_Hop]:
    """The files `path` continues, nearest first, following `parentSession` headers (the
    archived ones too, compressed or not). A relative pointer is relative to the folder."""
    folder = os.path.dirname(path)
    hops: list[_Hop] = []
    current: str | None = path
    seen = {path}
    for _ in range(MAX_HOPS):
        header = read_header(current) if current is not None else None
        pointer = header.get("parentSession") if header else None
        if not isinstance(pointer, str) or not pointer:
            break
        name = os.path.join(folder, os.path.basename(pointer).removesuffix(".gz"))
        given = os.path.join(folder, pointer)
        current = next((p for p in (given, given.removesuffix(".gz"), given + ".gz", name,
                                    *archived_copies(name)) if os.path.isfile(p)), None)
        found = read_header(current) if current is not None else None
        hops.append(_Hop(name, current, (found or {}).get("id"), pointer))
        if current is None or current in seen:
            break
        seen.add(current)
    return hops


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_source(hop: _Hop, src: Source) -> bool:
    """Whether a lineage hop is the followed file `src` (same session id, or named alike)."""
    own_id = (src.header or {}).get("id")
    if hop.session_id is not None and own_id is not None:
        return bool(hop.session_id == own_id)
    return _names(hop.pointer, src.path)


def _names(parent: Any, path: str) -> bool:
    """Whether a header's `parentSession` names `path`, where it is now or once archived."""
    if not isinstance(parent, str) or not parent:
        return False
    parent = parent.removesuffix(".gz")  # archives may be compressed after sealing
    return os.path.abspath(parent) == path or os.path.basename(parent) == os.path.basename(path)
