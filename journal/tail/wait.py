"""Waiting for the live tail: when the follower should read again.

The tail waits through the storage seam only: a waker holds one standing `Watch`
(`Storage.open_watch`, from the backend the followed sessions live in) and asks it to wait
on the storages of every followed session, plus the places (`FollowTargets.places`: folders,
for the file backend) where new sessions or successors may appear. The file backend's watch
(`journal.storage.filewatch`) is one `watchfiles` watcher for all of them: inotify, else
polling, else a plain timer. `Waker` blocks a thread; `AsyncWaker` awaits on the event loop.
The follower itself (`journal.tail.follow`) never waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ..storage import Watch
from ..storage.filewatch import DEBOUNCE_MS, POLL_DELAY_MS, POLL_INTERVAL, STEP_MS
from .chain import FollowTargets

__all__ = ["DEBOUNCE_MS", "POLL_DELAY_MS", "POLL_INTERVAL", "STEP_MS", "AsyncWaker", "Settable",
           "Stop", "StopSignal", "Waker"]


@runtime_checkable
class Settable(Protocol):
    """Anything with `is_set()`: a `threading.Event`, an `asyncio.Event`."""

    def is_set(self) -> bool: ...


StopSignal = Settable | Callable[[], bool] | None
"""A `threading.Event` / `asyncio.Event` (anything with `is_set()`), or a callable -> bool."""


class Stop:
    """The caller's `stop` as watchfiles wants it: `is_set()`, plus the `set()` awatch calls."""

    def __init__(self, stop: StopSignal) -> None:
        if stop is not None and not isinstance(stop, Settable) and not callable(stop):
            raise TypeError("stop must be an Event (with is_set()) or a callable returning bool")
        self._stop = stop
        self._set = False

    def is_set(self) -> bool:
        if self._set:
            return True
        stop = self._stop
        if stop is None:
            return False
        if isinstance(stop, Settable):
            return bool(stop.is_set())
        return bool(stop())

    def set(self) -> None:
        self._set = True


class Waker:
    """Blocks until the watch reports a change worth a read, or its interval passed."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def wait(self, targets: FollowTargets) -> bool:
        """Wait for a wake-up; False once `stop` is set."""
        return self.watch.wait(targets.storages, targets.places)

    def close(self) -> None:
        self.watch.close()


class AsyncWaker:
    """`Waker` for asyncio."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    async def wait(self, targets: FollowTargets) -> bool:
        return await self.watch.wait_async(targets.storages, targets.places)

    async def aclose(self) -> None:
        await self.watch.aclose()
