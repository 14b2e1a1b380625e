"""The database's standing watch: LISTEN/NOTIFY wake-ups, reconnection, polling, stop."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from journal.pg import schema  # noqa: E402
from journal.pg.watch import CHANNEL, POLL_INTERVAL, PgWatch, parse  # noqa: E402


@dataclass(frozen=True)
class Stream:
    session: str


def opened(url: str, stream: str = "s1", **kw: Any) -> PgWatch:
    """A watch on a database with the journal schema, already registered on `stream`."""
    with psycopg.connect(url, autocommit=True) as conn:
        schema.ensure(conn)
    watch = PgWatch(lambda: psycopg.connect(url), kw.pop("stop", threading.Event()),
                    timeout=kw.pop("timeout", 5.0), **kw)
    started = time.monotonic()
    assert watch.wait([Stream(stream)]) is True  # registered: the caller reads once
    assert time.monotonic() - started < 1.0
    return watch


def notify(url: str, stream: str, position: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{stream} {position}"))


def later(seconds: float, action: Any, *args: Any) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action(*args)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_payload_is_stream_and_position() -> None:
    assert parse("a b 12") == ("a b", 12)
    assert parse("abc") == ("abc", None)


def test_a_notification_for_a_followed_stream_wakes_the_wait(pg_url: str) -> None:
    watch = opened(pg_url)
    try:
        thread = later(0.3, notify, pg_url, "s1", 3)
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is True
        waited = time.monotonic() - started
        thread.join()
        assert 0.2 < waited < 2.0
        assert watch.notified == 1
    finally:
        watch.close()


def test_other_streams_do_not_wake_it_and_the_timeout_does(pg_url: str) -> None:
    watch = opened(pg_url, timeout=1.0)
    try:
        thread = later(0.2, notify, pg_url, "other", 1)
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is True
        thread.join()
        assert time.monotonic() - started >= 0.95  # the timeout, not the other stream
        assert watch.notified == 1
    finally:
        watch.close()


def test_a_change_between_two_waits_is_not_slept_through(pg_url: str) -> None:
    watch = opened(pg_url)
    try:
        notify(pg_url, "s1", 1)  # before any wait: the watch listens from its opening
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is True
        assert time.monotonic() - started < 1.0
    finally:
        watch.close()


def test_stop_ends_the_wait(pg_url: str) -> None:
    stop = threading.Event()
    watch = opened(pg_url, stop=stop, timeout=30.0)
    try:
        thread = later(0.2, stop.set)
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is False
        thread.join()
        assert time.monotonic() - started < 2.0
    finally:
        watch.close()


def test_a_killed_listening_connection_is_replaced(pg_url: str) -> None:
    watch = opened(pg_url, timeout=10.0)
    try:
        assert watch.conn is not None
        pid = watch.conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        started = time.monotonic()
        # the loss is noticed and the wait returns at once: the caller re-reads
        assert watch.wait([Stream("s1")]) is True
        assert time.monotonic() - started < 5.0
        assert watch.reconnects == 1
        assert watch.conn is not None and watch.conn.info.backend_pid != pid
        assert watch.wait([Stream("s1")]) is True  # registered again, from the new backend
        thread = later(0.2, notify, pg_url, "s1", 2)
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is True
        thread.join()
        assert time.monotonic() - started < 2.0
        assert watch.notified == 1
    finally:
        watch.close()


def test_polling_when_asked_or_when_listening_is_impossible(pg_url: str) -> None:
    watch = PgWatch(lambda: psycopg.connect(pg_url), threading.Event(), timeout=10.0, poll=True)
    started = time.monotonic()
    assert watch.wait([Stream("s1")]) is True
    assert time.monotonic() - started < POLL_INTERVAL + 0.5
    assert watch.conn is None

    def refuse() -> Any:
        raise psycopg.OperationalError("no server here")

    fallback = PgWatch(refuse, threading.Event(), timeout=10.0)
    started = time.monotonic()
    assert fallback.wait([Stream("s1")]) is True
    assert time.monotonic() - started < POLL_INTERVAL + 0.5
    with pytest.raises(psycopg.OperationalError):
        PgWatch(refuse, threading.Event(), timeout=10.0, poll=False)


def test_a_server_that_cannot_be_reached_is_polled_through_the_projects_connect() -> None:
    """The watch a storage opens connects with `journal.pg.connect.connect`, whose errors are
    the project's own (DatabaseUnavailable), not psycopg's: it polls all the same."""
    from journal.pg.connect import DatabaseUnavailable, connect

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = f"postgresql://postgres@127.0.0.1:{port}/nothing"
    watch = PgWatch(lambda: connect(unreachable), threading.Event(), timeout=10.0)
    started = time.monotonic()
    assert watch.wait([Stream("s1")]) is True
    assert time.monotonic() - started < POLL_INTERVAL + 0.5
    assert watch.conn is None
    with pytest.raises(DatabaseUnavailable):
        PgWatch(lambda: connect(unreachable), threading.Event(), timeout=10.0, poll=False)


APPEND_ONE = ("SELECT journal.append(%s, NULL, ARRAY['{}'], ARRAY[NULL], ARRAY[NULL], "
              "ARRAY[NULL], ARRAY[0::bigint], 3, NULL)")


def test_only_followed_streams_are_announced_and_closing_unregisters(pg_url: str) -> None:
    watch = opened(pg_url, timeout=1.0)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        listener = psycopg.connect(pg_url, autocommit=True)
        listener.execute(f"LISTEN {CHANNEL}")
        for session in ("s1", "s2"):
            conn.execute("INSERT INTO journal.streams (session, generation) VALUES (%s, 1)",
                         (session,))
        for session in ("s1", "s2"):  # an append notifies from journal.append itself
            conn.execute(APPEND_ONE, (session,))
        conn.execute("UPDATE journal.streams SET updated_at = now()")  # no change: silent
        heard = [n.payload for n in listener.notifies(timeout=0.5)]
        assert heard == ["s1 0", "s1 1"]  # created, appended; s2 is followed by nobody
        watch.close()
        left = conn.execute("SELECT count(*) FROM journal.followers").fetchone()
        assert left is not None and left[0] == 0
        conn.execute(APPEND_ONE, ("s1",))
        assert [n.payload for n in listener.notifies(timeout=0.3)] == []
        listener.close()


def test_closing_from_another_thread_ends_the_wait_and_listens_no_more(pg_url: str) -> None:
    """An async follower cancelled mid-wait closes the watch from the event loop's thread
    while the wait runs on a worker: the wait ends (False) and makes no new connection."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        schema.ensure(conn)
    made: list[Any] = []

    def connect() -> Any:
        made.append(psycopg.connect(pg_url))
        return made[-1]

    watch = PgWatch(connect, threading.Event(), timeout=10.0)
    assert watch.wait([Stream("s1")]) is True  # registered
    outcome: list[bool] = []
    waiting = threading.Thread(target=lambda: outcome.append(watch.wait([Stream("s1")])))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.3)
    watch.close()
    waiting.join(timeout=15)
    assert outcome == [False] and time.monotonic() - started < 3.0
    assert len(made) == 1 and made[0].closed and watch.conn is None


def test_a_wait_after_the_registration_may_have_expired_returns_at_once(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that took longer than a registration lasts between two waits: changes made
    meanwhile may not have been announced, so the wait that registers again returns at
    once and the caller re-reads."""
    import journal.pg.watch as pg_watch

    monkeypatch.setattr(pg_watch, "RENEW_EVERY", 0.2)
    monkeypatch.setattr(pg_watch, "FOLLOW_TTL", 0.5)
    watch = opened(pg_url, timeout=5.0)
    try:
        time.sleep(0.3)  # renewed, not expired: the wait sleeps until its timeout
        thread = later(0.5, notify, pg_url, "s1", 1)
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is True
        thread.join()
        assert 0.4 < time.monotonic() - started < 3.0  # woken by the notification
        time.sleep(0.6)  # longer than a registration lasts
        started = time.monotonic()
        assert watch.wait([Stream("s1")]) is True
        assert time.monotonic() - started < 2.5  # at once, not after the 5 s timeout
    finally:
        watch.close()


@dataclass
class Held:
    watch: PgWatch
    backend: int
    waiter: threading.Thread
    ended: list[bool]


@contextmanager
def held_registration(url: str, timeout: float) -> Iterator[Held]:
    """A watch whose wait, on another thread, is blocked in its first registration: its
    INSERT held up by another transaction's row of the same key (s1, its backend), which is
    rolled back on leaving."""
    with psycopg.connect(url, autocommit=True) as conn:
        schema.ensure(conn)
    watch = PgWatch(lambda: psycopg.connect(url), threading.Event(), timeout=timeout)
    assert watch.conn is not None
    backend = watch.conn.info.backend_pid
    blocker = psycopg.connect(url)
    try:
        blocker.execute("INSERT INTO journal.followers (session, backend, until) "
                        "VALUES ('s1', %s, now() + interval '1 minute')", (backend,))
        ended: list[bool] = []
        waiter = threading.Thread(target=lambda: ended.append(watch.wait([Stream("s1")])))
        waiter.start()
        with psycopg.connect(url, autocommit=True) as look:
            deadline = time.monotonic() + 10
            while not look.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND "
                                   "wait_event_type = 'Lock'", (backend,)).fetchone():
                assert time.monotonic() < deadline, "the registration never waited"
                time.sleep(0.01)
        yield Held(watch, backend, waiter, ended)
    finally:
        blocker.rollback()
        blocker.close()


def test_a_watch_closed_while_it_registers_leaves_no_registration(pg_url: str) -> None:
    """`close` from another thread while the wait's first registration is still under way:
    `close` saw nothing registered yet and could not take the busy connection, so the
    registration was committed after it and stayed behind, and writers announced their
    commits to nobody until it expired (60 s). The wait now takes back what it registered
    once it finds the watch closed."""
    with held_registration(pg_url, timeout=5.0) as held:
        held.watch.close()  # the wait's INSERT is cancelled; the wait takes back what it has
    held.waiter.join(10)
    assert not held.waiter.is_alive() and held.ended == [False]
    deadline = time.monotonic() + 5
    while registrations(pg_url, held.backend) != 0:
        assert time.monotonic() < deadline, "its registration stayed behind"
        time.sleep(0.05)


class AfterCommit(psycopg.Connection):  # type: ignore[type-arg]
    """A real connection that runs `then` (once) right after its next transaction ends, on
    the thread that ran it: a test's hook into the moment a registration is committed."""

    then: Callable[[], None] | None = None

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with super().transaction(*args, **kwargs) as tx:
            yield tx
        then, self.then = self.then, None
        if then is not None:
            then()


def registrations(url: str, backend: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM journal.followers WHERE backend = %s",
                           (backend,)).fetchone()
    assert row is not None
    return int(row[0])


def hooked(url: str) -> tuple[PgWatch, AfterCommit]:
    """A listening watch whose connection is an `AfterCommit`."""
    with psycopg.connect(url, autocommit=True) as conn:
        schema.ensure(conn)
    watch = PgWatch(lambda: AfterCommit.connect(url), threading.Event(), timeout=5.0)
    assert isinstance(watch.conn, AfterCommit)
    return watch, watch.conn


def on_another_thread(action: Callable[[], Any]) -> None:
    """Run `action` on a thread of its own and wait for it (at most 10 s)."""
    thread = threading.Thread(target=action)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "it never returned"


def test_a_watch_closed_right_after_it_commits_a_registration_leaves_none(
        pg_url: str) -> None:
    """`close` from another thread between the wait's commit of its registration and the
    wait's next look at the watch: `close` found no registration recorded yet and closed
    the connection, so the wait's taking back failed on it and the registration stayed
    until it expired (60 s), writers announcing every commit to nobody. The wait owns the
    connection now: it deletes the registration itself before it returns."""
    watch, conn = hooked(pg_url)
    backend = conn.info.backend_pid
    conn.then = lambda: on_another_thread(watch.close)
    assert watch.wait([Stream("s1")]) is False
    assert registrations(pg_url, backend) == 0
    assert conn.closed and watch.conn is None


def test_an_async_watch_closed_right_after_it_commits_a_registration_leaves_none(
        pg_url: str) -> None:
    """The same window for the async follower: `aclose` on the event loop while the wait
    runs on its worker thread, right after that committed the registration."""
    watch, conn = hooked(pg_url)
    backend = conn.info.backend_pid

    async def follow() -> bool:
        loop = asyncio.get_running_loop()
        conn.then = lambda: asyncio.run_coroutine_threadsafe(watch.aclose(), loop).result(10)
        return await watch.wait_async([Stream("s1")])

    assert asyncio.run(follow()) is False
    assert registrations(pg_url, backend) == 0
    assert conn.closed and watch.conn is None


def test_close_returns_at_once_while_a_wait_is_blocked(pg_url: str) -> None:
    """A wait blocked in its registration: `close` from another thread returned only after
    waiting 2 s for the connection, and the wait went on until the other transaction ended.
    `close` returns at once now, and the wait, its statement cancelled, ends with nothing
    registered while the other transaction still holds the row."""
    with held_registration(pg_url, timeout=30.0) as held:
        started = time.monotonic()
        held.watch.close()
        assert time.monotonic() - started < 0.5
        held.waiter.join(5)
        assert not held.waiter.is_alive() and held.ended == [False]
    assert registrations(pg_url, held.backend) == 0


def test_the_watch_warns_again_when_why_it_cannot_listen_changes(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server shuts down (smart: it waits for a last connection, refusing new ones as
    'shutting down'), then is gone ('Connection refused'): the watch said only the first
    cause, however long the second lasted. It warns again when the cause changes; a cause
    said once is not said again while it lasts (only at INFO)."""
    import pg_server

    import journal.pg.watch as pg_watch
    from journal.pg.connect import connect
    from journal.pg.server import EmbeddedServer

    pg_server.server()  # skips where no server can start at all
    monkeypatch.setattr(pg_watch, "RETRY_AFTER", 0.0)  # every wait tries to listen again
    with EmbeddedServer() as server:
        url = server.url()
        watch = PgWatch(lambda: connect(url), threading.Event(), timeout=0.2)
        try:
            assert watch.wait([Stream("s1")]) is True  # registered
            with caplog.at_level("WARNING", logger="journal.tail"):
                pg_server.through_a_shutdown(server, lambda: watch.wait([Stream("s1")]), 4)
        finally:
            watch.close()
    pg_server.said_in_turn([r.getMessage() for r in caplog.records
                            if r.name == "journal.tail"
                            and "cannot listen for changes" in r.getMessage()])
