"""Connections: keepalives at both ends where nobody else set them (the URL, PGOPTIONS, the
database), and the settings a writer asks for on top."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg  # noqa: E402

from journal.pg.connect import connect  # noqa: E402

SERVER = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
          "tcp_user_timeout", "synchronous_commit", "search_path")


def seen(url: str, **settings: str) -> tuple[dict[str, str], dict[str, str]]:
    """(the server's values of SERVER, libpq's parameters) on a connection `connect` makes."""
    conn = connect(url, **settings)
    try:
        server = {name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                  for name in SERVER}
        return server, conn.info.get_parameters()
    finally:
        conn.close()


def service(pg_url: str, folder: Any, monkeypatch: pytest.MonkeyPatch, **settings: str) -> str:
    """A libpq service file naming `pg_url`'s database with `settings`, made the one libpq
    reads: the conninfo that names the service."""
    given = psycopg.conninfo.conninfo_to_dict(pg_url)
    lines = ["[journal-test]", *(f"{key}={given[key]}" for key in ("host", "port", "user",
                                                                   "dbname")),
             *(f"{key}={value}" for key, value in settings.items())]
    services = folder / "pg_service.conf"
    services.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    return "service=journal-test"


@pytest.fixture(autouse=True)
def no_libpq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's own PGOPTIONS, PGCONNECT_TIMEOUT or PGSERVICE would stand in for ours."""
    for name in ("PGOPTIONS", "PGCONNECT_TIMEOUT", "PGSERVICE", "PGSERVICEFILE"):
        monkeypatch.delenv(name, raising=False)


def test_both_ends_give_up_on_a_silent_peer(pg_url: str) -> None:
    """The server drops a client that stopped answering (and with it a lease it held) after
    about 25 s, not after the system's two hours; the client gives up as soon."""
    server, used = seen(pg_url, synchronous_commit="off")
    assert server | {"search_path": "-"} == {
        "tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
        "tcp_user_timeout": "30000", "synchronous_commit": "off", "search_path": "-"}
    assert used["keepalives_idle"] == "10" and used["tcp_user_timeout"] == "30000"
    assert used["connect_timeout"] == "10"


def test_a_urls_own_values_are_kept(pg_url: str) -> None:
    url = (f"{pg_url}?keepalives_idle=60&connect_timeout=3"
           "&options=-c%20tcp_keepalives_idle%3D60%20-c%20search_path%3Dpublic")
    server, used = seen(url, synchronous_commit="off")
    assert server == {
        "tcp_keepalives_idle": "60", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3",
        "tcp_user_timeout": "30000", "synchronous_commit": "off", "search_path": "public"}
    assert used["keepalives_idle"] == "60" and used["connect_timeout"] == "3"


def test_the_environments_and_the_databases_values_are_kept(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("ALTER DATABASE {} SET tcp_keepalives_count = 7").format(
            psycopg.sql.Identifier(admin.info.dbname)))
    monkeypatch.setenv("PGOPTIONS", "-c tcp_keepalives_idle=61 -c search_path=public")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    server, used = seen(pg_url, synchronous_commit="off")
    assert server == {
        "tcp_keepalives_idle": "61", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "7",
        "tcp_user_timeout": "30000", "synchronous_commit": "off", "search_path": "public"}
    assert used["connect_timeout"] == "4"


def test_a_service_names_its_own_timeout_and_keepalives(
        pg_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, used = seen(service(pg_url, tmp_path, monkeypatch,
                                connect_timeout="3", keepalives_idle="77"))
    assert used["connect_timeout"] == "3" and used["keepalives_idle"] == "77"
    assert server["tcp_keepalives_idle"] == "10"  # the server's end: ours


def test_a_role_that_may_not_read_pg_settings_still_connects(pg_url: str) -> None:
    """pg_show_all_settings() (behind the pg_settings view) says where a setting came from:
    a role refused the view still gets our keepalives; one refused the function too gets the
    settings it asked for, and the server's keepalives as they are."""
    connect(pg_url).close()  # the schema, made by the superuser
    with psycopg.connect(pg_url, autocommit=True) as admin:
        try:
            admin.execute("CREATE ROLE journal_no_settings LOGIN")
        except psycopg.errors.DuplicateObject:
            pass  # roles are server-wide: made by an earlier run of this test
        admin.execute("GRANT USAGE ON SCHEMA journal TO journal_no_settings")
        admin.execute("GRANT SELECT ON ALL TABLES IN SCHEMA journal TO journal_no_settings")
        admin.execute("REVOKE SELECT ON pg_catalog.pg_settings FROM PUBLIC")
    role_url = pg_url.replace("postgresql://postgres@", "postgresql://journal_no_settings@")
    with psycopg.connect(role_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT count(*) FROM pg_settings")
    server, _ = seen(role_url, synchronous_commit="off")
    assert server["synchronous_commit"] == "off"
    assert server["tcp_keepalives_idle"] == "10"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_show_all_settings() FROM PUBLIC")
    server, _ = seen(role_url, synchronous_commit="off")
    assert server["synchronous_commit"] == "off"
    assert server["tcp_keepalives_idle"] != "10"


def test_close_shared_closes_this_processs_shared_connections(pg_url: str) -> None:
    from journal import Session
    from journal.pg.connect import close_shared, shared, with_shared
    from journal.pg.url import session_url

    Session.create(session_url(pg_url, "s"), cwd="/").close()  # the schema, made
    first = shared(pg_url)
    assert with_shared(pg_url, lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
    close_shared()
    assert first.closed
    again = shared(pg_url)
    assert again is not first and not again.closed
    assert with_shared(pg_url, lambda conn: conn.execute("SELECT 2").fetchone()) == (2,)


def test_what_counts_as_a_lost_connection(pg_url: str) -> None:
    """An error the server sent (it has a SQLSTATE) says the connection was there, even once
    the caller's cleanup closed it; an OperationalError of the client's own (no SQLSTATE:
    a socket error libpq does not count as the connection's) makes it lost, and closed."""
    from journal.pg.connect import connection_lost

    assert psycopg.errors.LockNotAvailable.sqlstate == "55P03"
    conn = connect(pg_url)
    try:
        assert not connection_lost(conn, psycopg.errors.UniqueViolation("dup"))
        assert not conn.closed
        conn.close()  # as a `finally` does before the caller looks at the error
        assert not connection_lost(conn, psycopg.errors.LockNotAvailable("lock timeout"))
        assert connection_lost(conn, psycopg.OperationalError("the connection is closed"))
    finally:
        conn.close()
    conn = connect(pg_url)
    try:
        assert connection_lost(conn, psycopg.OperationalError(
            "consuming input failed: could not receive data from server: Invalid argument"))
        assert conn.closed
    finally:
        conn.close()
    assert not connection_lost(None, psycopg.OperationalError("no connection"))


# A thread's read on a shared connection, and the test's close_shared() while it runs: in a
# child process, since closing it under the read (as close_shared did) is a use after free
# in the driver, which may take another connection's reply or crash.
_READ_WHILE_CLOSED = r'''
import json, sys, threading, time
import psycopg
from journal.pg.connect import LONG_READS, close_shared, shared, with_shared

url = sys.argv[1]
ran, seen = [], {}

def work(conn):
    ran.append(conn)
    return conn.execute("SELECT pg_sleep(0.8), 'read'").fetchone()[1]

def read():
    try:
        seen["result"] = with_shared(url, work, LONG_READS)
    except Exception as e:
        seen["result"] = f"{type(e).__name__}: {e}"

thread = threading.Thread(target=read)
thread.start()
while not (ran and ran[0].lock.locked()):  # its statement under way, the lock held
    time.sleep(0.001)
close_shared()
seen["closed_under_the_read"] = ran[0].closed
seen["handed_out_again"] = shared(url, LONG_READS) is ran[0]
with psycopg.connect(url, autocommit=True) as other:
    seen["other"] = other.execute("SELECT 'other', pg_sleep(0.3)").fetchone()[0]
thread.join(10)
seen["attempts"] = len(ran)
print(json.dumps(seen))
'''


def test_close_shared_leaves_a_connection_another_thread_reads_on_to_it(
        pg_url: str, tmp_path: Any) -> None:
    """close_shared() while another thread's statement runs on a shared connection: that
    connection is no longer handed out, but it is not closed under the statement (which
    then ends on it, once), and the connections made next get their own replies."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    connect(pg_url).close()  # the schema, made
    root = str(Path(__file__).resolve().parents[1])
    child = subprocess.run([sys.executable, "-c", _READ_WHILE_CLOSED, pg_url],
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": root,
                                "HOME": str(tmp_path)})
    assert child.returncode == 0, child.stderr[-2000:]
    seen = json.loads(child.stdout)
    assert seen == {"result": "read", "closed_under_the_read": False,
                    "handed_out_again": False, "other": "other", "attempts": 1}, seen


class _OwnedLock:
    """A lock that knows its holder, standing in for a connection's own."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.owner: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        import threading

        taken = self._lock.acquire(blocking, timeout)
        if taken:
            self.owner = threading.get_ident()
        return taken

    def release(self) -> None:
        self.owner = None
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_watch_closed_from_another_thread_does_not_close_under_its_wait(
        pg_url: str) -> None:
    """An async follower cancelled mid-wait closes its watch from the event loop's thread
    while `wait` runs on a worker thread: the listening connection is closed only once that
    wait has let go of it, and the wait ends (False)."""
    import threading
    import time

    from journal.pg import schema
    from journal.pg.watch import PgWatch

    with psycopg.connect(pg_url, autocommit=True) as conn:
        schema.ensure(conn)
    made: list[Any] = []
    closed_by: list[tuple[int, int | None]] = []

    class Tracked(psycopg.Connection):  # type: ignore[type-arg]
        def close(self) -> None:
            closed_by.append((threading.get_ident(), self.lock.owner))
            super().close()

    def listening() -> Any:
        conn = Tracked.connect(pg_url)
        conn.lock = _OwnedLock()  # type: ignore[assignment]
        made.append(conn)
        return conn

    watch = PgWatch(listening, threading.Event(), timeout=30.0)
    ended: list[bool] = []
    # a folder's follower waits on places, with no stream registered (so close() asks
    # nothing of the connection before it closes it)
    waiter = threading.Thread(target=lambda: ended.append(watch.wait([], places=["dir"])))
    waiter.start()
    deadline = time.monotonic() + 10
    while not (made and made[0].lock.owner == waiter.ident):  # inside its notifies() now
        assert time.monotonic() < deadline, "the wait never took the connection's lock"
        time.sleep(0.001)
    watch.close()
    waiter.join(5)
    assert ended == [False]
    assert made[0].closed
    assert closed_by and all(owner in (None, me) for me, owner in closed_by), closed_by


@pytest.mark.parametrize("where", ["PGCLIENTENCODING", "the URL", "the database",
                                   "the service"])
def test_the_client_encoding_is_utf8_whoever_set_another(
        pg_url: str, where: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line is UTF-8 and sent as it is. A client encoding of LATIN1 (the environment's,
    the URL's, the database's or a service's) once made psycopg encode the text in it: an
    append of text LATIN1 cannot hold failed with a UnicodeEncodeError (not a JournalError)
    and left its session's commits unconfirmed. Every connection is UTF-8 now."""
    from journal import Session, load
    from journal.pg.url import session_url

    url = pg_url
    if where == "PGCLIENTENCODING":
        monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    elif where == "the URL":
        url = pg_url + ("&" if "?" in pg_url else "?") + "client_encoding=latin1"
    elif where == "the database":
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("ALTER DATABASE {} SET client_encoding = 'LATIN1'")
                          .format(psycopg.sql.Identifier(admin.info.dbname)))
    else:
        url = service(pg_url, tmp_path, monkeypatch, client_encoding="LATIN1")
    with psycopg.connect(url, autocommit=True) as plain:  # the setting is there ...
        assert plain.info.encoding != "utf-8"
    conn = connect(url)
    try:
        assert conn.info.encoding == "utf-8"  # ... and ours is not its
    finally:
        conn.close()
    if where == "the service":
        return  # a session's URL is a URL (`postgresql://`), not a keyword string
    session = session_url(url, "encoded")
    texts = ["café", "日本語 € \U0001f600"]
    with Session.create(session, cwd="/") as writer:
        for text in texts:
            writer.append_message({"role": "user", "content": text, "timestamp": 1})
        writer.append_many([{"type": "message", "message": {
            "role": "user", "content": text, "timestamp": 1}} for text in texts])
    monkeypatch.delenv("PGCLIENTENCODING", raising=False)
    assert [e["message"]["content"] for e in load(session).entries] == texts * 2
