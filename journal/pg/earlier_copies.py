"""What an earlier `journal pull` left of a session rotated since: found before a pull
writes anything, moved out of the way once the pull has written the session's archive.

A pull lays a lineage out as file rotation leaves one: each sealed session at
`archive/<name>` (as its successor's `parentSession` names it), the live one at its own
name beside it. A session pulled while it was live and rotated in the database since is, in
the folder of that earlier pull, still at `<name>`, unsealed. A pull into an empty folder
now gives no file there: file rotation seals the file and moves it into the archive, never
leaving a copy behind. Left beside its archive, the copy is a second file of one session:
`journal ls` lists it as live, `lineage` takes it (the first place a sealed file is looked
for is beside its successor) and `push` refuses the lineage.

So a pull treats that copy as rotation treats the file it seals, under the same writer lock
(`journal.lock.WriterLock`, taken before the copy is read and held until it is gone, so no
writer of the store adds to it meanwhile):

1. before anything is written, the copy must hold a beginning of the sealed session's bytes,
   byte for byte: the database then holds all of it, and more (the lines written since, the
   seal). A copy of that session holding anything else (written to here since it was pulled,
   repaired) is bytes the database lacks: the pull is refused (`CopyDiffers`), nothing
   written, naming it;
2. the pull writes as ever: the archive is published whole and synced (`NewFile`), or is
   there already holding exactly those bytes;
3. once every file is written, `check_unchanged` finds each copy still what was read, and
   `retire` syncs the archive, moves the copy's backup and quarantine along into the
   archive folder (as rotation moves them), removes the copy, syncs its folder and lets go
   of the lock, removing the lock file.

Killed at any point, the folder holds the copy whole, or the archive whole (which begins
with the copy's bytes), or both: a rerun finds the archive already there and the copy still
a beginning of it, and finishes. A lock file left by a kill between the removal and the
release is a stray lock, beside a session file that is gone: `journal prune` removes it, by
its rule (`journal.lock.remove_stray_lock`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

from .. import archivegz, codec
from ..archivegz import uncompressed_name
from ..errors import ArchiveElsewhere, JournalError
from ..files import file_digest, fsync_directory, read_regular
from ..lineage import live_name, move_side_files_into_archive, release_after_move
from ..lock import DEFAULT_LOCK_TIMEOUT, WriterLock
from .storage import PostgresStorage

__all__ = ["STEPS", "CopyDiffers", "EarlierCopy", "check_unchanged", "find", "live_name",
           "reached", "release", "retire", "step_hook"]

log = logging.getLogger(__name__)

# where a pull that finds earlier copies stands (tests stop it at each: `step_hook`)
STEPS = ("checked", "written", "moved", "removed")
step_hook: Callable[[str], None] | None = None

_HEADER_LIMIT = 1 << 20  # a header line longer than this is no session's the store wrote


def reached(step: str) -> None:
    if step_hook is not None:
        step_hook(step)


class CopyDiffers(JournalError):
    """A copy of a session rotated since it was pulled holds bytes the database lacks."""


@dataclass
class EarlierCopy:
    """A file an earlier pull wrote for a session that is sealed now."""

    path: str  # the session's live name in the folder, where the earlier pull wrote it
    archive: str  # where this pull writes the session
    session: str  # its locator
    digest: tuple[int, str]  # the copy's size and SHA-256 as checked
    lock: WriterLock | None  # held from the check to the removal (None once let go)


def find(candidates: Iterable[tuple[PostgresStorage, str, str]], *,
         skip_elsewhere: bool = False,
         lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[EarlierCopy]:
    """The earlier copies among `candidates` (a sealed session, the archive it is written
    to, the path of its live name), each locked and checked to begin the session's bytes.

    A file there that is not a copy of the session (not a regular file, another session's
    header) is not one: it is left as it is. Raises CopyDiffers for a copy holding other
    bytes, LockTimeout for one a writer holds; every lock taken is let go then."""
    found: list[EarlierCopy] = []
    try:
        for storage, archive, path in candidates:
            copy = _checked(storage, archive, path, skip_elsewhere, lock_timeout)
            if copy is not None:
                found.append(copy)
    except BaseException:
        release(found)
        raise
    return found


def _checked(storage: PostgresStorage, archive: str, path: str, skip_elsewhere: bool,
             lock_timeout: float) -> EarlierCopy | None:
    if not os.path.lexists(path):
        return None
    try:
        ours = _session_header(storage)
    except ArchiveElsewhere:
        if skip_elsewhere:
            return None  # its archive is left out: the copy stays, the only one here
        raise
    if ours is None or _header_id(path) != ours:
        return None
    lock = WriterLock(path, lock_timeout)
    lock.acquire()
    try:
        try:
            f = read_regular(path, follow=False)
        except FileNotFoundError:  # moved away before it was locked: nothing here now
            lock.release()
            return None
        with f, storage.open_reader() as reader:
            begins, digest = _begins(f, archivegz.chunks(reader.stream, reader.size,
                                                         storage.locator))
        if not begins:
            raise CopyDiffers(
                f"{path}: a copy of {storage.locator}, pulled before it was rotated (it is "
                f"pulled to {archive} now), holds bytes the database does not (written to "
                "or repaired here since?); nothing was written: move the file out of the "
                "folder to keep it, then pull again")
    except BaseException:
        lock.release()
        raise
    return EarlierCopy(path, archive, storage.locator, digest, lock)


def _session_header(storage: PostgresStorage) -> object:
    """The id in the session's header (its first line), None if it has none."""
    with storage.open_reader() as reader:
        first = reader.stream.readline(_HEADER_LIMIT)
    return _id_of(first)


def _header_id(path: str) -> object:
    """The id in the header of the regular file `path`, None if it is no session file."""
    try:
        with read_regular(path, follow=False) as f:
            return _id_of(f.readline(_HEADER_LIMIT))
    except (OSError, JournalError):
        return None


def _id_of(line: bytes) -> object:
    try:
        header = codec.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        return None
    if isinstance(header, dict) and header.get("type") == "session":
        return header.get("id")
    return None


def _begins(f: BinaryIO, parts: Iterable[bytes]) -> tuple[bool, tuple[int, str]]:
    """Whether the file's bytes are a beginning of those `parts` make up (all of them
    included), and the file's size and SHA-256."""
    hasher, size, begins = hashlib.sha256(), 0, True
    for part in parts:
        got = f.read(len(part))
        hasher.update(got)
        size += len(got)
        if got != part[:len(got)]:
            begins = False
            break
        if len(got) < len(part):
            break  # the file ended here
    while rest := f.read(archivegz.CHUNK):  # longer than the session, or differing
        begins = False
        hasher.update(rest)
        size += len(rest)
    return begins, (size, hasher.hexdigest())


def release(copies: Iterable[EarlierCopy]) -> None:
    """Let go of the copies' locks, the copies left as they are."""
    for copy in copies:
        if copy.lock is not None:
            copy.lock.release()


def check_unchanged(copies: Iterable[EarlierCopy]) -> None:
    """CopyDiffers for a copy whose bytes are no longer those checked (changed by a program
    that takes no writer lock, while the pull wrote)."""
    for copy in copies:
        if file_digest(copy.path) != copy.digest:
            raise CopyDiffers(f"{copy.path} changed while the pull wrote; nothing was "
                              "written: move the file out of the folder to keep it, then "
                              "pull again")


def retire(copy: EarlierCopy) -> None:
    """Remove the copy, its archive written whole (see the module docstring): its side
    files moved into the archive folder first, its lock let go and its lock file removed
    last."""
    assert copy.lock is not None
    _sync(copy.archive)
    move_side_files_into_archive(copy.path, uncompressed_name(copy.archive))
    reached("moved")
    os.unlink(copy.path)
    fsync_directory(os.path.dirname(copy.path) or ".")
    reached("removed")
    log.info("%s: removed; its bytes begin %s, the session's archive", copy.path,
             copy.archive)
    lock, copy.lock = copy.lock, None
    release_after_move(lock, copy.path)


def _sync(path: str) -> None:
    """The archive on disk before the copy goes (a pull's own files are synced when they
    are published; one found there may not be)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(path) or ".")
