"""Rotation of every live session under a folder: `journal rotate DIR`, a nightly job's loop.

Sessions are found by the catalog's rule (`journal.discovery.find_lineages`: `*.jsonl` at any
depth, archives claimed by their live file), and each lineage's live file is rotated as
`journal.rotation.rotate` rotates one, with the same options. What cannot or need not rotate
is skipped with its reason, found first by a dry run that takes no lock (so a session with no
compaction is never waited for); a session whose writer holds the lock is `busy` (tried
again at the end, within one lock timeout shared by all of them); a session rotated by its
writer since the listing is followed; an interrupted rotation is finished first; any other
failure (a file that is no session, a destination that cannot be written) is that session's
and the loop goes on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .archivegz import is_compressed
from .discovery import check_paths, find_lineages
from .errors import (
    ForeignSession,
    JournalError,
    LockTimeout,
    UnsupportedVersion,
    describe_holder,
    describe_os_error,
)
from .lineage import MAX_HOPS, pending_rotations, resolve_live, seal_of
from .lock import DEFAULT_LOCK_TIMEOUT, check_lock_timeout
from .rotation import RotationResult, check_keep, rotate
from .view import check_session

__all__ = ["STATUSES", "SessionRotation", "busy_last", "live_sessions", "rotate_folder"]

STATUSES = ("rotated", "skipped", "busy", "failed")
T = TypeVar("T")


@dataclass
class SessionRotation:
    """What `rotate_folder` (or a whole database's rotation,
    `journal.pg.database_rotation.rotate_database_sessions`) did with one session: `status`
    is one of STATUSES (`rotated` also for a dry run's "would rotate"), `reason` says why it
    was skipped, busy or failed, `result` is the rotation's (None where none ran: busy,
    failed, skipped before it)."""

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
    here continues, a Claude Code transcript, a file gone since it was listed. With `keep`, a
    session with archives is rotated (or not) and its retention applied as `rotate` applies
    it, also when nothing rotates. An archive folder shared by every session (`archive_dir`)
    is fine: an archive never replaces another.

    A session rotated by its own writer since it was listed is followed to its successor, as
    `rotate` follows a rotated path; an interrupted rotation is finished first, as `rotate`
    finishes it. A session whose writer holds the lock is not waited for in its turn: the
    busy ones are tried again after all the others, sharing one `lock_timeout` between them
    (a writer that only appends lets go within it; an agent holds its session for as long as
    it runs, and the run should not wait that long for each), and are `busy` if still held.

    Example:
        >>> for done in rotate_folder("sessions/", keep=3):  # doctest: +SKIP
        ...     print(done.path, done.status, done.reason)
    """
    check_keep(keep)
    check_lock_timeout(lock_timeout)
    listed = sessions if sessions is not None else live_sessions(folder)
    turns = _Turns({path for path, _ in listed}, set())
    options = {"archive_dir": archive_dir, "keep": keep, "compress": compress,
               "dry_run": dry_run}

    def turn(session: tuple[str, int], timeout: float) -> SessionRotation:
        path, files = session
        turns.waiting.discard(path)
        return _rotate_one(path, files, turns, lock_timeout=timeout, **options)

    yield from busy_last(listed, turn, lock_timeout)


def busy_last(listed: Sequence[T], turn: Callable[[T, float], SessionRotation],
              lock_timeout: float) -> Iterator[SessionRotation]:
    """`turn(session, timeout)` for each of `listed`, yielding each outcome as it is done:
    first with no wait for the lock (timeout 0), then, after all the others, again for the
    ones that were `busy`, sharing one `lock_timeout` between them (a writer that only
    appends lets go within it; an agent holds its session for as long as it runs, and the
    run should not wait that long for each). The loop of `rotate_folder` and of a whole
    database's rotation (`journal.pg.database_rotation`)."""
    held: list[T] = []
    for session in listed:
        outcome = turn(session, 0)
        if outcome.status == "busy" and lock_timeout > 0:
            held.append(session)
            continue
        yield outcome
    deadline = time.monotonic() + lock_timeout
    for session in held:
        yield turn(session, max(0.0, deadline - time.monotonic()))


@dataclass
class _Turns:
    """Live files still to come in the listing, and those whose turn is done."""

    waiting: set[str]
    done: set[str]


def _rotate_one(listed: str, files: int, turns: _Turns, **options: Any) -> SessionRotation:
    """The turn of the session listed as `listed`, followed where its writer rotated it."""
    path, note = listed, ""
    for _ in range(MAX_HOPS):
        if not (os.path.exists(path) and pending_rotations(path)):  # (else: finished first)
            live = _live_now(path)
            if live is None:
                return SessionRotation(listed, "skipped", "gone since it was listed (removed "
                                       "or moved by another process)")
            if live != path:
                note = f"rotated meanwhile by its writer into {live}"
                if live in turns.done or live in turns.waiting:
                    where = "done above" if live in turns.done else "which has its own turn"
                    return SessionRotation(listed, "skipped", f"{note}, {where}")
                path, files = live, max(files, 2)  # the file it left is an archive now
        outcome = _rotate_live(path, files, **options)
        if outcome is None:
            continue  # rotated away between the look and the rotation: follow it again
        turns.done.add(path)
        if note:
            outcome.path = listed
            outcome.reason = f"{note}; {outcome.reason}" if outcome.reason else note
        return outcome
    return SessionRotation(listed, "failed", "kept moving on while it was rotated; try again")


def _live_now(path: str) -> str | None:
    """The live file of `path`'s lineage now, None if it is gone and nothing continues it."""
    try:
        live = resolve_live(path)[0]
    except (JournalError, OSError):
        return path
    return live if live != path or os.path.lexists(path) else None


def _rotate_live(path: str, files: int, *, archive_dir: str | None, keep: int | None,
                 compress: bool, dry_run: bool, lock_timeout: float) -> SessionRotation | None:
    """Rotate one live file; None if it was gone when it was read (rotated meanwhile)."""
    if is_compressed(path):
        return SessionRotation(path, "skipped", "a compressed archive that no live session "
                               "here continues")
    try:
        if pending_rotations(path) and not dry_run:
            # an interrupted rotation: `rotate` finishes it first, then rotates what is live
            result = rotate(path, archive_dir=archive_dir, keep=keep, compress=compress,
                            lock_timeout=lock_timeout)
        else:
            if seal_of(path) is not None:
                return SessionRotation(path, "skipped", "sealed by a rotation; its successor "
                                       "is not here")
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
    except UnsupportedVersion as e:  # left as it came (pi's own, say): not a failed job
        return SessionRotation(path, "skipped", str(e).removeprefix(f"{path}: "))
    except LockTimeout as e:
        return SessionRotation(path, "busy", f"{describe_holder(e.holder)} is writing it; "
                               "left for a later run")
    except (JournalError, OSError) as e:
        if not os.path.lexists(path):
            return None
        return SessionRotation(path, "failed", str(e) if isinstance(e, JournalError)
                               else describe_os_error(e))
    recovered = [done.removeprefix(f"{path}: ") for done in result.recovered]
    reason = "; ".join(recovered + ([] if result.rotated else [result.reason]))
    return SessionRotation(path, "rotated" if result.rotated else "skipped", reason, result)
