"""The throwaway embedded server: on 127.0.0.1 only (a Unix socket when asked), data in a
temporary folder (never under $HOME), run as `nobody` when started as root; one that cannot
start says why and leaves nothing behind."""

from __future__ import annotations

import json
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


def _pg_server(*argv: str, home: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """`journal pg-server --json ARGV` started: the process and its first line, read."""
    import select

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "journal.cli", "pg-server", "--json", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root), "HOME": str(home)})
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 90)
    if not ready:
        proc.kill()
        raise AssertionError("journal pg-server printed nothing in 90 s")
    return proc, json.loads(proc.stdout.readline())


def _journal(url: object, *argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root), "HOME": str(home),
                               "JOURNAL_DATABASE_URL": str(url)})


def _postmaster(folder: Path) -> int:
    return int((folder / "data" / "postmaster.pid").read_text().split()[0])


def test_pg_server_runs_until_sigterm_then_leaves_nothing(tmp_path: Path) -> None:
    """`journal pg-server`: the URL it prints takes sessions (`pg:` is its database once
    the variable is set); SIGTERM stops it, its temporary folder goes, nothing runs on."""
    pg_server.server()  # skips where no server can start at all
    proc, said = _pg_server(home=tmp_path)
    folder = Path(str(said["folder"]))
    try:
        assert said["kept"] is False and said["socketUrl"] is None
        postmaster = _postmaster(folder)
        made = _journal(said["url"], "new", "pg:", "--json", home=tmp_path)
        assert made.returncode == 0 and made.stderr == "", made.stderr  # the schema is there
        listed = _journal(said["url"], "ls", "pg:", "--json", home=tmp_path)
        assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 1, listed.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not folder.exists() and not alive(postmaster)


def test_pg_server_with_a_folder_keeps_its_sessions_for_the_next_run(tmp_path: Path) -> None:
    pg_server.server()
    # (a folder the server's user reaches when run as root: not under tmp_path's 0700)
    folder = Path(tempfile.mkdtemp(prefix="journal-given-"))
    try:
        proc, said = _pg_server("--dir", str(folder), "--unix-socket", home=tmp_path)
        try:
            assert said["kept"] is True and said["folder"] == str(folder)
            assert "host=" in str(said["socketUrl"])
            made = _journal(said["socketUrl"], "new", "pg:", "--json", home=tmp_path)
            assert made.returncode == 0, made.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        assert (folder / "data" / "PG_VERSION").exists()
        proc, said = _pg_server("--dir", str(folder), home=tmp_path)
        try:
            listed = _journal(said["url"], "ls", "pg:", "--json", home=tmp_path)
            assert listed.returncode == 0, listed.stderr
            assert len(json.loads(listed.stdout)) == 1  # the first run's session
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        assert proc.returncode == 130 and folder.exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_folder_the_servers_user_cannot_reach_is_refused_saying_why(tmp_path: Path) -> None:
    """Run as root, the server runs as nobody: a folder under one private to root (a home,
    pytest's tmp_path) is refused naming the cause, not only initdb's 'Permission denied'."""
    if os.geteuid() != 0:
        pytest.skip("only root's server runs as another user")
    pg_server.server()
    os.chmod(tmp_path, 0o700)
    with pytest.raises(ServerError, match="must be able to enter every folder above"):
        EmbeddedServer(tmp_path / "pg").start()


def _pg_server_fails(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`journal pg-server ARGV` expected to be refused (so it ends by itself)."""
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "journal.cli", "pg-server", *argv],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root), "HOME": str(home)})


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM a `journal pg-server`; what it said on stderr."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return proc.stderr.read() if proc.stderr else ""


def _port(url: object) -> int:
    return int(str(url).rsplit(":", 1)[1].split("/")[0])


def test_pg_server_on_a_folder_comes_back_on_its_port_or_says_it_moved(tmp_path: Path) -> None:
    """The URL a `--dir` server printed works again after a restart: the next run on the
    folder listens on the same port when it is free; when it is taken, on another, and a
    warning says the old URL no longer works."""
    import socket

    pg_server.server()
    folder = Path(tempfile.mkdtemp(prefix="journal-given-"))
    try:
        proc, said = _pg_server("--dir", str(folder), home=tmp_path)
        first = _port(said["url"])
        _stop(proc)
        proc, said = _pg_server("--dir", str(folder), home=tmp_path)
        try:
            assert _port(said["url"]) == first
            listed = _journal(said["url"], "ls", "pg:", "--json", home=tmp_path)
            assert listed.returncode == 0, listed.stderr
        finally:
            assert "Warning" not in _stop(proc)
        with socket.socket() as taker:
            # (the stopped server's connections may still be in TIME_WAIT on that port)
            taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taker.bind(("127.0.0.1", first))
            taker.listen()
            proc, said = _pg_server("--dir", str(folder), home=tmp_path)
            moved = _port(said["url"])
            err = _stop(proc)
        assert moved != first
        assert (f"Warning: port {first}, which the last run on {folder} listened on, is "
                f"taken: this run listens on {moved}") in err
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_pg_server_listens_on_the_port_asked_for_or_refuses_a_taken_one(tmp_path: Path) -> None:
    import socket

    pg_server.server()
    with socket.socket() as taker:
        taker.bind(("127.0.0.1", 0))
        taker.listen()
        taken = taker.getsockname()[1]
        refused = _pg_server_fails("--port", str(taken), home=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr == (f"Error: port {taken} of 127.0.0.1 is taken (another program "
                              "listens there): choose another, or none for a free one\n")
    wanted = taken  # free again now
    proc, said = _pg_server("--port", str(wanted), home=tmp_path)
    try:
        assert _port(said["url"]) == wanted
    finally:
        _stop(proc)


def test_pg_server_on_a_folder_a_running_server_uses_is_refused_in_one_line(
        tmp_path: Path) -> None:
    pg_server.server()
    folder = Path(tempfile.mkdtemp(prefix="journal-given-"))
    try:
        proc, said = _pg_server("--dir", str(folder), home=tmp_path)
        try:
            pid = _postmaster(folder)
            refused = _pg_server_fails("--dir", str(folder), home=tmp_path)
            assert refused.returncode == 2
            assert refused.stderr == (f"Error: {folder} is in use by a running server (pid "
                                      f"{pid}): stop that one first, or give this one another "
                                      "folder\n")
            assert alive(pid)  # the running one is untouched, and still answers
            listed = _journal(said["url"], "ls", "pg:", home=tmp_path)
            assert listed.returncode == 0, listed.stderr
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_pg_server_on_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    pg_server.server()
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    for given in (afile, afile / "sub"):
        refused = _pg_server_fails("--dir", str(given), home=tmp_path)
        assert refused.returncode == 2
        assert refused.stderr == (f"Error: {afile} is a file, not a folder: give the server a "
                                  "folder (it is made if missing)\n")
    assert afile.read_text() == "x\n"


def test_a_refused_start_removes_what_it_made_and_nothing_else() -> None:
    """A start refused (here, by a setting the server does not know) takes away the folder
    it made, or what it made in a folder that was there, never what was there before: a
    file of the caller's, or the data of an earlier run."""
    pg_server.server()
    above = Path(tempfile.mkdtemp(prefix="journal-given-"))
    os.chmod(above, 0o755)  # run as root, the server (nobody) reaches its folder through it
    wrong = {"no_such_setting": "1"}
    try:
        with pytest.raises(ServerError, match='unrecognized configuration parameter '
                                              '"no_such_setting"'):
            EmbeddedServer(above / "new" / "pg", settings=wrong).start()
        assert list(above.iterdir()) == []
        there = above / "there"
        there.mkdir(mode=0o700)
        (there / "mine").write_text("kept\n")
        with pytest.raises(ServerError, match="no_such_setting"):
            EmbeddedServer(there, settings=wrong).start()
        assert sorted(p.name for p in there.iterdir()) == ["mine"]
        assert there.stat().st_mode & 0o777 == 0o700
        with EmbeddedServer(there):
            pass
        with pytest.raises(ServerError, match="no_such_setting"):
            EmbeddedServer(there, settings=wrong).start()
        assert (there / "data" / "PG_VERSION").exists() and (there / "server.log").exists()
    finally:
        shutil.rmtree(above, ignore_errors=True)


def test_pg_server_refused_for_a_folder_its_user_cannot_reach_leaves_nothing(
        tmp_path: Path) -> None:
    """Run as root, the server runs as nobody, who cannot enter a private folder: the
    refusal leaves neither the folder it made there nor data/ and server.log (as nobody's).
    Which step refuses depends on where the wheel is installed: initdb, or, when nobody
    cannot run the installed programs either (a virtualenv in a folder private to root, as
    in a fresh clone under `mktemp -d`), the copy of them made in the folder."""
    if os.geteuid() != 0:
        pytest.skip("only root's server runs as another user")
    pg_server.server()
    private = tmp_path / "priv"
    private.mkdir(mode=0o700)
    refused = _pg_server_fails("--dir", str(private / "pg"), home=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith(("Error: initdb failed: ", "Error: the user nobody cannot "
                                      "run the server's programs in ")), refused.stderr
    assert refused.stderr.count("\n") == 1
    assert "must be able to enter every folder above" in refused.stderr
    assert list(private.iterdir()) == []


def test_pg_server_on_a_privileged_port_is_refused_saying_why_before_starting(
        tmp_path: Path) -> None:
    """Run as root, the server runs as nobody, who may not listen below 1024: the start
    failed late (initdb run) with only the server's 'Permission denied'. It is refused first,
    saying why and what to choose, with nothing made."""
    if os.geteuid() != 0:
        pytest.skip("only root's server runs as another user (nobody)")
    try:  # Linux's; 1024 elsewhere
        lowest = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, ValueError):
        lowest = 1024
    if lowest <= 1:
        pytest.skip("this machine lets unprivileged users listen on every port")
    pg_server.server()
    folder = tmp_path / "pg"
    refused = _pg_server_fails("--dir", str(folder), "--port", str(lowest - 1), home=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr == (
        f"Error: port {lowest - 1} of 127.0.0.1 needs privileges the server does not have: "
        f"ports below {lowest} are privileged, and the server runs as the unprivileged user "
        f"nobody (PostgreSQL refuses to run as root); choose a port from {lowest} up, or none "
        "for a free one\n")
    assert not folder.exists()
    server = EmbeddedServer(folder, port=lowest - 1)
    with pytest.raises(ServerError, match="needs privileges the server does not have"):
        server.start()
    assert not folder.exists() and not server.running
