"""Rotation of a database session: the successor and the seal in one transaction.

What the successor holds is the file rotation's rule, not a copy of it
(`journal.rotation.plan_successor`: the active branch from the latest compaction's kept
entries on, the settings in force before them, their labels and the latest session name, ids
kept), and it is proven to project to the old session's context before anything is written.
Then, under the old session's lease, one transaction checks the lease's fencing epoch,
creates the successor stream, appends the `journal.successor` seal to the old stream (the
same seal a rotated file ends with, so the tail follows both alike), and records the
successor on the old stream's row. Either all of it is committed or none: there is no
intent file and nothing to recover.

Names are those a file rotation would give, so `journal pull` writes a rotated lineage just
as file rotation leaves it: the successor is `<timestamp>_<id>.jsonl`, its header's
`parentSession` is `archive/<old file>`, and the old stream's file is that archive.

Archives stay in the database (the sealed stream, readable as before) and, by policy
(`archive_dir`), are also exported to `<archive_dir>/<file>.gz` once sealed (they no longer
change): after the commit, outside the transaction, so every rotation with `archive_dir`
exports the lineage's archives not yet exported (one an interrupted rotation left too), and
`rotate_database` does so also when there is nothing to rotate. With `keep` too, only the
newest `keep` archives of the lineage keep their lines in the database: older ones are moved
out (`move_out`: exported, the file read back and compared, then their rows deleted in one
transaction; the stream row stays, naming the file), and read from that file from then on.
Opening a sealed session follows its successors to the live one (`live_storage`,
`lock_live`), also when it was rotated while the opener waited for the lease.
"""

from __future__ import annotations

import logging
import os
import posixpath
import stat
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import psycopg

from .. import archivegz, codec, model
from ..archivegz import compressed_name
from ..errors import (
    BrokenLineage,
    JournalError,
    LeaseLost,
    NoSpace,
    SessionChanged,
    UnsupportedVersion,
)
from ..files import (
    NO_SPACE_ERRNOS,
    TEMP_SUFFIX,
    free_bytes,
    fsync_directory,
    make_private_dir,
    remove_stale_temps,
)
from ..lineage import ARCHIVE_DIR, MAX_HOPS
from ..lock import DEFAULT_LOCK_TIMEOUT
from ..publish import NewFile
from ..rotation import (
    RotationResult,
    check_archive_folder,
    check_keep,
    plan_successor,
    too_little_gained,
)
from ..seal import make_seal
from ..snapshot import find_last_of_type, last_newline_end, resume
from ..tree import Tree
from . import schema
from .connect import DatabaseError, connect, describe, in_transaction, with_shared
from .lease import Lease
from .storage import PostgresReader, PostgresStorage, current_end, split_batch
from .url import no_such_session, short_name

__all__ = ["CHANGED_TRIES", "UnsupportedOption", "again_while_changed", "archive_sealed",
           "check_options", "export_archive", "file_name", "follow_successors",
           "keep_archives", "live_storage", "lock_live", "move_out", "rotate_database",
           "rotate_session", "seal_in", "stream_row"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class UnsupportedOption(JournalError):
    """A rotation option a database session does not take; `option` names it as the API
    does (`compress`, `keep`), so a command line can say it in its own flags' words."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def check_options(*, compress: bool = True, keep: int | None = None,
                  archive_dir: str | None = None) -> None:
    """The rule for which file-rotation options a database session takes: its archives stay
    in the database or are exported compressed (no `compress=False`), and `keep` moves the
    older ones out to files, so it needs `archive_dir`. UnsupportedOption otherwise."""
    if not compress:
        raise UnsupportedOption("compress", "compress=False is for files: a database's "
                                "archives are exported (archive_dir) as .jsonl.gz")
    if keep is not None and archive_dir is None:
        raise UnsupportedOption("keep", "keep on a database moves the older archives out of "
                                "it, to files: give archive_dir too")

# times in all a repair or a rotation under the lease reads the session when, each time, an
# appender without the lease commits a line before it is done (`again_while_changed`)
CHANGED_TRIES = 3

ARCHIVE_TAG = "archive"


def stream_row(storage: PostgresStorage) -> dict[str, Any] | None:
    """The session's row: successor, file name, export, header timestamp (None if none)."""
    session = storage.session

    def query(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
        return conn.execute(
            f"SELECT s.successor, s.file_name, s.exported_to, s.sealed_at, s.generation, "
            f"coalesce(e.size, s.size), coalesce(e.entries, s.entries), s.moved_out_at "
            f"FROM {schema.STREAMS_WITH_END} "
            f"WHERE s.session = %s AND s.generation IS NOT NULL", (session,)).fetchone()

    row = with_shared(storage.conninfo, query)
    if row is None:
        return None
    keys = ("successor", "file_name", "exported_to", "sealed_at", "generation", "size",
            "entries", "moved_out_at")
    return dict(zip(keys, row, strict=True))


def file_name(storage: PostgresStorage, header: model.Entry | None = None) -> str:
    """The session's file name (relative to a pulled folder): the one recorded, else pi's
    name from its header."""
    row = stream_row(storage)
    if row is not None and row["file_name"]:
        return str(row["file_name"])
    if header is None:
        with storage.open_reader() as reader:
            first = reader.stream.readline()
        header = codec.loads(first) if first else {}
    return model.session_file_name(str(header.get("timestamp", "")),
                                   str(header.get("id", storage.session)))


def live_storage(storage: PostgresStorage) -> PostgresStorage:
    """The session that continues `storage` now (itself if it is not sealed). Raises
    BrokenLineage when a successor on the way is not in the database."""
    return follow_successors(storage)[0]


def follow_successors(storage: PostgresStorage) -> tuple[PostgresStorage, list[str]]:
    """The session that continues `storage` now, and the sealed sessions on the way there
    (their locators, `storage`'s first; none if it is not sealed), as
    `journal.lineage.resolve_live` gives a file's hops. A `storage` not in the database is
    given back as it is (its caller says so); a successor on the way that is not (its row
    deleted out of band) is BrokenLineage, naming it and the last session that is."""
    current = storage
    hops: list[str] = []
    seen = {storage.session}
    while True:  # ends: every hop goes to a session not visited yet
        row = stream_row(current)
        if row is None and hops:
            raise BrokenLineage(hops[-1], current.locator, current.session)
        if row is None or not row["successor"]:
            return current, hops
        successor = str(row["successor"])
        if successor in seen:
            raise JournalError(f"{storage.locator}: its successors lead back to {successor} "
                               "(a loop in journal.streams' successor column)")
        seen.add(successor)
        hops.append(current.locator)
        current = PostgresStorage(current.conninfo, successor)


def lock_live(storage: PostgresStorage, timeout: float
              ) -> tuple[PostgresStorage, Lease, list[str]]:
    """Take the lease of the live session `storage` leads to, following a rotation that
    happened while this waited for it; return it, its lease and the sealed sessions
    followed on the way (their locators, oldest first), as the file backend's
    `journal.live.lock_live` does."""
    current, followed = follow_successors(storage)
    for _ in range(MAX_HOPS):
        lease = current.lock(timeout)
        row = stream_row(current)
        if row is None or not row["successor"]:
            return current, lease, followed
        lease.release()  # rotated while we waited: on to its successor
        current, hops = follow_successors(current)
        followed.extend(hops)
    raise JournalError(f"{storage.locator}: kept moving on while it was opened; try again")


def again_while_changed(work: Callable[[], T], lease: Lease | None,
                        tries: int = CHANGED_TRIES) -> T:
    """`work()`, a repair or a rotation under the session's `lease`, done again from the
    session as it is now when it raised SessionChanged (it changed nothing: an appender
    without the lease, which the lease does not hold back, committed after it read the
    session). The last of `tries` holds the session's row from before its reading to its
    commit (`Lease.row_locked`), so that such an appender waits for it rather than outrun
    it again (but for a lease connection lost and taken back meanwhile: the row's lock goes
    with it). The last SessionChanged says how many times it was read."""
    for attempt in range(1, tries + 1):
        try:
            if attempt == tries and lease is not None:
                with lease.row_locked():
                    return work()
            return work()
        except SessionChanged as e:
            if attempt == tries:
                raise SessionChanged(e.locator, e.work, e.read, e.now, tries) from e
            log.info("%s: %s; reading it again", e.locator, e)
    raise AssertionError("unreachable: the last try returns or raises")


def rotate_database(
    target: str | PostgresStorage,
    *,
    archive_dir: str | None = None,
    keep: int | None = None,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> RotationResult:
    """Rotate a database session into a successor session (see the module docstring).

    `target` is a session URL or a `PostgresStorage`; a sealed session is followed to its live
    successor first. Returns `rotated=False` with the reason when there is nothing to rotate
    (no compaction on the active branch, or a successor no shorter). `archive_dir` also
    exports the sealed session to `<archive_dir>/<file>.gz`; `keep` (with `archive_dir`) then
    moves the lineage's archives beyond the newest `keep` out of the database
    (`keep_archives`). Both are done also when nothing rotates, for every archive of the
    lineage (`_finish_lineage`): a call again after one interrupted once it had committed
    finishes what that one left (`exported`, `moved_out`, `removed_temps` in the result); an
    interruption after the commit is raised with a note saying what was done and what is
    left. A dry run takes no lease and writes nothing. Raises ValueError for a
    `keep` below 0 (a `keep` without `archive_dir` is a warning), LockTimeout (naming the
    holder), LeaseLost if another writer took the session over meanwhile, DatabaseError. An
    appender without the lease that appends after the session was read makes it read the
    session again (`again_while_changed`: the last time, such an appender waits for the
    rotation; SessionChanged, nothing changed, if the lease's connection was lost meanwhile
    and it did not).

    Example:
        >>> result = rotate_database("pg:4f1c...")  # doctest: +SKIP
        >>> result.successor
    """
    started = time.perf_counter()
    check_keep(keep)
    storage = target if isinstance(target, PostgresStorage) else PostgresStorage.from_url(target)
    if stream_row(storage) is None:
        raise no_such_session(storage.locator)
    if archive_dir is not None:  # a dry run's "would rotate" means that it can, too
        check_archive_folder(storage.locator, archive_dir)
    lease: Lease | None = None
    if dry_run:
        storage = live_storage(storage)
    else:
        storage, lease, _ = lock_live(storage, lock_timeout)
    locked_at = time.perf_counter()
    result: RotationResult | None = None
    left = _steps_after(archive_dir, keep)
    try:
        try:
            result = again_while_changed(partial(_rotate_held, storage, lease, dry_run),
                                         lease)
        finally:
            if lease is not None:
                lease.release()
        result.lock_held_ms = (time.perf_counter() - locked_at) * 1000
        # also when nothing rotated: what an interrupted rotation of the lineage left undone
        _finish_lineage(result, storage, archive_dir, keep, left)
    except BaseException as e:
        if result is None and not dry_run:  # stopped after its commit, before it returned?
            result = _rotated_meanwhile(storage)
        note = None if result is None or dry_run else _unfinished(result, storage,
                                                                   archive_dir, keep, left)
        if note is not None:  # said by `journal rotate` on stderr
            e.add_note(note)
        raise
    result.total_ms = (time.perf_counter() - started) * 1000
    return result


def _rotated_meanwhile(storage: PostgresStorage) -> RotationResult | None:
    """The rotation of the live session `storage` as committed, when an interruption came
    between its commit and its result (None: not sealed, or the server cannot say now)."""
    try:
        row = stream_row(storage)
    except (JournalError, OSError):
        return None
    if row is None or not row["successor"]:
        return None
    successor = PostgresStorage(storage.conninfo, str(row["successor"]))
    return RotationResult(True, storage.locator, successor=successor.locator,
                          successor_id=successor.session, archive=storage.locator)


def rotate_session(storage: PostgresStorage, lease: Lease, *, dry_run: bool = False,
                   tree: Tree | None = None,
                   ) -> tuple[RotationResult, PostgresStorage | None, Lease | None]:
    """Rotate a session whose lease the caller holds (an open `Session`): the result, and,
    when it rotated, the successor holding its lease (its appenders are fenced by it), for
    the writer to carry on in. The successor's lease is taken before the transaction that
    creates it and seals the old one (no other writer can come between: the sealed session
    takes no more appends). The caller switches to the successor, then exports and moves
    archives out (`archive_sealed`): an interruption there leaves it writing on. `tree` is
    the writer's own (its leaf the active branch's end, after a `branch()`), planned from as
    a file session's rotation plans from it; by default, the session as a resume reads it."""
    started = time.perf_counter()
    held: list[tuple[PostgresStorage, Lease]] = []
    try:
        result = again_while_changed(partial(_rotate_held, storage, lease, dry_run, held, tree),
                                     None if dry_run else lease)
    except BaseException:  # the last try's commit failed after the successor's lease was taken
        for _, taken in held:
            taken.release()
        raise
    result.lock_held_ms = result.total_ms = (time.perf_counter() - started) * 1000
    if not result.rotated or dry_run or not held:
        return result, None, None
    successor, new_lease = held[0]
    return result, successor, new_lease


def archive_sealed(result: RotationResult, sealed: PostgresStorage, archive_dir: str | None,
                   keep: int | None) -> None:
    """After `rotate_session`: export the session it sealed to `archive_dir` (with the
    lineage's archives an earlier rotation left unexported) and move the lineage's archives
    beyond the newest `keep` out of the database (planned only, for a dry run), as
    `rotate_database` does, also when nothing rotated (`sealed` is then the live session).
    Failures are warnings in `result`."""
    started = time.perf_counter()
    check_keep(keep)
    left = _steps_after(archive_dir, keep)
    try:
        _finish_lineage(result, sealed, archive_dir, keep, left)
    except BaseException as e:  # the writer goes on in its successor: say what is left
        note = None if result.dry_run else _unfinished(
            result, sealed, archive_dir, keep, left,
            again="a rotation of the session with the same archive folder finishes it")
        if note is not None:
            e.add_note(note)
        raise
    result.total_ms += (time.perf_counter() - started) * 1000


EXPORT_STEP, KEEP_STEP = "export", "keep"


def _steps_after(archive_dir: str | None, keep: int | None) -> list[str]:
    """What follows the rotation's commit (`_finish_lineage`), each step taken off the list
    once done: what is left when it is interrupted."""
    if archive_dir is None:
        return []
    return [EXPORT_STEP] if keep is None else [EXPORT_STEP, KEEP_STEP]


def _unfinished(result: RotationResult, storage: PostgresStorage, archive_dir: str | None,
                keep: int | None, left: list[str],
                again: str = "run the same command again to finish it") -> str | None:
    """What a rotation interrupted after its commit says: that it rotated, what is left
    undone, and that running it `again` does it (None: nothing to say)."""
    said = (f"{result.path} was rotated into {result.successor}" if result.rotated
            else f"{storage.locator} was not rotated ({result.reason})")
    if not left and not result.rotated:
        return None
    if not left:
        return f"{said} before the interruption; nothing is left to do"
    archives = "its archive" if result.rotated else "its archives not yet exported"
    steps = {EXPORT_STEP: f"exporting {archives} to {archive_dir}",
             KEEP_STEP: f"moving the archives beyond the newest {keep} out of the database"}
    todo = " and ".join(steps[step] for step in left)
    return (f"{said}, but it was interrupted before {todo} (until then its archives stay "
            f"in the database, whole): {again}")


def _finish_lineage(result: RotationResult, storage: PostgresStorage, archive_dir: str | None,
                    keep: int | None, left: list[str]) -> None:
    """What follows a rotation of `storage` (the session it sealed; with none, the live one):
    with `archive_dir`, remove the temps crashed exports left there (`remove_stale_temps`:
    those no live export holds), export every archive of the lineage not yet exported (the
    one just sealed, and those an interrupted rotation left), then move those beyond the
    newest `keep` out (`keep_archives`). A dry run lists what it would export and move.
    Each step is taken off `left` once done. What fails is a warning in `result`: the
    rotation is done, and an archive not exported or moved out stays in the database."""
    dry_run = result.dry_run
    sealed: PostgresStorage | None = None
    newest: PostgresStorage | None = None
    if not result.rotated:
        live = storage
    elif dry_run:
        live, newest = live_storage(storage), storage  # the sealed one would be the newest
    elif result.successor_id is not None:
        live, sealed = PostgresStorage(storage.conninfo, result.successor_id), storage
    else:
        return
    if archive_dir is None:
        if keep is not None and result.rotated:
            result.warnings.append("keep needs an archive folder for a database session (its "
                                   "older archives move out to files there): they stay in "
                                   "the database")
        return
    try:
        archives = _archives_of(live)  # newest first
    except (OSError, JournalError) as e:  # the lineage could not be read: nothing exported
        result.warnings.append(f"exporting the lineage's archives failed ({e}); they stay in "
                               "the database")
        archives = []
    if not dry_run:
        try:
            result.removed_temps = _remove_export_temps(archives, archive_dir)
        except (OSError, JournalError) as e:
            result.warnings.append(f"removing the temps of stopped exports from {archive_dir} "
                                   f"failed ({e})")
    for archive in reversed(archives):
        _export_unexported(result, archive, archive_dir,
                           sealed is not None and archive.session == sealed.session)
    left.remove(EXPORT_STEP)
    if keep is None:
        return
    try:
        result.moved_out = keep_archives(live, keep, archive_dir, result.warnings,
                                         dry_run=dry_run, newest=newest)
    except (OSError, JournalError) as e:  # the lineage could not be read: nothing moved
        result.warnings.append(f"moving old archives out of the database failed ({e}); "
                               "they stay in the database")
    left.remove(KEEP_STEP)


def _export_unexported(result: RotationResult, archive: PostgresStorage, archive_dir: str,
                       just_sealed: bool) -> None:
    """Export `archive` to `archive_dir` if it never was (nor moved out), into
    `result.exported` (where it would go, for a dry run); a failure is a warning."""
    try:
        row = stream_row(archive)
        if row is None or row["exported_to"] is not None or row["moved_out_at"] is not None:
            return
        if result.dry_run:
            result.exported[archive.locator] = _archive_path(archive, archive_dir)
            return
        path = export_archive(archive, archive_dir)
    except (OSError, JournalError) as e:
        if just_sealed:
            result.warnings.append(f"exporting the archive failed ({e}); it stays in the "
                                   "database")
        else:
            said = str(e).removeprefix(f"{archive.locator}: ")
            result.warnings.append(f"{archive.locator}: not exported (it stays in the "
                                   f"database): {said}")
        return
    result.exported[archive.locator] = path
    if just_sealed:
        result.archive = path


def _archives_of(live: PostgresStorage) -> list[PostgresStorage]:
    """The sealed sessions `live` continues, newest first."""
    archives: list[PostgresStorage] = []
    seen = {live.session}
    older = live.predecessor()
    while older is not None and older.session not in seen:
        seen.add(older.session)
        archives.append(older)
        older = older.predecessor()
    return archives


def _remove_export_temps(archives: list[PostgresStorage], directory: str) -> list[str]:
    """Remove the temps exports of `archives` left in `directory` when a crash (a SIGKILL,
    a power cut) stopped them: `.<file>.gz.<random>.archive.tmp` no live process holds (the
    file backend's rule: `NewFile` holds a `flock` on its temp until it publishes it)."""
    removed: list[str] = []
    for archive in archives:
        name = os.path.basename(_archive_path(archive, directory))
        removed += remove_stale_temps(directory, name + ".", f".{ARCHIVE_TAG}{TEMP_SUFFIX}")
    return removed


def keep_archives(live: PostgresStorage, keep: int, directory: str,
                  warnings: list[str] | None = None, *, dry_run: bool = False,
                  newest: PostgresStorage | None = None) -> dict[str, str]:
    """Move the archives of `live`'s lineage beyond the newest `keep` out of the database
    (`move_out`, to `directory` where one was never exported); return {session URL: file}
    for those moved now (older ones moved before are left as they are). One that cannot be
    moved out stays in the database, the reason added to `warnings` (raised without them),
    and the others move all the same. A dry run moves nothing and returns where each would
    go; `newest` counts as the newest archive (the session a rotation would seal). Rows
    left of an archive moved out before (the generation a repair replaced, kept then for the
    readers still on it) are deleted."""
    check_keep(keep)
    archives = [] if newest is None else [newest]
    archives += [a for a in _archives_of(live) if newest is None or a.session != newest.session]
    moved: dict[str, str] = {}
    for index, archive in enumerate(archives):
        try:
            row = stream_row(archive)
            if row is None:
                continue
            if row["moved_out_at"] is not None:
                if not dry_run:
                    _drop_leftovers(archive)
                continue
            if index >= keep:
                moved[archive.locator] = (_destination(archive, row, directory) if dry_run
                                          else move_out(archive, directory))
        except (OSError, JournalError) as e:
            if warnings is None:
                raise
            said = str(e).removeprefix(f"{archive.locator}: ")
            warnings.append(f"{archive.locator}: not moved out of the database: {said}")
    return moved


def _drop_leftovers(storage: PostgresStorage) -> None:
    """Delete the rows an archive moved out of the database still has of older generations
    (never of the current one: what the file does not hold)."""
    session = storage.session

    def delete(conn: psycopg.Connection[Any]) -> None:
        conn.execute("DELETE FROM journal.entries e USING journal.streams s WHERE "
                     "e.stream = s.id AND s.session = %s AND s.moved_out_at IS NOT NULL "
                     "AND e.generation <> s.generation", (session,))

    with_shared(storage.conninfo, delete)


def _destination(storage: PostgresStorage, row: dict[str, Any], directory: str) -> str:
    """Where `move_out` would put the session's lines."""
    exported = row["exported_to"]
    if exported is not None and os.path.exists(str(exported)):
        return str(exported)
    return _archive_path(storage, directory)


def move_out(storage: PostgresStorage, directory: str) -> str:
    """Move a sealed session's lines out of the database; return the `.jsonl.gz` holding them.

    Its export (`exported_to`) is used where that file is here, else it is exported to
    `directory` first (a file already there holding exactly its bytes, left by an export
    that stopped before recording it, is taken as the export). The file is read back and
    must hold exactly the session's bytes; then, in one transaction, with the row locked
    and still the generation and size that were read, its rows are deleted and
    `moved_out_at` set, with the SHA-256 of the bytes (what readers check the file
    against). Readers read the file from then on. Raises JournalError for a session that
    is not sealed (only an archive moves out), or a file that does not hold its bytes (the
    rows stay); NotASession; DatabaseError when the commit failed (the rows stay) or its
    reply was lost (it may have been committed: keep the file)."""
    locator = storage.locator
    row = stream_row(storage)
    if row is None:
        raise no_such_session(locator)
    if row["moved_out_at"] is not None:
        return str(row["exported_to"])
    if row["successor"] is None:
        raise JournalError(f"{locator}: not sealed: only an archive (a rotated session) can "
                           "move out of the database")
    with storage.open_reader() as reader:
        generation = reader.generation
        path = _destination(storage, row, directory)
        if path != row["exported_to"]:
            path, digest = _write_archive(storage, directory, reader)
        else:
            digest = _digest(reader, locator)
    if not _holds(path, digest):  # read back: the file the rows are deleted on the strength of
        raise JournalError(f"{locator}: its export {path} does not hold the session's "
                           "bytes; its lines stay in the database")
    _sync_found(path)
    conn = connect(storage.conninfo)
    try:
        with conn.transaction():
            now = conn.execute(
                "SELECT id, generation, size, successor, moved_out_at, exported_to "
                "FROM journal.streams WHERE session = %s FOR UPDATE",
                (storage.session,)).fetchone()
            if now is not None and now[4] is not None:
                return str(now[5])  # moved out meanwhile by another process: its file
            if now is None or now[1] != generation or now[2] != digest.size or now[3] is None:
                raise JournalError(f"{locator}: it changed while it was being moved out of "
                                   "the database; its lines stay there")
            # the current generation only: the one a repair replaced stays for the readers
            # still on it, as a replacement leaves it
            conn.execute("DELETE FROM journal.entries WHERE stream = %s AND generation = %s",
                         (now[0], generation))
            conn.execute("UPDATE journal.streams SET exported_to = %s, moved_out_at = now(), "
                         "moved_out_sha256 = %s WHERE id = %s",
                         (path, digest.sha256, now[0]))
    except psycopg.Error as e:
        if conn.broken or conn.closed:  # its end is not known: keep the file
            raise DatabaseError(f"{locator}: the connection was lost while moving it out of "
                                f"the database, which may have been committed: keep {path} "
                                f"(its lines may be only there): {describe(e)}") from e
        raise DatabaseError(f"{locator}: moving it out of the database was not committed "
                            f"(its lines stay there): {describe(e)}") from e
    finally:
        conn.close()
    log.info("%s: moved out of the database to %s", locator, path)
    return path


def _rotate_held(storage: PostgresStorage, lease: Lease | None, dry_run: bool,
                 held: list[tuple[PostgresStorage, Lease]] | None = None,
                 tree: Tree | None = None) -> RotationResult:
    """The rotation itself (see the module docstring). With `held`, the successor's lease is
    taken before the commit and the successor, holding it, added to `held` (the lease is
    released again if the commit fails)."""
    locator = storage.locator
    snap = resume(storage)
    if snap.version != model.CURRENT_VERSION:
        raise UnsupportedVersion(locator, snap.version, "only version 3 sessions rotate; run "
                                 f"'journal repair --migrate {short_name(locator)}' first")
    header = snap.header or {}
    with storage.open_reader() as reader:
        old_size = reader.size
        end = last_newline_end(reader.stream, reader.size)
        info = find_last_of_type(reader.stream, end, "session_info")
    if tree is None:
        tree = Tree(snap.entries, complete=snap.complete)
    old_name = file_name(storage, header)
    archive = f"{ARCHIVE_DIR}/{os.path.basename(old_name)}"
    plan = plan_successor(tree, header, archive, info)
    if isinstance(plan, str):
        return RotationResult(False, locator, plan, old_size=old_size, dry_run=dry_run)
    data = codec.encode(plan.header) + codec.encode_many(plan.entries)
    reason = too_little_gained(len(data), old_size)
    if reason is not None:
        return RotationResult(False, locator, reason, old_size=old_size, dry_run=dry_run)
    new_id = str(plan.header["id"])
    new_name = model.session_file_name(plan.header["timestamp"], new_id)
    successor = PostgresStorage(storage.conninfo, new_id)
    # read back as a reader will see it, before anything is written
    read_back = [codec.loads(line) for line in data.splitlines()[1:]]
    if not plan.projects_alike(read_back):
        raise JournalError(f"{locator}: the successor would not give the model the same "
                           "context (nothing was changed; please report this)")
    result = RotationResult(True, locator, successor=successor.locator, successor_id=new_id,
                            archive=locator, entries_copied=len(plan.entries),
                            old_size=old_size, successor_size=len(data), dry_run=dry_run)
    if dry_run:
        return result
    assert lease is not None
    seal = make_seal(tree.ids, tree.leaf_id, new_name, new_id, archive, plan.leaf_id)
    # a new id, named nowhere yet: its lease is free (the row it makes has no generation,
    # which the creation below takes over)
    successor_lease = successor.lock(0) if held is not None else None
    inside = in_transaction(lease.conn)  # the last try's (`Lease.row_locked`): it commits
    try:
        # file names stay in the folder the old file was in (a pushed folder's subfolder)
        folder = posixpath.dirname(old_name)
        _commit(storage, successor, lease, data, codec.encode(seal),
                posixpath.join(folder, new_name), posixpath.join(folder, archive), snap.end)
    except BaseException as e:
        if successor_lease is not None:
            successor_lease.release()  # removes the row it made: nothing was created
        if not isinstance(e, psycopg.Error):
            raise
        if getattr(e, "sqlstate", None) == schema.SQLSTATE_FENCED:
            raise LeaseLost(locator, lease.epoch, describe(e)) from e
        if (lease.conn.broken or lease.conn.closed) and not inside:  # its end is not known
            raise DatabaseError(f"{locator}: the connection was lost during the rotation, "
                                "which may have been committed: open the session again (it "
                                f"follows to the live one): {describe(e)}") from e
        raise DatabaseError(f"{locator}: the rotation was not committed (nothing changed): "
                            f"{describe(e)}") from e
    if held is not None and successor_lease is not None:
        held.append((successor, successor_lease))
    log.info("%s: rotated into %s", locator, successor.locator)
    return result


def _commit(storage: PostgresStorage, successor: PostgresStorage, lease: Lease, data: bytes,
            seal: bytes, new_name: str, archive: str, read: int) -> None:
    """The one transaction: successor created, old stream sealed and pointed at it; `read`:
    the session's size the successor was made from (an appender without the lease may have
    appended since, which the successor would leave out: `SessionChanged`)."""
    batch = split_batch(storage.locator, -1, seal)
    with lease.busy, lease.connection().transaction() as transaction:
        conn = transaction.connection  # the lease's own: the advisory lock is held on it
        # durable whatever the writer's appender set on this connection
        conn.execute("SET LOCAL synchronous_commit = on")
        row = conn.execute("SELECT epoch, successor FROM journal.streams WHERE session = %s "
                           "FOR UPDATE", (storage.session,)).fetchone()
        if row is None or int(row[0]) != lease.epoch or row[1] is not None:
            raise LeaseLost(storage.locator, lease.epoch, "the session changed hands or was "
                            "rotated meanwhile")
        now = current_end(conn, storage.session)
        if now != read:
            raise SessionChanged(storage.locator, "rotated", read, now)
        successor.create_in(conn, data)
        conn.execute(
            "SELECT journal.append(%s, %s, %s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::bigint[], %s, %s)",
            (storage.session, lease.epoch, batch.lines, batch.ids, batch.parents, batch.types,
             batch.offsets, batch.total, batch.kept))
        conn.execute("UPDATE journal.streams SET file_name = %s WHERE session = %s",
                     (new_name, successor.session))
        seal_in(conn, storage.session, successor.session, archive)


def seal_in(conn: psycopg.Connection[Any], session: str, successor: str, archive: str) -> None:
    """Record on the row of `session`, inside the caller's transaction on `conn`, that it is
    sealed and continues in `successor`, its file now `archive`: opening it follows to the
    successor, and journal.append refuses it any line. The epoch moves on: the writer that
    sealed it (or one that kept its epoch) can append to it no more; it writes on in the
    successor. A rotation does this with the seal it appends, and `journal push` for a file
    lineage rotated since it was last pushed."""
    conn.execute("UPDATE journal.streams SET successor = %s, sealed_at = now(), "
                 "file_name = %s, epoch = epoch + 1, holder_host = NULL, "
                 "holder_pid = NULL, holder_since = NULL, holder_backend = NULL "
                 "WHERE session = %s", (successor, archive, session))


def export_archive(storage: PostgresStorage, directory: str) -> str:
    """Write the sealed session's bytes to `<directory>/<file>.gz` (gzip, as file rotation
    compresses archives), durably, never over an existing file; record it on the row and
    return its path."""
    with storage.open_reader() as reader:
        return _write_archive(storage, directory, reader)[0]


def _archive_path(storage: PostgresStorage, directory: str) -> str:
    # absolute: the row is read from other working folders (and other machines: it says which)
    name = os.path.basename(file_name(storage))
    return os.path.join(os.path.abspath(directory), compressed_name(name))


def _write_archive(storage: PostgresStorage, directory: str,
                   reader: PostgresReader) -> tuple[str, archivegz.Digest]:
    """`export_archive` of what `reader` reads (a chunk at a time); the file and the digest
    of the bytes. A file of that name is never replaced: one holding exactly these bytes
    (an export that stopped before it was recorded) is taken as the export, as it is (no
    copy is made: the disk may be full), any other is an error."""
    path = _archive_path(storage, directory)
    _make_folder(os.path.dirname(path))
    if os.path.lexists(path):
        digest = _digest(reader, storage.locator)
        _take_found(path, digest)
    else:
        with NewFile(path, ARCHIVE_TAG) as new:
            reader.stream.seek(0)
            try:
                with new.stream() as raw:
                    digest = archivegz.write(
                        archivegz.chunks(reader.stream, reader.size, storage.locator), raw)
            except OSError as e:
                if e.errno in NO_SPACE_ERRNOS:
                    raise NoSpace(new.path, reader.size,
                                  free_bytes(os.path.dirname(path))) from e
                raise
            try:
                new.publish(replace=False)  # whole: a short read raised above
            except FileExistsError:  # made meanwhile
                _take_found(path, digest)
    session = storage.session

    def record(conn: psycopg.Connection[Any]) -> None:
        # never over the file of an archive moved out meanwhile (by another process)
        conn.execute("UPDATE journal.streams SET exported_to = %s WHERE session = %s "
                     "AND moved_out_at IS NULL", (path, session))

    with_shared(storage.conninfo, record)
    return path, digest


def _make_folder(folder: str) -> None:
    """Make the archive folder (0700) if need be, each new folder's name durable."""
    missing: list[str] = []
    while folder and not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    if not missing:
        return
    make_private_dir(missing[0])
    for made in reversed(missing):
        fsync_directory(os.path.dirname(made))


def _digest(reader: PostgresReader, locator: str) -> archivegz.Digest:
    reader.stream.seek(0)
    return archivegz.digest_of(archivegz.chunks(reader.stream, reader.size, locator))


def _take_found(path: str, digest: archivegz.Digest) -> None:
    """Take the file at `path` as the export if it holds exactly the bytes of `digest`."""
    if not _holds(path, digest):
        raise JournalError(f"{path} already exists; the archive stays in the database only")
    _sync_found(path)


def _holds(path: str, digest: archivegz.Digest) -> bool:
    """Whether `path` is a regular file (not a link) holding a gzip archive of exactly the
    bytes of `digest` (False: no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return stat.S_ISREG(os.fstat(f.fileno()).st_mode) and archivegz.unpack(f) == digest
    except archivegz.UNREADABLE:
        return False


def _sync_found(path: str) -> None:
    """Make a file found in place (written by an export that stopped before recording it)
    durable, with its name, before rows are deleted on its strength."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(path))
