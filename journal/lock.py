"""The per-session writer lock: a kernel lock on a side file, plus who holds it.

Ownership is decided by the kernel lock alone (released when the holder dies, so a lock is
never stale). The holder's pid, host and start time are written into the lock file purely for
diagnostics, so a writer that gives up can say who it waited for.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from filelock import FileLock
from filelock import Timeout as _FileLockTimeout

from .errors import LockTimeout
from .model import now_iso

DEFAULT_LOCK_TIMEOUT = 10.0


def lock_path_for(session_path: str) -> str:
    return session_path + ".lock"


def read_holder(session_path: str) -> dict[str, Any] | None:
    """The holder details last written to the lock file, if any (diagnostic only)."""
    try:
        with open(lock_path_for(session_path), "rb") as f:
            data = f.read(4096)
    except OSError:
        return None
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
    if not os.path.exists(lock_path_for(session_path)):
        return None
    probe = FileLock(lock_path_for(session_path), timeout=0)
    try:
        probe.acquire()
    except _FileLockTimeout:
        return read_holder(session_path) or {}
    except OSError:
        return None
    probe.release()
    return None


class WriterLock:
    """Exclusive writer lock for one session file."""

    def __init__(self, session_path: str, timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.session_path = session_path
        self.timeout = timeout
        self._lock = FileLock(
            lock_path_for(session_path),
            timeout=timeout,
            mode=0o600,
            poll_interval=0.005,
            on_acquired=self._record_holder,
        )

    def _record_holder(self, fd: int) -> None:
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso()}
        data = json.dumps(holder).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> None:
        """Take the lock, waiting up to the timeout; raise `LockTimeout` naming the holder."""
        try:
            self._lock.acquire()
        except _FileLockTimeout as e:
            holder = read_holder(self.session_path)
            raise LockTimeout(self.session_path, self.timeout, holder) from e

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)

    def __enter__(self) -> WriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
