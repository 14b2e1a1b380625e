"""Connections: keepalives at both ends where nobody else set them (the URL, PGOPTIONS, the
database), and the settings a writer asks for on top."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg  # noqa: E402

from journal.pg.connect import connect  # noqa: E402


def show(conn: Any, name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    return str(row[0])


def test_both_ends_give_up_on_a_silent_peer(pg_url: str) -> None:
    """The server drops a client that stopped answering (and with it a lease it held) after
    about 25 s, not after the system's two hours; the client gives up as soon."""
    conn = connect(pg_url, synchronous_commit="off")
    try:
        assert show(conn, "tcp_keepalives_idle") == "10"
        assert show(conn, "tcp_keepalives_count") == "3"
        assert show(conn, "tcp_user_timeout") == "30000"
        assert show(conn, "synchronous_commit") == "off"
        used = conn.info.get_parameters()
        assert used["keepalives_idle"] == "10" and used["tcp_user_timeout"] == "30000"
        assert used["connect_timeout"] == "10"
    finally:
        conn.close()


def test_a_urls_own_values_are_kept(pg_url: str) -> None:
    url = (f"{pg_url}?keepalives_idle=60&connect_timeout=3"
           "&options=-c%20tcp_keepalives_idle%3D60%20-c%20search_path%3Dpublic")
    conn = connect(url, synchronous_commit="off")
    try:
        assert show(conn, "tcp_keepalives_idle") == "60"
        assert show(conn, "search_path") == "public"
        assert show(conn, "synchronous_commit") == "off"
        assert show(conn, "tcp_keepalives_interval") == "5"
        used = conn.info.get_parameters()
        assert used["keepalives_idle"] == "60" and used["connect_timeout"] == "3"
    finally:
        conn.close()


def test_the_environments_and_the_databases_values_are_kept(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("ALTER DATABASE {} SET tcp_keepalives_count = 7").format(
            psycopg.sql.Identifier(admin.info.dbname)))
    monkeypatch.setenv("PGOPTIONS", "-c tcp_keepalives_idle=61 -c search_path=public")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    conn = connect(pg_url, synchronous_commit="off")
    try:
        assert show(conn, "tcp_keepalives_idle") == "61"
        assert show(conn, "search_path") == "public"
        assert show(conn, "tcp_keepalives_count") == "7"
        assert show(conn, "tcp_keepalives_interval") == "5"
        assert show(conn, "synchronous_commit") == "off"
        assert conn.info.get_parameters()["connect_timeout"] == "4"
    finally:
        conn.close()
