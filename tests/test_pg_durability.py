"""The durability policies on PostgreSQL: `always` commits with synchronous_commit on, `batch`
and `never` with it off; under `batch` the appender forces a flush every N commits, and
`sync()` forces one at any time (a transaction that takes an id and commits synchronously)."""

from __future__ import annotations

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
