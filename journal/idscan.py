"""Every entry id in a file, gathered in the background: after a fast resume, and in the
archived file a session continues.

A resumed session has read only the tail of its file, so a fresh id checked against what was
read could repeat an id further back. This scans the whole file once, in a thread, for
`"id":"xxxxxxxx"` fields and keeps them as integers; until it is done, new ids are checked
against the entries read, as before. The scan may also pick up 8-hex ids nested inside
messages: that only means a few ids are avoided that need not be.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import BinaryIO

from . import archivegz
from .archivegz import is_compressed
from .errors import JournalError
from .files import read_regular
from .pg.url import is_database_url
from .storage import FileStorage, Storage, as_storage

ID_FIELD = re.compile(rb'"id":"([0-9a-f]{8})"')
FIELD_LENGTH = len(b'"id":"01234567"')
BLOCK = 1 << 22


class IdScan:
    """A background scan of a session file's entry ids; `__contains__` once it is done."""

    def __init__(self, source: str | Storage | Callable[[], str | Storage | None]) -> None:
        """Scan the file `source` names (or the session a `Storage` holds, read through it); a
        callable is asked in the thread which session that is (finding it may read files or
        query a database too), and None means there is nothing to scan."""
        self._ids: set[int] | None = None
        self._thread = threading.Thread(target=self._scan, args=(source,), daemon=True,
                                        name="journal-id-scan")
        self._thread.start()

    def _scan(self, source: str | Storage | Callable[[], str | Storage | None]) -> None:
        try:
            found = source if isinstance(source, (str, Storage)) else source()
            self._ids = set() if found is None else entry_ids(found)
        except archivegz.UNREADABLE + (JournalError,):  # fresh ids then checked as before
            return

    @property
    def done(self) -> bool:
        return self._ids is not None

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return self.done

    def __contains__(self, entry_id: object) -> bool:
        ids = self._ids
        if ids is None or not isinstance(entry_id, str) or len(entry_id) != 8:
            return False
        try:
            return int(entry_id, 16) in ids
        except ValueError:
            return False


def entry_ids(source: str | Storage) -> set[int]:
    """The 8-hex ids of a session, as integers: a file's (compressed or not) scanned from its
    bytes, a database session's (a URL, `pg:<id>`, or its Storage) listed from its id column
    where the backend indexes them, else scanned from its bytes as read through the storage.

    Raises `JournalError` (or an archive's read error, `archivegz.UNREADABLE`) when the
    session cannot be read."""
    found = as_storage(source) if is_database_url(source) else source
    if isinstance(found, FileStorage):
        found = found.path  # an archive is read decompressed
    if isinstance(found, str):
        return scan_ids(found)
    ids_of = getattr(found, "entry_ids", None)
    if callable(ids_of):
        # a backend that indexes ids (PostgreSQL) lists them (None: not for this one)
        listed: set[int] | None = ids_of()
        if listed is not None:
            return listed
    with found.open_reader() as reader:
        return scan_stream(reader.stream)


def _decompressed(raw: BinaryIO, path: str) -> BinaryIO:
    """`raw` itself, or a reader of its decompressed bytes for an archive (`.gz`)."""
    return archivegz.reader(raw) if is_compressed(path) else raw


def scan_ids(path: str) -> set[int]:
    """The 8-hex ids in a session file (gzip-compressed or not), as integers. Reads in blocks
    (memory stays small), carrying a block's last bytes into the next so an id field split
    between blocks is still found."""
    with read_regular(path) as raw, _decompressed(raw, path) as f:
        return scan_stream(f)


def scan_stream(f: BinaryIO) -> set[int]:
    """The 8-hex ids in a session's bytes read from `f` (from where it stands), in blocks."""
    found: set[int] = set()
    carry = b""
    while block := f.read(BLOCK):
        data = carry + block
        found.update(int(m.group(1), 16) for m in ID_FIELD.finditer(data))
        carry = data[-(FIELD_LENGTH - 1):]
    return found
