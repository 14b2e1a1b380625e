"""Where sessions live: the tail's catalog, and its only knowledge of the file system.

The storage seam (`journal.storage`) knows one session's bytes; it has no notion of listing
sessions, of a folder, or of the archive a rotation moves a sealed file into. So what the
tail needs of that, and only that, is here, behind one small interface: `FileCatalog`. It
says what the followed name is (a session or a folder of them), lists a folder's sessions,
reads their headers (to order them and to recognise a successor), finds where a sealed or
deleted session goes on, turns a session's name into a `Storage` (`FileStorage` unless the
caller gives its own `open_storage`), and opens the backend's standing `Watch`. Everything
else in the tail (reading, re-syncing, waiting) goes through `Storage` and its readers; a
backend that can list its sessions replaces this module's class, not the follower's logic.

The lookups themselves hold no state: which names are sessions, where a seal says the
successor is, which files a session continues (its chain of `parentSession` headers, through
archived and compressed files), and so which file continues a followed one, however many
rotations happened since it was last read. A pointer relative to the folder is taken as
such; an absolute one is only a hint, the folder's own files first.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from ..archivegz import is_compressed, names_of, uncompressed_name
from ..errors import NotASession
from ..header import peek, read_header
from ..lineage import MAX_HOPS, archived_copies, successor_named_by
from ..model import Entry
from ..storage import FileStorage, StopFlag, Storage, Watch
from .source import Source

_IGNORED_PARTS = (".quarantine", ".lock", ".bak", ".orig", ".tmp", ".swp", "~")


def is_session_name(name: str) -> bool:
    """Whether a directory entry looks like a session file a directory follow should track."""
    if not name.endswith(".jsonl") or name.startswith("."):
        return False
    return not any(part in name for part in _IGNORED_PARTS)


@dataclass(frozen=True)
class Hop:
    """A file of a lineage found through a `parentSession` pointer."""

    name: str  # its name in the session folder (where it was live)
    path: str | None  # where it is now (the name, or an archived copy), None if not found
    session_id: str | None
    pointer: str  # the `parentSession` text that led here


def session_files(directory: str) -> list[str]:
    """The session files directly in `directory`, by name."""
    try:
        with os.scandir(directory) as it:
            names = [e.name for e in it if is_session_name(e.name) and e.is_file()]
    except OSError:
        return []
    return [os.path.join(directory, name) for name in sorted(names)]


def find_successor(src: Source) -> tuple[str, str] | None:
    """(its name in the folder, where it is now) of the file that continues `src`.

    First the file the seal names, where it is or in the archive; else a session in the
    folder whose chain of `parentSession` headers leads back to `src` (the file after
    `src` on that chain, even if archived since), or whose header has the id the seal
    names.
    """
    for name in marker_successors(src.marker, src.path):
        for candidate in (name, *archived_copies(name)):
            if os.path.isfile(candidate):
                return name, candidate
    named = marker_successor(src.marker, src.path)
    wanted = (src.marker or {}).get("data", {}).get("sessionId")
    own_id = (src.header or {}).get("id")
    if wanted == own_id:
        wanted = None
    dirs = {os.path.dirname(src.path)}
    if named is not None:
        dirs.add(os.path.dirname(named))
    for directory in sorted(dirs):
        for path in session_files(directory):
            if path == src.path:
                continue
            header = read_header(path)
            if header is None or (own_id is not None and header.get("id") == own_id):
                continue
            chain = [Hop(path, path, header.get("id"), path), *ancestors(path)]
            for k, hop in enumerate(chain):
                if wanted is not None and hop.session_id == wanted and hop.path:
                    return hop.name, hop.path
                if k and is_source(hop, src):
                    if hop.path is not None and identity(hop.path) != src.generation:
                        # our file, replaced (by a repair, say) before it was archived:
                        # read that version, whose seal then leads on
                        return src.path, hop.path
                    nearer = chain[k - 1]
                    if nearer.path is not None:
                        return nearer.name, nearer.path
                    break
    return None


def marker_successors(marker: Entry | None, old_path: str) -> list[str]:
    """Where a seal says the successor is, most trusted first: its name in the old file's
    folder (rotation always puts it there, and a copied folder stays self-contained), then
    what `lineage` finds from the seal's other pointers, each checked against the successor's
    identity (so a seal never leads out of the folder a copy was made from)."""
    data = marker.get("data") if marker is not None else None
    if not isinstance(data, dict):
        return []
    out: list[str] = []
    name = data.get("file")
    if isinstance(name, str) and name:
        out.append(os.path.join(os.path.dirname(old_path), os.path.basename(name)))
    checked = successor_named_by(data, old_path, old_path)
    if checked is not None:
        out.append(checked)
    return list(dict.fromkeys(os.path.normpath(p) for p in out))


def marker_successor(marker: Entry | None, old_path: str) -> str | None:
    named = marker_successors(marker, old_path)
    return named[0] if named else None


def ancestors(path: str) -> list[Hop]:
    """The files `path` continues, nearest first, following `parentSession` headers (the
    archived ones too, compressed or not). A relative pointer is relative to the folder."""
    folder = os.path.dirname(path)
    hops: list[Hop] = []
    current: str | None = path
    seen = {path}
    for _ in range(MAX_HOPS):
        header = read_header(current) if current is not None else None
        pointer = header.get("parentSession") if header else None
        if not isinstance(pointer, str) or not pointer:
            break
        name = os.path.join(folder, uncompressed_name(os.path.basename(pointer)))
        given = os.path.join(folder, pointer)
        current = next((p for p in (given, *names_of(given), name,
                                    *archived_copies(name)) if os.path.isfile(p)), None)
        found = read_header(current) if current is not None else None
        hops.append(Hop(name, current, (found or {}).get("id"), pointer))
        if current is None or current in seen:
            break
        seen.add(current)
    return hops


def identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def is_source(hop: Hop, src: Source) -> bool:
    """Whether a lineage hop is the followed file `src` (same session id, or named alike)."""
    own_id = (src.header or {}).get("id")
    if hop.session_id is not None and own_id is not None:
        return bool(hop.session_id == own_id)
    return _names(hop.pointer, src.path)


def _names(parent: object, path: str) -> bool:
    """Whether a header's `parentSession` names `path`, where it is now or once archived."""
    if not isinstance(parent, str) or not parent:
        return False
    parent = uncompressed_name(parent)  # archives may be compressed after sealing
    return os.path.abspath(parent) == path or os.path.basename(parent) == os.path.basename(path)


@dataclass(frozen=True)
class FollowTargets:
    """What a follow waits on: the storages of the sessions it follows, and the places (for
    the file backend, folders) where a new session or a successor may appear."""

    storages: tuple[Storage, ...]
    places: tuple[str, ...]


class Catalog(Protocol):
    """What the follower asks of where sessions live (`FileCatalog` for files; a database
    backend has its own, `journal.tail.dbchain.DatabaseCatalog`). Names are the followed
    sessions' names in that backend: file paths, or session URLs."""

    def storage(self, path: str) -> Storage: ...

    def canonical(self, path: str | os.PathLike[str]) -> str: ...

    def resolve(self, path: str) -> tuple[str | None, list[str]]: ...

    def exists(self, folder: str) -> bool: ...

    def sessions(self, folder: str) -> list[str]: ...

    def header(self, path: str) -> Entry | None: ...

    def complete(self, path: str) -> bool: ...

    def generation(self, path: str) -> Hashable | None: ...

    def successor(self, src: Source) -> tuple[str, str] | None: ...

    def named_successor(self, src: Source) -> str | None: ...

    def copies(self, found: str, name: str) -> tuple[str, ...]: ...

    def compressed(self, where: str) -> bool: ...

    def continues(self, path: str, sources: list[Source]) -> Source | None: ...

    def targets(self, sources: list[Source], root: str | None) -> FollowTargets: ...

    def open_watch(self, target: str, stop: StopFlag, timeout: float,
                   poll: bool | None) -> Watch: ...


class FileCatalog:
    """Sessions as files in folders (see the module docstring): the one file-system-aware
    piece of the tail. `open_storage` turns a session file's path into its `Storage`."""

    def __init__(self, open_storage: Callable[[str], Storage] | None = None) -> None:
        self.open_storage: Callable[[str], Storage] = open_storage or FileStorage

    def storage(self, path: str) -> Storage:
        return self.open_storage(path)

    @staticmethod
    def canonical(path: str | os.PathLike[str]) -> str:
        """Symlinks resolved once: a link swapped later does not redirect the follow, and
        successors are looked for beside the real file."""
        return os.path.realpath(os.fspath(path))

    def resolve(self, path: str) -> tuple[str | None, list[str]]:
        """(the folder, if `path` is one; the sessions to follow, oldest first, so a file is
        read before a successor that repeats its entries). NotASession if neither."""
        try:
            st = os.stat(path)
        except FileNotFoundError as e:
            raise NotASession(path, "no such file or directory") from e
        except OSError as e:
            raise NotASession(path, e.strerror or str(e)) from e
        if stat.S_ISDIR(st.st_mode):
            return path, sorted(session_files(path), key=self._created)
        if stat.S_ISREG(st.st_mode):
            return None, [path]
        raise NotASession(path, "neither a session file nor a directory")

    @staticmethod
    def _created(path: str) -> tuple[str, str]:
        header = read_header(path) or {}
        created = header.get("timestamp")
        return (created if isinstance(created, str) else "", path)

    @staticmethod
    def exists(folder: str) -> bool:
        return os.path.isdir(folder)

    @staticmethod
    def sessions(folder: str) -> list[str]:
        return session_files(folder)

    @staticmethod
    def header(path: str) -> Entry | None:
        return read_header(path)

    @staticmethod
    def complete(path: str) -> bool:
        """Whether the session's first line (its header) is written out."""
        return peek(path).complete

    def generation(self, path: str) -> Hashable | None:
        mark = self.storage(path).mark()
        return mark.generation if mark is not None else None

    @staticmethod
    def successor(src: Source) -> tuple[str, str] | None:
        return find_successor(src)

    @staticmethod
    def named_successor(src: Source) -> str | None:
        return marker_successor(src.marker, src.path) if src.marker is not None else None

    @staticmethod
    def copies(found: str, name: str) -> tuple[str, ...]:
        """Where to open the session `name` found at `found`: there, under its name, or in
        the archive (it may be compressed, and the plain copy removed, meanwhile)."""
        return (found, name, *archived_copies(name))

    @staticmethod
    def compressed(where: str) -> bool:
        return is_compressed(where)

    @staticmethod
    def continues(path: str, sources: list[Source]) -> Source | None:
        """The followed source that `path` continues (through archived files between)."""
        for hop in ancestors(path):
            for src in sources:
                if is_source(hop, src):
                    return src
        return None

    def targets(self, sources: list[Source], root: str | None) -> FollowTargets:
        places = {root} if root is not None else set()
        for src in sources:
            named = self.named_successor(src)
            if named is not None:
                places.add(os.path.dirname(named))
        return FollowTargets(tuple(src.storage for src in sources), tuple(sorted(places)))

    def open_watch(self, target: str, stop: StopFlag, timeout: float,
                   poll: bool | None) -> Watch:
        """The standing watch of the backend `target` (the followed name) lives in."""
        return self.storage(target).open_watch(stop, timeout, poll)
