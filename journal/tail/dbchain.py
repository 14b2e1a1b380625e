"""Where database sessions live: the tail's catalog for the PostgreSQL backend.

The follower asks its catalog what a followed name is and where a sealed session goes on
(`journal.tail.chain.Catalog`). For a database the name is a session URL, there are no
folders to watch for new sessions, nothing is compressed or moved away, and a sealed session
goes on where its seal says (the `journal.successor` entry a database rotation appends, as a
file rotation does), or where its row's `successor` column says. Waiting is the backend's
standing watch (LISTEN/NOTIFY, `journal.pg.watch`). The driver is loaded only when a
database session is followed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable

from .. import codec
from ..errors import BrokenLineage, NotASession
from ..model import Entry
from ..pg.url import parse_url, session_url
from ..storage import StopFlag, Storage, Watch
from .chain import FollowTargets
from .source import Source

__all__ = ["DatabaseCatalog", "first_readable"]

log = logging.getLogger(__name__)


def first_readable(url: str) -> str:
    """The session `url` names, or, when its lines were moved out of the database to a file
    that is not here, the first of its successors that can be read here (a warning says
    so): where a tail of it can start."""
    from ..pg.storage import PostgresStorage

    storage = PostgresStorage.from_url(url)
    seen = {storage.session}
    while True:  # ends: every hop goes to a session not visited yet
        moved, after = storage.moved_out(), storage.successor()
        if moved is None or os.path.exists(moved.path) or after is None:
            break
        if (following := PostgresStorage.from_url(after)).session in seen:
            break
        log.warning("%s: moved out of the database to %s, which is not here; reading on from "
                    "its successor %s", storage.locator, moved.path, after)
        seen.add(following.session)
        sealed, storage = storage, following
        if storage.mark() is None:  # its row deleted out of band
            raise BrokenLineage(sealed.locator, storage.locator, storage.session)
    return storage.locator if storage.session != parse_url(url).session else url


class DatabaseCatalog:
    """Sessions in PostgreSQL databases, named by URL (see the module docstring)."""

    def storage(self, path: str) -> Storage:
        from ..pg.storage import PostgresStorage

        return PostgresStorage.from_url(path)

    @staticmethod
    def canonical(path: str | os.PathLike[str]) -> str:
        return parse_url(os.fspath(path)).url

    def resolve(self, path: str) -> tuple[str | None, list[str]]:
        if self.storage(path).mark() is None:
            raise NotASession(path, "no such session in the database")
        return None, [first_readable(path)]

    @staticmethod
    def exists(folder: str) -> bool:
        return False

    @staticmethod
    def sessions(folder: str) -> list[str]:
        return []

    def header(self, path: str) -> Entry | None:
        try:
            with self.storage(path).open_reader() as reader:
                first = reader.stream.readline()
        except NotASession:
            return None
        try:
            value = codec.loads(first) if first.endswith(b"\n") else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    @staticmethod
    def complete(path: str) -> bool:
        return True  # a commit is whole: a header is there entirely or not at all

    def generation(self, path: str) -> Hashable | None:
        mark = self.storage(path).mark()
        return mark.generation if mark is not None else None

    def successor(self, src: Source) -> tuple[str, str] | None:
        named = self.named_successor(src)
        if named is None:
            from ..pg.storage import PostgresStorage

            storage = src.storage
            if isinstance(storage, PostgresStorage):
                named = storage.successor()
        if named is None or self.storage(named).mark() is None:
            return None
        readable = first_readable(named)  # past successors moved out to files not here
        return readable, readable

    @staticmethod
    def named_successor(src: Source) -> str | None:
        data = (src.marker or {}).get("data")
        found = data.get("sessionId") if isinstance(data, dict) else None
        if not isinstance(found, str) or not found:
            return None
        return session_url(parse_url(src.path).conninfo, found)

    @staticmethod
    def copies(found: str, name: str) -> tuple[str, ...]:
        return (found,)

    @staticmethod
    def compressed(where: str) -> bool:
        return False

    @staticmethod
    def continues(path: str, sources: list[Source]) -> Source | None:
        return None  # no folder is followed: a successor is reached only through its seal

    @staticmethod
    def targets(sources: list[Source], root: str | None) -> FollowTargets:
        return FollowTargets(tuple(src.storage for src in sources), ())

    def open_watch(self, target: str, stop: StopFlag, timeout: float,
                   poll: bool | None) -> Watch:
        return self.storage(target).open_watch(stop, timeout, poll)
