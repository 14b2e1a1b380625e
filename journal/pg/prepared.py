"""A statement sent through psycopg's libpq layer (`psycopg.pq`), for the commonest commit.

psycopg's cursor (query conversion, adapting the parameters, its generator-driven wait)
costs the client about 10-25 us of CPU per statement on top of the round trip on the 2-core
machine, and a durable one-row commit 10-20 us more wall time (`bench/pg_pq_path.py`), paid
by every appended entry. The appender's one-entry statement (`schema.APPEND_ONE`) is sent here
instead, through the documented libpq wrapper psycopg ships: prepared once per connection
under a name of its own, its parameters as text, its result awaited with poll(2) (a signal
interrupts the wait, as psycopg's own wait allows). Everything else goes through psycopg's
cursor as usual.

What it does not do, it leaves to the caller's other way (`None`): a statement that failed
while the connection stayed up did nothing (the connection is in autocommit mode), and
psycopg, running the fuller statement, reports what is wrong. So do parameters libpq could
not pass as they are (a NUL character, which psycopg refuses; an encoding other than UTF-8).
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq

__all__ = ["Prepared"]


class Prepared:
    """One statement (`$1`... placeholders, parameters of the given type oids), prepared on
    each connection it runs on."""

    def __init__(self, name: bytes, sql: str, types: Sequence[int]) -> None:
        self.name = name
        self.sql = sql.encode()
        self.types = list(types)
        # the connection it was last prepared on, and whether that worked (a statement
        # the server would not prepare is not tried again on that connection)
        self._on: tuple[psycopg.Connection[Any], bool] | None = None

    def first_row(self, conn: psycopg.Connection[Any],
                  params: Sequence[str | None]) -> list[bytes | None] | None:
        """The first row the statement returns on `conn` (an autocommit connection that is
        idle); None if it returns none, failed without losing the connection, or was not
        sent (see the module docstring). psycopg.OperationalError when the connection is
        lost (`conn.broken` is then true). An interruption while it waits (a signal)
        closes `conn`: the statement may still be committed."""
        if conn.info.encoding != "utf-8":
            return None
        values: list[bytes | None] = []
        for value in params:
            if value is not None and "\0" in value:
                return None
            values.append(None if value is None else value.encode())
        pgconn = conn.pgconn
        if self._on is None or self._on[0] is not conn:
            prepared = pgconn.prepare(self.name, self.sql, self.types)
            self._on = (conn, prepared.status == pq.ExecStatus.COMMAND_OK)
            if not self._on[1]:
                _raise_if_lost(pgconn, prepared)
                return None
        elif not self._on[1]:
            return None
        try:
            pgconn.send_query_prepared(self.name, values)
            result = _result(pgconn)
        except BaseException:
            # a statement in flight (an interruption, a connection failing): the state of
            # the connection is not known, and it is not used again
            if not conn.closed:
                conn.close()
            raise
        if result is None or result.status != pq.ExecStatus.TUPLES_OK:
            _raise_if_lost(pgconn, result)
            return None
        if result.ntuples == 0:
            return None
        return [result.get_value(0, column) for column in range(result.nfields)]


def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """Send what is left of the query, then wait for its results; the last of them."""
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLOUT)
    while pgconn.flush():  # 1: more to send, once the socket takes it
        poller.poll()
    poller.modify(pgconn.socket, select.POLLIN)
    last = None
    while True:
        pgconn.consume_input()
        if pgconn.is_busy():
            poller.poll()
            continue
        result = pgconn.get_result()
        if result is None:
            return last
        last = result


def _raise_if_lost(pgconn: pq.abc.PGconn, result: pq.abc.PGresult | None) -> None:
    """OperationalError for a statement that failed because its connection was lost."""
    if pgconn.status == pq.ConnStatus.BAD:
        message = result.error_message if result is not None else pgconn.error_message
        raise psycopg.OperationalError(message.decode(errors="replace").strip()
                                       or "the connection to the server was lost")
