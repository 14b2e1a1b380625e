"""The database's standing watch (`Storage.open_watch`): LISTEN/NOTIFY, with polling behind it.

Every transaction that changes a stream (an append, a replacement, a rotation) sends one
notification on `CHANNEL` as it commits, carrying only the stream's id and its new position
(`notify_sql`). A notification is a hint, never data: the follower re-selects everything
after the last position it delivered, so a notification that is dropped, or one sent while
the watch was reconnecting, loses nothing; at worst the change is seen at the next wake-up.

Announcing costs writers something (NOTIFY takes a lock at commit), so only streams someone
follows are announced: the watch registers the streams it waits on in `journal.followers`
(renewed while it waits, expiring `FOLLOW_TTL` seconds after the last renewal, removed when it
closes), and the `journal.streams` trigger and the writers notify only for those. A wait that
registers a stream for the first time returns once the writers have seen it registered, so
the caller reads what was committed before: a writer committing one entry at a time looks in
`journal.followers` at most every `ANNOUNCE_LAG` seconds (not in every commit:
`journal.pg.schema.APPEND_ONE`), so that wait returns after `ANNOUNCE_LAG`.

`PgWatch` keeps one connection listening from the moment it is opened (before the follower's
first read, so nothing committed after that read is slept through). `wait(storages, places)`
returns True when a notification names one of the followed streams (or any stream, when
`places` is not empty: new sessions may appear there), when `timeout` seconds pass, or right
after the listening connection was lost and opened again (the caller re-reads, which covers
what happened while it was down); False once `stop` is set. When the server cannot be
listened to (or `poll=True`), it waits `POLL_INTERVAL` and returns True: plain polling.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from contextlib import closing
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import JournalError
from ..storage.mark import StopFlag
from .connect import close_idle

if TYPE_CHECKING:
    import psycopg

__all__ = ["ANNOUNCE_LAG", "CHANNEL", "POLL_INTERVAL", "STEP", "PgWatch", "Streamed",
           "notify_sql", "parse"]

log = logging.getLogger("journal.tail")

CHANNEL = "journal_changes"
"""The one channel every change of every stream is announced on."""
POLL_INTERVAL = 0.05
"""How often a polling watch (no LISTEN) wakes the follower to re-read."""
STEP = 0.1
"""The longest a wait blocks without looking at its stop flag."""
CLOSE_WAIT = 2.0
"""How long `close` waits for a `wait` on another thread to let go of the connection."""
RETRY_AFTER = 2.0
"""Seconds between attempts to listen while it fails (polling meanwhile)."""
FOLLOW_TTL = 60
"""Seconds a registration in `journal.followers` lasts; the watch renews it well before."""
RENEW_EVERY = 20.0
ANNOUNCE_LAG = 0.1
"""The longest a writer committing one entry at a time goes on without looking whether its
session is followed (while it commits): a stream registered that long ago is announced."""


class Streamed(Protocol):
    """What the watch needs of a database session's `Storage`: its session id."""

    @property
    def session(self) -> str: ...


def notify_sql(stream: str = "%s", position: str = "%s") -> str:
    """The statement (one call of `pg_notify`) a changing transaction sends on commit."""
    return f"SELECT pg_notify('{CHANNEL}', {stream} || ' ' || {position})"


def parse(payload: str) -> tuple[str, int | None]:
    """(stream id, position) from a notification's payload; position None if unreadable."""
    stream, _, position = payload.rpartition(" ")
    if not stream:
        return payload, None
    try:
        return stream, int(position)
    except ValueError:
        return payload, None


def _session(storage: Streamed | object) -> str | None:
    """The session id of a database session's storage (None for another backend's)."""
    found = getattr(storage, "session", None)
    return found if isinstance(found, str) else None


def _unregister(conn: psycopg.Connection[Any]) -> None:
    """Delete the registrations `conn`'s backend made in journal.followers."""
    import psycopg

    try:
        conn.execute("DELETE FROM journal.followers WHERE backend = pg_backend_pid()")
    except psycopg.Error:
        pass  # gone with the connection anyway: the registrations expire


class PgWatch:
    """A standing wait over database sessions (see the module docstring)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], stop: StopFlag,
                 timeout: float, poll: bool | None = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.connect = connect
        self.stop = stop
        self.timeout = timeout
        self.polling = bool(poll)
        self.may_fall_back = poll is None
        self.conn: psycopg.Connection[Any] | None = None
        self.reconnects = 0
        self.notified = 0
        self._retry_at = 0.0
        self._failing = False  # the last try to listen failed (warned about once)
        self._worked = False
        self._registered: dict[str, float] = {}
        # set by `close`, which may come from another thread while `wait` runs (an async
        # follower cancelled mid-wait): the wait then ends and listens no more
        self._closed = False
        if not self.polling:
            self._listen(first=True)

    def _listen(self, first: bool = False) -> bool:
        """Open the listening connection; on failure poll (if allowed) or raise."""
        import psycopg

        conn: psycopg.Connection[Any] | None = None
        try:
            conn = self.connect()
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}")
        except BaseException as e:
            if conn is not None:
                conn.close()
            # psycopg's errors, and a factory's own (`connect` raises JournalErrors), mean
            # that the server cannot be listened to; anything else (an interruption) is raised
            if not isinstance(e, (psycopg.Error, JournalError)):
                raise
            if first and not self.may_fall_back:
                raise
            # said once while it lasts (it is tried again every RETRY_AFTER seconds)
            log.log(logging.INFO if self._failing else logging.WARNING,
                    "cannot listen for changes (%s); polling every %gs until it can",
                    str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                    POLL_INTERVAL)
            self._failing = True
            self.conn = None
            self._retry_at = time.monotonic() + RETRY_AFTER
            return False
        self.conn = conn
        if self._closed:  # closed meanwhile (after `close` looked at `conn`): not kept
            self._drop()
            return False
        if self._failing:
            log.info("listening for changes again")
        self._failing = False
        self._worked = False
        self._registered = {}
        if not first:
            self.reconnects += 1
        return True

    def _register(self, conn: psycopg.Connection[Any], wanted: set[str | None]) -> bool:
        """Register (or renew) this watch as a follower of `wanted` in `journal.followers`,
        so their changes are announced; True if one was not registered yet, or its
        registration may have expired (a caller that took longer than FOLLOW_TTL between
        waits): its changes until now may not have been announced, so the caller must
        re-read once."""
        now = time.monotonic()
        due = sorted(s for s in wanted
                     if s is not None and now - self._registered.get(s, -RENEW_EVERY)
                     >= RENEW_EVERY)
        if not due:
            return False
        new = any(now - self._registered.get(s, -FOLLOW_TTL) >= FOLLOW_TTL for s in due)
        with conn.transaction():
            conn.execute("DELETE FROM journal.followers WHERE until < now()")
            conn.execute(
                "INSERT INTO journal.followers (session, backend, until) "
                "SELECT s, pg_backend_pid(), now() + make_interval(secs => %s) "
                "FROM unnest(%s::text[]) AS s ON CONFLICT (session, backend) "
                "DO UPDATE SET until = excluded.until", (FOLLOW_TTL, due))
        for stream in due:
            self._registered[stream] = now
        self._worked = True
        if self._closed:
            # closed meanwhile: `close` may have looked before this was committed, or could
            # not take the connection while it was busy here, so the registration is taken
            # back here (else writers announce to nobody until it expires)
            self._take_back(conn)
            return False
        return new

    def _take_back(self, conn: psycopg.Connection[Any]) -> None:
        """Delete this connection's registrations and close it (after `close`)."""
        try:
            _unregister(conn)
        finally:
            conn.close()

    def _unannounced(self, error: Exception) -> None:
        """This role may not register as a follower, so no change would be announced to it:
        poll from now on (listening again would only be refused again)."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else "permission denied"
        log.warning("cannot register as a follower in journal.followers (%s): polling every "
                    "%gs; GRANT INSERT, UPDATE, DELETE ON journal.followers to this role to be "
                    "woken by notifications (docs/postgres.md, Roles and grants)", first,
                    POLL_INTERVAL)
        self.polling = True
        self._drop()

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - it may be broken; closing is best effort
                pass

    def _lost(self) -> None:
        self._drop()
        log.info("the listening connection was lost; listening again")
        # at once, unless that connection failed before it ever worked
        self._retry_at = time.monotonic() + (0.0 if self._worked else RETRY_AFTER)

    def wait(self, storages: Collection[Any], places: Collection[str] = ()) -> bool:
        """Block until a followed stream may have changed, or the interval passed (True), or
        `stop` is set (False)."""
        import psycopg

        wanted = {_session(storage) for storage in storages} - {None}
        anywhere = bool(places)
        deadline = time.monotonic() + self.timeout
        while True:
            if self.stop.is_set() or self._closed:
                return False
            now = time.monotonic()
            if now >= deadline:
                return True
            conn = self.conn
            if conn is None:
                if self.polling:
                    self._sleep(min(POLL_INTERVAL, deadline - now))
                    return True
                if now < self._retry_at:  # polling until listening is tried again
                    self._sleep(min(POLL_INTERVAL, deadline - now))
                    return True
                self._listen()  # listening again or not, the caller re-reads what it missed
                return True
            woken = False
            try:
                registered = self._register(conn, wanted)
                if self._closed:
                    return False
                if registered:
                    # after the writers' next look (ANNOUNCE_LAG), which finds the stream
                    # registered: what they commit from then on is announced (a commit that
                    # ends only after its writer's look was due looks itself)
                    self._sleep(ANNOUNCE_LAG)
                    return not (self.stop.is_set() or self._closed)
                # closed before anything else is asked of the connection: a suspended
                # `notifies` generator holds the connection's lock
                with closing(conn.notifies(
                        timeout=max(0.001, min(STEP, deadline - now)))) as notes:
                    for note in notes:
                        self.notified += 1
                        stream, _ = parse(note.payload)
                        if anywhere or stream in wanted:
                            woken = True
                            break
                        # another stream's change: keep waiting, but look at the stop flag
                        if self.stop.is_set() or time.monotonic() >= deadline:
                            break
            except psycopg.errors.InsufficientPrivilege as e:
                self._unannounced(e)
                return True
            except psycopg.Error:
                self._lost()
                continue
            self._worked = True
            if woken:
                self._drain()
                return True

    def _drain(self) -> None:
        """Take in notifications already queued (one wake-up reads them all)."""
        import psycopg

        conn = self.conn
        if conn is None:
            return
        try:
            with closing(conn.notifies(timeout=0.001)) as notes:
                for _ in notes:
                    self.notified += 1
        except psycopg.Error:
            self._lost()

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + max(0.0, seconds)
        while not self.stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, STEP))

    async def wait_async(self, storages: Collection[Any],
                         places: Collection[str] = ()) -> bool:
        """`wait` on a worker thread, so the event loop keeps running meanwhile."""
        return await asyncio.to_thread(self.wait, storages, places)

    def close(self) -> None:

        self._closed = True
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if self._registered:
                _unregister(conn)
        finally:
            # not under a `wait` on another thread: its `notifies` ends within STEP
            close_idle(conn, wait=CLOSE_WAIT)

    async def aclose(self) -> None:
        self.close()
