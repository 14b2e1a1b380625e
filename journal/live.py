"""Taking the writer lock on the file a path leads to, following it if it moves on meanwhile.

A writer (open, rotate, repair) resolves its path once (links, then seals to the live file)
and waits for that file's lock. While it waits, the holder may rotate the file into the
archive or swap it; so, once the lock is held, the path is checked again: if the file is gone
or sealed, the lock is released and the writer follows to the file that continues it.
"""

from __future__ import annotations

import os
import stat

from .errors import JournalError, NotASession
from .files import describe_kind
from .identity import other_names, real_path
from .lineage import (
    MAX_HOPS,
    pending_successor,
    recover_pending,
    recover_rotation,
    release_after_move,
    resolve_live,
    seal_of,
)
from .lock import WriterLock
from .storage import FileStorage


def lock_live(path: str | os.PathLike[str], lock_timeout: float, *, recover: bool = True,
              follow_seals: bool = True) -> tuple[str, WriterLock, list[str]]:
    """Lock the live file `path` leads to; return its real path, the held lock and the
    files followed on the way.

    With `recover`, interrupted rotations on the way are finished or undone first (that
    writes). With `follow_seals=False` a sealed file is locked as it is (repair works on the
    file it was given); a file that is gone is followed either way.
    """
    requested = real_path(path)
    if recover:
        recover_pending(requested, lock_timeout)
    target, followed = resolve_live(requested) if follow_seals else (requested, [])
    for _ in range(MAX_HOPS):
        if not os.path.lexists(target):  # rotated away since it was resolved
            live, hops = resolve_live(target)
            if live != target:
                target = live
                followed.extend(hops)
                continue
        _check_lockable(target)
        lock = FileStorage(target).lock(lock_timeout)
        try:
            if recover:
                recover_rotation(target)
            moved_on = _moved_on(target, follow_seals)
        except BaseException:
            lock.release()
            raise
        if moved_on is None:
            return target, lock, followed
        release_after_move(lock, target)
        target, hops = moved_on
        followed.extend(hops)
    raise JournalError(f"{requested}: too many successors to follow")


def _check_lockable(target: str) -> None:
    """Refuse what cannot be a session before a lock file is created beside it."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        raise NotASession(target, "no such file") from None
    except OSError as e:
        raise NotASession(target, e.strerror or str(e)) from e
    if not stat.S_ISREG(mode):
        raise NotASession(target, f"is {describe_kind(mode)}, not a session file")


def _moved_on(target: str, follow_seals: bool) -> tuple[str, list[str]] | None:
    """Where the locked `target` has gone since it was resolved (and the files on the way),
    or None if it is still the file to write."""
    if os.path.islink(target):
        raise NotASession(target, "was replaced by a symbolic link while waiting for the "
                          "writer lock; nothing was written (check who changes this folder)")
    if os.path.exists(target) and not (follow_seals and (
            seal_of(target) is not None or pending_successor(target) is not None)):
        return None
    live, hops = resolve_live(target)
    if live == target:
        if not os.path.exists(target):
            raise NotASession(target, "no such file, and no successor of it was found")
        return None
    return live, hops


def check_single_name(path: str) -> None:
    """Refuse to write a session file that has other hard links: the writer lock sits beside
    one name, so a writer through another name would take another lock and both would write.
    Called under the lock, once crash leftovers (which may be such names) are removed."""
    extra = other_names(path)
    if extra > 0:
        raise JournalError(f"{path}: has {extra} other name(s) (hard links); a writer "
                           "through another name would take another lock, so nothing was "
                           "written. Keep one name (copy the file if you need two)")
