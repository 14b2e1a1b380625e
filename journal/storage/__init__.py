"""The storage seam: the one narrow interface through which the writer and the readers reach
a session's bytes.

A session is an append-only sequence of complete JSON lines. Everything above this seam
(`Session`, `snapshot.load`/`resume`, rotation and repair planning) asks a `Storage` for
those bytes and never opens a session file itself, so a second backend (a database table,
say) plugs in by implementing these few operations with the same guarantees:

- `open_appender(durability)` -> `Appender`: `commit(data)` appends a batch of encoded lines
  as one unit and returns the offset it starts at. It is durable as the `Durability` policy
  says (synced before returning under `always`), and a commit that fails (a short write, a
  full store, a failed sync) is rolled back before the error (`WriteFailed`) reaches the
  caller: no fragment is ever followed by an acknowledged commit.
- `open_reader()` -> `Reader`: the committed bytes as of now, read forward from any offset
  (`lines`), backward from an offset just past a newline (`lines_backward`: how `resume`
  finds the live context without reading the whole session), or as a random-access binary
  `stream` for byte searches.
- `publish(data, tag, before_swap)`: replace the whole session atomically (repair,
  migration). Readers see the old bytes or the new ones, never a mix; on failure the old
  bytes stay. `before_swap` runs after the new bytes are durable and before they replace the
  old (repair keeps its quarantine and backup there); if it raises, nothing is replaced.
  With `based_on` (the size the replacement was made from), `SessionChanged` and nothing
  replaced if the session holds other than that many bytes by then (a writer without the
  lock appended: a database session's appenders need not hold its lease).
- `create(data)`: make a new session holding `data` (its header); refuses an existing one.
- `lock(timeout)` -> `Lock`: the exclusive writer lock, across processes and hosts sharing
  the store; raises `LockTimeout` naming the holder. Released by `Lock.release()`, and by the
  holder's death.
- `mark()` -> `Mark` and `watch(since, timeout)`: wait until the session's mark differs from
  `since` (an append, a replacement) and return the new mark, or None when `timeout` seconds
  pass first (a missing session has no mark: None).
- `open_watch(stop, timeout, poll)` -> `Watch`: a standing wait over many sessions of this
  backend at once, for the live tail (one per follow, however many sessions it follows; a
  thread per session would not do). `Watch.wait(storages, places)` blocks until one of the
  sessions may have changed, a session may have appeared in or left one of `places` (the
  backend's own notion of where sessions live: a folder for the file backend), or `timeout`
  seconds pass, and returns True; False once `stop` is set. It may wake without a change
  (the caller compares `mark()`s and reads), never sleeps through one that happened after
  the previous wait returned. `wait_async` is its asyncio twin; `close`/`aclose` end it.

For a reader that follows a live session (the tail), a `Reader` also reads past what it saw
at opening: `read(offset, length)` returns the bytes of *its* generation at `offset` (the
ones appended since included, as a positioned read: nothing moves), `extent()` is how many
bytes that generation holds now, and `generation` is which generation it reads (compare with
`mark().generation`: a reader keeps reading the replaced generation until it is closed, so
the tail reads an old version to its end before it moves to the new one).

Offsets are byte offsets into the session's encoded lines; a backend that stores rows keeps
an equivalent monotonic position. `FileStorage` (journal.storage.filesystem) is the first
backend; `as_storage` turns a path into one. `PostgresStorage` (journal.pg.storage) is the
second: `as_storage` turns a `postgresql://...?session=<id>` URL (or `pg:<id>` in the
database `JOURNAL_DATABASE_URL` names) into one.

`Session.create` and `Session.open` take any Storage as well as a path. What only a file has
when it is opened for writing (links and seals followed, an interrupted rotation finished,
crash temps removed, a second hard link refused, a torn tail quarantined, a version 1 or 2
file migrated) is done by the file backend's hook in `journal.session` (`_open_file`), so
another backend gets a working Session by implementing this protocol alone; its commits are
whole by contract, so it has no torn tail to cut. Rotation and lineage are file features.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Hashable, Iterator
from types import TracebackType
from typing import BinaryIO, Protocol, runtime_checkable

from ..codec import Diagnostic, Line
from ..durability import Durability
from ..pg.url import is_database_url
from .filesystem import FileStorage
from .mark import Mark, StopFlag

__all__ = ["Appender", "Continues", "FileStorage", "Lock", "Mark", "Reader", "StopFlag", "Storage",
           "Watch", "as_storage"]


class Lock(Protocol):
    """A held writer lock."""

    @property
    def held(self) -> bool: ...

    def release(self) -> None: ...


class Appender(Protocol):
    """The one writer's handle for appending (the caller holds the `Lock`)."""

    durability: Durability

    @property
    def closed(self) -> bool: ...

    def commit(self, data: bytes) -> int:
        """Append complete lines as one unit; return their start offset (see module doc)."""
        ...

    def sync(self) -> None:
        """Make every acknowledged commit durable now, whatever the policy."""
        ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class Reader(Protocol):
    """The committed bytes as of `open_reader()`; close it (or use it in `with`)."""

    @property
    def size(self) -> int: ...

    @property
    def stream(self) -> BinaryIO:
        """A seekable binary reader over the bytes (for byte searches and bulk parsing)."""
        ...

    def lines(self, start: int = 0, end: int | None = None) -> Iterator[Line | Diagnostic]:
        """Complete lines forward from `start`; a last fragment without newline is reported
        as a torn-tail Diagnostic."""
        ...

    def lines_backward(self, end: int) -> Iterator[Line]:
        """Complete lines backward from `end` (just past a newline); line numbers are 0."""
        ...

    @property
    def generation(self) -> Hashable:
        """Which generation of the session this reader reads (`Mark.generation`)."""
        ...

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes of this reader's generation at `offset`, appended since the
        reader was opened or not (fewer at its end); the stream's position does not move."""
        ...

    def extent(self) -> int:
        """How many bytes this reader's generation holds now (grows with appends; `size` is
        what it held at opening)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Reader: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """One session's bytes (see the module docstring for each operation's guarantees)."""

    @property
    def locator(self) -> str:
        """What names this session in messages (a file path for the file backend)."""
        ...

    def size(self) -> int: ...

    def open_reader(self) -> Reader: ...

    def open_appender(self, durability: Durability | None = None) -> Appender: ...

    def create(self, data: bytes) -> None: ...

    def publish(self, data: bytes, tag: str, before_swap: Callable[[], None] | None = None,
                *, based_on: int | None = None) -> None: ...

    def lock(self, timeout: float) -> Lock: ...

    def mark(self) -> Mark | None: ...

    def watch(self, since: Mark | None, timeout: float) -> Mark | None: ...

    def open_watch(self, stop: StopFlag, timeout: float, poll: bool | None = None) -> Watch:
        """A standing watch over any sessions of this backend (see the module docstring);
        `poll`: None lets the backend choose, True asks for polling, False refuses it."""
        ...


@runtime_checkable
class Continues(Protocol):
    """A backend that links a rotated lineage itself (PostgreSQL: the sealed stream's row
    names its successor). Files need no such method: a successor's header names the archived
    file it continues (`journal.lineage.parent_of`)."""

    def predecessor(self) -> Storage | None:
        """The sealed session this one continues, if any."""
        ...


class Watch(Protocol):
    """A standing wait over many sessions of one backend (`Storage.open_watch`)."""

    def wait(self, storages: Collection[Storage], places: Collection[str] = ()) -> bool: ...

    async def wait_async(self, storages: Collection[Storage],
                         places: Collection[str] = ()) -> bool: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


def as_storage(target: str | os.PathLike[str] | Storage) -> Storage:
    """`target` itself if it is a Storage; a database session for a `postgresql://` URL or
    `pg:<id>` (journal.pg.url; the driver is imported only then); else the file backend over
    that path."""
    if is_database_url(target):
        from ..pg.storage import PostgresStorage

        return PostgresStorage.from_url(target)
    if isinstance(target, (str, os.PathLike)):
        return FileStorage(os.fspath(target))
    if not isinstance(target, Storage):
        raise TypeError(f"a session is named by a path, a postgresql:// URL, pg:<id> or a "
                        f"Storage, not {type(target).__name__}")
    return target
