"""SIGTERM handled as an interruption, so that `with` blocks and `finally` clauses run.

By default SIGTERM ends a Python process on the spot: a `journal tail -f` stopped by a service
manager leaves its registration as a follower behind (until it expires), the database demo
leaves its embedded server running. Inside `terminated_as_interrupted()` SIGTERM raises
SystemExit(143) in the main thread instead, which unwinds like Ctrl-C.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["terminated_as_interrupted"]


@contextmanager
def terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM raises SystemExit(128 + SIGTERM) while this is entered, once: later ones are
    ignored until it is left. Main thread only (a signal handler can be set nowhere else); a
    SIGTERM ignored on entry stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: object) -> None:
        # once: a second SIGTERM must not cut short the cleanup this one starts
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:  # the caller wants it ignored
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        yield
    finally:  # None: the handler was not set from Python; the default is what stood
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
