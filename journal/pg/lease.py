"""One writer per session across machines: the lease and its fencing epoch.

A writer takes the session's lease by taking a session-level advisory lock (keyed on the
session id) on a connection of its own, kept open while it writes. PostgreSQL releases the
lock when that connection ends for any reason (the process dies, the machine goes away, the
backend is terminated), so a dead writer's lease frees itself without cleanup.

Having the lock, the writer increments the session's fencing epoch in its `journal.streams`
row and records who holds it (host, pid, since; the row is made if the session does not exist
yet). Every commit made without that lock (off the lease's connection) goes through
`journal.append`, which locks the same row and refuses it (`LeaseLost`) unless the epoch is
still the writer's own, so a writer that lost its connection (and with it the lock) and comes
back after another one took over can never interleave: the newcomer's increment waited for
any append in flight (the row lock) and every later one sees the new epoch.

A writer that waits gives up after its timeout with `LockTimeout`, naming the holder.

The writer's appender commits on the lease's connection while it lives (`journal.pg.storage`):
there the advisory lock alone keeps every other writer out (no takeover can happen while the
connection lives, so nothing committed on it can come after one), and nothing else changes
the session's generation, epoch or seal without that lock. A batch goes through
`journal.append`, which also locks the stream row and checks the epoch; a takeover's epoch
update waits for that lock. When the lease's connection is lost, `renew` takes the lock
again on a new connection if it comes free and the epoch is still the lease's (nobody took the
session over meanwhile); `connection()` is the lease's connection, taken back if need be, for
the writer's own transactions (rotation, repair).
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from ..errors import LeaseLost, LockTimeout
from ..lock import check_lock_timeout
from ..model import iso_millis
from .connect import DatabaseError, DatabaseUnavailable, connect, connection_lost, describe

__all__ = ["RENEW_WAIT", "ROW_LOCK_IDLE_LIMIT", "Lease", "LeaseLost", "acquire", "advisory_key",
           "current_holder", "gate_key"]

# how long the transaction of `Lease.row_locked` may sit idle (the work reads the session on
# other connections meanwhile) before the server ends it: it holds up writers without the
# lease, and a server's own shorter limit would end it in the middle of a long read
ROW_LOCK_IDLE_LIMIT = "5min"

# seconds a writer whose lease connection was lost waits for the lease's advisory lock to come
# free (the old backend lets go once its last statement ends) when it takes the lease back
RENEW_WAIT = 1.0


def advisory_key(session: str) -> int:
    """The advisory lock key of a session: 64 bits of a hash of its id, as a signed bigint."""
    return _key(b"journal.session:", session)


def gate_key(session: str) -> int:
    """The key of a session's append gate, a second advisory lock: the lease holder's
    one-entry commits take it shared for their transaction, and a writer without the lease
    that lost the race for the session's end to them takes it exclusive around its next
    call (`journal.pg.storage`), which holds them off until it committed."""
    return _key(b"journal.gate:", session)


def _key(kind: bytes, session: str) -> int:
    digest = hashlib.blake2b(kind + session.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class Lease:
    """A held lease: its own connection (the advisory lock lives as long as it) and epoch."""

    def __init__(self, conn: psycopg.Connection[Any], session: str, epoch: int,
                 conninfo: str = "", locator: str = "") -> None:
        self.conn = conn
        self.session = session
        self.epoch = epoch
        self.conninfo = conninfo
        self.locator = locator or session
        # what an appender set `synchronous_commit` to on `conn` (None: the server's default)
        self.synchronous_commit: str | None = None
        # held while `conn` runs one piece of the writer's work (a commit with its setting, a
        # flush, a rotation's or a repair's transaction): psycopg's own lock is held per
        # statement only, and a commit sent from another thread inside an open transaction
        # would be acknowledged before it is committed, and lost if that transaction is not
        self.busy = threading.RLock()
        # how often the holder's own transactions took the connection (`connection()`): a
        # replacement or a rotation there may change the stream, so an appender reads the
        # session's end again once this moved on since it last did
        self.turns = 0
        self._released = False

    @property
    def released(self) -> bool:
        """Whether `release()` was called (a lease whose connection broke is not released:
        its epoch still fences its writer's appends)."""
        return self._released

    @property
    def held(self) -> bool:
        """Not released, and its connection (so its advisory lock) not known to be lost."""
        return not self._released and not self.conn.closed and not self.conn.broken

    def renew(self, wait: float) -> bool:
        """Take the lease again on a new connection after its own was lost: True if the
        advisory lock came free within `wait` seconds (the old backend ends once its last
        statement has) and the epoch is still this lease's (the lease is whole again, on
        `conn`); False if another backend holds the lock (another writer, or this lease's
        old backend that the server has not yet seen gone), the lease then fenced by its epoch
        alone. LeaseLost if the epoch moved on (another writer took the session over);
        DatabaseUnavailable if the database cannot be reached."""
        if self._released:
            raise LeaseLost(self.locator, self.epoch, "the lease was released")
        conn = connect(self.conninfo)
        with _closed_on_error(conn, self.locator, "taking the lease again"):
            if not _wait_for_lock(conn, advisory_key(self.session), wait):
                conn.close()
                return False
            row = conn.execute(
                "UPDATE journal.streams SET holder_backend = pg_backend_pid() "
                "WHERE session = %s AND epoch = %s RETURNING epoch",
                (self.session, self.epoch)).fetchone()
            if row is None:
                raise LeaseLost(self.locator, self.epoch, "the session changed hands while "
                                "this writer's connection was lost")
        old, self.conn = self.conn, conn
        self.synchronous_commit = None
        old.close()
        return True

    def connection(self, wait: float = RENEW_WAIT) -> psycopg.Connection[Any]:
        """The lease's connection, for a transaction of the lease holder's (a rotation, a
        replacement), checked with a round trip first: a connection lost since its last use
        (a network drop, a terminated backend) is found out only by using it, and then
        taken back (`renew`). LeaseLost if it cannot be (the lock held by another backend,
        or the epoch moved on). The caller holds `busy`."""
        self.turns += 1
        if self.held:
            try:
                self.conn.execute("SELECT 1")
                return self.conn
            except psycopg.OperationalError:
                if self.held:  # not a lost connection
                    raise
        if self.renew(wait):
            return self.conn
        raise LeaseLost(self.locator, self.epoch, "its connection was lost and the session's "
                        "lock is held by another connection")

    @contextmanager
    def row_locked(self) -> Iterator[None]:
        """The block as one transaction on the lease's connection that first locks the
        session's stream row (FOR UPDATE), committed when the block ends: every commit of a
        writer without the lease (`journal.append` locks that row) waits until then, unless
        the lease's connection is lost and taken back meanwhile (the lock goes with the old
        one). The holder's own transactions in the block (a rotation's, a replacement's)
        become part of this one. For the last try of work that such a writer outran every
        time before (`journal.pg.rotation.again_while_changed`). The transaction ends
        itself if left idle for ROW_LOCK_IDLE_LIMIT (a stopped holder holds such writers
        up no longer than that). DatabaseError if the row cannot be locked, or the commit
        fails (a lost connection: it may have been committed)."""
        with self.busy:
            conn = self.connection()
            locked = ended = False
            try:
                with conn.transaction():
                    conn.execute("SELECT set_config('idle_in_transaction_session_timeout', "
                                 "%s, true)", (ROW_LOCK_IDLE_LIMIT,))
                    conn.execute("SELECT 1 FROM journal.streams WHERE session = %s "
                                 "FOR UPDATE", (self.session,))
                    locked = True
                    yield
                    ended = True
            except psycopg.Error as e:
                if not locked:
                    raise DatabaseError(f"{self.locator}: could not lock the session's row "
                                        f"(nothing changed): {describe(e)}") from e
                if not ended:
                    raise
                if connection_lost(conn, e):
                    raise DatabaseError(f"{self.locator}: the connection was lost as the work "
                                        "was committed, which may have been committed: open "
                                        f"the session again to know: {describe(e)}") from e
                raise DatabaseError(f"{self.locator}: the work was not committed (nothing "
                                    f"changed): {describe(e)}") from e

    def release(self) -> None:
        with self.busy:  # after a transaction running on the connection (a replacement's)
            self._release()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            if not self.conn.broken and not self.conn.closed:
                # a session that was never created leaves no row behind
                self.conn.execute("DELETE FROM journal.streams WHERE session = %s "
                                  "AND generation IS NULL AND epoch = %s",
                                  (self.session, self.epoch))
                self.conn.execute(
                    "UPDATE journal.streams SET holder_host = NULL, holder_pid = NULL, "
                    "holder_since = NULL, holder_backend = NULL "
                    "WHERE session = %s AND epoch = %s", (self.session, self.epoch))
                self.conn.execute("SELECT pg_advisory_unlock(%s)", (advisory_key(self.session),))
        except psycopg.Error:
            pass  # closing the connection below lets go of the lock all the same
        finally:
            self.conn.close()


def acquire(conninfo: str, session: str, locator: str, timeout: float) -> Lease:
    """Take the session's lease, waiting up to `timeout` seconds (LockTimeout naming the
    holder), and move its fencing epoch on."""
    check_lock_timeout(timeout)
    conn = connect(conninfo)
    key = advisory_key(session)
    with _closed_on_error(conn, locator, "taking the lease"):
        if timeout <= 0:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            got = bool(row and row[0])
        else:
            got = _wait_for_lock(conn, key, timeout)
        if not got:
            raise LockTimeout(locator, timeout, _holder(conn, session))
        row = conn.execute(
            "INSERT INTO journal.streams AS s (session, epoch, holder_host, holder_pid, "
            "holder_since, holder_backend) VALUES (%s, 1, %s, %s, now(), pg_backend_pid()) "
            "ON CONFLICT (session) DO UPDATE SET epoch = s.epoch + 1, "
            "holder_host = EXCLUDED.holder_host, holder_pid = EXCLUDED.holder_pid, "
            "holder_since = EXCLUDED.holder_since, holder_backend = EXCLUDED.holder_backend "
            "RETURNING epoch", (session, socket.gethostname(), os.getpid())).fetchone()
        assert row is not None
        epoch = int(row[0])
    return Lease(conn, session, epoch, conninfo, locator)


@contextmanager
def _closed_on_error(conn: psycopg.Connection[Any], locator: str, doing: str
                     ) -> Iterator[None]:
    """Close `conn` if the block fails; psycopg's errors said as the journal's."""
    try:
        yield
    except psycopg.OperationalError as e:
        conn.close()
        raise DatabaseUnavailable(f"{locator}: lost the database while {doing}: "
                                  f"{describe(e)}") from e
    except psycopg.Error as e:
        conn.close()
        raise DatabaseError(f"{locator}: failed while {doing}: {describe(e)}") from e
    except BaseException:
        conn.close()
        raise


def _wait_for_lock(conn: psycopg.Connection[Any], key: int, timeout: float) -> bool:
    """Wait on the server (no polling) up to `timeout` for the advisory lock."""
    # the server's lock_timeout is whole milliseconds below 2^31 (0: none); longer is for ever
    limit = 0 if timeout * 1000 >= 2**31 - 1 else max(1, int(timeout * 1000))
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = {limit}")
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def current_holder(conn: psycopg.Connection[Any], session: str) -> dict[str, Any] | None:
    """The lease's holder (pid, host, since) if its connection still holds the lock."""
    row = conn.execute(
        "SELECT s.holder_pid, s.holder_host, s.holder_since FROM journal.streams s "
        "WHERE s.session = %s AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l WHERE "
        "l.locktype = 'advisory' AND l.granted AND l.pid = s.holder_backend)",
        (session,)).fetchone()
    return _as_holder(row)


def _holder(conn: psycopg.Connection[Any], session: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT holder_pid, holder_host, holder_since FROM journal.streams "
                       "WHERE session = %s", (session,)).fetchone()
    return _as_holder(row)


def _as_holder(row: tuple[Any, ...] | None) -> dict[str, Any] | None:
    if row is None or row[0] is None:
        return None
    since = iso_millis(row[2]) if row[2] is not None else None  # as a lock file's
    return {"pid": row[0], "host": row[1], "since": since}
