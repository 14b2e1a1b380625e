"""The peak of Python memory a call allocates (tracemalloc): how tests show that a session
is streamed, never held whole."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable


def peak_of(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
