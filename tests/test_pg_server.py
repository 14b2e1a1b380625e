"""The throwaway embedded server: on 127.0.0.1 only (a Unix socket when asked), data in a
temporary folder (never under $HOME), run as `nobody` when started as root; one that cannot
start says why and leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import pg_server  # noqa: E402
import psycopg  # noqa: E402
from processes import alive  # noqa: E402

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


def test_a_server_asked_for_a_unix_socket_listens_there_in_its_own_folder_too() -> None:
    pg_server.server()  # skips where no server can start at all
    with EmbeddedServer(unix_socket=True) as server:
        folder = server.folder
        with psycopg.connect(server.socket_url()) as conn:
            assert conn.pgconn.host.decode() == str(folder / "socket")
            assert conn.execute("SELECT inet_server_addr()").fetchone() == (None,)
        with psycopg.connect(server.url()) as conn:  # and on TCP, as ever
            assert conn.pgconn.host == b"127.0.0.1"
    assert not folder.exists()
    with pytest.raises(ServerError, match="no Unix socket"):
        pg_server.server().socket_url()


def test_a_unix_socket_in_a_folder_named_with_a_space_or_too_long_a_one(tmp_path: Path) -> None:
    pg_server.server()  # skips where no server can start at all
    spaced = Path(tempfile.mkdtemp(prefix="journal pg "))
    os.chmod(spaced, 0o755)  # run as root, the server (nobody) reaches its folder through it
    try:
        with EmbeddedServer(spaced / "s p", unix_socket=True) as server:
            with psycopg.connect(server.socket_url()) as conn:
                assert conn.pgconn.host.decode() == str(spaced / "s p" / "socket")
    finally:
        shutil.rmtree(spaced, ignore_errors=True)
    deep = tmp_path / ("d" * 100)
    with pytest.raises(ServerError, match="too long a path for a Unix socket"):
        with EmbeddedServer(deep, unix_socket=True):
            pass


def test_a_server_that_cannot_start_says_why_and_leaves_nothing() -> None:
    pg_server.server()  # skips where no server can start at all
    server = EmbeddedServer(settings={"no_such_setting": "1"})
    folder = server.folder
    with pytest.raises(ServerError, match="no_such_setting"):
        with server:
            pass
    assert not Path(folder).exists()


OWNER = """
import sys, time
from journal.pg.server import EmbeddedServer
server = EmbeddedServer(sys.argv[1] or None).start()
print(server.folder, (server.data / "postmaster.pid").read_text().split()[0], flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("given", [False, True])
def test_an_owner_killed_leaves_no_server_running_nor_a_folder_it_made(given: bool) -> None:
    pg_server.server()  # skips where no server can start at all
    # (a folder for the server's user to reach when run as root: not under tmp_path's 0700)
    folder = tempfile.mkdtemp(prefix="journal-given-") if given else None
    try:
        _kill_owner(folder)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _kill_owner(folder: str | None) -> None:
    given = folder is not None
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(folder or "")],
                             stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    made, pid = owner.stdout.readline().split()
    assert alive(int(pid))
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 30
    while alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(int(pid))
    while not given and Path(made).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # a folder the caller named is the caller's: kept, with the server's data in it
    assert Path(made).exists() == given
    if given:
        assert (Path(made) / "data" / "PG_VERSION").exists()


def test_a_server_closed_leaves_no_reaper_behind() -> None:
    pg_server.server()
    with EmbeddedServer() as server:
        data = str(server.data)

        def reapers() -> list[str]:
            return [p for p in os.listdir("/proc") if p.isdigit() and _reaper_of(p, data)]

        deadline = time.monotonic() + 10  # (its command line shows once its exec is done)
        while not reapers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(reapers()) == 1
    deadline = time.monotonic() + 10
    while reapers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reapers() == []


def _reaper_of(pid: str, data: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"reaper.py") for a in args) and data.encode() in args


def test_the_reaper_stops_only_the_postmaster_of_its_data_folder(tmp_path: Path) -> None:
    """A stale postmaster.pid whose pid went to another process (here one with `postgres`
    in its command line) is not taken for the server: only `postgres -D <that folder>` is."""
    from journal.pg.reaper import postmaster

    pg_server.server()
    other = subprocess.Popen(["sleep", "30", "postgres"])
    try:
        data = tmp_path / "data"
        data.mkdir()
        (data / "postmaster.pid").write_text(f"{other.pid}\n{data}\n")
        assert postmaster(str(data)) is None
        with EmbeddedServer() as server:
            pid = int((server.data / "postmaster.pid").read_text().split()[0])
            assert postmaster(str(server.data)) == pid
            (data / "postmaster.pid").write_text(f"{pid}\n")
            assert postmaster(str(data)) is None  # a postmaster, of another folder
    finally:
        other.kill()
        other.wait()
