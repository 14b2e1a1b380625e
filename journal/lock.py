"""The per-session writer lock: a kernel lock on a side file, plus who holds it.

Ownership is decided by the kernel lock alone (`flock`, released when the holder dies, so a
lock is never stale). The holder's pid, host and start time are written into the lock file
purely for diagnostics, so a writer that gives up can say who it waited for.

The lock belongs to the real file: `<real path>.lock`, whatever name the caller used, so two
names of one session (a symbolic link and its target) share one lock. Anyone who can write the
sessions folder can plant something at the lock path, so the lock file is opened with
`O_NOFOLLOW` and used only if it is a regular file with a single name: a planted link, FIFO or
hard link is refused with `UnsafeLockFile` instead of being truncated or written through.

The lock file does not outlive its last holder (docs/safety.md, "Lock files"). The protocol
that makes removing it safe:

- a holder removes the lock file while it still holds the kernel lock, and only if the path
  still names the file it locked; then it lets go;
- a locker that acquires the kernel lock checks that the path still names the file it locked
  (a holder may have removed it while this waited on the old file); if not, it lets go and
  starts again on whatever the path names now.

So at any moment at most one process holds the kernel lock on the file the path names, and
only that process removes it: two writers never both believe they hold the lock. A lock file
left beside a session file that is gone, which no writer locks again, is removed the same way
(`remove_stray_lock`): by whoever takes its kernel lock, as its holder. (This is why
the lock is `flock` here and not the `filelock` package: removing the file safely needs the
locker to compare the inode it locked with what the path names after acquiring, which that
package does not expose; it leaves lock files in place instead.)
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Sequence
from typing import Any

from .errors import LockTimeout, UnsafeLockFile
from .files import describe_kind
from .identity import real_path
from .model import now_iso

DEFAULT_LOCK_TIMEOUT = 10.0
POLL_INTERVAL = 0.005
_HOLDER_LIMIT = 4096
_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
LOCK_SUFFIX = ".lock"
_HOLDER_FIELDS = frozenset({"pid", "host", "since"})
"""What a holder writes into the lock file (`_holder_record`); a file without them was not
written by this module (`remove_stray_lock` leaves it alone)."""


def lock_path_for(session_path: str) -> str:
    """The lock file of a session: beside its real file."""
    return real_path(session_path) + LOCK_SUFFIX


def _holder_record() -> bytes:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "since": now_iso()}).encode()


def _read_record(fd: int) -> dict[str, Any] | None:
    """The JSON object at the start of the open lock file, if it holds one."""
    try:
        holder = json.loads(os.pread(fd, _HOLDER_LIMIT, 0))
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _unsafe_reason(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink > 1:  # 0: its holder just removed it; the locker starts again
        return f"has {st.st_nlink} hard links"
    return None


def _open_lock_file(path: str, create: bool) -> int:
    """The lock file's descriptor (created if `create`), never through a link; refuse
    anything but a plain file with one name."""
    flags = os.O_RDWR | _NOFOLLOW | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeLockFile(path, "is a symbolic link") from e
        if e.errno in (errno.EISDIR, errno.ENXIO, errno.EACCES, errno.EPERM):
            raise UnsafeLockFile(path, e.strerror or str(e)) from e
        raise
    try:
        reason = _unsafe_reason(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    if reason is not None:
        os.close(fd)
        raise UnsafeLockFile(path, reason)
    return fd


def _names(path: str, fd: int) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        return os.path.samestat(os.lstat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def read_holder(session_path: str) -> dict[str, Any] | None:
    """The holder details last written to the lock file, if any (diagnostic only)."""
    try:
        fd = os.open(lock_path_for(session_path), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read_record(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def lock_state(session_path: str) -> str:
    """`"none"` (no lock file), `"held"` (a writer holds the lock) or `"stale"` (a lock file
    nobody holds: left by a crash or an older version; harmless, the next writer of the file
    reuses and removes it). Probes without waiting and without creating anything."""
    path = lock_path_for(session_path)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return "none"
    try:
        if _unsafe_reason(os.fstat(fd)) is not None:
            return "none"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "held"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "stale"
    finally:
        os.close(fd)


def remove_stray_lock(lock_file: str, *, also_gone: Sequence[str] = (),
                      dry_run: bool = False) -> str | None:
    """Remove `lock_file`, the lock file `<name>.lock` of a session file `<name>` that no
    longer exists, unless someone holds it. A rotation killed after it archived the old file,
    before it let go, leaves one that nobody locks again (writers lock the successor).

    Returns None when it was removed (with `dry_run`: when it would be; nothing is touched),
    else why it stays. It is removed as its holder would remove it (module docstring): under
    its kernel lock, taken without waiting, and only if, once locked, the name still leads to
    the file locked, `<name>` and every path in `also_gone` (a rotation intent of it) still do
    not exist, and the file holds the record a holder of this module writes (another
    program's `.lock` is not ours). A locker that opened it before it went gets the kernel lock
    on a file no name leads to, and starts again on a fresh one. A link, FIFO, anything but a
    regular file with one name, is never opened for this. Raises OSError if it cannot be
    unlinked.
    """
    if not lock_file.endswith(LOCK_SUFFIX) or os.path.basename(lock_file) == LOCK_SUFFIX:
        raise ValueError(f"{lock_file!r} is not the name of a lock file (<session>.lock)")
    session = lock_file[: -len(LOCK_SUFFIX)]
    try:
        st = os.lstat(lock_file)
    except FileNotFoundError:
        return "gone already"
    if not stat.S_ISREG(st.st_mode):
        return f"is {describe_kind(st.st_mode)}, not a lock file this store made"
    try:
        fd = os.open(lock_file, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return "gone already"
    except OSError as e:
        return f"cannot be opened ({e.strerror or e})"
    try:
        st = os.fstat(fd)
        reason = _unsafe_reason(st)
        if reason is not None:
            return f"{reason}, not a lock file this store made"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(fd)
            pid = holder.get("pid") if holder else None
            return f"held by pid {pid}" if isinstance(pid, int) else "held by a live process"
        if not _names(lock_file, fd):
            return "replaced while being looked at (a writer is using it)"
        present = next((p for p in (session, *also_gone) if os.path.lexists(p)), None)
        if present == session:
            return f"its session file {session} exists"
        if present is not None:
            return f"{present} exists"
        record = _read_record(fd)
        if record is None or not _HOLDER_FIELDS <= record.keys():
            return ("holds no writer record of this store (pid, host, since): perhaps "
                    "another program's lock; left alone")
        if not dry_run:
            os.unlink(lock_file)
        return None
    finally:
        os.close(fd)


def check_lock_timeout(timeout: float) -> None:
    """ValueError unless `timeout` is a number of seconds to wait for a writer lock: 0 or more
    (infinity: for ever)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError(f"a lock timeout is a number of seconds, 0 or more, not {timeout!r}")


def current_holder(session_path: str) -> dict[str, Any] | None:
    """Who holds the writer lock right now, or None if nobody does.

    Probes the kernel lock without waiting, so the answer is authoritative; the details come
    from the lock file.
    """
    if lock_state(session_path) != "held":
        return None
    return read_holder(session_path) or {}


class WriterLock:
    """Exclusive writer lock for one session file (named by any of its paths)."""

    def __init__(self, session_path: str, timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        check_lock_timeout(timeout)
        self.session_path = real_path(session_path)
        self.lock_path = lock_path_for(self.session_path)
        self.timeout = timeout
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, waiting up to the timeout; raise `LockTimeout` naming the holder,
        or `UnsafeLockFile` if something other than a plain file sits at the lock path."""
        if self._fd is not None:
            return
        deadline = time.monotonic() + self.timeout
        while True:
            fd = _open_lock_file(self.lock_path, create=True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise LockTimeout(self.session_path, self.timeout,
                                      read_holder(self.session_path)) from None
                time.sleep(POLL_INTERVAL)
                continue
            except BaseException:
                os.close(fd)
                raise
            if not _names(self.lock_path, fd):
                os.close(fd)  # its holder removed it meanwhile: lock what the path names now
                continue
            break
        try:
            holder = _holder_record()
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder, 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Let go, removing the lock file first (while still holding it, see the module
        docstring); a lock file that cannot be removed stays and is reused."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _names(self.lock_path, fd):
                os.unlink(self.lock_path)
        except OSError:
            pass
        finally:
            os.close(fd)

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
