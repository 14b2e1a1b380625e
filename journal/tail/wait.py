"""Waiting for the live tail: when the follower should read again.

A waker blocks until `watchfiles` reports a change in a watched directory that concerns a
followed file, or until the re-read interval passes, or until the caller's `stop` is set.
It picks inotify, falls back to watchfiles polling, and, if no watcher works at all, to a
plain timer. `Waker` blocks a thread; `AsyncWaker` awaits on the event loop. The follower
itself (`journal.tail.follow`) never waits.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import JournalError

if TYPE_CHECKING:
    import watchfiles

# logged under the public module's name, which is what callers configure
log = logging.getLogger("journal.tail")

# watchfiles wakes up `STEP_MS` after the first change, or at most `DEBOUNCE_MS` after it when
# changes keep coming; together they bound the delivery latency with inotify.
STEP_MS = 5
DEBOUNCE_MS = 20
# Polling mode: watchfiles stats the directory every POLL_DELAY_MS, and the follower re-reads
# every POLL_INTERVAL whatever watchfiles saw (its mtime checks miss same-second appends).
POLL_DELAY_MS = 50
POLL_INTERVAL = 0.05
# watchfiles returns at least this often, so the follower can honour its own deadlines and
# re-read once right after a watcher starts (appends made while it started sent no event).
_TICK_MS = 50



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


class _WakerBase:
    """Chooses how to wait: inotify, watchfiles polling, or (if neither works) a plain timer."""

    def __init__(
        self, stop: Stop, timeout: float, poll: bool | None,
        wants: Callable[[watchfiles.Change, str], bool],
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.stop = stop
        self.timeout = timeout
        self.may_fall_back = poll is None
        self.polling = _default_poll() if poll is None else poll
        self.timer_only = False
        self.wants = wants
        self.dirs: tuple[str, ...] = ()
        self.fresh = False

    @property
    def interval(self) -> float:
        return min(self.timeout, POLL_INTERVAL) if self.polling else self.timeout

    def options(self) -> dict[str, Any]:
        return {
            "watch_filter": None,
            "debounce": DEBOUNCE_MS,
            "step": STEP_MS,
            "stop_event": self.stop,
            "rust_timeout": min(_TICK_MS, max(1, int(self.interval * 1000))),
            "yield_on_timeout": True,
            "force_polling": self.polling,
            "poll_delay_ms": POLL_DELAY_MS,
            "recursive": False,
            "ignore_permission_denied": True,
        }

    def failed(self, error: BaseException) -> None:
        """A watcher could not start or broke: poll instead, or fall back to a timer."""
        where = ", ".join(self.dirs)
        if not self.polling and self.may_fall_back:
            log.warning("cannot watch %s with inotify (%s); polling instead", where, error)
            self.polling = True
            return
        if not self.polling:
            raise JournalError(f"cannot watch {where} ({error}); retry with polling") from error
        log.warning("cannot watch %s (%s); re-reading every %gs", where, error, self.interval)
        self.timer_only = True

    def woke(self, changes: set[tuple[watchfiles.Change, str]], deadline: float) -> bool:
        """Whether what watchfiles returned is worth a read: a change to a followed file, the
        first tick of a new watcher, or the end of the interval."""
        if (
            time.monotonic() >= deadline
            or (not changes and self.fresh)
            or any(self.wants(change, path) for change, path in changes)
        ):
            self.fresh = False
            return True
        return False


class Waker(_WakerBase):
    """Blocks until something changed in a watched directory, or the interval passed."""

    _gen: Iterator[set[tuple[watchfiles.Change, str]]] | None = None

    def wait(self, dirs: tuple[str, ...]) -> bool:
        """Wait for a wake-up; False once `stop` is set."""
        if self.stop.is_set():
            return False
        if dirs != self.dirs:
            self.close()
            self.dirs = dirs
        deadline = time.monotonic() + self.interval
        while not self.timer_only and dirs:
            try:
                if self._gen is None:
                    import watchfiles  # only a live follow needs it; `import journal` stays light

                    self._gen = watchfiles.watch(*dirs, raise_interrupt=True, **self.options())
                    self.fresh = True
                changes = next(self._gen)
            except StopIteration:
                self._gen = None
                return False
            except (OSError, RuntimeError) as e:
                self.close()
                self.failed(e)
                continue
            if self.woke(changes, deadline):
                return True
        while (left := deadline - time.monotonic()) > 0:
            if self.stop.is_set():
                return False
            time.sleep(min(left, STEP_MS / 1000))
        return not self.stop.is_set()

    def close(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            gen.close()  # type: ignore[attr-defined]


class AsyncWaker(_WakerBase):
    """`Waker` for asyncio, on `watchfiles.awatch`."""

    _gen: AsyncIterator[set[tuple[watchfiles.Change, str]]] | None = None

    async def wait(self, dirs: tuple[str, ...]) -> bool:
        import asyncio  # loaded by the running event loop already; not at `import journal`

        if self.stop.is_set():
            return False
        if dirs != self.dirs:
            await self.aclose()
            self.dirs = dirs
        deadline = time.monotonic() + self.interval
        while not self.timer_only and dirs:
            try:
                if self._gen is None:
                    import watchfiles  # only a live follow needs it; `import journal` stays light

                    self._gen = watchfiles.awatch(*dirs, **self.options())
                    self.fresh = True
                changes = await self._gen.__anext__()
            except StopAsyncIteration:
                self._gen = None
                return False
            except (OSError, RuntimeError) as e:
                await self.aclose()
                self.failed(e)
                continue
            if self.woke(changes, deadline):
                return True
        while (left := deadline - time.monotonic()) > 0:
            if self.stop.is_set():
                return False
            await asyncio.sleep(min(left, STEP_MS / 1000))
        return not self.stop.is_set()

    async def aclose(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            await gen.aclose()  # type: ignore[attr-defined]


def _default_poll() -> bool:
    """Poll when WATCHFILES_FORCE_POLLING asks for it, as watchfiles itself does."""
    value = os.environ.get("WATCHFILES_FORCE_POLLING", "")
    return bool(value) and value.lower() not in ("false", "disable", "disabled")
