"""Rotation of every live session under a folder: `journal rotate DIR`, a nightly job's loop.

Sessions are found by the catalog's rule (`journal.discovery.find_lineages`: `*.jsonl` at any
depth, archives claimed by their live file), and each lineage's live file is rotated as
`journal.rotation.rotate` rotates one, with the same options. What cannot or need not rotate
is skipped with its reason, found first by a dry run that takes no lock (so a session with no
compaction is never waited for); a session whose writer holds the lock past the timeout is
`busy`; any other failure (a file that is no session, a destination that cannot be written)
is that session's and the loop goes on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .archivegz import is_compressed
from .discovery import check_paths, find_lineages
from .errors import ForeignSession, JournalError, LockTimeout, describe_os_error
from .lineage import seal_of
from .lock import DEFAULT_LOCK_TIMEOUT
from .rotation import RotationResult, check_keep, rotate
from .view import check_session

__all__ = ["STATUSES", "SessionRotation", "live_sessions", "rotate_folder"]

STATUSES = ("rotated", "skipped", "busy", "failed")


@dataclass
class SessionRotation:
    """What `rotate_folder` did with one session: `status` is one of STATUSES (`rotated`
    also for a dry run's "would rotate"), `reason` says why it was skipped, busy or failed,
    `result` is the rotation's (None where none ran: busy, failed, skipped before it)."""

    path: str
    status: str
    reason: str = ""
    result: RotationResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "reason": self.reason,
                "result": self.result.to_json() if self.result is not None else None}


def live_sessions(folder: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """The live file of each session under `folder` and how many files its lineage has
    (archives included). JournalError if `folder` does not exist or cannot be read."""
    check_paths([os.fspath(folder)])
    return [(chain[-1], len(chain)) for chain in find_lineages([folder])]


def rotate_folder(
    folder: str | os.PathLike[str],
    *,
    archive_dir: str | None = None,
    keep: int | None = None,
    compress: bool = True,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    sessions: list[tuple[str, int]] | None = None,
) -> Iterator[SessionRotation]:
    """Rotate every live session under `folder` that can be rotated, one at a time, yielding
    each one's outcome as it is done (`sessions`: `live_sessions(folder)`, when the caller
    listed them already, to count them say).

    Skipped, with the reason: a session with nothing to rotate (no compaction on its active
    branch, too little before the kept entries), a compressed or sealed file no live file
    here continues, a Claude Code transcript. With `keep`, a session with archives is
    rotated (or not) and its retention applied as `rotate` applies it, also when nothing
    rotates. An archive folder shared by every session (`archive_dir`) is fine: an archive
    never replaces another.

    Example:
        >>> for done in rotate_folder("sessions/", keep=3):  # doctest: +SKIP
        ...     print(done.path, done.status, done.reason)
    """
    check_keep(keep)
    for path, files in sessions if sessions is not None else live_sessions(folder):
        yield _rotate_one(path, files, archive_dir=archive_dir, keep=keep, compress=compress,
                          dry_run=dry_run, lock_timeout=lock_timeout)


def _rotate_one(path: str, files: int, *, archive_dir: str | None, keep: int | None,
                compress: bool, dry_run: bool, lock_timeout: float) -> SessionRotation:
    if is_compressed(path):
        return SessionRotation(path, "skipped", "a compressed archive that no live session "
                               "here continues")
    try:
        if seal_of(path) is not None:
            return SessionRotation(path, "skipped", "sealed by a rotation; its successor is "
                                   "not here")
        check_session(path)  # a file in which nothing is a session fails, as `rotate FILE`
        # a look without the lock first: a session that would not rotate is never waited for
        plan = rotate(path, archive_dir=archive_dir, compress=compress, dry_run=True)
        if dry_run or not (plan.rotated or (keep is not None and files > 1)):
            if plan.rotated:
                return SessionRotation(path, "rotated", result=plan)
            return SessionRotation(path, "skipped", plan.reason, plan)
        result = rotate(path, archive_dir=archive_dir, keep=keep, compress=compress,
                        lock_timeout=lock_timeout)
    except ForeignSession:
        return SessionRotation(path, "skipped", "a Claude Code transcript: never rotated")
    except LockTimeout as e:
        return SessionRotation(path, "busy", str(e))
    except JournalError as e:
        return SessionRotation(path, "failed", str(e))
    except OSError as e:
        return SessionRotation(path, "failed", describe_os_error(e))
    return SessionRotation(path, "rotated" if result.rotated else "skipped",
                           "" if result.rotated else result.reason, result)
