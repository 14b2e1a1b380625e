"""A second storage backend, for tests only: a session held in memory.

It implements the whole `journal.storage.Storage` protocol with the same guarantees as the
file backend, so the contract suite (test_storage_contract.py) and `Session` run on it
unchanged:

- the bytes live in a process-wide table keyed by the locator, so every `MemoryStorage` made
  with one locator is the same session (a reader, a second appender, a watcher);
- a commit goes to the "device" in pieces (`device_write`, which a test may make come up
  short, as a full disk does); a commit that is not taken whole is cut back before the error
  reaches the caller, so no fragment is ever followed by an acknowledged commit;
- a reader gets the bytes committed when it was opened; a replacement swaps the whole buffer
  and starts a new generation, so a reader sees the old bytes or the new, never a mix;
- the writer lock is a real `flock` on `<locator>.memlock`, so it excludes other processes
  (the contract's holder runs in one) and other handles in this process alike, and the
  holder's death releases it;
- `watch` waits on a condition that every commit and replacement notifies.
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import BinaryIO

from journal import Durability, codec
from journal.codec import Diagnostic, Line
from journal.errors import JournalError, LockTimeout, SessionChanged, SessionClosed, WriteFailed
from journal.storage import Mark, StopFlag, Storage

DEVICE_CHUNK = 1 << 16


def device_write(buffer: bytearray, data: memoryview) -> int:
    """Put up to one chunk of `data` at the end of `buffer`; return how much was taken. Tests
    replace it to make a commit come up short."""
    taken = data[:DEVICE_CHUNK]
    buffer += taken
    return len(taken)


@dataclass
class _Session:
    data: bytearray = field(default_factory=bytearray)
    generation: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)


_TABLE: dict[str, _Session] = {}
_TABLE_LOCK = threading.Lock()
_ANY_CHANGE = threading.Condition()
_CHANGES = [0]  # how many commits, replacements and creations so far, in any session


def _changed() -> None:
    with _ANY_CHANGE:
        _CHANGES[0] += 1
        _ANY_CHANGE.notify_all()


def _session(locator: str, *, create: bool = False) -> _Session:
    with _TABLE_LOCK:
        found = _TABLE.get(locator)
        if found is None:
            if not create:
                raise JournalError(f"{locator}: no such session in memory")
            found = _TABLE[locator] = _Session()
        return found


class MemoryReader:
    """The bytes committed when it was opened (`stream`, `lines`), and, for a live tail, the
    bytes its generation holds later (`read`, `extent`): a replacement gives the session a new
    buffer, so this reader keeps the one it opened."""

    def __init__(self, session: _Session) -> None:
        self._session = session
        self._buffer = session.data
        self._generation = session.generation
        self._stream = io.BytesIO(bytes(self._buffer))
        self._size = len(self._buffer)

    @property
    def generation(self) -> int:
        return self._generation

    def read(self, offset: int, length: int) -> bytes:
        with self._session.changed:
            return bytes(self._buffer[offset:offset + max(length, 0)])

    def extent(self) -> int:
        with self._session.changed:
            return len(self._buffer)

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

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> MemoryReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class MemoryAppender:
    def __init__(self, locator: str, session: _Session, durability: Durability | None) -> None:
        self.locator = locator
        self._session = session
        self.durability = durability or Durability.always()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def commit(self, data: bytes) -> int:
        if self._closed:
            raise SessionClosed(self.locator)
        if not data.endswith(b"\n"):
            raise JournalError("a commit is whole lines")
        session = self._session
        with session.changed:
            start = len(session.data)
            view, done = memoryview(data), 0
            while done < len(data):
                taken = device_write(session.data, view[done:])
                if taken <= 0:
                    del session.data[start:]  # roll back: no fragment stays
                    raise WriteFailed(self.locator, start,
                                      f"the store took {done} of {len(data)} bytes")
                done += taken
            session.changed.notify_all()
        _changed()
        return start

    def sync(self) -> None:
        """Memory is as durable as it gets here: nothing is pending."""

    def size(self) -> int:
        with self._session.changed:
            return len(self._session.data)

    def close(self) -> None:
        self._closed = True


class MemoryLock:
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class MemoryStorage:
    """A session in memory named `locator` (a path: its lock file is `<locator>.memlock`)."""

    def __init__(self, locator: str) -> None:
        self._locator = locator

    @property
    def locator(self) -> str:
        return self._locator

    def __repr__(self) -> str:
        return f"MemoryStorage({self._locator!r})"

    def _session(self) -> _Session:
        return _session(self._locator)

    def size(self) -> int:
        session = self._session()
        with session.changed:
            return len(session.data)

    def open_reader(self) -> MemoryReader:
        session = self._session()
        with session.changed:
            return MemoryReader(session)

    def open_appender(self, durability: Durability | None = None) -> MemoryAppender:
        return MemoryAppender(self._locator, self._session(), durability)

    def create(self, data: bytes) -> None:
        with _TABLE_LOCK:
            if self._locator in _TABLE:
                raise FileExistsError(f"{self._locator}: exists")
            _TABLE[self._locator] = _Session(bytearray(data))
        _changed()

    def publish(self, data: bytes, tag: str, before_swap: Callable[[], None] | None = None,
                *, based_on: int | None = None) -> None:
        session = self._session()
        if based_on is not None and len(session.data) != based_on:
            raise SessionChanged(self._locator, "replaced", based_on, len(session.data))
        replacement = bytearray(data)
        if before_swap is not None:
            before_swap()
        with session.changed:
            session.data = replacement
            session.generation += 1
            session.changed.notify_all()
        _changed()

    def lock(self, timeout: float) -> MemoryLock:
        fd = os.open(self._locator + ".memlock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return MemoryLock(fd)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockTimeout(self._locator, timeout, None) from None
                time.sleep(0.02)

    def mark(self) -> Mark | None:
        with _TABLE_LOCK:
            session = _TABLE.get(self._locator)
        if session is None:
            return None
        with session.changed:
            return Mark(session.generation, len(session.data))

    def watch(self, since: Mark | None, timeout: float) -> Mark | None:
        deadline = time.monotonic() + timeout
        while True:
            now = self.mark()
            if now is not None and now != since:
                return now
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with _TABLE_LOCK:
                session = _TABLE.get(self._locator)
            if session is None:
                time.sleep(min(left, 0.05))
                continue
            with session.changed:
                if Mark(session.generation, len(session.data)) == since:
                    session.changed.wait(left)

    def open_watch(self, stop: StopFlag, timeout: float, poll: bool | None = None) -> MemoryWatch:
        return MemoryWatch(stop, timeout)


class MemoryWatch:
    """A standing wait over every memory session: any commit, replacement or creation since
    the previous wait returned wakes it (they all count in `_CHANGES`)."""

    SLICE = 0.02  # how often the stop flag is looked at while waiting

    def __init__(self, stop: StopFlag, timeout: float) -> None:
        self.stop = stop
        self.timeout = timeout
        self.seen = -1  # the first wait returns at once (the protocol allows one such wake)

    def wait(self, storages: Collection[Storage], places: Collection[str] = ()) -> bool:
        deadline = time.monotonic() + self.timeout
        with _ANY_CHANGE:
            while not self.stop.is_set():
                if _CHANGES[0] != self.seen:
                    self.seen = _CHANGES[0]
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                _ANY_CHANGE.wait(min(left, self.SLICE))
        return False

    async def wait_async(self, storages: Collection[Storage],
                         places: Collection[str] = ()) -> bool:
        return await asyncio.to_thread(self.wait, storages, places)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
