"""Connections: keepalives at both ends unless the URL sets its own, and a URL's own server
options kept next to the settings a writer asks for."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

from journal.pg.connect import connect  # noqa: E402


def show(conn: object, name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()  # type: ignore[attr-defined]
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
