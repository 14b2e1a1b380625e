"""A statement sent through psycopg's libpq layer (`psycopg.pq`), for the commonest commit.

psycopg's cursor (query conversion, adapting the parameters, its generator-driven wait)
costs the client CPU time on top of the round trip, paid by every appended entry
(`bench/pg_pq_path.py`; the figures are in docs/postgres.md, "Fourth pass"). The appender's
one-entry statement (`schema.APPEND_ONE`) is sent here instead, through the documented libpq
wrapper psycopg ships: prepared once per connection under a name of its own, its parameters
as text, its result awaited with poll(2).

It behaves as the cursor did where that matters to the appender:
- an error the server reports is raised as the psycopg exception of its SQLSTATE
  (`psycopg.errors.lookup`), with the server's message; a lost connection is
  `psycopg.OperationalError`, with `conn.broken` true;
- an interruption while it waits (a signal's exception) cancels the statement on the
  server (`Connection.cancel_safe`), as psycopg cancels a query on Ctrl-C, and waits up to
  CANCEL_WAIT for it to end: the connection is kept when it did (idle again; it may be a
  writer's lease connection, whose advisory lock goes with it), else closed (its state is
  not known). Of a request interrupted before it was sent whole, closing may still send
  the rest (libpq flushes on close), so its outcome is not known either (the appender then
  counts the commit as unconfirmed, as it does any interrupted one);
- psycopg's connection lock is held meanwhile, so calls from other threads wait as they
  would for a cursor;
- a statement psycopg dropped from the connection (it deallocates all prepared statements
  when it rolls a transaction back) is prepared again.

Parameters libpq could not pass as they are (a NUL character, which psycopg refuses; a
connection not in UTF-8) are not sent: `None`, and the caller goes psycopg's way.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import pq

__all__ = ["Prepared"]

INVALID_STATEMENT_NAME = "26000"  # no such prepared statement (deallocated)
DUPLICATE_PREPARED_STATEMENT = "42P05"
CANCEL_WAIT = 5.0  # seconds an interrupted statement is given to be cancelled and end


class Prepared:
    """One statement (`$1`... placeholders, parameters of the given type oids), prepared on
    each connection it runs on."""

    def __init__(self, name: bytes, sql: str, types: Sequence[int]) -> None:
        self.name = name
        self.sql = sql.encode()
        self.types = list(types)
        self._on: psycopg.Connection[Any] | None = None  # the connection it is prepared on

    def first_row(self, conn: psycopg.Connection[Any],
                  params: Sequence[str | None]) -> list[bytes | None] | None:
        """The first row the statement returns on `conn` (an idle autocommit connection),
        None if it returns none or was not sent (see the module docstring); raises as the
        cursor would (see the module docstring)."""
        if conn.info.encoding != "utf-8":
            return None
        values: list[bytes | None] = []
        for value in params:
            if value is not None and "\0" in value:
                return None
            values.append(None if value is None else value.encode())
        pgconn = conn.pgconn
        with conn.lock:  # psycopg's own: its other calls on `conn` wait, as for a cursor's
            for attempt in range(2):
                if self._on is not conn:
                    self._prepare(conn)
                result = _exchange(conn,
                                   lambda: pgconn.send_query_prepared(self.name, values))
                if result.status == pq.ExecStatus.TUPLES_OK:
                    break
                if _state(result) == INVALID_STATEMENT_NAME and attempt == 0:
                    self._on = None  # psycopg deallocated it
                    continue
                raise _error(result)
        if result.ntuples == 0:
            return None
        return [result.get_value(0, column) for column in range(result.nfields)]

    def prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Prepare the statement on `conn` (an idle autocommit connection) unless it is:
        `first_row` does on first use, which for an insert waits for any lock on its table
        (a writer that sends two statements prepares both at once)."""
        if self._on is not conn:
            with conn.lock:
                self._prepare(conn)

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        pgconn = conn.pgconn

        def prepare() -> None:
            pgconn.send_prepare(self.name, self.sql, self.types)

        result = _exchange(conn, prepare)
        if _state(result) == DUPLICATE_PREPARED_STATEMENT:
            # the name is this program's own: whatever holds it is made anew
            dropped = _exchange(conn, lambda: pgconn.send_close_prepared(self.name))
            if dropped.status != pq.ExecStatus.COMMAND_OK:
                raise _error(dropped)
            result = _exchange(conn, prepare)
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise _error(result)
        self._on = conn


def _exchange(conn: psycopg.Connection[Any], send: Callable[[], None]) -> pq.abc.PGresult:
    """`send()` one request, then its result (the last, for a request that makes several)."""
    pgconn = conn.pgconn
    try:
        send()
        result = _result(pgconn)
    except psycopg.OperationalError:
        if not conn.closed:
            conn.close()  # lost midway: never used again
        raise
    except BaseException:
        try:
            whole = pgconn.flush() == 0
        except psycopg.Error:
            whole = False
        idle = False
        if whole:  # sent whole: it runs unless cancelled
            deadline = time.monotonic() + CANCEL_WAIT
            try:
                conn.cancel_safe(timeout=CANCEL_WAIT)
                _result(pgconn, deadline)  # None as well when it had ended already
                idle = (not pgconn.is_busy()
                        and pgconn.transaction_status == pq.TransactionStatus.IDLE)
            except BaseException:  # a second interruption too: closed below
                pass
        if not idle:
            conn.close()  # its state is not known: never used again
        raise
    if result is None or pgconn.status == pq.ConnStatus.BAD:
        message = (result.error_message if result is not None else pgconn.error_message)
        conn.close()
        raise psycopg.OperationalError(message.decode(errors="replace").strip()
                                       or "the connection to the server was lost")
    return result


def _result(pgconn: pq.abc.PGconn, deadline: float | None = None) -> pq.abc.PGresult | None:
    """Send what is left of the request, then wait for its results; the last of them (None:
    none came before `deadline`). The waits are libpq's documented ones for a nonblocking
    connection."""
    poller = select.poll()
    fd = pgconn.socket
    poller.register(fd, select.POLLIN | select.POLLOUT)
    while pgconn.flush():  # 1: more to send
        ready = _wait(poller, deadline)
        if not ready:
            return None
        if any(events & select.POLLIN for _, events in ready):
            pgconn.consume_input()
    poller.modify(fd, select.POLLIN)
    last = None
    while True:
        pgconn.consume_input()
        if pgconn.is_busy():
            if not _wait(poller, deadline):
                return None
            continue
        result = pgconn.get_result()
        if result is None:
            return last
        last = result


def _wait(poller: select.poll, deadline: float | None) -> list[tuple[int, int]]:
    if deadline is None:
        return poller.poll()
    return poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))


def _state(result: pq.abc.PGresult) -> str | None:
    state = result.error_field(pq.DiagnosticField.SQLSTATE)
    return state.decode() if state is not None else None


def _error(result: pq.abc.PGresult) -> psycopg.Error:
    """The psycopg exception of the error `result` holds, with the server's message."""
    state = _state(result)
    message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or result.error_message
    try:
        kind = psycopg.errors.lookup(state) if state else psycopg.DatabaseError
    except KeyError:
        kind = psycopg.DatabaseError
    return kind(message.decode(errors="replace").strip())
