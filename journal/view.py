"""A read-only view of a session that can take in what other processes appended since.

A `View` never locks and never writes. `refresh()` reads from the byte offset the view had
consumed up to the last complete line, so a writer's half-written line is left for later. If
the file was replaced (a repair: the inode changed) or truncated, the view reloads. A session
a rotation sealed (or moved away) is followed to the live one that continues it, which the view
then holds, reloaded. A session of another backend (a `postgresql://` URL, any `Storage` but a
file) is viewed through the storage seam: its mark's generation stands for the inode.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable
from typing import BinaryIO

from .archivegz import is_compressed
from .claude import ClaudeRead, feed_lines
from .codec import Diagnostic, iter_lines
from .context import Context, build_context, for_model
from .errors import BrokenLineage, NotASession
from .identity import real_path
from .lineage import MAX_HOPS, resolve_live, successor_watch
from .model import CURRENT_VERSION, Entry
from .pg.url import is_database_url
from .seal import is_seal
from .snapshot import Snapshot, load, open_for_reading, read_stream, require_session, resume
from .storage import FileStorage, Storage, as_storage

log = logging.getLogger(__name__)


class View:
    """Example:
    >>> view = View.open("sessions/a.jsonl")  # doctest: +SKIP
    >>> new_entries = view.refresh()
    """

    def __init__(self, path: str, snap: Snapshot, inode: Hashable,
                 storage: Storage | None = None, dialect: str | None = None,
                 follow: bool = False) -> None:
        self.path = path
        self._storage = storage
        self._forced = dialect  # a dialect the caller forced (None: detected per reading)
        self._follow = follow  # a session sealed by a rotation: on to its successor
        self._take(snap, inode)

    def _take(self, snap: Snapshot, inode: Hashable) -> None:
        """Hold what `snap` read from the file with inode `inode`."""
        self.header: Entry | None = snap.header
        self.diagnostics: list[Diagnostic] = list(snap.diagnostics)
        self.tree = snap.tree()
        self.dialect = snap.dialect
        self.claude = snap.claude
        self._end = snap.end
        self._inode = inode
        # a compressed archive never changes once written: what identifies the file read,
        # so a refresh reads it again only if it was replaced
        self._archive = _archive_signature(self.path) if self._storage is None else None
        # where a sealed session's successor was last looked for in vain, and how those
        # places were then: looked for again only once they changed (see `_dead_end_now`)
        self._dead_end: Hashable | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str] | Storage, *, full: bool = False,
             follow: bool = True, dialect: str | None = None) -> View:
        """Load a session for reading; `full=False` reads only the tail the context needs.

        Links are resolved first. A file that a concurrent rotation moved away is followed
        to the file that continues it (unless `follow=False`); one replaced while it was
        read is read again; a file that exists is read as it is named (an archive too). A
        Claude Code transcript is detected (or forced with `dialect="claude"`) and read in
        place. A database URL or another backend's `Storage` is read through the storage
        seam, as it is named (a session a rotation sealed too). On both backends `refresh`
        then follows a session that rotations sealed or moved away to the live one that
        continues it (unless `follow=False`).
        """
        if is_database_url(path) or (isinstance(path, Storage)
                                     and not isinstance(path, FileStorage)):
            storage = as_storage(path)
            return cls(storage.locator, *read_stored(storage, full=full), storage=storage,
                       follow=follow)
        if isinstance(path, FileStorage):
            path = path.path
        assert not isinstance(path, Storage)
        return cls(*read_live(path, full=full, follow=follow, dialect=dialect),
                   dialect=dialect, follow=follow)

    @property
    def leaf_id(self) -> str | None:
        return self.tree.leaf_id

    def context(self, leaf_id: str | None = None, *, raw: bool = False) -> Context:
        """The projection for the leaf (or `leaf_id`), sanitized for a model unless `raw`."""
        if leaf_id is None:
            leaf_id = self.tree.leaf_id
        elif not self.tree.complete:
            self._take(*self._read(full=True))
        context = build_context(self.tree, leaf_id)
        return context if raw else for_model(context)

    def refresh(self) -> list[Entry]:
        """Take in entries appended since the last read; return them (all, after a reload).

        A session sealed by a rotation, or moved away by one (into its archive, wherever
        that is), is followed through as many rotations as happened to the live session
        that continues it (unless the view was opened with `follow=False`), which is then
        reloaded: `path` names it and all its entries are returned. Raises NotASession when
        the file is gone and nothing continues it (or `follow=False`).
        """
        if self._storage is not None:
            return self._refresh_stored(self._storage)
        try:
            stat = os.stat(self.path)
        except FileNotFoundError as e:
            return self._follow_file(gone=e)
        if self._archive is not None and self._archive == _signature(stat):
            return self._follow_file([])  # the archive as it was read: nothing new
        if stat.st_ino != self._inode or stat.st_size < self._end or self._version() < 3:
            return self._follow_file(self._reload())
        if stat.st_size == self._end:
            return self._follow_file([])
        try:
            f = open_for_reading(self.path)
        except NotASession as e:
            if os.path.exists(self.path):
                raise
            return self._follow_file(gone=e)  # moved away between the stat and the open
        with f:
            opened = os.fstat(f.fileno())
            if opened.st_ino != self._inode or opened.st_size < self._end:
                # replaced between the stat and the open
                return self._follow_file(self._reload())
            if self.claude is not None:
                return self._refresh_claude(f, self.claude)
            snap = read_stream(self.path, f, start=self._end, version=self._version())
        for entry in snap.entries:
            self.tree.add(entry)
        self.diagnostics.extend(d for d in snap.diagnostics if d.reason != "torn_tail")
        self._end = snap.end
        return self._follow_file(snap.entries)

    def _sealed(self) -> bool:
        """Whether the session as held ends with a rotation's seal and is to be followed."""
        last = self.tree.entries[-1] if self.tree.entries else None
        return self._follow and last is not None and is_seal(last)

    def _follow_file(self, entries: list[Entry] | None = None, *,
                     gone: Exception | None = None) -> list[Entry]:
        """`entries` (what a refresh took in), unless the file is sealed by a rotation, or
        moved away by one (`gone`: the error that said so): then the live file its lineage
        continues in (`lineage.resolve_live`: seals, archives, `parentSession`), reloaded,
        all its entries. A sealed file that nothing found continues stays as it is held."""
        if gone is None and not self._sealed():
            return entries or []
        watch = self._successor_places() if gone is None and self._follow else None
        if watch is not None and watch == self._dead_end:
            return entries or []  # nothing changed where its successor would appear
        live = resolve_live(self.path)[0] if self._follow else self.path
        if live == self.path or not os.path.exists(live):
            self._dead_end = watch
            if gone is None:
                return entries or []
            raise NotASession(self.path, "the file is gone (deleted, or rotated with "
                              "nothing found to continue it)") from gone
        self.path = live
        return self._reload()

    def _successor_places(self) -> Hashable:
        """How the places a successor of the sealed file held would appear in are now."""
        seal = self.tree.entries[-1].get("data")
        if not isinstance(seal, dict):
            return None
        return successor_watch(seal, self.path, self.path)

    def _refresh_claude(self, f: BinaryIO, read: ClaudeRead) -> list[Entry]:
        """Feed the records appended to a Claude Code transcript to its translator."""
        entries: list[Entry] = []
        numbers: list[int] = []
        diagnostics: list[Diagnostic] = []
        end = feed_lines(read.translator, iter_lines(f, self._end), entries, numbers,
                         diagnostics)
        for entry in entries:
            self.tree.add(entry)
        leaf = read.translator.leaf_id
        if leaf is not None:
            self.tree.leaf = self.tree.index_of(leaf)
        self.diagnostics.extend(d for d in diagnostics if d.reason != "torn_tail")
        self._end = max(self._end, end)
        return entries

    def _version(self) -> int:
        if self.header is None:
            return CURRENT_VERSION
        version = self.header.get("version", 1)
        return version if isinstance(version, int) else CURRENT_VERSION

    def _refresh_stored(self, storage: Storage) -> list[Entry]:
        """New entries of a stored session; where it ends sealed by a rotation (and
        `follow`), on into the live session that continues it: all its entries."""
        entries = self._refresh_one(storage)
        if not self._sealed():
            return entries
        missing = self._dead_end
        if isinstance(missing, str) and as_storage(missing).mark() is None:
            return entries  # its successor is still not there: one look, not the lineage
        live, self._dead_end = _continued(storage)
        if live.locator != storage.locator:
            self._storage, self.path = live, live.locator
            missing, entries = self._dead_end, self._reload()
            self._dead_end = missing
        return entries

    def _refresh_one(self, storage: Storage) -> list[Entry]:
        mark = storage.mark()
        if mark is None:
            raise NotASession(self.path, "the session is gone")
        if mark.generation != self._inode or mark.size < self._end or self._version() < 3:
            return self._reload()
        if mark.size == self._end:
            return []
        with storage.open_reader() as reader:
            if reader.generation != self._inode or reader.size < self._end:
                return self._reload()
            snap = read_stream(self.path, reader.stream, start=self._end,
                               version=self._version())
        for entry in snap.entries:
            self.tree.add(entry)
        self.diagnostics.extend(d for d in snap.diagnostics if d.reason != "torn_tail")
        self._end = snap.end
        return snap.entries

    def _read(self, *, full: bool) -> tuple[Snapshot, Hashable]:
        if self._storage is not None:
            return read_stored(self._storage, full=full)
        # a file moved away meanwhile is followed (unless `follow=False`): the view holds
        # the one read from then on
        self.path, snap, inode = read_live(self.path, full=full, follow=self._follow,
                                           dialect=self._forced)
        return snap, inode

    def _reload(self) -> list[Entry]:
        self._take(*self._read(full=self.tree.complete))
        return list(self.tree.entries)


def _continued(storage: Storage) -> tuple[Storage, str | None]:
    """The live session a database session continues in (itself if no rotation sealed
    it); another backend's storage as it is. Where a successor on the way is not in the
    database, the last session of the lineage that is (a warning names the one missing),
    as a sealed file whose successor is not found stays as it is held, and the missing
    one's locator (else None)."""
    if not is_database_url(storage.locator):
        return storage, None
    from .pg.rotation import live_storage
    from .pg.storage import PostgresStorage

    if not isinstance(storage, PostgresStorage):
        return storage, None
    try:
        return live_storage(storage), None
    except BrokenLineage as e:
        log.warning("%s", e)
        return PostgresStorage.from_url(e.sealed), e.missing


def _signature(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _archive_signature(path: str) -> tuple[int, ...] | None:
    """What identifies the compressed archive `path` as it is now (None: not an archive)."""
    if not is_compressed(path):
        return None
    try:
        return _signature(os.stat(path))
    except OSError:
        return None


def read_stored(storage: Storage, *, full: bool) -> tuple[Snapshot, Hashable]:
    """(what was read, its generation) for a session of any backend, read again if it was
    replaced while it was read."""
    for _ in range(MAX_HOPS):
        before = storage.mark()
        if before is None:
            raise NotASession(storage.locator, "no such session")
        snap = load(storage) if full else resume(storage)
        after = storage.mark()
        if after is None or after.generation != before.generation:
            continue
        require_session(snap)
        return snap, before.generation
    raise NotASession(storage.locator, "kept being replaced while it was read; try again")


def read_live(path: str | os.PathLike[str], *, full: bool, follow: bool = True,
              dialect: str | None = None) -> tuple[str, Snapshot, int]:
    """(the file read, what was read, its inode) for a session, following it if it moved.

    Links are resolved first. A file that a concurrent rotation moved away is followed to the
    file that continues it (unless `follow=False`); one replaced while it was read is read
    again. `full=False` reads only the tail the context needs.
    """
    target = real_path(path)
    for _ in range(MAX_HOPS):
        try:
            before = os.stat(target)
            forced = {} if dialect is None else {"dialect": dialect}
            snap = load(target, **forced) if full else resume(target, **forced)
            after = os.stat(target)
        except (FileNotFoundError, NotASession):
            if os.path.exists(target):
                raise
            live, _ = resolve_live(target) if follow else (target, [])
            if live == target:
                raise NotASession(target, "no such file") from None
            target = live
            continue
        if (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino):
            continue
        require_session(snap)
        return target, snap, after.st_ino
    raise NotASession(target, "kept moving while it was read; try again")



def locate(path: str | os.PathLike[str], *, follow: bool = True) -> tuple[str, str | None]:
    """The file to read for `path`, and the path it was followed from (None if not followed).

    A path that no longer exists (a rotation moved the file into the archive, or it was
    moved) is followed to the live file of its lineage when `follow`; a file that exists is
    read as it is named, an archive (`.jsonl.gz`) included, and so is a database session
    (a `postgresql://` URL or `pg:<id>`). Nothing is locked or written.
    """
    named = os.fspath(path)
    if not follow or os.path.lexists(named) or is_database_url(named):
        return named, None
    live, _ = resolve_live(named)
    if not os.path.exists(live):
        return named, None  # nothing continues it: reading it says "no such file"
    return live, named


def check_session(path: str | os.PathLike[str], *, dialect: str | None = None) -> Snapshot:
    """Read the tail of `path` (see `resume`) and refuse it unless it is a readable session:
    an unreadable file, an empty one, or one with neither a header nor an entry raises
    `NotASession`. Returns what was read."""
    snap = resume(path) if dialect is None else resume(path, dialect=dialect)
    require_session(snap)
    return snap
