"""The file backend of the storage seam: one session is one JSONL file.

Appending is `log.AppendLog` (one `write()` per commit on an `O_APPEND` descriptor, rollback
by `ftruncate`), the lock is `lock.WriterLock` (a kernel lock on `<file>.lock`), reading opens
only a regular file (`files.open_regular`), a replacement is published by `publish.NewFile`
(temp, sync, rename, directory sync) keeping the file's permissions, `watch` uses
watchfiles (inotify) on the file's folder, polling where that is not available, and
`open_watch` gives a standing `FileWatch` (one watcher for the folders of many sessions).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

from .. import codec
from ..codec import Diagnostic, Line
from ..durability import Durability
from ..errors import NotASession, SessionChanged
from ..files import read_regular
from ..lock import WriterLock
from ..log import AppendLog
from ..publish import NewFile, create_file
from .mark import Mark, StopFlag

if TYPE_CHECKING:
    from .filewatch import FileWatch

__all__ = ["FileReader", "FileStorage"]

WATCH_STEP_MS = 50


class FileReader:
    """A session file opened for reading (only a regular file; see `files.open_regular`)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        st = os.fstat(stream.fileno())
        self._size = st.st_size
        self._generation = (st.st_dev, st.st_ino)

    @property
    def size(self) -> int:
        return self._size

    @property
    def stream(self) -> BinaryIO:
        return self._stream

    def lines(self, start: int = 0, end: int | None = None) -> Iterator[Line | Diagnostic]:
        return codec.iter_lines(self._stream, start, end)

    def lines_backward(self, end: int) -> Iterator[Line]:
        return codec.iter_lines_reverse(self._stream, end)

    @property
    def generation(self) -> tuple[int, int]:
        """The file's device and inode (what `FileStorage.mark` calls its generation)."""
        return self._generation

    def read(self, offset: int, length: int) -> bytes:
        """`pread` on the open file: the same inode even once its name is replaced."""
        return os.pread(self._stream.fileno(), length, offset)

    def extent(self) -> int:
        return os.fstat(self._stream.fileno()).st_size

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class FileStorage:
    """A session stored as the file `path` (see the `journal.storage` seam)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def locator(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"FileStorage({self.path!r})"

    def size(self) -> int:
        return os.path.getsize(self.path)

    def open_stream(self) -> BinaryIO:
        """The file opened read-only; OS errors become clear `NotASession` errors. A FIFO,
        device or socket raises NotASession at once (opened non-blocking, checked by fstat),
        so nothing hangs or reads forever."""
        path = self.path
        try:
            return read_regular(path)
        except FileNotFoundError as e:
            raise NotASession(path, "no such file") from e
        except IsADirectoryError as e:
            raise NotASession(path, "is a directory, not a session file") from e
        except PermissionError as e:
            raise NotASession(path, "permission denied") from e
        except OSError as e:
            raise NotASession(path, e.strerror or str(e)) from e

    def open_reader(self) -> FileReader:
        return FileReader(self.open_stream())

    def open_appender(self, durability: Durability | None = None) -> AppendLog:
        return AppendLog(self.path, durability)

    def create(self, data: bytes) -> None:
        """Create the file holding `data`, synced (FileExistsError if the name is taken)."""
        create_file(self.path, data)

    def publish(self, data: bytes, tag: str, before_swap: Callable[[], None] | None = None,
                *, based_on: int | None = None) -> None:
        """Replace the file atomically with `data`, keeping its permissions and owner (see
        `NewFile`'s `like`); `before_swap` runs once the new bytes are written and synced,
        just before the rename. `based_on`: see `Storage.publish` (the caller holds the
        writer lock, which every appender of a file takes)."""
        with NewFile(self.path, tag, like=self.path) as new:
            new.write(data)
            new.sync()
            if based_on is not None and (now := self.size()) != based_on:
                raise SessionChanged(self.path, "replaced", based_on, now)
            if before_swap is not None:
                before_swap()
            new.publish()

    def lock(self, timeout: float) -> WriterLock:
        lock = WriterLock(self.path, timeout)
        lock.acquire()
        return lock

    def mark(self) -> Mark | None:
        """The file's identity (device, inode) and size; None if no regular file has the
        name (missing, or a folder, FIFO or device: not a session)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return Mark((st.st_dev, st.st_ino), st.st_size)

    def open_watch(self, stop: StopFlag, timeout: float, poll: bool | None = None) -> FileWatch:
        """One watchfiles watcher over the folders of the sessions (and places) it is given,
        kept between waits (see `journal.storage.filewatch`)."""
        from .filewatch import FileWatch  # only a live tail waits; `import journal` stays light

        return FileWatch(stop, timeout, poll)

    def watch(self, since: Mark | None, timeout: float) -> Mark | None:
        """Wait for the file's mark to differ from `since` (an append, a replacement): inotify
        (through watchfiles) on its folder, re-checking at least every 50 ms, so a missed
        event costs a step, never the change. None on timeout."""
        deadline = time.monotonic() + timeout
        changed = self._changed(since)
        if changed is not None or timeout <= 0:
            return changed
        import watchfiles  # only waiting needs it; `import journal` stays light

        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            for _ in watchfiles.watch(folder, rust_timeout=WATCH_STEP_MS, yield_on_timeout=True,
                                      debounce=0, step=WATCH_STEP_MS, recursive=False,
                                      watch_filter=None, raise_interrupt=True):
                changed = self._changed(since)
                if changed is not None or time.monotonic() >= deadline:
                    return changed
        except (OSError, RuntimeError):
            pass
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, WATCH_STEP_MS / 1000))
            changed = self._changed(since)
            if changed is not None:
                return changed
        return self._changed(since)

    def _changed(self, since: Mark | None) -> Mark | None:
        now = self.mark()
        return now if now is not None and now != since else None
