"""Where a stored session stands, for waiting on change (`Storage.mark`, `Storage.watch`,
`Storage.open_watch`)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Mark:
    """Which version of the session (`generation`: a replacement starts a new one; for a file,
    its device and inode) and how many bytes it holds. Two marks differ when anything was
    appended or the whole was replaced, even by bytes of the same length."""

    generation: Hashable
    size: int


class StopFlag(Protocol):
    """What ends a standing watch (`Storage.open_watch`): `is_set()`, and `set()` for the
    watcher to call when it ends on its own (a `threading.Event`, say)."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...
