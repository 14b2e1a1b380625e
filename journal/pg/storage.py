"""The PostgreSQL backend of the storage seam: one session is one row of `journal.streams`
and one row of `journal.entries` per line (see `journal.pg.schema`).

Byte offsets are the file backend's, exactly: each line is stored verbatim (text, without its
newline) with the byte offset it would have in the session's file, so a `Reader` serves the
same bytes at the same offsets as the file would (`stream` is a seekable view fetching ranges
of rows on demand), and everything above the seam (`Session`, `load`, `resume`, repair
planning, the tail) works unchanged.

- A commit is one call of the server function `journal.append` (one round trip, one
  transaction; an appender without the lease that lost the race for the end to the lease
  holder calls it once more, locking the row first, `LOCKED_APPEND`): it locks the stream row,
  checks the writer's fencing epoch, finds the end from the session's last line, assigns the
  next gap-free positions and offsets, and inserts the batch; a batch that is already the
  session's last, with the same ids and bytes (a retry after a lost acknowledgement), is
  acknowledged at the offset it has, never stored twice. The writer holding the lease commits
  on the lease's own connection, where its advisory lock keeps every other writer out: a
  single plain entry goes there as `schema.APPEND_ONE` (sent through psycopg's libpq layer by
  `journal.pg.prepared`), an insert at the end the appender keeps track of that reads and
  locks no other row (nothing else changes the session's generation, epoch or seal without
  the lease's lock; what the holder's own transactions change, the appender learns from
  `Lease.turns`). If the
  connection is lost during a commit, the appender takes the lease back on a new connection
  (`Lease.renew`; failing that, it goes on on one of its own, fenced by the epoch through
  `journal.append`) and sends the same batch once more: it looks the batch up by its lines
  after where its last acknowledged batch ended (`FIND_BATCH`: another writer's line after it
  means it is no longer the session's last), and if it is not there, looks again and calls
  the function in a transaction that locks the stream row first (`_resend`): the lock waits
  for a first attempt still waiting for the row, and the primary key for one still running
  at that offset, so the batch is then found (acknowledged) or appended once. If that fails
  too, `WriteFailed`:
  the batch may have been committed (or may still be), and committing the same batch again as
  this process's next commit to the session stores it at most once. The stream row's size
  is set by batches, and by the writer at most once a second and on close; readers find a
  live session's end from its last line (`schema.STREAM_END`).
- Durability maps to `synchronous_commit` on the appender's connection: `always` is `on`
  (the commit returns once its WAL is flushed), `batch:N:MS` and `never` are `off` (the
  server flushes within a few hundred milliseconds; under `batch` the appender also forces a
  flush after N commits or MS milliseconds, and `sync()` forces one at any time).
- `lock` takes the session's lease (`journal.pg.lease`); an appender opened from the storage
  that holds it commits on the lease's connection (its advisory lock fencing them: no
  takeover while it lives) and, off it, through `journal.append` with its epoch, refused
  with `LeaseLost` once another writer took over. (An appender opened without the lease is
  not fenced, and always calls `journal.append`.)
- `publish` writes the replacement as a new generation (COPY), runs `before_swap`, and makes
  it current in one transaction; the generation before stays readable for readers that still
  read it, older ones are removed. Under the storage's lease it runs on the lease's
  connection (taken back first if it was lost): what `before_swap` writes there (repair's
  quarantine) commits with the replacement or not at all, and no second connection of this
  process waits for the row lock the replacement holds. With `based_on`, it first checks
  under the row lock that the session still has the size the replacement was made from
  (`current_end`; an appender without the lease is not fenced): else `SessionChanged`.
- An archive moved out of the database (`journal.pg.rotation.move_out`) has no rows: its
  reader serves the bytes of the `.jsonl.gz` its row names, where that file can be read (the
  machine that moved it, or a shared folder), and says where the file is where it cannot.
- `mark` and `watch` poll the stream row and the session's last line; `open_watch` waits on
  LISTEN/NOTIFY (`journal.pg.watch`), or with `poll=True` polls the stream rows and last
  lines (one query for all).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, TypeVar

import orjson
import psycopg

from .. import archivegz, codec
from ..codec import Diagnostic, Line
from ..durability import Durability, SyncClock
from ..errors import (
    ArchiveElsewhere,
    CommitsLost,
    GenerationGone,
    JournalError,
    LeaseLost,
    LockTimeout,
    NoSpace,
    SessionChanged,
    SessionClosed,
    SessionSealed,
    WriteFailed,
)
from ..files import NO_SPACE_ERRNOS, free_bytes
from ..storage.mark import Mark, StopFlag
from . import schema
from .connect import (
    LONG_READS,
    DatabaseError,
    DatabaseUnavailable,
    connect,
    connection_lost,
    describe,
    in_transaction,
    with_shared,
)
from .lease import RENEW_WAIT, Lease, acquire, advisory_key, current_holder, gate_key
from .prepared import Prepared
from .url import SessionUrl, no_such_session, parse_url, session_url
from .watch import ANNOUNCE_LAG, PgWatch

__all__ = ["MovedOut", "PostgresAppender", "PostgresReader", "PostgresStorage", "PostgresWatch",
           "current_end"]

log = logging.getLogger(__name__)
T = TypeVar("T")

POLL_INTERVAL = 0.02
# The arrays go as array literals made here (`text_array`): two C-level replaces per line
# cost less than psycopg's per-call adaptation of five Python lists (about 12 us a commit,
# bench/pg_append_micro.py), and the server parses a one-element literal for next to nothing.
# With the offset, the generation the session was at when the statement began (the batch is
# in it unless a replacement committed while the call waited for the row: it then names a
# generation the session never returns to, and the floor it records is not used, `FIND_BATCH`).
APPEND_CALL = ("SELECT journal.append(%s, %s, %s::text[], %s::text[], %s::text[], "
               "%s::text[], %s::bigint[], %s, %s)")
APPEND = APPEND_CALL + ", (SELECT generation FROM journal.streams WHERE session = %s)"
COMMIT_ATTEMPTS = 2
# `PostgresStorage.extend_in` sends a grown file's new lines in batches of about this many
# bytes (the arrays of one call are built whole in the server's memory)
EXTEND_BATCH = 4 << 20
# journal.append called once the session's append gate is held against the lease holder's
# one-entry statement (`lease.gate_key`: it takes the gate shared, so it waits for this) and
# the stream row locked, in one statement: for a call that lost the race for the end
# (`_append`). No row: no such session (the plain call then says so).
# (The row's subquery refers to the gate's, so the gate is taken first whatever the plan.)
LOCKED_APPEND = APPEND + (" FROM (SELECT pg_advisory_xact_lock(%s) IS NULL AS taken) AS gate "
                          "CROSS JOIN LATERAL (SELECT 1 FROM journal.streams WHERE session = %s "
                          "AND gate.taken IS NOT NULL FOR UPDATE) AS locked")
# The append gate taken and the stream row locked for a re-sent batch's second look-up and
# call (`_resend`).
LOCK_STREAM = ("SELECT pg_advisory_xact_lock(%s) FROM journal.streams WHERE session = %s "
               "FOR UPDATE")
# Where a batch sent before without a known outcome is, in a live session's current
# generation: (the generation; the offset from which every line of it is stored in order;
# the offset of an entry with its first id and line, whatever follows it; the offset of the
# session's last line), looked for at or after the offset it cannot start before while the
# session is in the same generation (from the start if it is not). No row: no live session.
FIND_BATCH = (
    "WITH s AS (SELECT id, generation, CASE WHEN generation = %(generation)s "
    "THEN %(floor)s ELSE 0 END AS floor FROM journal.streams "
    "WHERE session = %(session)s AND successor IS NULL AND generation IS NOT NULL), "
    "first AS (SELECT e.byte_offset FROM s JOIN journal.entries e ON e.stream = s.id "
    "AND e.generation = s.generation WHERE e.byte_offset >= s.floor AND e.id = %(id)s "
    "AND e.line = %(line)s) "
    "SELECT s.generation, (SELECT f.byte_offset FROM first f WHERE ARRAY(SELECT n.line "
    "FROM journal.entries n WHERE n.stream = s.id AND n.generation = s.generation "
    "AND n.byte_offset >= f.byte_offset ORDER BY n.byte_offset LIMIT %(count)s) "
    "= %(lines)s::text[] ORDER BY f.byte_offset LIMIT 1), (SELECT min(byte_offset) FROM first), "
    "(SELECT max(e.byte_offset) FROM journal.entries e WHERE e.stream = s.id "
    "AND e.generation = s.generation) FROM s")
# How long a re-sent batch's transaction may hold the stream row idle between its statements
# (a stalled client would otherwise hold every writer of the session).
RESEND_IDLE_LIMIT = "5s"
# seconds between two settings of the stream row's size by a writer committing one entry at a
# time (`PostgresAppender._settle`): one statement a second, whatever the rate of commits
SETTLE_INTERVAL = 1.0
UNCONFIRMED_OUTCOME = ("it may have been committed, or may still be: committing the same "
                       "batch again stores it at most once (a Session, which gives each "
                       "append a new id, cannot: open the session again and look for the "
                       "entry named)")
# ... of a batch whose first entry has no id: not recognised when sent again
UNRECOGNISED_OUTCOME = ("it may have been committed, or may still be: read the session before "
                        "committing it again (a batch whose first entry has no id is not "
                        "recognised when sent again)")
# A commit refused while an earlier one to the session has no known outcome (`_UNCONFIRMED`)
UNSURE_OUTCOME = ("this commit stored nothing, but an earlier commit to this session has no "
                  "known outcome: if this batch is that one sent again, it may have been "
                  "committed, or may still be")
RESENT_NOTE = ("an earlier attempt of this batch lost its connection and may have been "
               "committed before that")
UNSURE_NOTE = ("this commit appended nothing, but an earlier commit to this session has no "
               "known outcome and may have been committed before that")
# Notes of SessionSealed for a batch that may have landed before the seal
UNSURE_SEALED = ("but an earlier commit to this session has no known outcome: if this batch is "
                 "that one, sent again, it may be in this session already, and in its "
                 "successor if the rotation kept it; look there before writing it again")
RESENT_SEALED = ("but an earlier attempt of this batch lost its connection: it may be in this "
                 "session already, and in its successor if the rotation kept it; look there "
                 "before writing it again")
# The outcome of an empty commit whose connection was lost
EMPTY_OUTCOME = "it held no entries: nothing of it can have been stored"
# ... of a look-up's refusal after this commit's first attempt lost its connection
FIRST_ATTEMPT_OUTCOME = ("its first attempt lost its connection, and may have been committed, "
                         "or may still be")
REFUSED_OUTCOME = "nothing of it was stored, and the session is as it was"
# A flush (`sync`) that failed: the commits before it were made; under `synchronous_commit`
# off the server writes their log out itself within a fraction of a second
SYNC_OUTCOME = ("the commits acknowledged before it are stored, and durable once the server "
                "has written its log out (on its own within a second, unless it stops first)")
# Sessions (conninfo, session) this process committed to without learning the end of the
# commit (its connection was lost, or the commit was interrupted): their next commit goes
# through journal.append.
_UNCONFIRMED: set[tuple[str, str]] = set()
READ_AHEAD = 1 << 20
RESUME_READ_AHEAD = 64 << 20


@dataclass
class Batch:
    """Encoded lines split for the database: text, entry columns, offsets within the batch."""

    lines: list[str]
    ids: list[str | None]
    parents: list[str | None]
    types: list[str | None]
    offsets: list[int]
    total: int
    kept: str | None = None
    """The firstKeptEntryId of the batch's last compaction."""

    def kept_offset(self) -> int | None:
        """The offset (in the batch) of the last entry with the id `kept`."""
        if self.kept is None:
            return None
        found = [o for o, i in zip(self.offsets, self.ids, strict=True) if i == self.kept]
        return found[-1] if found else None


def check_storable(locator: str, at: int, data: bytes) -> None:
    """WriteFailed (at offset `at` of the session `locator`) unless `data` is whole lines a
    text column can hold: no NUL byte, valid UTF-8."""
    if data and not data.endswith(b"\n"):
        raise WriteFailed(locator, at, "a commit must be whole lines (no newline at its end)")
    if b"\x00" in data:
        raise WriteFailed(locator, at, "a NUL byte cannot be stored in a text column")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WriteFailed(locator, at, f"not valid UTF-8 at byte {e.start}") from e


def split_batch(locator: str, at: int, data: bytes) -> Batch:
    """`data` (complete lines) as rows; WriteFailed for bytes a text column cannot hold."""
    check_storable(locator, at, data)
    lines: list[str] = []
    ids: list[str | None] = []
    parents: list[str | None] = []
    types: list[str | None] = []
    offsets: list[int] = []
    offset = 0
    kept: str | None = None
    for raw in data.split(b"\n")[:-1]:
        lines.append(raw.decode("utf-8"))
        offsets.append(offset)
        offset += len(raw) + 1
        try:
            value = codec.loads(raw)  # as readers parse it: lone surrogate escapes too
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            ids.append(_text(value.get("id")))
            parents.append(_text(value.get("parentId")))
            types.append(_text(value.get("type")))
            if value.get("type") == "compaction":
                kept = _text(value.get("firstKeptEntryId"))
        else:
            ids.append(None)
            parents.append(None)
            types.append(None)
    return Batch(lines, ids, parents, types, offsets, offset, kept)


@dataclass(frozen=True)
class MovedOut:
    """Where a session moved out of the database is (`journal.pg.rotation.move_out`)."""

    path: str
    sha256: str
    """Of the session's bytes (not of the gzip file)."""
    generation: int


def text_array(values: Sequence[str | None]) -> str:
    """`values` as a PostgreSQL array literal: each element double-quoted with its backslashes
    and double quotes escaped (inside quotes nothing else is special), None as NULL."""
    return "{" + ",".join(
        "NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for v in values) + "}"


def _text(value: object) -> str | None:
    """A string field as a column's value; None for anything else, and for a string a text
    column cannot hold (a lone surrogate: the line itself keeps its escape)."""
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _last_of(batch: Batch, kind: str) -> int | None:
    found = [offset for offset, t in zip(batch.offsets, batch.types, strict=True) if t == kind]
    return found[-1] if found else None


class RangeStream(io.RawIOBase):
    """A seekable, read-only byte view of one generation, `limit` bytes long, fetching the
    rows that cover each read (see `PostgresReader`)."""

    def __init__(self, reader: PostgresReader, limit: int) -> None:
        super().__init__()
        self._reader = reader
        self._limit = limit
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._limit}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def close(self) -> None:
        # the stream is often all a caller keeps of its reader (`snapshot.open_for_reading`):
        # closing it lets go of what the reader holds (a moved-out archive's unpacked copy)
        if not self.closed:
            self._reader.release()
        super().close()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._limit - self._pos)
        if want <= 0:
            return 0
        data = self._reader.fetch(self._pos, want, self._limit)
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)


class PostgresReader:
    """The committed bytes of one generation of a session as of `open_reader()`."""

    def __init__(self, storage: PostgresStorage, stream_id: int, generation: int, size: int,
                 resume_from: int | None, moved: MovedOut | None = None) -> None:
        self._storage = storage
        self._moved = moved
        self._stream_id = stream_id
        self._generation = generation
        self._size = size
        self._resume_from = resume_from
        self._stream: io.BufferedReader | None = None
        self._cached: list[tuple[int, bytes]] = []
        self._final_extent: int | None = None
        self._unpacked: IO[bytes] | None = None  # a moved-out archive's bytes (`_unpack`)

    @property
    def size(self) -> int:
        return self._size

    @property
    def stream(self) -> io.BufferedReader:
        if self._stream is None:
            self._stream = io.BufferedReader(RangeStream(self, self._size), 1 << 16)
        return self._stream

    def lines(self, start: int = 0, end: int | None = None) -> Iterator[Line | Diagnostic]:
        return codec.iter_lines(self.stream, start, end)

    def lines_backward(self, end: int) -> Iterator[Line]:
        return codec.iter_lines_reverse(self.stream, end)

    @property
    def generation(self) -> int:
        return self._generation

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return self.fetch(offset, length, None)

    def extent(self) -> int:
        if self._final_extent is not None:
            return self._final_extent
        stream, generation = self._stream_id, self._generation

        def query(conn: psycopg.Connection[Any]) -> int:
            last = conn.execute(
                "SELECT byte_offset + octet_length(line) + 1 FROM journal.entries "
                "WHERE stream = %s AND generation = %s ORDER BY byte_offset DESC LIMIT 1",
                (stream, generation)).fetchone()
            if last is not None:
                return int(last[0])
            # no rows: moved out (the row keeps its size), a replaced generation's rows gone
            # (-1), or the session itself gone (0: nothing more to read)
            row = conn.execute("SELECT generation, size FROM journal.streams WHERE id = %s",
                               (stream,)).fetchone()
            if row is None:
                return 0
            return int(row[1]) if int(row[0]) == generation else -1

        found = with_shared(self._storage.conninfo, query)
        if found < 0:
            raise GenerationGone(self._storage.locator,
                                 moved_out=self._storage.moved_out() is not None)
        fresh = self._storage.current_generation()
        if fresh != generation:
            self._final_extent = found  # a replaced generation grows no more
        return found

    def fetch(self, offset: int, length: int, limit: int | None) -> bytes:
        """Up to `length` bytes at `offset` (not past `limit`), from the rows covering them.

        Reads of the stream (`limit` set) read ahead: the last block of the session is read
        from the resume hint (the earliest of where the latest compaction's kept entries
        start, the latest model change and thinking-level change), so a resume reads its tail
        in one query; a read just before the previous one (a backward scan) takes READ_AHEAD
        bytes before it. The two latest ranges are kept (the header and the tail, during a
        resume)."""
        end = offset + length if limit is None else min(offset + length, limit)
        if end <= offset:
            return b""
        for first, data in self._cached:
            if first <= offset and end <= first + len(data):
                return data[offset - first:end - first]
        start = offset
        if limit is not None:
            hint = self._resume_from
            backwards = any(first == end for first, _ in self._cached)
            if (hint is not None and end == limit and hint < offset
                    and limit - hint <= RESUME_READ_AHEAD):
                start = hint
            elif backwards:
                start = max(0, offset - READ_AHEAD)
        first, data = self._rows(start, end)
        self._cached = [(first, data), *self._cached[:1]]
        lo = offset - first
        hi = min(offset + length, first + len(data)) - first
        if limit is not None:
            hi = min(hi, limit - first)
        return data[lo:max(lo, hi)]

    def _rows(self, start: int, end: int) -> tuple[int, bytes]:
        """The bytes of the rows that cover [start, end): where the first begins, and them."""
        if self._moved is not None:
            return start, self._from_archive(self._moved, start, end)
        stream, generation = self._stream_id, self._generation

        def query(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            cur = conn.cursor(binary=True)
            return cur.execute(
                "SELECT byte_offset, convert_to(line, 'UTF8') FROM journal.entries "
                "WHERE stream = %(s)s AND generation = %(g)s AND byte_offset >= coalesce(("
                "SELECT max(byte_offset) FROM journal.entries WHERE stream = %(s)s AND "
                "generation = %(g)s AND byte_offset <= %(o)s), 0) AND byte_offset < %(e)s "
                "ORDER BY byte_offset", {"s": stream, "g": generation, "o": start, "e": end}
            ).fetchall()

        rows = with_shared(self._storage.conninfo, query)
        if not rows:
            # moved out of the database while this reader read it? (a reader of rows past
            # its size reads on, as a tail does: then the rows of the seal appended since)
            self._moved = self._storage.moved_out()
            if self._moved is not None:
                return start, self._from_archive(self._moved, start, end)
            if start < self._size and self._replaced():
                # rows this reader's generation had are gone: ending here would cut the
                # session short without a word
                raise GenerationGone(self._storage.locator, moved_out=False)
            return start, b""
        parts: list[bytes] = []
        for _, raw in rows:
            parts.append(bytes(raw))
            parts.append(b"\n")
        return int(rows[0][0]), b"".join(parts)

    def _replaced(self) -> bool:
        """Whether the session's generation is another than this reader's (a session
        deleted since is not: its reader ends where its rows do, as a tail of it does)."""
        now = self._storage.current_generation()
        return now is not None and now != self._generation

    def _from_archive(self, moved: MovedOut, start: int, end: int) -> bytes:
        """Bytes [start, end) of the session (fewer past its end), read from the archive it
        was moved out to."""
        if self._unpacked is None:
            self._unpacked = self._unpack(moved)
        parts: list[bytes] = []
        while start < end:  # one pread gives at most about 2 GiB
            part = os.pread(self._unpacked.fileno(), end - start, start)
            if not part:
                break
            parts.append(part)
            start += len(part)
        return b"".join(parts)

    def _unpack(self, moved: MovedOut) -> IO[bytes]:
        """The archive's bytes, unpacked a chunk at a time into a temporary file (an archive
        may be long) and checked there against the SHA-256 recorded when it moved out: all
        of them, of which this reader serves its first `size` (opened before the rotation's
        seal, it has fewer). JournalError naming the file where it cannot be read here, or
        does not hold the session's bytes."""
        locator, path = self._storage.locator, moved.path
        if moved.generation != self._generation:
            raise GenerationGone(locator, moved_out=True)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            raise ArchiveElsewhere(locator, path) from None
        except OSError as e:
            raise JournalError(f"{locator}: an archive moved out of the database to {path}, "
                               f"which cannot be read ({e})") from e
        unpacked: IO[bytes] | None = None
        try:
            try:
                unpacked = tempfile.TemporaryFile(prefix="journal-archive-")
                digest = archivegz.unpack(f, unpacked)
                unpacked.flush()
            except OSError as e:
                if e.errno in NO_SPACE_ERRNOS:  # reading does not fill a disk: the copy did
                    folder = tempfile.gettempdir()
                    raise NoSpace(os.path.join(folder, "journal-archive-*"), self._size,
                                  free_bytes(folder)) from e
                raise JournalError(f"{locator}: an archive moved out of the database to "
                                   f"{path}, which cannot be read ({e})") from e
            except archivegz.DAMAGE as e:
                raise JournalError(f"{locator}: an archive moved out of the database to "
                                   f"{path}, which cannot be read ({e})") from e
            if digest.sha256 != moved.sha256 or digest.size < self._size:
                raise JournalError(f"{locator}: an archive moved out of the database to "
                                   f"{path}, which no longer holds the bytes it was moved "
                                   "out with")
        except BaseException:
            if unpacked is not None:
                unpacked.close()
            raise
        finally:
            f.close()
        return unpacked

    def release(self) -> None:
        """Let go of a moved-out archive's unpacked copy (made again if read again)."""
        if self._unpacked is not None:
            self._unpacked.close()
            self._unpacked = None
        self._cached = []

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self.release()

    def __enter__(self) -> PostgresReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class End:
    """Where a session's current generation ends, as its writer knows it."""

    stream: int
    generation: int
    size: int
    entries: int
    last_id: str | None

    def after(self, batch: Batch) -> End:
        return End(self.stream, self.generation, self.size + batch.total,
                   self.entries + len(batch.lines),
                   batch.ids[-1] if batch.lines else self.last_id)


@dataclass(frozen=True)
class Lookup:
    """A live session's generation, where a batch looked for is stored in it (None: not
    found), and the offset of its last line then."""

    generation: int
    at: int | None
    last: int


class PostgresAppender:
    """The writer's handle. With the session's lease it commits on the lease's connection
    (its advisory lock fencing every commit there, the epoch every batch), one plain entry as
    `schema.APPEND_ONE` at the end it keeps track of; without it, on a connection of its
    own, unfenced."""

    def __init__(self, storage: PostgresStorage, durability: Durability | None,
                 lease: Lease | None) -> None:
        self.storage = storage
        self.durability = durability or Durability.always()
        self.lease = lease
        self.epoch = lease.epoch if lease is not None else None
        self._clock = SyncClock(self.durability)
        # the synchronous_commit of its commits: the durability policy's
        self._synchronous = "on" if self.durability.every == 1 else "off"
        self._cursor: psycopg.Cursor[Any] | None = None
        self._one = Prepared(b"journal_append_one", schema.APPEND_ONE, schema.APPEND_ONE_TYPES)
        self._looking = Prepared(b"journal_append_looking", schema.APPEND_LOOKING,
                                 schema.APPEND_LOOKING_TYPES)
        # whether the session was followed when a one-entry commit last looked, and when the
        # next one looks again (monotonic): until then the commits announce themselves or not
        # as that one found (`schema.APPEND_ONE`)
        self._followed = False
        self._look_at = 0.0
        self._gate = gate_key(storage.session)
        self._reconnecting = threading.Lock()
        # without a lease, the appender's own connection does one piece of work at a time
        # (a re-send's transaction spans statements: another thread's would run inside it)
        self._busy = threading.RLock()
        self._end: End | None = None  # known on the lease's connection only
        self._end_turn = 0  # the lease's `turns` when the end was read
        # where this appender's last acknowledged batch ended, and in which generation: no
        # later batch starts before it (while the session is in that generation)
        self._floor: tuple[int | None, int] = (None, 0)
        # its connection was made again while commits awaited a flush (batch, never): the
        # server may have stopped and lost them, which the next commit or sync looks at
        # (`_check_floor`) before anything else
        self._floor_unsure = False
        # its last acknowledged line (generation, offset, text), which the check looks for
        self._last_line: tuple[int | None, int, str] | None = None
        self._lost: CommitsLost | None = None  # once found, for good
        self._moved = False  # committed since the stream row's size was last set
        self._settle_at = 0.0  # when the stream row's size is next set (monotonic)
        self._conn: psycopg.Connection[Any] | None = None
        with self._turn():  # a renewal of the lease's connection is one at a time
            self._conn = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        """The lease's connection (taken again if it was lost, `Lease.renew`), else one of
        the appender's own: where the lease's cannot be had back, the epoch alone fences."""
        self._end = None
        self._look_at = 0.0  # its first one-entry commit looks (and prepares both statements)
        lease = self.lease
        if lease is not None and (lease.held or lease.renew(RENEW_WAIT)):
            conn = lease.conn
        else:
            conn = connect(self.storage.conninfo, synchronous_commit=self._synchronous)
        # An appender runs the same two statements all its life: prepared on first use (not
        # the fifth), the one-entry statement is planned 6 times in a new appender's first
        # commits, not 11. Forcing generic plans (plan_cache_mode) would plan it once, but
        # would also plan journal.append's searches of a recent offset range for any offset:
        # a scan of the whole session at every compaction.
        conn.prepare_threshold = 0
        return conn

    @property
    def closed(self) -> bool:
        return self._conn is None

    @property
    def synchronous_commit(self) -> str:
        """The server's `synchronous_commit` for this appender's commits (`on` or `off`)."""
        return self.setting("synchronous_commit")

    def setting(self, name: str) -> str:
        """A server setting of the connection this appender commits on, as SHOW gives it."""
        query = psycopg.sql.SQL("SHOW {}").format(psycopg.sql.Identifier(name))
        row = self._on_live(lambda conn: conn.execute(query).fetchone())
        return str(row[0]) if row is not None else ""

    def commit(self, data: bytes) -> int:
        """Append `data` (complete lines) as one unit; return the offset it starts at."""
        locator = self.storage.locator
        if self._conn is None:
            raise SessionClosed(locator)
        try:
            batch = split_batch(locator, 0, data)
        except WriteFailed as e:
            raise WriteFailed(locator, self.storage.size_or(0), e.reason) from None
        # A session this process committed to without learning the outcome goes through
        # journal.append (which acknowledges a batch already stored) until a commit confirms.
        key = (self.storage.conninfo, self.storage.session)
        known = bool(batch.lines) and batch.ids[0] is not None
        one = (len(batch.lines) == 1 and batch.types[0] not in schema.RESUME_TYPES
               and known and key not in _UNCONFIRMED)
        # a batch is recognised on a retry by its first entry's id: without one it is sent
        # once only
        attempts = COMMIT_ATTEMPTS if known else 1
        with self._turn():
            return self._commit(batch, key, one, attempts)

    def _turn(self) -> contextlib.AbstractContextManager[Any]:
        """The lock that gives the connection one piece of work at a time: the lease's
        `busy` (its appenders share its connection), or without a lease, this appender's."""
        return self.lease.busy if self.lease is not None else self._busy

    def _commit(self, batch: Batch, key: tuple[str, str], one: bool, attempts: int) -> int:
        """`commit`'s attempts, with the lease's connection this appender's.

        `lost`: an attempt sent the batch and lost its connection before the outcome came
        (it may have been committed, or may still be); an attempt that could not reach the
        database (`DatabaseUnavailable`, from making the connection) sent nothing."""
        locator = self.storage.locator
        lost: BaseException | None = None
        unreached: BaseException | None = None
        # an earlier commit to the session has no known outcome: this may be it, sent again
        # (an empty commit never is)
        unsure = bool(batch.lines) and key in _UNCONFIRMED
        recognisable = bool(batch.lines) and batch.ids[0] is not None
        for _ in range(attempts):
            sending = False  # nothing of this attempt has left yet
            try:
                conn = self._live()
                self._check_floor()
                sending = True
                if self._cursor is None or self._cursor.connection is not conn:
                    self._cursor = conn.cursor()  # kept: one less object per commit
                at = (self._commit_one(conn, batch) if one and not unsure and lost is None
                      else None)
                if at is not None:
                    assert self._end is not None
                    generation: int | None = self._end.generation
                elif (lost is not None or unsure) and recognisable:
                    self._end = None  # others may have written since: learnt again
                    at, generation = self._resend(conn, batch)
                    self._moved = False
                else:
                    before, self._end = self._end, None
                    at, generation = self._append(self._cursor, batch)
                    if before is not None and at == before.size:
                        self._end = before.after(batch)
                    self._moved = False
            except psycopg.Error as e:
                self._end = None
                # a lost connection (whatever the error: the server's idle-in-transaction
                # timeout ends it with an InternalError) is tried again; else a refusal
                if self._conn is not None and not connection_lost(self._conn, e):
                    raise self._refused(e, resent=lost is not None, unsure=unsure) from e
                lost = e
                continue
            except DatabaseUnavailable as e:
                unreached = e
                continue
            except DatabaseError as e:  # a new connection refused: this attempt sent nothing
                if lost is None and not unsure:
                    raise
                if not batch.lines:
                    raise WriteFailed(locator, -1, _first_line(e), EMPTY_OUTCOME) from e
                _UNCONFIRMED.add(key)
                raise WriteFailed(locator, -1, _first_line(e), FIRST_ATTEMPT_OUTCOME
                                  if lost is not None else UNSURE_OUTCOME) from e
            except LeaseLost as e:
                if lost is None and not unsure:
                    raise
                _UNCONFIRMED.add(key)
                raise self._lease_lost(e, resent=lost is not None) from e
            except WriteFailed as e:  # the look-up's refusal (only after an unknown outcome)
                self._end = None
                _UNCONFIRMED.add(key)
                raise WriteFailed(locator, -1, e.reason, FIRST_ATTEMPT_OUTCOME
                                  if lost is not None else UNSURE_OUTCOME) from e
            except BaseException:  # interrupted: the commit may have been made all the same
                self._end = None
                if batch.lines and (sending or lost is not None):
                    _UNCONFIRMED.add(key)
                raise
            if recognisable:  # a batch that cannot be looked up confirms nothing before it
                _UNCONFIRMED.discard(key)
            if batch.lines:  # no later batch of this appender starts before its end
                self._floor = (generation, at + batch.total)
                self._last_line = (generation, at + batch.offsets[-1], batch.lines[-1])
            self._after_commit()
            return at
        if lost is None:  # no attempt reached the database: nothing was sent
            raise WriteFailed(locator, -1, _first_line(unreached),
                              UNSURE_OUTCOME if unsure else "nothing of it was sent")
        if batch.lines:
            _UNCONFIRMED.add(key)
        # named, so that a caller that cannot send the same batch again (a Session makes a
        # new id each append) can look for it once the session is opened again
        first = f" (its first entry: {batch.ids[0]})" if recognisable else ""
        raise WriteFailed(locator, -1, f"the connection was lost and the batch{first} could "
                          f"not be confirmed ({_first_line(lost)})",
                          UNCONFIRMED_OUTCOME if recognisable
                          else UNRECOGNISED_OUTCOME if batch.lines else EMPTY_OUTCOME)

    def _lease_lost(self, e: LeaseLost, *, resent: bool) -> LeaseLost:
        """`e` for a commit made after an unknown outcome (of this batch's first attempt:
        `resent`, or of an earlier commit): the batch may be in the session already, and, if
        the session was sealed, in its successor if the rotation kept it."""
        sealed = self._sealed()
        if sealed is not None:
            detail = "; ".join(d for d in (sealed, e.detail) if d)
            note = RESENT_SEALED if resent else UNSURE_SEALED
        else:
            detail = "; ".join(d for d in ("its connection was lost" if resent else "",
                                            e.detail) if d)
            note = RESENT_NOTE if resent else UNSURE_NOTE
        return LeaseLost(self.storage.locator, e.epoch, detail, note)

    def _sealed(self) -> str | None:
        """That the session was sealed, and where it continues; None if it was not (or that
        cannot be learnt now: the refusal is reported all the same)."""
        try:
            successor = self.storage.successor()
        except JournalError:
            return None
        if successor is None:
            return None
        return f"the session was sealed by a rotation and continues in {successor}"

    def _append(self, cursor: psycopg.Cursor[Any], batch: Batch) -> tuple[int, int | None]:
        """journal.append's offset for `batch`, and the generation of `APPEND`.

        The lease holder's one-entry statement does not take the row lock journal.append
        orders its callers by, so a call from an appender without the lease can find the end
        it read taken by a line of the holder's committed meanwhile (a unique violation:
        nothing stored), and, while the holder commits back to back, again on every try (its
        next line is in flight whenever the end is read). The call is then made once more in
        one statement that first takes the session's append gate exclusive and locks the
        stream row FOR UPDATE (LOCKED_APPEND; no round trip while they are held): that waits
        for the holder's statement in flight (which holds the gate shared) and holds its next
        ones off until the call committed."""
        params = (*self._params(batch), self.storage.session)

        def call() -> tuple[int, int | None]:
            row = cursor.execute(APPEND, params).fetchone()
            assert row is not None
            return int(row[0]), row[1]

        try:
            return call()
        except psycopg.errors.UniqueViolation:
            pass
        row = cursor.execute(LOCKED_APPEND, (*params, self._gate,
                                             self.storage.session)).fetchone()
        return (int(row[0]), row[1]) if row is not None else call()

    def _resend(self, conn: psycopg.Connection[Any], batch: Batch) -> tuple[int, int | None]:
        """Where `batch`, sent before without a known outcome, is stored, or where it is
        stored now, and the generation.

        journal.append acknowledges a re-sent batch only while it is the session's last: a
        line of another writer's after it (one without the lease, or the lease holder after
        one without it) would otherwise have it stored twice. So the batch is looked up by
        its lines (`FIND_BATCH`) first, without a lock (a scan of the whole session, for an
        appender that has acknowledged nothing yet, holds no writer up). Not there, it is
        looked for again after what was the session's last line, and else appended, in one
        transaction that locks the stream row first: the lock waits for every commit that
        was waiting for the row, the first attempt's included, and the append gate it takes
        with it holds off the lease holder's one-entry statement until the call committed.
        A batch whose first entry is stored but not the rest of it is another batch:
        refused."""
        generation, floor = self._floor
        found = self._find(conn, batch, generation, floor)
        if found is None:  # no live session: the function says why
            return self._append(conn.cursor(), batch)
        if found.at is not None:
            return found.at, found.generation
        with conn.transaction():
            conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                         (RESEND_IDLE_LIMIT,))
            conn.execute(LOCK_STREAM, (self._gate, self.storage.session))
            again = self._find(conn, batch, found.generation, found.last + 1)
            if again is not None and again.at is not None:
                return again.at, again.generation
            row = conn.execute(APPEND, (*self._params(batch), self.storage.session)).fetchone()
            assert row is not None
            return int(row[0]), None if again is None else again.generation

    def _find(self, conn: psycopg.Connection[Any], batch: Batch, generation: int | None,
              floor: int) -> Lookup | None:
        """`FIND_BATCH` for `batch`, at or after `floor` if the session is in `generation`;
        None if the session is not live. WriteFailed if its first entry is stored, but not
        the rest of it."""
        row = conn.execute(FIND_BATCH, {
            "session": self.storage.session, "generation": generation, "floor": floor,
            "id": batch.ids[0], "line": batch.lines[0], "count": len(batch.lines),
            "lines": text_array(batch.lines)}).fetchone()
        if row is None:
            return None
        current, whole, first, last = row
        if whole is None and first is not None:
            raise WriteFailed(self.storage.locator, -1, (
                f"its first entry ({batch.ids[0]}) is stored already, at byte {int(first):,}, "
                "and the batch that starts with it is not: an entry id names one entry, and "
                "a batch sent again after an unknown outcome must be the same batch"),
                REFUSED_OUTCOME)
        return Lookup(int(current), None if whole is None else int(whole),
                      -1 if last is None else int(last))

    def _durable_as_set(self, conn: psycopg.Connection[Any]) -> None:
        """The lease's connection, shared by the appenders of the lease, committing with this
        appender's `synchronous_commit` (set only when another one changed it)."""
        lease, wanted = self.lease, self._synchronous
        if lease is None or conn is not lease.conn or lease.synchronous_commit == wanted:
            return
        try:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", (wanted,))
        except psycopg.OperationalError as e:
            raise DatabaseUnavailable(f"{self.storage.locator}: lost the database: "
                                      f"{describe(e)}") from e
        lease.synchronous_commit = wanted

    def _commit_one(self, conn: psycopg.Connection[Any], batch: Batch) -> int | None:
        """One entry as APPEND_ONE at the known end, on the lease's connection; None where
        journal.append must take it (no lease connection, the end not known or moved, the
        entry perhaps already the session's last, a parameter libpq cannot pass). The end is
        read again after a transaction of the lease holder's own (a replacement, a rotation)
        and after any refusal: nobody else changes the session while the connection lives."""
        lease = self.lease
        if lease is None or conn is not lease.conn:
            return None
        end = self._end
        if end is None or self._end_turn != lease.turns:
            end = self._read_end(conn)
        if end is None or end.last_id == batch.ids[0]:
            return None  # journal.append compares the bytes, and acknowledges a retry
        params = [str(end.stream), str(end.generation), str(end.entries), str(end.size),
                  batch.lines[0], batch.ids[0], batch.parents[0], batch.types[0],
                  self.storage.session, str(self._gate)]
        now = time.monotonic()
        looking = now >= self._look_at
        if not looking:
            params.append("t" if self._followed else "f")
        try:
            if looking:  # the first commit looks: both prepared then (and after a reconnection)
                self._one.prepare(conn)
            row = (self._looking if looking else self._one).first_row(conn, params)
        except psycopg.errors.UniqueViolation:
            row = None  # a line is at that offset already: written without the lease
        if row is None:
            self._end = None
            return None
        if looking:
            self._followed = row[1] is not None
            self._look_at = now + ANNOUNCE_LAG
        elif not self._followed and time.monotonic() >= self._look_at:
            self._look_after(conn, end.entries + 1)
        self._end = end.after(batch)
        self._moved = True
        if now >= self._settle_at:
            self._settle(conn)
        return end.size

    def _look_after(self, conn: psycopg.Connection[Any], entries: int) -> None:
        """Look for followers after a commit sent unannounced that ended only once the next
        look was due (it waited, for the append gate say): a follower that registered
        meanwhile read the session before the commit ended, counting on the writers' looks
        (`watch.ANNOUNCE_LAG`), so it is announced now. A failure leaves the next commit to
        look; the commit is made either way."""
        try:
            row = conn.execute(schema.ANNOUNCE_IF_FOLLOWED, {
                "session": self.storage.session, "entries": entries}).fetchone()
        except psycopg.Error as e:
            log.debug("%s: followers not looked for (%s)", self.storage.locator,
                      _first_line(e))
            self._look_at = 0.0
            return
        self._followed = row is not None and row[0] is not None
        self._look_at = time.monotonic() + ANNOUNCE_LAG

    def _read_end(self, conn: psycopg.Connection[Any]) -> End | None:
        """The end of the session's current generation, read on the lease's connection (so
        every commit of another writer before this lease is in); None if the session is
        not there, sealed, or no longer at this lease's epoch. DatabaseUnavailable if the
        connection is found lost here, before anything of a commit was sent."""
        try:
            row = conn.execute(
                f"SELECT s.id, s.generation, coalesce(e.size, s.size), coalesce(e.entries, "
                f"s.entries), e.last_id FROM {schema.STREAMS_WITH_END} WHERE s.session = %s "
                f"AND s.generation IS NOT NULL AND s.successor IS NULL AND s.epoch = %s",
                (self.storage.session, self.epoch)).fetchone()
        except psycopg.OperationalError as e:
            if not connection_lost(conn, e):
                raise
            raise DatabaseUnavailable(f"{self.storage.locator}: lost the database: "
                                      f"{describe(e)}") from e
        if row is None:
            return None
        self._end = End(int(row[0]), int(row[1]), int(row[2]), int(row[3]), row[4])
        if self.lease is not None:
            self._end_turn = self.lease.turns
        return self._end

    def _params(self, batch: Batch) -> tuple[Any, ...]:
        """journal.append's arguments for `batch`."""
        return _append_args(self.storage.session, self.epoch, batch)

    def _refused(self, e: psycopg.Error, *, resent: bool = False,
                 unsure: bool = False) -> JournalError:
        """The error for a commit the server refused. `resent`: an earlier attempt of it lost
        its connection, so it may have been committed all the same (and may still be);
        `unsure`: an earlier commit to the session has no known outcome (this batch may be
        that one, sent again)."""
        locator = self.storage.locator
        state = getattr(e, "sqlstate", None)
        if resent or unsure:
            _UNCONFIRMED.add((self.storage.conninfo, self.storage.session))
        if state == schema.SQLSTATE_FENCED:
            fenced = LeaseLost(locator, self.epoch or 0, _first_line(e))
            if resent or unsure:
                return self._lease_lost(fenced, resent=resent)
            return LeaseLost(locator, self.epoch or 0, self._sealed() or _first_line(e))
        if state == schema.SQLSTATE_NO_SESSION:
            return no_such_session(locator)
        if state == schema.SQLSTATE_SEALED:
            said = e.diag.message_detail  # the successor's session id
            successor = (session_url(self.storage.conninfo, said) if said
                         else self.storage.successor())
            return SessionSealed(locator, successor or "its successor", RESENT_SEALED
                                 if resent else UNSURE_SEALED if unsure else None)
        if resent:
            return WriteFailed(locator, -1, _first_line(e), UNCONFIRMED_OUTCOME)
        if unsure:
            return WriteFailed(locator, -1, _first_line(e), UNSURE_OUTCOME)
        return WriteFailed(locator, self.storage.size_or(-1), _first_line(e), REFUSED_OUTCOME)

    def _after_commit(self) -> None:
        """The policy's flush after a commit. A flush that fails does not fail the commit:
        the commit is made, and a database cannot take it back as a file's is cut back (a
        caller told it failed would not know of its entry, or would store it again). It is
        logged, and the flush is made again by the next commit, `sync` or `close`."""
        if self.durability.every == 1 or not self._clock.due():
            return
        try:
            self.sync()
        except WriteFailed as e:
            log.warning("%s; the commit it followed is stored, and the next commit, sync or "
                        "close flushes again", e)

    def sync(self) -> None:
        """Make every acknowledged commit durable now (see `_flush`); CommitsLost if the
        server lost some (`_check_floor`). One piece of work: another thread's commit waits
        for it, so none lands between the flush and the count it resets."""
        if self._conn is None:
            return
        with self._turn():
            try:
                self._check_floor()
                self._on_live(lambda conn: _flush(conn, self.storage.session))
                self._check_floor()  # made again for this flush: what it flushed may lack some
            except (psycopg.Error, JournalError) as e:
                if isinstance(e, CommitsLost):
                    raise
                # LeaseLost too (the lease's connection could not be had back)
                unnamed = "its connection could not be had back"
                said = (f"the lease is lost ({e.detail or unnamed})"
                        if isinstance(e, LeaseLost) else _first_line(e))
                raise WriteFailed(self.storage.locator, -1, f"sync failed: {said}",
                                  SYNC_OUTCOME) from e
            self._clock.synced()

    def _live(self) -> psycopg.Connection[Any]:
        """The appender's connection, made again if it was lost or closed (an interrupted
        commit may close it), committing with this appender's durability."""
        with self._reconnecting:  # two threads make one connection, not two
            if self._conn is None:
                raise SessionClosed(self.storage.locator)
            if self._conn.closed or self._conn.broken:
                self._floor_unsure = self._floor_unsure or self._clock.pending > 0
                self._conn = self._connect()
            self._durable_as_set(self._conn)
            return self._conn

    def _check_floor(self) -> None:
        """CommitsLost if this appender's last acknowledged line is no longer where it was
        committed (same generation, same offset, same bytes): the server lost commits it
        acknowledged and had not flushed (it stopped), whatever was committed since in their
        place. Looked at once its connection was made again with commits awaiting a flush;
        for good once found (this writer's view of the session is wrong from there). A
        replacement since (another generation) is not looked into: it was made from what
        the session held then."""
        if self._lost is not None:
            raise self._lost
        if not self._floor_unsure:
            return
        last = self._last_line
        if last is not None and last[0] is not None:
            generation, offset, line = last
            row = with_shared(self.storage.conninfo, lambda conn: conn.execute(
                "SELECT s.generation, e.line = %s FROM journal.streams s LEFT JOIN "
                "journal.entries e ON e.stream = s.id AND e.generation = %s AND "
                "e.byte_offset = %s WHERE s.session = %s",
                (line, generation, offset, self.storage.session)).fetchone())
            if row is not None and row[0] == generation and not row[1]:
                mark = self.storage.mark()
                self._lost = CommitsLost(self.storage.locator,
                                         mark.size if mark is not None else 0,
                                         self._floor[1])
                raise self._lost
        self._floor_unsure = False

    def _on_live(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`work` on the live connection; once more on a new one if that connection was
        closed while `work` waited for it (another thread's commit was interrupted)."""
        with self._turn():
            conn = self._live()
            try:
                return work(conn)
            except psycopg.OperationalError as e:
                if not connection_lost(conn, e):
                    raise
            return work(self._live())

    def size(self) -> int:
        end = self._end
        return end.size if end is not None else self.storage.size()

    def close(self) -> None:
        """Flush what the durability policy left pending and set the stream row's size to
        the end; the lease's connection is the lease's to close."""
        if self._conn is None:
            return
        with self._turn():
            self._close()

    def _close(self) -> None:
        assert self._conn is not None
        conn = self._conn
        try:
            never = self.durability.every == 0 and self.durability.interval_ms is None
            if self._clock.pending and not never:
                conn = self._live()
                _flush(conn, self.storage.session)
                self._check_floor()  # made again: the server may have lost some
            if self._moved and conn is not None and not (conn.closed or conn.broken):
                self._settle(conn)
        except CommitsLost as e:
            log.warning("%s", e)
        except (psycopg.Error, JournalError) as e:
            log.warning("%s: the last commits could not be flushed on close (%s): they are "
                        "durable once the server has written its log out, which it does on its "
                        "own within a second; a server that stopped before that lost them",
                        self.storage.locator, _first_line(e))
        finally:
            self._conn, self._cursor = None, None
            if self.lease is None or conn is not self.lease.conn:
                conn.close()

    def _settle(self, conn: psycopg.Connection[Any]) -> None:
        """Bring the stream row's size, entries and updated_at up to the session's end, for
        those who read the row itself (one-entry commits leave it as it was): after a
        one-entry commit at most every SETTLE_INTERVAL, and on close; only while this
        writer's epoch is the session's."""
        try:
            conn.execute(
                f"UPDATE journal.streams s SET size = coalesce((SELECT x.size FROM "
                f"({schema.STREAM_END}) AS x), s.size), "
                f"entries = coalesce((SELECT x.entries FROM ({schema.STREAM_END}) AS x), "
                f"s.entries), updated_at = now() WHERE s.session = %s AND s.generation IS NOT "
                f"NULL AND s.successor IS NULL AND s.epoch = %s",
                (self.storage.session, self.epoch))
        except psycopg.Error as e:
            log.debug("%s: the stream row's size was not set (%s)", self.storage.locator,
                      _first_line(e))
        self._moved = False
        self._settle_at = time.monotonic() + SETTLE_INTERVAL


def current_end(conn: psycopg.Connection[Any], session: str) -> int:
    """The size of a live session as `conn` sees it now: under the stream row's lock
    (`FOR UPDATE`, which every journal.append call waits for), every line committed, the
    lease holder's one-entry commits included while the caller holds the lease."""
    row = conn.execute(f"SELECT coalesce(e.size, s.size) FROM {schema.STREAMS_WITH_END} "
                       "WHERE s.session = %s", (session,)).fetchone()
    return int(row[0]) if row is not None else -1


def _flush(conn: psycopg.Connection[Any], session: str) -> None:
    """Make every commit before now, of any connection, durable: a transaction that writes a
    WAL record commits with synchronous_commit on, which flushes the WAL up to its commit
    record. It must write one: PostgreSQL commits a transaction that wrote no WAL without
    waiting for the flush, id or not (so taking an id alone flushed nothing). The record is
    a transactional logical message, which touches no table and takes no lock, and which any
    role may write unless an administrator revoked that; then the session's stream row is
    written again instead (a writer may update it). One statement (its own transaction):
    nothing else on the connection can run inside it."""
    try:
        conn.execute("SELECT set_config('synchronous_commit', 'on', true), "
                     "pg_logical_emit_message(true, 'journal.flush', '')")
    except psycopg.errors.InsufficientPrivilege:
        conn.execute("UPDATE journal.streams SET updated_at = updated_at WHERE session = %s "
                     "AND set_config('synchronous_commit', 'on', true) IS NOT NULL",
                     (session,))


class PostgresStorage:
    """One session in a PostgreSQL database (see the module docstring)."""

    def __init__(self, conninfo: str, session: str) -> None:
        self.conninfo = conninfo
        self.session = session
        self._name = SessionUrl(conninfo, session).url
        self._lease: Lease | None = None
        self._lease_lock = threading.Lock()

    @classmethod
    def from_url(cls, target: str) -> PostgresStorage:
        """The session a URL names (`postgresql://...?session=<id>` or `pg:<id>`)."""
        parsed = parse_url(target)
        return cls(parsed.conninfo, parsed.session)

    @property
    def locator(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"PostgresStorage({self._name!r})"

    # -- state

    def _row(self) -> tuple[Any, ...] | None:
        session = self.session

        def query(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute(
                f"SELECT s.id, s.generation, coalesce(e.size, s.size), least(s.last_compaction, "
                f"s.last_kept, s.last_model_change, s.last_thinking_change), CASE WHEN "
                f"s.moved_out_at IS NOT NULL THEN s.exported_to END, s.moved_out_sha256 FROM "
                f"{schema.STREAMS_WITH_END} "
                f"WHERE s.session = %s AND s.generation IS NOT NULL", (session,)).fetchone()

        return with_shared(self.conninfo, query)

    def size(self) -> int:
        row = self._row()
        if row is None:
            raise no_such_session(self._name)
        return int(row[2])

    def size_or(self, default: int) -> int:
        try:
            return self.size()
        except (JournalError, psycopg.Error):
            return default

    def current_generation(self) -> int | None:
        row = self._row()
        return None if row is None else int(row[1])

    def mark(self) -> Mark | None:
        row = self._row()
        return None if row is None else Mark(int(row[1]), int(row[2]))

    def successor(self) -> str | None:
        """The session a sealed session continues in (its URL), or None."""
        session = self.session

        def query(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute("SELECT successor FROM journal.streams WHERE session = %s",
                                (session,)).fetchone()

        row = with_shared(self.conninfo, query)
        return None if row is None or row[0] is None else session_url(self.conninfo,
                                                                      str(row[0]))

    def moved_out(self) -> MovedOut | None:
        """Where this session's lines were moved out of the database to, if they were
        (`journal.pg.rotation.move_out`)."""
        return _moved(self._row())

    def predecessor(self) -> PostgresStorage | None:
        """The sealed session this one continues: the one whose row names it as successor
        (set by a database rotation and by `journal push`), the latest sealed if several."""
        session = self.session

        def query(conn: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
            return conn.execute(
                "SELECT session FROM journal.streams WHERE successor = %s AND session <> %s "
                "AND generation IS NOT NULL ORDER BY sealed_at DESC NULLS LAST, id DESC LIMIT 1",
                (session, session)).fetchone()

        row = with_shared(self.conninfo, query)
        return None if row is None else PostgresStorage(self.conninfo, str(row[0]))

    # -- reading and writing

    def open_reader(self) -> PostgresReader:
        row = self._row()
        if row is None:
            raise no_such_session(self._name)
        hint = None if row[3] is None else int(row[3])
        moved = _moved(row)
        if moved is not None and not os.path.exists(moved.path):
            raise ArchiveElsewhere(self._name, moved.path)
        return PostgresReader(self, int(row[0]), int(row[1]), int(row[2]), hint, moved)

    def open_appender(self, durability: Durability | None = None) -> PostgresAppender:
        lease = self._lease
        # the epoch fences even when the lease connection broke since: never unfenced then
        return PostgresAppender(self, durability,
                                lease if lease is not None and not lease.released else None)

    def create(self, data: bytes) -> None:
        """Make the session holding `data` (FileExistsError if it exists)."""
        batch = split_batch(self._name, 0, data)
        conn = connect(self.conninfo)
        try:
            self._create(conn, batch)
        except psycopg.Error as e:
            raise DatabaseError(f"{self._name}: cannot create the session: {describe(e)}") from e
        finally:
            conn.close()

    def create_in(self, conn: psycopg.Connection[Any], data: bytes) -> None:
        """`create`, inside the caller's transaction on `conn` (a rotation creates the
        successor in the transaction that seals the old session)."""
        self._create(conn, split_batch(self._name, 0, data))

    def extend_in(self, conn: psycopg.Connection[Any], data: bytes, *, epoch: int,
                  generation: int, end: int) -> None:
        """Append `data` (complete lines) at the session's end, inside the caller's
        transaction on `conn`, through journal.append fenced by `epoch` (the caller holds the
        lease), provided the session is still what the caller compared it with: live, at
        `epoch`, in `generation` and ending at `end`, checked under the stream row's lock
        (which every journal.append call waits for; the lease's holder, the caller, makes
        no one-entry commit meanwhile), so no other writer's line lands
        between what was compared and what is appended. SessionChanged if it changed
        (another generation, another end), LeaseLost if the epoch moved on, SessionSealed if
        it was sealed, WriteFailed for bytes a text column cannot hold. `journal push`
        brings a session that grew as a file up to date this way (in batches of about
        EXTEND_BATCH bytes, each acknowledged at the offset it was sent for)."""
        row = conn.execute(
            "SELECT generation, epoch, successor, moved_out_at FROM journal.streams "
            "WHERE session = %s AND generation IS NOT NULL FOR UPDATE",
            (self.session,)).fetchone()
        if row is None:
            raise no_such_session(self._name)
        if row[2] is not None:
            raise SessionSealed(self._name, session_url(self.conninfo, str(row[2])))
        if row[3] is not None or int(row[1]) != epoch:
            raise LeaseLost(self._name, epoch, f"the session is at epoch {row[1]}")
        now = current_end(conn, self.session)
        if int(row[0]) != generation or now != end:
            raise SessionChanged(self._name, "appended to", end, now)
        start = 0
        while start < len(data):
            stop = data.find(b"\n", min(start + EXTEND_BATCH, len(data)) - 1) + 1 or len(data)
            batch = split_batch(self._name, end + start, data[start:stop])
            got = conn.execute(APPEND_CALL, _append_args(self.session, epoch, batch)).fetchone()
            if got is None or int(got[0]) != end + start:
                # journal.append took the batch for a retry of lines the session ends with
                # (the same ids and bytes): appending it is the caller's to decide
                raise WriteFailed(self._name, end + start, "these lines repeat the lines the "
                                  "session ends with, which the database takes for a batch "
                                  "sent again", REFUSED_OUTCOME)
            start = stop

    def _create(self, conn: psycopg.Connection[Any], batch: Batch) -> None:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO journal.streams AS s (session, generation) "
                "VALUES (%s, nextval('journal.generations')) ON CONFLICT (session) DO "
                "UPDATE SET generation = nextval('journal.generations'), updated_at = now() "
                "WHERE s.generation IS NULL RETURNING id, generation",
                (self.session,)).fetchone()
            if row is None:
                raise FileExistsError(f"{self._name}: the session exists")
            self._fill(conn, int(row[0]), int(row[1]), batch)

    def publish(self, data: bytes, tag: str, before_swap: Callable[[], None] | None = None,
                *, based_on: int | None = None) -> None:
        """Replace the session with `data` as a new generation, atomically (see module doc).
        `based_on`: the session's size the replacement was made from, checked under the row
        lock (an appender without the lease may have appended since: `SessionChanged`).
        Without the session's lease, the replacement takes the lease's lock for its
        transaction: `LockTimeout`, nothing changed, while a writer holds the lease (its
        one-entry commits go to the generation it knows)."""
        batch = split_batch(self._name, 0, data)
        lease = self._lease
        conn: psycopg.Connection[Any] | None = None
        inside = False  # in a transaction of the caller's (`Lease.row_locked`): it commits
        try:
            if lease is not None and not lease.released:
                with lease.busy:  # the lease's appenders wait meanwhile
                    conn = lease.connection()
                    inside = in_transaction(conn)
                    self._publish(conn, batch, before_swap, based_on)
                return
            conn = connect(self.conninfo)
            try:
                self._publish(conn, batch, before_swap, based_on)
            finally:
                conn.close()
        except psycopg.Error as e:
            if isinstance(e, psycopg.OperationalError) and connection_lost(conn, e):
                if inside:  # the server rolled the caller's transaction back
                    raise DatabaseError(f"{self._name}: the connection was lost before the "
                                        "replacement was committed (the session is as it "
                                        f"was): {describe(e)}") from e
                raise DatabaseError(f"{self._name}: the connection was lost while the "
                                    "replacement was made, which may have been committed: "
                                    "read the session again to know (a repair can be run "
                                    f"again): {describe(e)}") from e
            raise DatabaseError(f"{self._name}: the replacement was not published (the "
                                f"session is as it was): {describe(e)}") from e

    def _publish(self, conn: psycopg.Connection[Any], batch: Batch,
                 before_swap: Callable[[], None] | None, based_on: int | None) -> None:
        lease = self._lease
        with conn.transaction():
            # durable whatever an appender set on the lease's connection
            conn.execute("SET LOCAL synchronous_commit = on")
            if lease is None or lease.released:
                # the lease's lock, for this transaction: the lease holder's one-entry
                # commits count on nobody else changing the generation under them
                got = conn.execute("SELECT pg_try_advisory_xact_lock(%s)",
                                   (advisory_key(self.session),)).fetchone()
                if not (got and got[0]):
                    raise LockTimeout(self._name, 0, current_holder(conn, self.session))
            row = conn.execute(
                "SELECT id, generation, epoch, moved_out_at, exported_to, successor "
                "FROM journal.streams WHERE session = %s AND generation IS NOT NULL "
                "FOR UPDATE", (self.session,)).fetchone()
            if row is None:
                raise no_such_session(self._name)
            if row[3] is not None:
                raise JournalError(f"{self._name}: an archive moved out of the database (to "
                                   f"{row[4]}): it is not replaced")
            if row[5] is not None:  # its lines end with its seal, as journal.append keeps them
                raise SessionSealed(self._name, session_url(self.conninfo, str(row[5])),
                                    "nor is it replaced")
            stream, old, epoch = int(row[0]), int(row[1]), int(row[2])
            if lease is not None and not lease.released and epoch != lease.epoch:
                raise LeaseLost(self._name, lease.epoch, f"the session is at epoch {epoch}")
            if based_on is not None:
                now = current_end(conn, self.session)
                if now != based_on:
                    raise SessionChanged(self._name, "replaced", based_on, now)
            new_row = conn.execute("SELECT nextval('journal.generations')").fetchone()
            assert new_row is not None
            generation = int(new_row[0])
            self._fill(conn, stream, generation, batch)
            if before_swap is not None:
                before_swap()
            conn.execute("DELETE FROM journal.entries WHERE stream = %s "
                         "AND generation <> %s AND generation <> %s",
                         (stream, old, generation))

    def _fill(self, conn: psycopg.Connection[Any], stream: int, generation: int,
              batch: Batch) -> None:
        """Insert `batch` as the whole of `generation` (COPY) and make it current."""
        with conn.cursor().copy(
                "COPY journal.entries (stream, generation, position, byte_offset, id, "
                "parent_id, type, line) FROM STDIN") as copy:
            for position, (line, offset, entry_id, parent, kind) in enumerate(zip(
                    batch.lines, batch.offsets, batch.ids, batch.parents, batch.types,
                    strict=True)):
                copy.write_row((stream, generation, position, offset, entry_id, parent, kind,
                                line))
        conn.execute(
            "UPDATE journal.streams SET generation = %s, size = %s, entries = %s, "
            "last_compaction = %s, last_kept = %s, last_model_change = %s, "
            "last_thinking_change = %s, updated_at = now() WHERE id = %s",
            (generation, batch.total, len(batch.lines), _last_of(batch, "compaction"),
             batch.kept_offset(),
             _last_of(batch, "model_change"), _last_of(batch, "thinking_level_change"), stream))

    # -- the writer lock

    def lock(self, timeout: float) -> Lease:
        """Take the session's lease (see `journal.pg.lease`); this storage's appenders then
        carry its fencing epoch."""
        lease = acquire(self.conninfo, self.session, self._name, timeout)
        with self._lease_lock:
            self._lease = lease
        return lease

    def entry_ids(self) -> set[int] | None:
        """Every 8-hex entry id of the current generation, as integers (what
        `journal.idscan` gathers from a file's bytes), from the id column: a resumed
        session learns the ids it must not reuse without reading the whole session. None
        for an archive moved out of the database: its ids are in its file (read it)."""
        if self.moved_out() is not None:
            return None
        session = self.session

        def query(conn: psycopg.Connection[Any]) -> list[Any]:
            return conn.execute(
                "SELECT e.id FROM journal.entries e JOIN journal.streams s ON s.id = e.stream "
                "AND s.generation = e.generation WHERE s.session = %s "
                "AND e.id ~ '^[0-9a-f]{8}$'", (session,)).fetchall()

        try:  # the long reads' lane: it must not hold up the short reads of other threads
            rows = with_shared(self.conninfo, query, LONG_READS)
        except DatabaseError as e:
            raise DatabaseError(f"{self._name}: cannot list the entry ids: {e}") from e
        return {int(row[0], 16) for row in rows}

    def holder(self) -> dict[str, Any] | None:
        """Who holds the session's lease now (pid, host, since), or None: the holder
        recorded in the stream row, if its lease connection still holds the advisory lock."""
        session = self.session

        def query(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
            return current_holder(conn, session)

        return with_shared(self.conninfo, query)

    # -- waiting for change

    def watch(self, since: Mark | None, timeout: float) -> Mark | None:
        deadline = time.monotonic() + timeout
        while True:
            now = self.mark()
            if now is not None and now != since:
                return now
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, POLL_INTERVAL))

    def open_watch(self, stop: StopFlag, timeout: float,
                   poll: bool | None = None) -> PostgresWatch | PgWatch:
        """LISTEN/NOTIFY (`journal.pg.watch`), falling back to polling if it cannot listen;
        `poll=True` polls the stream rows (`PostgresWatch`)."""
        if poll:
            return PostgresWatch(stop, timeout)
        conninfo = self.conninfo
        return PgWatch(lambda: connect(conninfo, create=False), stop, timeout, poll)


class PostgresWatch:
    """A standing wait over database sessions: it wakes when the mark of one of them differs
    from what it was when the previous wait returned (checked every POLL_INTERVAL, all the
    sessions of one database in one query), when `timeout` passes, or (False) on `stop`."""

    def __init__(self, stop: StopFlag, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.stop = stop
        self.timeout = timeout
        self.seen: dict[tuple[str, str], Mark | None] | None = None

    def _marks(self, storages: Collection[Any]) -> dict[tuple[str, str], Mark | None]:
        by_database: dict[str, list[str]] = {}
        for storage in storages:
            if isinstance(storage, PostgresStorage):
                by_database.setdefault(storage.conninfo, []).append(storage.session)
        marks: dict[tuple[str, str], Mark | None] = {}
        for conninfo, sessions in by_database.items():
            def query(conn: psycopg.Connection[Any],
                      sessions: list[str] = sessions) -> list[tuple[Any, ...]]:
                return conn.execute(
                    f"SELECT s.session, s.generation, coalesce(e.size, s.size) FROM "
                    f"{schema.STREAMS_WITH_END} "
                    f"WHERE s.session = ANY(%s) AND s.generation IS NOT NULL",
                    (sessions,)).fetchall()

            found = {row[0]: Mark(int(row[1]), int(row[2])) for row in
                     with_shared(conninfo, query)}
            for session in sessions:
                marks[(conninfo, session)] = found.get(session)
        return marks

    def _changed(self, storages: Collection[Any]) -> bool:
        now = self._marks(storages)
        before, self.seen = self.seen, now
        if before is None:
            return True  # the first wait returns at once (the protocol allows it)
        return any(before.get(key, now[key]) != now[key] for key in now)

    def wait(self, storages: Collection[Any], places: Collection[str] = ()) -> bool:
        deadline = time.monotonic() + self.timeout
        while not self.stop.is_set():
            if self._changed(storages):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, POLL_INTERVAL))
        return False

    async def wait_async(self, storages: Collection[Any], places: Collection[str] = ()) -> bool:
        deadline = time.monotonic() + self.timeout
        while not self.stop.is_set():
            if await asyncio.to_thread(self._changed, storages):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, POLL_INTERVAL))
        return False

    def close(self) -> None:
        self.seen = None

    async def aclose(self) -> None:
        self.seen = None


def _moved(row: tuple[Any, ...] | None) -> MovedOut | None:
    """The `MovedOut` of a `PostgresStorage._row()` (None: not moved out)."""
    if row is None or row[4] is None:
        return None
    return MovedOut(str(row[4]), str(row[5]), int(row[1]))


def _append_args(session: str, epoch: int | None, batch: Batch) -> tuple[Any, ...]:
    """journal.append's arguments for `batch` (`APPEND`'s first nine)."""
    return (session, epoch, text_array(batch.lines), text_array(batch.ids),
            text_array(batch.parents), text_array(batch.types),
            "{" + ",".join(map(str, batch.offsets)) + "}", batch.total, batch.kept)


def _first_line(e: BaseException | None) -> str:
    text = str(e).strip() if e is not None else ""
    return text.splitlines()[0] if text else (type(e).__name__ if e is not None else "")
