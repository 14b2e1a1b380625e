"""SIGTERM handled as an interruption, so that `with` blocks and `finally` clauses run.

By default SIGTERM ends a Python process on the spot: a `journal pull` stopped by a service
manager leaves the files it wrote so far and its temp, a `journal tail -f` its registration
as a follower (until it expires), the database demo its embedded server running. Inside
`terminated_as_interrupted()` SIGTERM raises `Terminated` (a SystemExit(143)) in the main
thread instead, which unwinds like Ctrl-C. Every command line entry point runs its command
inside it (`journal.cli.app.run`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXIT_TERMINATED", "Terminated", "terminated", "terminated_as_interrupted"]

EXIT_TERMINATED = 128 + signal.SIGTERM
"""The exit status of a process ended by SIGTERM after cleaning up, as a shell reports one."""


class Terminated(SystemExit):
    """Raised in the main thread by a SIGTERM inside `terminated_as_interrupted()`."""

    def __init__(self) -> None:
        super().__init__(EXIT_TERMINATED)


_terminated = False


def terminated() -> bool:
    """Whether a SIGTERM arrived inside the latest outermost `terminated_as_interrupted()`:
    a library that catches the exception the handler raises (watchfiles turns it into a
    KeyboardInterrupt) cannot hide it from the exit status."""
    return _terminated


def _interrupted(signum: int, frame: object) -> None:
    global _terminated
    _terminated = True
    # once: a second SIGTERM must not cut short the cleanup this one starts (a handler that
    # does nothing, not SIG_IGN: an ignored signal stays ignored in the programs the cleanup
    # starts, which could then not be stopped by SIGTERM)
    signal.signal(signal.SIGTERM, _after_interrupted)
    raise Terminated()


def _after_interrupted(signum: int, frame: object) -> None:
    """SIGTERM again while the first one's cleanup runs: nothing."""


@contextmanager
def terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM raises `Terminated` (SystemExit(128 + SIGTERM)) while this is entered, once:
    later ones are ignored until it is left. Main thread only (a signal handler can be set
    nowhere else); a SIGTERM ignored on entry stays ignored; entered again inside itself, it
    changes nothing (the outer one owns the handler, so a SIGTERM that the inner one's
    cleanup is running for cannot be re-armed when the inner one is left)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    current = signal.getsignal(signal.SIGTERM)
    if current in (signal.SIG_IGN, _interrupted, _after_interrupted):  # ignored, or ours
        yield
        return
    global _terminated
    _terminated = False  # of this one: a SIGTERM an earlier one took says nothing here
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        yield
    finally:  # None: the handler was not set from Python; the default is what stood
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
