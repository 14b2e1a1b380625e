"""Progress of a long operation on one large file, counted in bytes.

A library function that may take seconds on a large file (`repair`, `rotate`) takes a
`progress` callback, called with (bytes done, bytes in all) every few megabytes and once at
the end with done == total. The library draws nothing; the command line draws a bar on
stderr when it is a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

Progress = Callable[[int, int], None]
"""Called with (done, total), in bytes, as an operation advances."""

STEP = 8 << 20
"""Bytes between two calls."""


class Meter:
    """Calls `callback` (if any) as `advance_to` passes each `STEP` of `total`."""

    def __init__(self, callback: Progress | None, total: int) -> None:
        self.callback = callback
        self.total = max(total, 0)
        # the next offset worth a call: never reached without a callback
        self.next = STEP if callback is not None else float("inf")

    def advance_to(self, done: int) -> None:
        if done >= self.next and self.callback is not None:
            self.callback(min(done, self.total), self.total)
            self.next = done + STEP

    def finish(self) -> None:
        if self.callback is not None:
            self.callback(self.total, self.total)


class MeteredReader:
    """A binary reader that moves `meter` on by the bytes read through it (for a copy
    loop such as `shutil.copyfileobj`)."""

    def __init__(self, raw: BinaryIO, meter: Meter) -> None:
        self.raw = raw
        self.meter = meter
        self.done = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.done += len(data)
        self.meter.advance_to(self.done)
        return data
