"""The append-only file: one write() per commit, rollback of failed commits, sync policy.

Invariant 1 of the design: a commit is a single os.write() of complete lines on an O_APPEND
descriptor. If the kernel takes fewer bytes (a full disk) or the write or sync fails, the file
is truncated back to where the commit began before the error reaches the caller, so a failed
commit leaves no fragment for the next one to glue onto.
"""

from __future__ import annotations

import errno
import logging
import os

from .durability import Durability, SyncClock
from .errors import JournalError, SessionClosed, WriteFailed
from .files import fsync_directory, open_regular

__all__ = ["AppendLog", "fsync_directory"]

log = logging.getLogger(__name__)


class AppendLog:
    """An open session file positioned for appending. The caller holds the writer lock.

    The log keeps the offset where the file should end. If a failed commit cannot be cut
    back (the truncate fails too), the log refuses every later commit until the truncate
    succeeds, so a fragment is never followed by an acknowledged entry.
    """

    def __init__(self, path: str, durability: Durability | None = None) -> None:
        self.path = path
        self.durability = durability or Durability.always()
        self._clock = SyncClock(self.durability)
        fd = open_regular(path, os.O_RDWR | os.O_APPEND)
        self._end = os.fstat(fd).st_size
        if self._end and os.pread(fd, 1, self._end - 1) != b"\n":
            os.close(fd)
            raise JournalError(
                f"{path}: does not end with a newline (a torn last line); open it with "
                "Session.open, which quarantines the fragment first"
            )
        self._fd: int | None = fd
        self._stuck: str | None = None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def size(self) -> int:
        return os.fstat(self._require_fd()).st_size

    def commit(self, data: bytes) -> int:
        """Append `data` (complete lines) in one write; return the offset it starts at.

        Raises WriteFailed after rolling the file back if the write is short or fails, or if
        the policy's sync fails (an unsynced commit is not acknowledged).
        """
        if not data.endswith(b"\n"):
            raise ValueError("a commit must end with a newline")
        fd = self._require_fd()
        start = self._end
        if self._stuck is not None:
            self._retry_rollback(fd, start)
        try:
            written = os.write(fd, data)
        except OSError as e:
            raise WriteFailed(self.path, start, self._rollback(fd, start, _os_reason(e))) from e
        if written != len(data):
            short = f"short write: {written:,} of {len(data):,} bytes (disk full?)"
            raise WriteFailed(self.path, start, self._rollback(fd, start, short))
        self._end = start + written
        if self._clock.due():
            try:
                os.fdatasync(fd)
            except OSError as e:
                self._end = start
                reason = self._rollback(fd, start, f"sync failed: {_os_reason(e)}")
                raise WriteFailed(self.path, start, reason) from e
            self._clock.synced()
        return start

    def sync(self) -> None:
        if self._fd is not None and self._clock.pending:
            os.fdatasync(self._fd)
            self._clock.synced()

    def close(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._clock.pending and self.durability.describe() != "never":
                os.fdatasync(fd)
        except OSError as e:
            log.warning("%s: final sync failed: %s", self.path, e)
        finally:
            os.close(fd)

    def _rollback(self, fd: int, offset: int, reason: str) -> str:
        try:
            os.ftruncate(fd, offset)
        except OSError as e:
            self._stuck = f"{reason}; cutting it back failed too: {_os_reason(e)}"
            log.error("%s: could not roll back to byte %d: %s", self.path, offset, e)
            return self._stuck
        return reason

    def _retry_rollback(self, fd: int, offset: int) -> None:
        try:
            os.ftruncate(fd, offset)
        except OSError as e:
            raise WriteFailed(
                self.path, offset,
                f"an earlier failed commit could not be cut back ({_os_reason(e)}); "
                "refusing to append after it",
            ) from e
        self._stuck = None

    def _require_fd(self) -> int:
        if self._fd is None:
            raise SessionClosed(self.path)
        return self._fd


def _os_reason(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "")
    text = e.strerror or str(e)
    return f"{name}: {text}" if name else text
