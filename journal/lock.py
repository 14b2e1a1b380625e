"""The per-session writer lock: a kernel lock on a side file, plus who holds it.

Ownership is decided by the kernel lock alone (`filelock`, released when the holder dies, so a
lock is never stale). The holder's pid, host and start time are written into the lock file
purely for diagnostics, so a writer that gives up can say who it waited for.

The lock belongs to the real file: `<real path>.lock`, whatever name the caller used, so two
names of one session (a symbolic link and its target) share one lock. Anyone who can write the
sessions folder can plant something at the lock path, so the lock file is created here with
`O_NOFOLLOW` before `filelock` opens it, and the holder details are written only through a
descriptor that is a regular file with a single name: a planted link, FIFO or hard link is
refused with `UnsafeLockFile` instead of being truncated or written through.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
from typing import Any

from filelock import FileLock
from filelock import Timeout as _FileLockTimeout

from .errors import LockTimeout, UnsafeLockFile
from .identity import real_path
from .model import now_iso

DEFAULT_LOCK_TIMEOUT = 10.0
_HOLDER_LIMIT = 4096
_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def lock_path_for(session_path: str) -> str:
    """The lock file of a session: beside its real file."""
    return real_path(session_path) + ".lock"


def _unsafe_reason(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} hard links"
    return None


def _prepare_lock_file(path: str) -> None:
    """Create the lock file if needed, never through a link; refuse anything but a plain file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeLockFile(path, "is a symbolic link") from e
        if e.errno in (errno.EISDIR, errno.ENXIO, errno.EACCES, errno.EPERM):
            raise UnsafeLockFile(path, e.strerror or str(e)) from e
        raise
    try:
        reason = _unsafe_reason(os.fstat(fd))
    finally:
        os.close(fd)
    if reason is not None:
        raise UnsafeLockFile(path, reason)


def read_holder(session_path: str) -> dict[str, Any] | None:
    """The holder details last written to the lock file, if any (diagnostic only)."""
    try:
        fd = os.open(lock_path_for(session_path), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _HOLDER_LIMIT)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        holder = json.loads(data)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def current_holder(session_path: str) -> dict[str, Any] | None:
    """Who holds the writer lock right now, or None if nobody does.

    Probes the kernel lock without waiting, so the answer is authoritative; the details come
    from the lock file.
    """
    path = lock_path_for(session_path)
    try:
        if _unsafe_reason(os.lstat(path)) is not None:
            return None
    except OSError:
        return None
    probe = FileLock(path, timeout=0)
    try:
        probe.acquire()
    except _FileLockTimeout:
        return read_holder(session_path) or {}
    except OSError:
        return None
    probe.release()
    return None


class WriterLock:
    """Exclusive writer lock for one session file (named by any of its paths)."""

    def __init__(self, session_path: str, timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.session_path = real_path(session_path)
        self.lock_path = lock_path_for(self.session_path)
        self.timeout = timeout
        self._refused: str | None = None
        self._lock = FileLock(
            self.lock_path,
            timeout=timeout,
            mode=0o600,
            poll_interval=0.005,
            on_acquired=self._record_holder,
        )

    def _record_holder(self, fd: int) -> None:
        # The descriptor filelock locked may differ from the file checked before (a peer can
        # replace the lock file meanwhile), so it is checked again before anything is written.
        self._refused = _unsafe_reason(os.fstat(fd))
        if self._refused is not None:
            return
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso()}
        data = json.dumps(holder).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> None:
        """Take the lock, waiting up to the timeout; raise `LockTimeout` naming the holder,
        or `UnsafeLockFile` if something other than a plain file sits at the lock path."""
        _prepare_lock_file(self.lock_path)
        self._refused = None
        try:
            self._lock.acquire()
        except _FileLockTimeout as e:
            holder = read_holder(self.session_path)
            raise LockTimeout(self.session_path, self.timeout, holder) from e
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafeLockFile(self.lock_path, "is a symbolic link") from e
            raise
        if self._refused is not None:
            reason = self._refused
            self._lock.release(force=True)
            raise UnsafeLockFile(self.lock_path, reason)

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
