"""The durability policies on PostgreSQL: `always` commits with synchronous_commit on, `batch`
and `never` with it off; under `batch` the appender forces a flush every N commits, and
`sync()` forces one at any time (a transaction that writes a WAL record and commits
synchronously)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import Durability  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.storage import as_storage  # noqa: E402

HEADER = b'{"type":"session","version":3,"id":"d","timestamp":"t","cwd":"/"}\n'


def made(pg_url: str, name: str) -> PostgresStorage:
    storage = as_storage(session_url(pg_url, name))
    assert isinstance(storage, PostgresStorage)
    storage.create(HEADER)
    return storage


@pytest.mark.parametrize(("policy", "setting"), [
    (Durability.always(), "on"),
    (Durability.batch(3, 1000), "off"),
    (Durability.never(), "off"),
])
def test_each_policy_maps_to_synchronous_commit(pg_url: str, policy: Durability,
                                                setting: str) -> None:
    storage = made(pg_url, "policy")
    appender = storage.open_appender(policy)
    try:
        assert appender.synchronous_commit == setting
        appender.commit(b'{"type":"custom","id":"x1"}\n')
        assert storage.size() == len(HEADER) + len(b'{"type":"custom","id":"x1"}\n')
    finally:
        appender.close()


def test_batch_flushes_every_n_commits_and_sync_flushes_now(pg_url: str) -> None:
    storage = made(pg_url, "batched")
    appender = storage.open_appender(Durability.batch(4, None))
    try:
        synced: list[int] = []
        real = appender.sync

        def counted() -> None:
            synced.append(1)
            real()

        appender.sync = counted  # type: ignore[method-assign]
        for n in range(8):
            appender.commit(b'{"type":"custom","id":"b%d"}\n' % n)
        assert len(synced) == 2  # after the 4th and the 8th commit
        appender.sync()
        assert len(synced) == 3
    finally:
        appender.close()


def test_a_sync_the_server_cannot_take_says_what_is_stored() -> None:
    """The server stops between a commit under `batch` and the `sync` that would flush it:
    the sync fails saying that the commits made are stored and what their durability
    depends on, not that anything was rolled back (the words of a file's failed commit)."""
    from journal.errors import WriteFailed
    from journal.pg.server import EmbeddedServer

    try:
        server = EmbeddedServer().start()
    except Exception as e:  # as tests/pg_server.py: no server, the test says why
        pytest.skip(f"the embedded PostgreSQL server could not start: {e}")
    try:
        storage = made(server.url(), "unsynced")
        appender = storage.open_appender(Durability.batch(100, 60_000))
        appender.commit(b'{"type":"custom","id":"x1"}\n')
        server.close()
        with pytest.raises(WriteFailed, match="sync failed") as failed:
            appender.sync()
        assert "rolled back" not in str(failed.value)
        assert str(failed.value).endswith("the commits acknowledged before it are stored, and "
                                          "durable once the server has written its log out "
                                          "(on its own within a second, unless it stops first)")
    finally:
        server.close()


@pytest.fixture(scope="module")
def slow_writer() -> Any:
    """A server of its own (fsync on) whose WAL writer waits 10 s between its own flushes, so
    that only the appender's flushes make a commit made with synchronous_commit off durable
    within a test."""
    from journal.pg.server import EmbeddedServer

    with EmbeddedServer(fsync=True, settings={"wal_writer_delay": "10000ms"}) as server:
        yield server


def wal_positions(url: str) -> tuple[int, int]:
    """(where the server's WAL is written up to, where it is flushed up to), in bytes."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0', "
                           "pg_current_wal_flush_lsn() - '0/0'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("how", ["sync", "batch", "close"])
def test_a_flush_makes_the_commits_before_it_durable(slow_writer: Any, how: str) -> None:
    """The flush (`sync()`, the batch policy's every N commits, `close`'s last one) moves
    the server's WAL flush past every commit before it: it once committed a transaction
    that wrote nothing, which PostgreSQL does not wait to flush, so nothing was flushed."""
    import uuid

    storage = made(slow_writer.url(), f"flush-{how}-{uuid.uuid4().hex[:6]}")
    # never: only a sync flushes; batch(20): the 20th commit and close flush
    policy = Durability.never() if how == "sync" else Durability.batch(20, None)
    appender = storage.open_appender(policy)
    try:
        for n in range(19):
            appender.commit(b'{"type":"custom","id":"f%d"}\n' % n)
        written, flushed = wal_positions(slow_writer.url())
        assert flushed < written  # committed, not flushed: the test can tell
        if how == "sync":
            appender.sync()
        elif how == "batch":
            appender.commit(b'{"type":"custom","id":"f19"}\n')  # the 20th: a flush
        else:
            appender.close()
        assert wal_positions(slow_writer.url())[1] >= written
    finally:
        appender.close()


def test_commits_a_flush_covered_survive_a_crash_of_the_server(slow_writer: Any) -> None:
    """Every process of the server SIGKILLed (what a power cut leaves of what was not yet
    written), after 25 commits under batch(10): the 20 that two flushes covered are there
    after its restart, in order, and none is partial."""
    url = session_url(slow_writer.url(), "crashed")
    storage = made(slow_writer.url(), "crashed")
    appender = storage.open_appender(Durability.batch(10, None))
    for n in range(25):
        appender.commit(b'{"type":"custom","id":"c%02d","customType":"x"}\n' % n)
    crash(slow_writer)
    appender.close()  # its connection is gone: a warning, nothing more
    with as_storage(url).open_reader() as reader:
        lines = reader.stream.read().splitlines()[1:]  # the header, then the commits
    assert len(lines) >= 20
    assert lines == [b'{"type":"custom","id":"c%02d","customType":"x"}' % n
                     for n in range(len(lines))]


def crash(server: Any) -> None:
    """SIGKILL every process of `server` (what a power cut leaves of what was not written),
    then start it again on its port."""
    import os
    import signal

    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) ==
                postmaster]
    for pid in [postmaster, *children]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.restart()


@pytest.mark.parametrize("others_write", [False, True])
def test_commits_the_server_lost_are_said_lost_not_flushed(
        slow_writer: Any, others_write: bool, caplog: pytest.LogCaptureFixture) -> None:
    """Under batch(1000), five messages are acknowledged, then the server dies before writing
    them out and comes back without them (and, in one case, another writer appends more
    than they held in their place). sync() made its flush on a new connection and said they
    were durable, and the next append built on the lost entries: both now raise
    CommitsLost, every later call too, and close says so; the session holds what the server
    kept."""
    import logging

    from journal import CommitsLost, Session

    url = session_url(slow_writer.url(), f"lost-{others_write}")
    session = Session.create(url, cwd="/", durability=Durability.batch(1000, None))
    for n in range(5):
        session.append_message({"role": "user", "content": f"m{n}", "timestamp": 1})
    crash(slow_writer)
    if others_write:  # bytes past where the lost ones ended: their size hides nothing
        other = as_storage(url).open_appender(Durability.always())
        other.commit(b'{"type":"custom","id":"o1","customType":"x","data":"%s"}\n'
                     % (b"y" * 2000))
        other.close()
    with pytest.raises(CommitsLost, match="the server lost commits it had acknowledged"):
        session.sync()
    with pytest.raises(CommitsLost):
        session.append_message({"role": "user", "content": "after", "timestamp": 1})
    with pytest.raises(CommitsLost):
        session.sync()  # for good
    with caplog.at_level(logging.WARNING, logger="journal"):
        session.close()
    assert any("the server lost commits" in r.getMessage() for r in caplog.records)
    with as_storage(url).open_reader() as reader:  # what the server kept
        data = reader.stream.read()
    assert (b'"id":"o1"' in data) is others_write and b'"m0"' not in data


def test_a_connection_lost_with_commits_awaiting_a_flush_keeps_them(
        slow_writer: Any) -> None:
    """The appender's connection is terminated while commits await a flush, the server
    going on: it keeps them (its own log), so the flush on the new connection is made and
    sync() says so; the next append follows them."""
    import psycopg

    from journal import Session, load

    url = session_url(slow_writer.url(), "kept")
    with Session.create(url, cwd="/", durability=Durability.batch(1000, None)) as session:
        for n in range(5):
            session.append_message({"role": "user", "content": f"m{n}", "timestamp": 1})
        with psycopg.connect(slow_writer.url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                          "datname = current_database() AND pid <> pg_backend_pid() AND "
                          "backend_type = 'client backend'")
        session.sync()
        session.append_message({"role": "user", "content": "after", "timestamp": 1})
    assert [e["message"]["content"] for e in load(url).entries] == [
        "m0", "m1", "m2", "m3", "m4", "after"]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1
