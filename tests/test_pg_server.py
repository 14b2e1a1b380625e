"""The throwaway embedded server: on 127.0.0.1 only, no Unix socket, data in a temporary folder
(never under $HOME), run as `nobody` when started as root; one that cannot start says why and
leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import pg_server  # noqa: E402
import psycopg  # noqa: E402

from journal.pg.server import NOBODY, EmbeddedServer, ServerError  # noqa: E402


def test_the_run_server_listens_on_loopback_only_and_runs_unprivileged() -> None:
    server = pg_server.server()
    assert isinstance(server, EmbeddedServer)
    with psycopg.connect(server.url()) as conn:
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('listen_addresses', 'unix_socket_directories', 'port')").fetchall())
    assert settings == {"listen_addresses": "127.0.0.1", "unix_socket_directories": "",
                        "port": str(server.port)}
    assert not str(server.data).startswith(os.path.expanduser("~") + os.sep)
    pid = int((server.data / "postmaster.pid").read_text().split()[0])
    owner = os.stat(f"/proc/{pid}").st_uid
    assert owner == (NOBODY if os.geteuid() == 0 else os.geteuid())


def test_a_server_that_cannot_start_says_why_and_leaves_nothing() -> None:
    pg_server.server()  # skips where no server can start at all
    server = EmbeddedServer(settings={"no_such_setting": "1"})
    folder = server.folder
    with pytest.raises(ServerError, match="no_such_setting"):
        with server:
            pass
    assert not Path(folder).exists()
