"""The file backend's standing watch (`Storage.open_watch`): one watcher for many sessions.

A `FileWatch` waits until `watchfiles` reports a change that concerns one of the sessions it
is given (or, in a folder given as a place, a file that may be a session), or until the
re-read interval passes, or until the caller's stop flag is set. Under the hood it is one
`watchfiles` watcher over the folders involved, kept open between waits (an append made
between two waits is still reported), re-created only when the set of folders changes: a
follow of a whole folder of sessions costs one watcher, not one per session. It picks
inotify, falls back to watchfiles polling, and, if no watcher works at all, to a plain
timer. `wait` blocks a thread; `wait_async` awaits on the event loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Collection, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import JournalError
from .mark import StopFlag

if TYPE_CHECKING:
    import watchfiles

__all__ = ["DEBOUNCE_MS", "POLL_DELAY_MS", "POLL_INTERVAL", "STEP_MS", "FileWatch"]

# logged under the live tail's name, its only user, which is what callers configure
log = logging.getLogger("journal.tail")

# watchfiles wakes up `STEP_MS` after the first change, or at most `DEBOUNCE_MS` after it when
# changes keep coming; together they bound the delivery latency with inotify.
STEP_MS = 5
DEBOUNCE_MS = 20
# Polling mode: watchfiles stats the folder every POLL_DELAY_MS, and the watch wakes up every
# POLL_INTERVAL whatever watchfiles saw (its mtime checks miss same-second appends).
POLL_DELAY_MS = 50
POLL_INTERVAL = 0.05
# watchfiles returns at least this often, so the watch can honour its own deadlines and wake
# once right after a watcher starts (appends made while it started sent no event).
_TICK_MS = 50


class Located(Protocol):
    """What the watch needs of a file session's `Storage`: its path."""

    @property
    def locator(self) -> str: ...


class FileWatch:
    """A standing wait over session files and folders (see the module docstring).

    `wait(storages, places)` returns True when one of `storages` (file sessions) may have
    changed, when a file that may be a session (`*.jsonl`) was modified in one of `places`
    (folders), when anything was added to or removed from a watched folder, or when the
    interval (`timeout`, at most POLL_INTERVAL when polling) has passed; False once `stop` is
    set. What changed is for the caller to find out (`Storage.mark`, its reader).
    """

    def __init__(self, stop: StopFlag, timeout: float, poll: bool | None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.stop = stop
        self.timeout = timeout
        self.may_fall_back = poll is None
        self.polling = _default_poll() if poll is None else poll
        self.timer_only = False
        self.dirs: tuple[str, ...] = ()
        self.paths: frozenset[str] = frozenset()
        self.places: frozenset[str] = frozenset()
        self.fresh = False
        self._gen: Iterator[set[tuple[watchfiles.Change, str]]] | None = None
        self._agen: AsyncIterator[set[tuple[watchfiles.Change, str]]] | None = None

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

    def _aim(self, storages: Collection[Located], places: Collection[str]) -> bool:
        """Take in what to watch now; whether the folders changed (a new watcher is needed)."""
        self.paths = frozenset(storage.locator for storage in storages)
        self.places = frozenset(places)
        dirs = {os.path.dirname(path) for path in self.paths} | self.places
        wanted = tuple(sorted(d for d in dirs if os.path.isdir(d)))
        if wanted == self.dirs:
            return False
        self.dirs = wanted
        return True

    def wants(self, change: watchfiles.Change, path: str) -> bool:
        """Whether a watchfiles change deserves a wake-up (other files' writes do not).

        Only a watcher calls this, so watchfiles is already loaded when it is imported here.
        """
        from watchfiles import Change

        if change != Change.modified:
            return True
        if os.path.dirname(path) in self.places:
            name = os.path.basename(path)
            return name.endswith(".jsonl") and not name.startswith(".")
        return path in self.paths

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

    def wait(self, storages: Collection[Located], places: Collection[str] = ()) -> bool:
        """Block until a wake-up (see the class docstring); False once `stop` is set."""
        if self.stop.is_set():
            return False
        if self._aim(storages, places):
            self.close()
        dirs = self.dirs
        deadline = time.monotonic() + self.interval
        while not self.timer_only and dirs:
            try:
                if self._gen is None:
                    import watchfiles  # only waiting needs it; `import journal` stays light

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

    async def wait_async(self, storages: Collection[Located],
                         places: Collection[str] = ()) -> bool:
        """`wait` on the running event loop, with `watchfiles.awatch`."""
        import asyncio  # loaded by the running event loop already; not at `import journal`

        if self.stop.is_set():
            return False
        if self._aim(storages, places):
            await self.aclose()
        dirs = self.dirs
        deadline = time.monotonic() + self.interval
        while not self.timer_only and dirs:
            try:
                if self._agen is None:
                    import watchfiles  # only waiting needs it; `import journal` stays light

                    self._agen = watchfiles.awatch(*dirs, **self.options())
                    self.fresh = True
                changes = await self._agen.__anext__()
            except StopAsyncIteration:
                self._agen = None
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

    def close(self) -> None:
        gen, self._gen = self._gen, None
        if gen is not None:
            gen.close()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        self.close()
        agen, self._agen = self._agen, None
        if agen is not None:
            await agen.aclose()  # type: ignore[attr-defined]


def _default_poll() -> bool:
    """Poll when WATCHFILES_FORCE_POLLING asks for it, as watchfiles itself does."""
    value = os.environ.get("WATCHFILES_FORCE_POLLING", "")
    return bool(value) and value.lower() not in ("false", "disable", "disabled")
