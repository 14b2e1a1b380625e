"""Rotation of every live session in a database: `journal rotate pg:`, a nightly job's loop.

The database's counterpart of `journal.folder_rotation`, with the same outcomes
(`SessionRotation`) and the same loop (`busy_last`). Sessions are found by
`journal.pg.lineages.live_database_sessions` (the last session of each lineage: a sealed one
is reached through its live one), and each is rotated as `rotate_database` rotates one, with
the same options. What cannot or need not rotate is skipped with its reason, found first by
a dry run that takes no lease (so a session with nothing to do is never waited for); a
session whose writer holds the lease is `busy` (tried again at the end, within one lock
timeout shared by all of them); a session rotated by its writer since the listing is
followed (`rotate_database` follows a sealed session to its live one); any other failure
(a version 1 session, an archive folder that cannot be written) is that session's and the
loop goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from ..errors import (
    BrokenLineage,
    JournalError,
    LockTimeout,
    NotASession,
    UnsupportedVersion,
    describe_holder,
    describe_os_error,
)
from ..folder_rotation import SessionRotation, busy_last
from ..lock import DEFAULT_LOCK_TIMEOUT, check_lock_timeout
from ..rotation import RotationResult, check_keep
from .lineages import live_database_sessions
from .rotation import check_options, rotate_database, stream_row
from .storage import PostgresStorage

__all__ = ["rotate_database_sessions"]


def rotate_database_sessions(
    url: str,
    *,
    archive_dir: str | None = None,
    keep: int | None = None,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    sessions: list[tuple[str, int]] | None = None,
) -> Iterator[SessionRotation]:
    """Rotate every live session of the database `url` names (a URL without `session`, or
    `pg:` alone) that can be rotated, one at a time, yielding each one's outcome as it is
    done, named by its URL without the password (`sessions`: `live_database_sessions(url)`,
    when the caller listed them already, to count them say).

    Skipped, with the reason: a session with nothing to rotate (no compaction on its active
    branch, too little before the kept entries), the last session of a broken lineage (its
    successor's row deleted: no live session continues it), one deleted since it was listed.
    With `archive_dir`, a session with archives not yet exported (or, with `keep`, beyond
    the newest `keep` still in the database) is rotated (or not) and those exported and
    moved out as `rotate_database` does it, also when nothing rotates. The archives stay in
    the database otherwise: `keep` without `archive_dir` is refused (JournalError), as a
    session's rotation refuses it (`journal.anywhere.rotate`); there is no `compress`.

    A session whose writer holds the lease is not waited for in its turn: the busy ones are
    tried again after all the others, sharing one `lock_timeout` between them, and are
    `busy` if still held (`journal.folder_rotation.busy_last`).

    Raises (before any session is rotated): ValueError for a `keep` below 0 or a bad
    `lock_timeout`; BadDatabaseUrl, NoJournalSchema (no schema is made), DatabaseError
    from the listing.

    Example:
        >>> for done in rotate_database_sessions("pg:", archive_dir="/srv/archive"):
        ...     print(done.path, done.status, done.reason)  # doctest: +SKIP
    """
    check_keep(keep)
    check_lock_timeout(lock_timeout)
    check_options(keep=keep, archive_dir=archive_dir)
    listed = sessions if sessions is not None else live_database_sessions(url)
    turn = partial(_rotate_one, archive_dir=archive_dir, keep=keep, dry_run=dry_run)
    yield from busy_last([session for session, _ in listed], turn, lock_timeout)


def _rotate_one(url: str, lock_timeout: float, *, archive_dir: str | None,
                keep: int | None, dry_run: bool) -> SessionRotation:
    """The turn of the live session `url` (as listed)."""
    listed = PostgresStorage.from_url(url)
    name = listed.locator
    try:
        # a look without the lease first: a session with nothing to do is never waited for
        plan = rotate_database(listed, archive_dir=archive_dir, keep=keep, dry_run=True)
        if dry_run or not (plan.rotated or plan.exported or plan.moved_out):
            return _outcome(name, plan)
        result = rotate_database(listed, archive_dir=archive_dir, keep=keep,
                                 lock_timeout=lock_timeout)
    except LockTimeout as e:
        return SessionRotation(name, "busy", f"{describe_holder(e.holder)} is writing it; "
                               "left for a later run")
    except BrokenLineage as e:
        return SessionRotation(name, "skipped", str(e).removeprefix(f"{e.sealed}: "))
    except UnsupportedVersion as e:  # pushed as it came (pi's own, say): not a failed job
        return SessionRotation(name, "skipped", str(e).removeprefix(f"{e.path}: "))
    except NotASession as e:
        if _gone(listed):
            return SessionRotation(name, "skipped", "gone since it was listed (deleted by "
                                   "another process)")
        return SessionRotation(name, "failed", str(e))
    except (JournalError, OSError) as e:
        return SessionRotation(name, "failed", str(e) if isinstance(e, JournalError)
                               else describe_os_error(e))
    return _outcome(name, result)


def _gone(storage: PostgresStorage) -> bool:
    try:
        return stream_row(storage) is None
    except (JournalError, OSError):
        return False


def _outcome(name: str, result: RotationResult) -> SessionRotation:
    """The session's outcome from its rotation's result (a dry run's too): named as it was
    listed, saying so where its writer rotated it since and the result is its successor's."""
    reason = "" if result.rotated else result.reason
    if result.path != name:
        note = f"rotated meanwhile by its writer into {result.path}"
        reason = f"{note}; {reason}" if reason else note
    return SessionRotation(name, "rotated" if result.rotated else "skipped", reason, result)
