"""Connections to the database: a dedicated one for a writer or a lease, a shared one for the
short reads of this process (marks, sizes, reader ranges).

Every connection is in autocommit mode (a transaction is always explicit) and the schema is
brought up to date once per process and database (`journal.pg.schema.ensure`). The shared
connection belongs to one process (a fork makes its own) and is made again when it breaks.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ..errors import JournalError
from . import schema

__all__ = ["DatabaseError", "DatabaseUnavailable", "connect", "describe", "shared",
           "with_shared"]

CONNECT_TIMEOUT = 10
T = TypeVar("T")

_lock = threading.Lock()
_shared: dict[tuple[int, str], psycopg.Connection[Any]] = {}
_ready: set[tuple[int, str]] = set()


class DatabaseError(JournalError):
    """The database refused an operation (a permission, a constraint) or failed it."""


class DatabaseUnavailable(DatabaseError):
    """The database could not be reached (or refused the connection)."""


def connect(conninfo: str, **settings: str) -> psycopg.Connection[Any]:
    """A new autocommit connection; `settings` are server settings for its whole life
    (`synchronous_commit="off"`, say). DatabaseUnavailable if it cannot be had."""
    extra: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT}
    if settings:
        extra["options"] = " ".join(f"-c {key}={value}" for key, value in settings.items())
    try:
        conn = psycopg.connect(conninfo, autocommit=True, **extra)
    except psycopg.Error as e:
        raise DatabaseUnavailable(f"cannot connect to the database: {describe(e)}") from e
    key = (os.getpid(), conninfo)
    if key not in _ready:
        try:
            schema.ensure(conn)
        except psycopg.Error as e:
            conn.close()
            raise DatabaseError(f"cannot check the journal schema: {describe(e)}") from e
        except BaseException:
            conn.close()
            raise
        _ready.add(key)
    return conn


def shared(conninfo: str) -> psycopg.Connection[Any]:
    """This process's shared connection to `conninfo` (made on first use, again if broken)."""
    key = (os.getpid(), conninfo)
    with _lock:
        conn = _shared.get(key)
        if conn is None or conn.closed or conn.broken:
            conn = _shared[key] = connect(conninfo)
        return conn


def with_shared(conninfo: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
    """`work(conn)` on the shared connection, once more on a new one if the connection was
    lost (the work must be a read, or safe to repeat). DatabaseError for what the database
    refuses."""
    conn = shared(conninfo)
    try:
        try:
            return work(conn)
        except psycopg.OperationalError:
            if not (conn.broken or conn.closed):
                raise
        return work(shared(conninfo))
    except psycopg.Error as e:
        raise DatabaseError(f"the database refused a read: {describe(e)}") from e


def describe(e: BaseException) -> str:
    """An error's first line (the driver's messages go on with context lines)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
