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
import threading
import time
from collections.abc import Callable, Collection
from contextlib import closing
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import JournalError
from ..storage.mark import StopFlag

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
CANCEL_TIMEOUT = 1.0
"""The longest `close` spends asking the server to cancel a `wait`'s statement."""
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


def _take_back(conn: psycopg.Connection[Any]) -> None:
    """Delete the registrations `conn`'s backend made in journal.followers, and close it."""
    import psycopg

    try:
        conn.execute("DELETE FROM journal.followers WHERE backend = pg_backend_pid()")
    except psycopg.Error:
        pass  # the connection is broken: its registrations expire
    finally:
        conn.close()


def _cancel(conn: psycopg.Connection[Any]) -> None:
    """Ask the server to cancel the statement under way on `conn` (from another thread); a
    connection with none is left as it is."""
    import psycopg

    try:
        conn.cancel_safe(timeout=CANCEL_TIMEOUT)
    except psycopg.Error:
        pass  # the statement ends by itself (the wait takes back after it all the same)


_REGISTERED, _WOKEN, _QUIET = "registered", "woken", "quiet"
"""What one step of a wait came to (`PgWatch._step`)."""


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
        self._failing: float | None = None  # since when trying to listen fails
        self._causes: set[str] = set()  # why it fails, as said while that lasts
        self._worked = False
        self._registered: dict[str, float] = {}
        # `close` may come from another thread while `wait` runs (an async follower cancelled
        # mid-wait). The guard orders them: while a wait uses the connection (`_busy`), it
        # owns it, and `close` only marks the watch closed (and cancels the statement under
        # way); the wait, letting go, then deletes its registrations and closes the
        # connection itself. Otherwise `close` takes the connection and does that.
        self._guard = threading.Lock()
        self._busy = False
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
            self._cannot_listen(
                str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            self.conn = None
            self._retry_at = time.monotonic() + RETRY_AFTER
            return False
        with self._guard:
            closed = self._closed
            if not closed:
                self.conn = conn
        if closed:  # closed meanwhile (after `close` looked at `conn`): not kept
            conn.close()
            return False
        if self._failing is not None:
            log.info("listening for changes again")
        self._failing = None
        self._causes.clear()
        self._worked = False
        self._registered = {}
        if not first:
            self.reconnects += 1
        return True

    def _cannot_listen(self, cause: str) -> None:
        """Say why listening failed (it is tried again every RETRY_AFTER seconds): a warning
        at first, and when the cause changes to one not said yet while this lasts (once
        each, however often the tries alternate); otherwise only at INFO."""
        now = time.monotonic()
        if self._failing is None:
            self._failing = now
        if cause in self._causes:
            log.info("cannot listen for changes (%s); polling every %gs until it can", cause,
                     POLL_INTERVAL)
            return
        self._causes.add(cause)
        if len(self._causes) == 1:
            log.warning("cannot listen for changes (%s); polling every %gs until it can", cause,
                        POLL_INTERVAL)
        else:
            log.warning("cannot listen for changes (%s; failing for %.0fs); polling every %gs "
                        "until it can", cause, now - self._failing, POLL_INTERVAL)

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
        return new

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
        with self._guard:
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
        `stop` is set or the watch closed (False)."""
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
            conn = self._hold()
            if conn is None:
                if self._closed:
                    return False
                if self.polling or now < self._retry_at:  # polling (until listening again)
                    self._sleep(min(POLL_INTERVAL, deadline - now))
                    return True
                self._listen()  # listening again or not, the caller re-reads what it missed
                return True
            step: str | psycopg.Error
            try:
                step = self._step(conn, wanted, anywhere, deadline)
            except psycopg.Error as e:
                step = e  # dealt with once the connection is let go
            finally:
                closed = self._let_go(conn)
            if closed:
                return False
            if isinstance(step, psycopg.errors.InsufficientPrivilege):
                self._unannounced(step)
                return True
            if isinstance(step, psycopg.Error):
                self._lost()
                continue
            if step == _REGISTERED:
                # after the writers' next look (ANNOUNCE_LAG), which finds the stream
                # registered: what they commit from then on is announced (a commit that
                # ends only after its writer's look was due looks itself)
                self._sleep(ANNOUNCE_LAG)
                return not (self.stop.is_set() or self._closed)
            if step == _WOKEN:
                return True

    def _hold(self) -> psycopg.Connection[Any] | None:
        """The listening connection, now used by this wait (`close` leaves it to the wait
        until `_let_go`); None if there is none, or the watch is closed."""
        with self._guard:
            if self._closed or self.conn is None:
                return None
            self._busy = True
            return self.conn

    def _let_go(self, conn: psycopg.Connection[Any]) -> bool:
        """End this wait's use of `conn`; if the watch was closed meanwhile, `close` left it
        to the wait: its registrations (one just committed too) are deleted and it is
        closed here, before the wait returns. Whether the watch was closed."""
        with self._guard:
            self._busy = False
            closed = self._closed
            if closed:
                self.conn = None
        if closed:
            _take_back(conn)
        return closed

    def _step(self, conn: psycopg.Connection[Any], wanted: set[str | None], anywhere: bool,
              deadline: float) -> str:
        """Register (or renew) if due, else take notifications for up to STEP: _REGISTERED,
        _WOKEN (a followed stream's, or any with `anywhere`), or _QUIET."""
        if self._register(conn, wanted):
            return _REGISTERED
        if self._closed:
            return _QUIET
        woken = False
        # closed before anything else is asked of the connection: a suspended `notifies`
        # generator holds the connection's lock
        with closing(conn.notifies(
                timeout=max(0.001, min(STEP, deadline - time.monotonic())))) as notes:
            for note in notes:
                self.notified += 1
                stream, _ = parse(note.payload)
                if anywhere or stream in wanted:
                    woken = True
                    break
                # another stream's change: keep waiting, but look at the stop flag
                if self.stop.is_set() or self._closed or time.monotonic() >= deadline:
                    break
        self._worked = True
        if not woken:
            return _QUIET
        self._drain(conn)
        return _WOKEN

    def _drain(self, conn: psycopg.Connection[Any]) -> None:
        """Take in notifications already queued (one wake-up reads them all)."""
        with closing(conn.notifies(timeout=0.001)) as notes:
            for _ in notes:
                self.notified += 1

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
        """Stop listening and delete this watch's registrations; returns at once. A `wait`
        running on another thread ends (False) within STEP, its statement under way
        cancelled, having deleted its registrations (one it was committing too) and closed
        the connection itself: `close` never leaves a registration behind for writers to
        announce to until it expires, nor waits for the connection."""
        with self._guard:
            self._closed = True
            conn = self.conn
            if self._busy:
                if conn is not None:
                    # under the guard: the wait cannot take back (its DELETE) before the
                    # server has had the cancel request, so the cancel never hits that
                    _cancel(conn)
                return
            self.conn = None
        if conn is not None:
            _take_back(conn)

    async def aclose(self) -> None:
        self.close()
