"""The roles and grants docs/postgres.md gives a deployment, run as written: the owner runs the
migrations, a writer creates, appends and reopens sessions, a reader reads them and can
neither write nor take a lease."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402
from pg_server import statement_counts  # noqa: E402

from journal import JournalError, Session, load  # noqa: E402
from journal.pg.connect import connect  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.storage import as_storage  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "postgres.md"
HEADER = b'{"type":"session","version":3,"id":"r","timestamp":"t","cwd":"/"}\n'


def documented_grants(database: str) -> list[str]:
    """The statements of the doc's grants block, for `database` instead of `agents`."""
    text = DOC.read_text()
    block = text[text.index("<!-- grants -->"):]
    sql = block[block.index("```sql") + len("```sql"):]
    sql = sql[:sql.index("```")]
    sql = re.sub(r"--[^\n]*", "", sql).replace("DATABASE agents", f'DATABASE "{database}"')
    return [s.strip() for s in sql.split(";") if s.strip()]


def as_role(url: str, role: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://{role}@")


def test_the_documented_roles_and_grants_are_enough_and_no_more(pg_url: str,
                                                               tmp_path: Path) -> None:
    database = pg_url.rsplit("/", 1)[1]
    statements = documented_grants(database)
    setup = [s for s in statements if s.startswith(("CREATE ROLE", "GRANT CREATE"))]
    after = [s for s in statements if s not in setup]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for statement in setup:
            try:
                admin.execute(statement.encode())
            except psycopg.errors.DuplicateObject:
                pass  # a role made by an earlier test of this run (roles are server-wide)
        connect(as_role(pg_url, "journal_owner")).close()  # the owner runs the migrations
        for statement in after:
            admin.execute(statement.encode())

    writer = session_url(as_role(pg_url, "journal_writer"), "w")
    with Session.create(writer, cwd="/") as session:
        first = session.append_message({"role": "user", "content": "one", "timestamp": 1})
    with Session.open(writer) as session:
        second = session.append_message({"role": "user", "content": "two", "timestamp": 1})

    reader = session_url(as_role(pg_url, "journal_reader"), "w")
    assert [e["id"] for e in load(reader).entries] == [first, second]
    with pytest.raises(JournalError, match="permission denied"):
        Session.open(reader)
    with pytest.raises(JournalError, match="permission denied"):
        as_storage(session_url(as_role(pg_url, "journal_reader"), "new")).create(HEADER)
    storage = as_storage(reader)
    with pytest.raises(JournalError, match="permission denied"):
        appender = storage.open_appender()
        try:
            appender.commit(b'{"type":"custom","id":"z"}\n')
        finally:
            appender.close()
    assert [e["id"] for e in load(reader).entries] == [first, second]

    # a push finds a file up to date with a reader's grants too: what it found alike is
    # recorded only where the role may (the writer's push did)
    from journal.pg.transfer import push

    with Session.create(str(tmp_path), cwd="/") as session:
        session.append_message({"role": "user", "content": "pushed", "timestamp": 1})
    assert push(session.path, as_role(pg_url, "journal_writer")).changed
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("UPDATE journal.streams SET alike_generation = NULL")
    assert [r["action"] for r in push(session.path, as_role(pg_url, "journal_reader")).sessions
            ] == ["unchanged"]


def test_a_reader_that_may_not_register_as_a_follower_polls_and_says_why(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A role with SELECT only (no write on journal.followers) cannot be announced changes;
    its follow says so once, with the grant that is missing, and polls: nothing is lost."""
    import logging
    import threading

    from journal import follow

    with psycopg.connect(pg_url, autocommit=True) as admin:
        connect(pg_url).close()  # the schema, made by the superuser
        try:
            admin.execute("CREATE ROLE journal_select_only LOGIN")
        except psycopg.errors.DuplicateObject:
            pass
        admin.execute("GRANT USAGE ON SCHEMA journal TO journal_select_only")
        admin.execute("GRANT SELECT ON ALL TABLES IN SCHEMA journal TO journal_select_only")
    url = session_url(pg_url, "followed")
    Session.create(url, cwd="/").close()
    reader = session_url(as_role(pg_url, "journal_select_only"), "followed")
    stop = threading.Event()
    texts: list[str] = []

    def consume() -> None:
        for entry in follow(reader, from_start=True, stop=stop, timeout=30.0):
            texts.append(entry["message"]["content"])
            if len(texts) == 3:
                return

    with caplog.at_level(logging.INFO):
        thread = threading.Thread(target=consume)
        thread.start()
        with Session.open(url) as session:
            for i in range(3):
                session.append_message({"role": "user", "content": f"m{i}", "timestamp": 1})
                time.sleep(0.3)
        thread.join(timeout=20)
        stop.set()
    assert texts == ["m0", "m1", "m2"]
    said = [r.getMessage() for r in caplog.records if r.name.startswith("journal")]
    assert len([m for m in said if "journal.followers" in m]) == 1, said
    assert any("GRANT INSERT, UPDATE, DELETE ON journal.followers" in m for m in said), said
    assert not [m for m in said if "listening again" in m], said


def test_a_writer_that_may_not_write_a_logical_message_still_flushes(pg_url: str) -> None:
    """A flush writes a transactional logical message (so that its commit waits for the WAL
    flush); where an administrator revoked that function from the writers, it writes the
    session's stream row instead, and sync() still works."""
    from journal import Durability

    database = pg_url.rsplit("/", 1)[1]
    statements = documented_grants(database)
    setup = [s for s in statements if s.startswith(("CREATE ROLE", "GRANT CREATE"))]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for statement in setup:
            try:
                admin.execute(statement.encode())
            except psycopg.errors.DuplicateObject:
                pass
        connect(as_role(pg_url, "journal_owner")).close()
        for statement in statements:
            if statement not in setup:
                admin.execute(statement.encode())
        admin.execute("DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT oid::regprocedure "
                      "FROM pg_proc WHERE proname = 'pg_logical_emit_message' LOOP EXECUTE "
                      "format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f); END LOOP; END $$")
    writer = session_url(as_role(pg_url, "journal_writer"), "flushed")
    Session.create(writer, cwd="/").close()
    appender = as_storage(writer).open_appender(Durability.never())
    try:
        appender.commit(b'{"type":"custom","id":"z"}\n')
        appender.sync()
    finally:
        appender.close()
    calls, rows = statement_counts(pg_url, "UPDATE journal.streams SET updated_at = updated_at%")
    assert (calls, rows) == (1, 1)
