"""Repair of a database session, and its quarantine: the bytes repair took out, kept in a table.

`repair_database` is file repair's plan and verification (`journal.repair.repair_held`:
salvage, pairing, duplicates, broken parents; damage only unless `strict`), published through
the storage seam as a new generation of the session, under its lease. Every line repair drops
or rewrites is stored, byte for byte, in `journal.quarantine` (session, generation,
byte offset, reason, the bytes) in the transaction that publishes the replacement, so nothing
leaves a session unrecorded, exactly as a file's
quarantine side file does. `quarantined` lists a session's records and `quarantined_record`
gives one back with its bytes (`journal quarantine list/show URL`).
"""

from __future__ import annotations

import base64
import hashlib
from functools import partial
from typing import Any

import psycopg

from .. import model
from ..errors import JournalError
from ..header import stream_first_line
from ..lock import DEFAULT_LOCK_TIMEOUT
from ..progress import Progress
from ..publish import create_file
from ..quarantine import Quarantined, text_of
from ..repair import RepairReport, assess, migrate_held_in, repair_held
from .connect import DatabaseError, describe, with_shared
from .lease import Lease
from .rotation import again_while_changed, live_storage, lock_live, stream_row
from .storage import PostgresStorage
from .url import no_such_session

__all__ = ["migrate_database_held", "quarantined", "quarantined_record", "repair_database",
           "restore_record"]

MIGRATED_DETAIL = ("the whole session as it was before it was written as version 3 (its "
                   "format version 1 or 2 lines)")


def _storage(target: str | PostgresStorage) -> PostgresStorage:
    storage = target if isinstance(target, PostgresStorage) else PostgresStorage.from_url(target)
    if stream_row(storage) is None:
        raise no_such_session(storage.locator)
    return storage


def repair_database(
    target: str | PostgresStorage,
    *,
    dry_run: bool = False,
    migrate: bool = False,
    strict: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Progress | None = None,
) -> RepairReport:
    """Repair the database session `target` names (a sealed one: its live successor).

    A dry run reads only (no lease). Otherwise the session's lease is taken (LockTimeout
    naming the holder) and, if anything is damaged, the repaired session replaces it
    atomically, its removed and rewritten lines kept in `journal.quarantine` in the same
    transaction. An appender without the lease that commits after the session was read
    makes it read the session again (`again_while_changed`: the last time, such an appender
    waits for the repair; SessionChanged, nothing changed, if the lease's connection was lost
    meanwhile and it did not).

    Example:
        >>> report = repair_database("pg:4f1c...")  # doctest: +SKIP
        >>> report.changed, report.counts
    """
    storage = _storage(target)
    if dry_run:
        return assess(live_storage(storage).locator, migrate=migrate, strict=strict,
                      progress=progress)
    live, lease, _ = lock_live(storage, lock_timeout)
    try:
        whole = migrate and _older_version(live)
        keep = partial(_keep, live, lease, whole=whole)
        report = again_while_changed(partial(repair_held, live, keep, migrate=migrate,
                                             strict=strict, progress=progress), lease)
    finally:
        lease.release()
    return _kept_whole(report, live) if whole else report


def _kept_whole(report: RepairReport, storage: PostgresStorage) -> RepairReport:
    """A migration's report names the quarantine, which holds the session as it was."""
    if report.changed:
        report.quarantine = storage.locator
    return report


def migrate_database_held(storage: PostgresStorage, lease: Lease) -> RepairReport:
    """A version 1 or 2 database session written as version 3 under its `lease` (held by the
    caller: `Session.open` does this, as it migrates a file), the session as it was kept in
    its quarantine as one record; a damaged one raises UnsupportedVersion naming
    `journal repair --migrate`."""
    return _kept_whole(again_while_changed(partial(
        migrate_held_in, storage, partial(_keep, storage, lease, whole=True)), lease), storage)


def _older_version(storage: PostgresStorage) -> bool:
    """Whether the session's header says format version 1 or 2 (migrating rewrites it)."""
    with storage.open_reader() as reader:
        header = stream_first_line(reader.stream).header
    return header is not None and model.header_version(header) < model.CURRENT_VERSION


def _keep(storage: PostgresStorage, lease: Lease, items: list[Quarantined], *,
          whole: bool = False) -> None:
    """Store the byte ranges repair takes out, in the replacement's transaction: `publish`
    calls this under the lease, on the lease's connection (`PostgresStorage.publish`), so the
    records commit with the replacement or not at all. The connection is not taken back here
    if it was lost: that transaction is lost with it, and the repair fails whole. `whole`
    (a migration, which rewrites every line) keeps the session as it was, too, as one
    record, copied by the server: what a file's migration keeps as `<file>.bak`."""
    if not items and not whole:
        return
    if lease.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        raise JournalError(f"{storage.locator}: the quarantine is kept only in the "
                           "replacement's transaction, and none is open: nothing was repaired")
    generation = storage.current_generation()
    try:
        with lease.busy, lease.conn.transaction() as transaction:  # a savepoint in publish's
            conn = transaction.connection
            with conn.cursor() as cur:
                if items:
                    cur.executemany(
                        "INSERT INTO journal.quarantine (session, generation, byte_offset, "
                        "reason, detail, data) VALUES (%s, %s, %s, %s, %s, %s)",
                        [(storage.session, generation, q.offset, q.reason, q.detail, q.data)
                         for q in items])
                if whole:
                    cur.execute(
                        "INSERT INTO journal.quarantine (session, generation, byte_offset, "
                        "reason, detail, data) SELECT %s, %s, 0, 'migrated', %s, "
                        "convert_to(string_agg(e.line || E'\\n', '' ORDER BY e.position), "
                        "'UTF8') FROM journal.entries e JOIN journal.streams s ON "
                        "e.stream = s.id WHERE s.session = %s AND e.generation = %s",
                        (storage.session, generation, MIGRATED_DETAIL, storage.session,
                         generation))
    except psycopg.Error as e:
        raise DatabaseError(f"{storage.locator}: cannot keep the quarantined lines, so nothing "
                            f"was repaired: {describe(e)}") from e


def quarantined(target: str | PostgresStorage) -> list[dict[str, Any]]:
    """The session's quarantine records, oldest first, numbered from 1 (without their bytes).
    NotASession when there is no such session and nothing of that name in the quarantine
    (the records of a deleted session are still listed)."""
    storage = target if isinstance(target, PostgresStorage) else PostgresStorage.from_url(target)
    session = storage.session

    def query(conn: psycopg.Connection[Any]) -> tuple[bool, list[tuple[Any, ...]]]:
        rows = conn.execute(
            "SELECT id, at, generation, byte_offset, octet_length(data), reason, detail "
            "FROM journal.quarantine WHERE session = %s ORDER BY id", (session,)).fetchall()
        return bool(rows) or _known(conn, session), rows

    known, rows = with_shared(storage.conninfo, query)
    if not known:
        raise no_such_session(storage.locator)
    return [_fields(storage, n, row) for n, row in enumerate(rows, 1)]


def quarantined_record(target: str | PostgresStorage, number: int) -> dict[str, Any]:
    """Record `number` (from 1, as `quarantined` numbers them) with its bytes (`data`).
    NotASession when there is no such session and nothing of that name in the quarantine, as
    `quarantined`; JournalError when it has no record `number`."""
    storage = target if isinstance(target, PostgresStorage) else PostgresStorage.from_url(target)
    session = storage.session

    def query(conn: psycopg.Connection[Any]) -> tuple[bool, tuple[Any, ...] | None]:
        row = conn.execute(
            "SELECT id, at, generation, byte_offset, octet_length(data), reason, detail, data "
            "FROM journal.quarantine WHERE session = %s ORDER BY id OFFSET %s LIMIT 1",
            (session, max(0, number - 1))).fetchone()
        return row is not None or _known(conn, session), row

    known, row = with_shared(storage.conninfo, query)
    if not known:
        raise no_such_session(storage.locator)
    if row is None or number < 1:
        raise JournalError(f"{storage.locator}: no quarantine record {number} (see 'journal "
                           "quarantine list')")
    data = bytes(row[7])
    record = _fields(storage, number, row[:7])
    record["data"] = data
    text = text_of(data)
    if text is not None:
        record["text"] = text
    record["bytes"] = base64.b64encode(data).decode("ascii")  # as a file's record has them
    return record


def _known(conn: psycopg.Connection[Any], session: str) -> bool:
    """Whether the database holds `session` (a row with a generation: not a lease alone) or
    still has quarantine records of it (a session deleted since)."""
    known = conn.execute("SELECT EXISTS (SELECT 1 FROM journal.streams WHERE session = %s "
                         "AND generation IS NOT NULL) OR EXISTS (SELECT 1 FROM "
                         "journal.quarantine WHERE session = %s)", (session, session)).fetchone()
    return bool(known and known[0])


def _fields(storage: PostgresStorage, number: int, row: tuple[Any, ...]) -> dict[str, Any]:
    """A record's fields but its bytes, from (id, at, generation, byte_offset, length, reason,
    detail): those of a file's record (`key` first, as there) and its `generation`."""
    row_id, at, generation, offset, length, reason, detail = row
    return {"line": number, "key": _record_key(storage.session, row_id),
            "time": model.iso_millis(at), "source": storage.locator,
            "generation": generation, "offset": offset, "length": length, "reason": reason,
            "detail": detail}


def _record_key(session: str, row_id: int) -> str:
    """A database record's `key`: 32 hex digits naming it, as a file's record's key does
    (there a hash of the file's identity and the record; here of the session and the row,
    which is kept once, in the replacement's transaction, so needs no hash of the bytes)."""
    return hashlib.sha256(f"{session}\0{row_id}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def restore_record(target: str | PostgresStorage, number: int, path: str) -> int:
    """Write record `number`'s bytes to a new file `path` (never an existing one); return
    how many (`journal quarantine restore URL N FILE`)."""
    data: bytes = quarantined_record(target, number)["data"]
    try:
        create_file(path, data, 0o600)
    except FileExistsError as e:
        raise JournalError(f"{path}: already exists; nothing was written (restore writes a "
                           "new file only; choose another name)") from e
    return len(data)
