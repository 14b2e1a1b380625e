"""The PostgreSQL schema: created once, at the version the program knows, by one process at a
time, refused where it cannot hold sessions byte for byte."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402
from pg_server import fresh_database, made_at  # noqa: E402

from journal.pg import schema  # noqa: E402


def test_a_new_database_is_brought_to_the_current_version_once(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert schema.current_version(conn) == 0
        assert schema.ensure(conn) == schema.VERSION
        assert schema.ensure(conn) == schema.VERSION
        rows = conn.execute("SELECT version, description FROM journal.schema_version "
                            "ORDER BY version").fetchall()
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'journal'")}
    assert [r[0] for r in rows] == [number for number, _, _ in schema.MIGRATIONS]
    assert {"schema_version", "streams", "entries"} <= tables


def test_processes_starting_at_once_migrate_once(pg_url: str) -> None:
    errors: list[BaseException] = []
    versions: list[int] = []

    def start() -> None:
        try:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                versions.append(schema.ensure(conn))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and versions == [schema.VERSION] * 4
    with psycopg.connect(pg_url) as conn:
        count = conn.execute("SELECT count(*) FROM journal.schema_version").fetchone()
    assert count is not None and count[0] == len(schema.MIGRATIONS)


def test_a_newer_schema_is_refused(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        schema.ensure(conn)
        conn.execute("INSERT INTO journal.schema_version (version, description) "
                     "VALUES (%s, 'from the future')", (schema.VERSION + 1,))
        with pytest.raises(schema.SchemaError, match="newer"):
            schema.ensure(conn)


def test_a_database_that_is_not_utf8_is_refused() -> None:
    url = fresh_database()
    name = url.rsplit("/", 1)[1] + "_ascii"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" ENCODING SQL_ASCII TEMPLATE template0')
    with psycopg.connect(url.rsplit("/", 1)[0] + "/" + name, autocommit=True) as conn:
        with pytest.raises(schema.SchemaError,
                           match=r"^the database's encoding is SQL_ASCII; journal needs UTF8"):
            schema.ensure(conn)  # named as text (it was shown as b'SQL_ASCII')
        assert schema.current_version(conn) == 0


def test_deleting_a_session_deletes_its_lines_and_no_other(pg_url: str) -> None:
    from journal.pg.storage import PostgresStorage

    header = b'{"type":"session","version":3,"id":"h","timestamp":"t","cwd":"/"}\n'
    line = b'{"type":"custom","id":"0000000a","parentId":null,"timestamp":"t","customType":"x"}\n'
    for name in ("gone", "kept"):
        storage = PostgresStorage(pg_url, name)
        storage.create(header)
        appender = storage.open_appender()
        appender.commit(line)
        appender.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = 'gone'")
        rows = conn.execute("SELECT s.session, count(*) FROM journal.entries e LEFT JOIN "
                            "journal.streams s ON s.id = e.stream GROUP BY 1").fetchall()
    assert rows == [("kept", 2)]


def test_version_4_refuses_lines_after_a_seal_and_keeps_the_grants(pg_url: str) -> None:
    """A database made at version 3 (where journal.append took lines after a seal) is
    brought to the current version: its sealed session then takes no more lines, a live one
    still does, and a writer role granted EXECUTE before keeps it."""
    call = ("SELECT journal.append(%s, NULL, ARRAY[%s], ARRAY['x0000001'], ARRAY[NULL], "
            "ARRAY['custom'], ARRAY[0]::bigint[], %s, NULL)")
    line = '{"type":"custom","id":"x0000001","customType":"x"}'
    role = f"writer_{pg_url.rsplit('/', 1)[1]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        made_at(conn, 3, role)
        conn.execute("INSERT INTO journal.streams (session, generation, successor) VALUES "
                     "('old', 1, 'new'), ('new', 2, NULL)")
        conn.execute(call, ("old", line, len(line) + 1))  # version 3 took it
        assert schema.ensure(conn) == schema.VERSION
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(call, ("old", line, len(line) + 1))
        assert caught.value.sqlstate == schema.SQLSTATE_SEALED
        assert caught.value.diag.message_detail == "new"
        conn.execute(call, ("new", line, len(line) + 1))
        counts = dict(conn.execute("SELECT s.session, count(e.line) FROM journal.streams s "
                                   "LEFT JOIN journal.entries e ON e.stream = s.id "
                                   "GROUP BY 1").fetchall())
        allowed = conn.execute("SELECT has_function_privilege(%s, 'journal.append(text, "
                               "bigint, text[], text[], text[], text[], bigint[], bigint, "
                               "text)', 'EXECUTE'), has_function_privilege('public', "
                               "'journal.append(text, bigint, text[], text[], text[], "
                               "text[], bigint[], bigint, text)', 'EXECUTE')",
                               (role,)).fetchone()
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')
    assert counts == {"old": 1, "new": 1}
    assert allowed == (True, False)
