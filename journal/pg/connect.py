"""Connections to the database: a dedicated one for a writer or a lease, a shared one for the
short reads of this process (marks, sizes, reader ranges).

Every connection is in autocommit mode (a transaction is always explicit) and the schema is
brought up to date once per process and database (`journal.pg.schema.ensure`). The shared
connection belongs to one process (a fork makes its own) and is made again when it breaks.

A connection another thread may be using is never closed under it (`close_idle`): psycopg's
`close` does not wait for a statement in progress on another thread, whose wait then reads
on through the freed connection, from whatever socket and connection were made next in its
place, taking their replies (a hang in the thread that sent them).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ..errors import JournalError, Unreachable
from . import schema
from .url import is_database_url, shown

__all__ = ["DatabaseError", "DatabaseUnavailable", "NoJournalSchema", "close_idle",
           "close_shared", "connect", "connection_lost", "describe", "in_transaction",
           "refused_for_good", "shared", "with_shared", "LONG_READS", "READS"]

CONNECT_TIMEOUT = 10
# How long a peer that stopped answering goes unnoticed, at either end. A writer's lease is an
# advisory lock of its server process: for a client whose machine dropped off the network,
# the server would keep that process, and the lease, for the system's keepalive time (two
# hours by default); the client, waiting for a reply that cannot come, as long or longer.
# Here either end gives up after about 25 s of silence (30 s for data sent and never
# acknowledged). Anyone else's values win: libpq's where the URL sets any (or names a
# service), the server's where the session's value is not the built-in default (set by
# the URL's or PGOPTIONS' options, a service, the role, the database or the server's file).
CLIENT_KEEPALIVE = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5",
                    "keepalives_count": "3", "tcp_user_timeout": "30000"}
SERVER_KEEPALIVE = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5",
                    "tcp_keepalives_count": "3", "tcp_user_timeout": "30000"}
# Server settings made once connected: each forced, or only where still the default (the
# function behind the pg_settings view: a role may be refused the view and not the function).
SETTINGS = ("SELECT count(set_config(d.name, d.value, false)) FROM unnest(%s::text[], "
            "%s::text[], %s::bool[]) AS d(name, value, forced) JOIN pg_show_all_settings() s "
            "ON s.name = d.name WHERE d.forced OR s.source = 'default'")
T = TypeVar("T")
# what libpq says of a URL it cannot use (an option's value), before it connects to anything
_MISWRITTEN = ("invalid sslmode value", "invalid port number", "invalid connection option",
               "invalid URI", "invalid value for parameter", "invalid integer value",
               "no password supplied")  # libpq's own, when the server asks for one
# what a server's FATAL message says when it refuses a connection for good: a wrong password
# or method (28P01, 28000), no such role or database (3D000), no right to log in or connect
_REFUSED = ("password authentication failed", "authentication failed for user",
            "no pg_hba.conf entry", "pg_hba.conf rejects connection", "does not exist",
            "is not permitted to log in", "permission denied for database",
            "password authentication", "no password supplied")

_lock = threading.Lock()
_shared: dict[tuple[int, str, str], psycopg.Connection[Any]] = {}

READS, LONG_READS = "reads", "long reads"
"""The lanes of shared connections: short reads, and reads that may take long (every id of
a session), which must not hold up the short ones of other threads."""
_ready: set[tuple[int, str]] = set()


class DatabaseError(JournalError):
    """The database refused an operation (a permission, a constraint) or failed it."""


class DatabaseUnavailable(DatabaseError, Unreachable):
    """The database could not be reached (or refused the connection)."""


class NoJournalSchema(DatabaseError):
    """A read of a database that has no journal schema: nothing was ever stored in it (a
    misspelt database name, say). A read never creates the schema; a writer does."""


def connect(conninfo: str, *, create: bool = True, **settings: str) -> psycopg.Connection[Any]:
    """A new autocommit connection; `settings` are server settings for its whole life
    (`synchronous_commit="off"`, say), with keepalives at both ends where nobody else set
    them (`CLIENT_KEEPALIVE`, `SERVER_KEEPALIVE`). DatabaseUnavailable if it cannot be had.
    The journal schema is brought up to date; `create=False` (a reader's connection) does
    not make it in a database that has none (NoJournalSchema), changing nothing there."""
    try:
        conn = psycopg.connect(conninfo, autocommit=True, **_parameters(conninfo))
    except psycopg.Error as e:
        kind = DatabaseError if refused_for_good(e) else DatabaseUnavailable
        raise kind(f"cannot connect to the database{_named(conninfo)}: {describe(e)}") from e
    wanted = {**{key: (value, False) for key, value in SERVER_KEEPALIVE.items()},
              **{key: (value, True) for key, value in settings.items()}}
    try:
        _settle(conn, wanted)
    except psycopg.Error as e:
        conn.close()
        kind = DatabaseUnavailable if isinstance(e, psycopg.OperationalError) else DatabaseError
        raise kind(f"cannot make the connection's settings: {describe(e)}") from e
    except BaseException:
        conn.close()
        raise
    key = (os.getpid(), conninfo)
    if key not in _ready:
        try:
            if not create and schema.current_version(conn) == 0:
                conn.close()
                raise NoJournalSchema(
                    f"{shown(conninfo)}: no journal schema in this database: no session was "
                    "ever stored in it (is it the database meant?); nothing was changed")
            schema.ensure(conn)
        except psycopg.errors.InsufficientPrivilege as e:
            role = schema.current_role(conn)
            conn.close()
            raise DatabaseError(
                f"{shown(conninfo)}: cannot check the journal schema as the role {role}: "
                f"{describe(e)}; grant the role what it needs ({schema.GRANTS_DOC})") from e
        except psycopg.Error as e:
            conn.close()
            raise DatabaseError(f"cannot check the journal schema: {describe(e)}") from e
        except BaseException:
            conn.close()
            raise
        _ready.add(key)
    return conn


def _named(conninfo: str) -> str:
    """` <URL>` (its password hidden) for a URL: which database it was, where several may
    be at hand (`pg:` names the one JOURNAL_DATABASE_URL gives); nothing for a key=value
    string, which libpq's own message places well enough (host and port)."""
    return f" {shown(conninfo)}" if is_database_url(conninfo) else ""


def refused_for_good(e: BaseException) -> bool:
    """Whether a failed connection was refused for what waiting does not mend (a URL libpq
    cannot use; the server's refusal of the password, the role, the database, pg_hba.conf),
    rather than not made (no server there, a network fault, a timeout) or put off (the
    server starting up or shutting down, all its connection slots taken, a pooler that
    cannot reach it): then `DatabaseError`, not `DatabaseUnavailable`, and a live tail ends
    instead of waiting. libpq gives no SQLSTATE for a failed connection, so this looks for
    its own and the server's words for those refusals; anything else (a message in another
    language included) is taken as a server that cannot be reached now, and waited for."""
    text = str(e)
    if isinstance(e, psycopg.ProgrammingError) or any(sign in text for sign in _MISWRITTEN):
        return True  # the URL itself is wrong: no attempt mends it
    return "FATAL:" in text and any(sign in text for sign in _REFUSED)


def _parameters(conninfo: str) -> dict[str, Any]:
    """The libpq parameters added to `conninfo`'s: UTF-8 as the client encoding, always (a
    line is UTF-8 and is sent as it is; `PGCLIENTENCODING`, the URL's `client_encoding` or a
    role's setting would have text that encoding cannot hold refused); a connect timeout and
    keepalives, each where neither `conninfo` nor the environment sets one, and none where a
    service is named (it may set any of them, and libpq reads it after these)."""
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    extra: dict[str, Any] = {"client_encoding": "UTF8"}
    if "service" in given or os.environ.get("PGSERVICE"):
        return extra  # the service may set any of them: libpq reads it after the URL
    if "connect_timeout" not in given and not os.environ.get("PGCONNECT_TIMEOUT"):
        extra["connect_timeout"] = CONNECT_TIMEOUT
    extra.update({k: v for k, v in CLIENT_KEEPALIVE.items() if k not in given})
    return extra


def _settle(conn: psycopg.Connection[Any], wanted: dict[str, tuple[str, bool]]) -> None:
    """Make the server settings `wanted` (name: value, forced). A role that may not call
    pg_show_all_settings() (which says where a value came from) gets the forced ones only."""
    names = list(wanted)
    values = [value for value, _ in wanted.values()]
    forced = [force for _, force in wanted.values()]
    try:
        conn.execute(SETTINGS, (names, values, forced))
    except psycopg.errors.InsufficientPrivilege:
        conn.execute("SELECT count(set_config(d.name, d.value, false)) FROM unnest(%s::text[], "
                     "%s::text[], %s::bool[]) AS d(name, value, forced) WHERE d.forced",
                     (names, values, forced))


def connection_lost(conn: psycopg.Connection[Any] | None, error: BaseException) -> bool:
    """Whether `error`, raised by work on `conn`, came of losing `conn`: it is broken, or
    the error is not the server's (no SQLSTATE) and the connection is closed, or failed by
    a communication error that libpq did not mark as the connection's (an `OperationalError`:
    a blackhole route's EINVAL, a prohibited one's EACCES leave its status OK). Such a
    connection is closed here, so that it is made again rather than used on, and what was
    sent on it counts as of unknown outcome. An error the server sent says the connection
    was there, even if it was closed since (by the caller's cleanup, say)."""
    if conn is None:
        return False
    if conn.broken:
        return True
    if getattr(error, "sqlstate", None) is not None:
        return False
    if conn.closed:
        return True
    if isinstance(error, psycopg.OperationalError):
        if not close_idle(conn):
            _forget(conn)  # another thread's statement is on it: the next read makes one
        return True
    return False


def close_idle(conn: psycopg.Connection[Any]) -> bool:
    """Close `conn` unless a statement is in progress on it in another thread (holding
    psycopg's lock of the connection); whether it was closed. One left open is closed when
    the last reference to it goes, after that statement (see the module docstring). Not for
    a caller inside a statement on `conn` itself: it would find the connection busy."""
    if not conn.lock.acquire(blocking=False):
        return False
    try:
        conn.close()
    finally:
        conn.lock.release()
    return True


def _forget(conn: psycopg.Connection[Any]) -> None:
    """Hand `conn` out as a shared connection no more."""
    with _lock:
        for key, known in list(_shared.items()):
            if known is conn:
                del _shared[key]


def shared(conninfo: str, lane: str = READS) -> psycopg.Connection[Any]:
    """This process's shared connection to `conninfo` for `lane` (made on first use, again if
    broken)."""
    key = (os.getpid(), conninfo, lane)
    with _lock:
        conn = _shared.get(key)
        if conn is None or conn.closed or conn.broken:
            conn = _shared[key] = connect(conninfo, create=False)
        return conn


def close_shared() -> None:
    """Close this process's shared connections (the next short read makes one again): for a
    program done with a database, or one that worked on many (each keeps one a lane). One
    another thread is reading on now is only forgotten (`close_idle`): it is closed once
    that read is done with it. A forked child's copies of its parent's are forgotten, not
    closed: closing would end the parent's own."""
    with _lock:
        for (pid, _, _), conn in list(_shared.items()):
            if pid == os.getpid():
                close_idle(conn)
        _shared.clear()


def with_shared(conninfo: str, work: Callable[[psycopg.Connection[Any]], T],
                lane: str = READS) -> T:
    """`work(conn)` on the shared connection of `lane`, once more on a new one if the
    connection was lost (the work must be a read, or safe to repeat). DatabaseError for what
    the database refuses."""
    conn = shared(conninfo, lane)
    try:
        try:
            return work(conn)
        except psycopg.OperationalError as e:
            if not connection_lost(conn, e):
                raise
        return work(shared(conninfo, lane))
    except psycopg.Error as e:
        raise DatabaseError(f"the database refused a read: {describe(e)}") from e


def database_identity(conninfo: str) -> str:
    """Which database `conninfo` reaches, however it is spelt (host name or address, the
    password in the URL, a parameter or the environment, either scheme): the server's system
    identifier (fixed when its cluster was made) and the database's name, read from the
    server once per process."""
    with _lock:
        known = _identities.get(conninfo)
    if known is None:
        row = with_shared(conninfo, lambda conn: conn.execute(
            "SELECT system_identifier::text, current_database() "
            "FROM pg_control_system()").fetchone())
        assert row is not None
        known = f"{row[0]}/{row[1]}"
        with _lock:
            _identities[conninfo] = known
    return known


_identities: dict[str, str] = {}


def in_transaction(conn: psycopg.Connection[Any]) -> bool:
    """Whether `conn` is inside a transaction: one opened on it now is a savepoint, which a
    lost connection cannot have committed."""
    return conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


def describe(e: BaseException) -> str:
    """An error's first line (the driver's messages go on with context lines)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
