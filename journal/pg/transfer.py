"""Moving sessions between the file backend and a database: `journal push` and `journal pull`.

`push(PATH, URL)` brings the database up to date with session files: a file with its whole
lineage (the archived files it continues, compressed or not, and the live one), or every
session file under a folder. Each file is one session, named by its header's id, holding its
bytes verbatim (a compressed archive's uncompressed bytes, up to the last complete line),
with its file name (relative to the session's folder: `archive/<name>.jsonl.gz` for an
archive) and, for a sealed file, its successor when that is pushed too. A session the
database lacks is stored; one it holds a beginning of (the file grew) gets the file's new
lines, appended under the session's lease (`PostgresStorage.extend_in`); one it holds whole
is left as it is; one of which it holds more or other bytes is refused. A file lineage is one
transaction: all of its changes (a rotated one's sealed session pointed at its successor, as
a database rotation does: `rotation.seal_in`) or none; the other lineages are pushed even
when one is refused (`PushRefused` then names it). A push repeated changes nothing.

`pull(URL, DIR)` writes them back: a session URL pulls that session's lineage (the sessions
it continues and those continuing it), a database URL (no `session`) every session. Each is
written to `DIR/<its file name>`, compressed as file rotation compresses archives when the
name ends in `.gz` (a lineage with a name an older one has is written into a folder of its
own: see `_targets`). Existing files are never overwritten: a file already at a target holding
exactly the bytes the pull would write there counts as written (`already` in the result: a
pull that was killed is finished by running it again), one with other bytes refuses the pull
before anything is written, and one that appears meanwhile with other bytes undoes it. Temps
a killed pull left in the folders it writes into are removed (`files.remove_stale_temps`:
those no live process holds). A push then a pull gives byte-identical files.
An earlier pull's copy of a session rotated since, at the name it had while live, is removed
once the session's archive is written, as file rotation moves the file it seals
(`earlier_copies`); a copy holding bytes the database lacks refuses the pull.
An archive moved out of the database (`journal rotate --keep`) is copied from its file;
where that file is not on this machine the pull fails, writing nothing, unless
`skip_elsewhere` is given: then that archive is left out (listed in the result's `skipped`)
and the rest is written.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import logging
import os
import posixpath
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

import psycopg

from .. import archivegz, codec, model
from ..archivegz import compressed_name, is_compressed, uncompressed_name
from ..discovery import is_session_name
from ..errors import (
    ArchiveElsewhere,
    JournalError,
    LockTimeout,
    NotASession,
    WriteFailed,
    describe_os_error,
)
from ..files import TEMP_SUFFIX, file_digest, remove_stale_temps
from ..identity import plain_name
from ..lineage import ARCHIVE_DIR, archive_name_of, live_name, parent_of, seal_of, trace
from ..lock import DEFAULT_LOCK_TIMEOUT
from ..progress import Meter, Progress
from ..publish import NewFile
from ..seal import is_seal
from ..snapshot import last_newline_end
from . import earlier_copies, schema
from .connect import (
    DatabaseError,
    DatabaseUnavailable,
    NoJournalSchema,
    connect,
    describe,
    with_shared,
)
from .lease import Lease
from .rotation import file_name, seal_in
from .storage import PostgresStorage, check_storable
from .url import (
    DATABASE_ENV,
    is_database_url,
    long_id,
    names_session,
    no_such_session,
    parse_database,
    parse_url,
    session_url,
    shown,
)

__all__ = ["PullResult", "PushRefused", "PushResult", "TransferError", "database_of",
           "database_sessions", "pull", "push", "push_bytes"]

log = logging.getLogger(__name__)

PULL_TAG = "pull"
# times in all a pull writes its sessions when, each time, one of them was rotated meanwhile
PULL_TRIES = 3


# times a push reads a folder whose files a rotation moved while it was read
PLAN_TRIES = 3

# what a push did with a session (a row's `action`)
NEW, APPENDED, UNCHANGED, REFUSED = "new", "appended", "unchanged", "refused"


class TransferError(JournalError):
    """A push or pull that cannot be done; nothing was changed."""


@dataclass
class PushResult:
    """What a push did, one row per file in the order found: `file`, `name` (what it is
    stored as), `session` (its URL; None if the file has no session header), `action`
    (`new`, `appended`, `unchanged`, `refused`), `bytes` (the session's bytes the file
    holds), `lines` (stored, for a new one; appended), `torn` (the bytes of an incomplete
    last line left out), `sealed` (the successor's URL, where this push pointed the session
    at it), `renamed` (the file name it was stored under, where this push named it anew:
    its file was compressed since), `reason` (why it was refused)."""

    database: str
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pushed(self) -> list[dict[str, Any]]:
        """The rows of sessions stored or appended to."""
        return [row for row in self.sessions if row["action"] in (NEW, APPENDED)]

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """The rows of sessions the database holds as the files do (left as they are)."""
        return [row for row in self.sessions if row["action"] == UNCHANGED]

    @property
    def refused(self) -> list[dict[str, Any]]:
        return [row for row in self.sessions if row["action"] == REFUSED]

    @property
    def changed(self) -> bool:
        """Whether the push changed the database (stored, appended or sealed anything)."""
        return bool(self.pushed) or any("sealed" in row or "renamed" in row
                                        for row in self.sessions)

    def to_json(self) -> dict[str, Any]:
        return {"database": self.database, "sessions": self.sessions, "pushed": self.pushed,
                "skipped": self.skipped, "refused": self.refused}


class PushRefused(TransferError):
    """Sessions a push refused (each row of `result.refused` says why); the other
    lineages were pushed."""

    def __init__(self, result: PushResult) -> None:
        self.result = result
        refused = result.refused
        said = "; ".join(f"{row['file']}: {row['reason']}" for row in refused)
        rest = len(result.sessions) - len(refused)
        tail = f" (the {rest} other session(s) are pushed or up to date)" if rest else ""
        super().__init__(f"{said}{tail}")


@dataclass
class PullResult:
    """The files a pull wrote (with those it found already there, holding the bytes it would
    have written: `already` true), the archives it left out (`skip_elsewhere`): moved out
    of the database to a file not on this machine, and the earlier pulls' copies of sessions
    rotated since that it removed (`archived`: `session`, `file` removed, `archive`: the
    file holding its bytes now, `bytes`: how many of the archive's first bytes it held)."""

    directory: str
    files: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    archived: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"directory": self.directory, "files": self.files, "skipped": self.skipped,
                "archived": self.archived}


def database_of(url: str | None) -> str:
    """The database a push or pull uses: `url` (a database URL, `pg:` for the default one,
    or a session URL whose database is meant), else JOURNAL_DATABASE_URL."""
    if url is None or url == "":
        url = os.environ.get(DATABASE_ENV) or ""
        if not url:
            raise TransferError(f"no database named and {DATABASE_ENV} is not set")
    if not is_database_url(url):
        raise TransferError(f"{url}: not a postgresql:// URL")
    return parse_url(url).conninfo if names_session(url) else parse_database(url)


# push


@dataclass
class _File:
    path: str
    name: str  # relative to the session's folder
    session: str  # "" for a file that cannot be read (a damaged archive, no header)
    successor: str | None
    parent: str | None = None  # its header's `parentSession` pointer
    successor_file: str | None = None  # the file name its seal gives the successor


def _files_to_push(source: str) -> list[tuple[str, str]]:
    """(path, name relative to the session folder) of every file `source` stands for."""
    if os.path.isdir(source):
        found = []
        for root, dirs, names in os.walk(source):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                # as `journal ls` finds them: an archive rotation numbered too (`<name>.2.gz`)
                if (is_session_name(name, in_archive=os.path.basename(root) == ARCHIVE_DIR)
                        and not os.path.islink(path)):
                    found.append((path, os.path.relpath(path, source)))
        # an archive and its `.gz` both there: a compression between its publish and its
        # removal of the plain file (the same bytes): the `.gz` is the one that stays
        listed = {name for _, name in found}
        found = [(path, name) for path, name in found
                 if is_compressed(name) or compressed_name(name) not in listed]
        return found + _archived_elsewhere(source, found)
    if not os.path.isfile(source):
        raise NotASession(source, "no such file or directory")
    chain = trace(os.path.realpath(source)).files  # a damaged archive in it refuses it
    folder = os.path.dirname(chain[-1])
    chain += _unreadable_successors(chain[-1])
    return [(path, _name_in(folder, path)) for path in chain]


def _unreadable_successors(last: str) -> list[str]:
    """The files beside `last`, the end of the lineage `lineage` found, that its seal names
    as its successor's archive (`archive_name_of`) and that cannot be read (a damaged
    archive): `lineage` cannot follow a seal into them, and would end the lineage at a
    sealed file. Pushed with it, they refuse it whole (`_links_to_unreadable`)."""
    seal = seal_of(last)
    named = plain_name(seal.get("file")) if seal is not None else None
    if named is None:
        return []
    folder = os.path.dirname(last)
    beside = [os.path.join(folder, n) for n in sorted(os.listdir(folder))
              if n != os.path.basename(last) and archive_name_of(named, n)]
    return [path for path in beside if os.path.isfile(path) and not _readable(path)]


def _archived_elsewhere(source: str, found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(path, name) of the archives the sessions `found` in the folder `source` continue
    that rotation put outside it (`journal rotate --archive-dir`), each named as a single
    file's push names it (`archive/<name>` beside its live file): without them, a folder's
    lineages would be stored without their history."""
    inside = {os.path.realpath(path) for path, _ in found}
    # a file the folder holds a copy of (by its file name, compressed or not) is the folder's
    taken = {uncompressed_name(posixpath.basename(name)) for _, name in found}
    top = os.path.realpath(source)
    more: list[tuple[str, str]] = []
    for path, _ in found:
        real = os.path.realpath(path)
        try:
            chain = trace(real).files
        except (JournalError, OSError):
            continue  # its own push says what is wrong with it
        folder = os.path.dirname(real)
        for older in chain[:-1]:
            where = os.path.realpath(older)
            # a rotation's archive (sealed); not a fork's parent, a session of its own; one
            # whose seal cannot be read is taken along, so that its refusal refuses its lineage
            if where in inside or (seal_of(where) is None and _readable(where)):
                continue
            name = posixpath.normpath(posixpath.join(os.path.relpath(folder, top),
                                                     _name_in(folder, where)))
            if uncompressed_name(posixpath.basename(name)) in taken:
                continue  # a copy of it is in the folder (brought back): that one is pushed
            inside.add(where)
            taken.add(uncompressed_name(posixpath.basename(name)))
            more.append((where, name))
    return more


def _readable(path: str) -> bool:
    """Whether the push can read the session file `path` (its header's id, its seal)."""
    try:
        _described(path, "", _read(path)[0])
    except (TransferError, OSError):
        return False
    return True


def _name_in(folder: str, path: str) -> str:
    """The name `path` is stored under, relative to the live file's `folder`: an archive
    that rotation put outside that folder (`--archive-dir`) is named as rotation names one
    kept beside it (`archive/<name>`), so that a pull writes it inside the folder."""
    relative = os.path.relpath(path, folder)
    if _leads_out(relative):
        return posixpath.join(ARCHIVE_DIR, os.path.basename(path))
    return relative


class _Damaged(TransferError):
    """An archive that cannot be unpacked: its session id and seal cannot be read."""


# what to do with a damaged archive: `journal repair` does not rewrite archives
_DAMAGED_HINT = ("nothing of its lineage was pushed (its files are linked through this one): "
                 "put back a good copy of it, or move it away and push again to store the "
                 "rest of its lineage without it")


def _read(path: str) -> tuple[bytes, int]:
    """The session bytes of the file (an archive's uncompressed) up to its last complete
    line, and how many bytes of an incomplete last line (a torn tail, or a line being
    written) were left out; TransferError for a damaged archive."""
    with open(path, "rb") as f:
        data = f.read()
    if is_compressed(path):
        try:
            data = archivegz.decompress(data, path)
        except NotASession as e:
            raise _Damaged(str(e)) from e
    end = data.rfind(b"\n") + 1
    return data[:end], len(data) - end


def _described(path: str, name: str, data: bytes) -> _File:
    """The file's session id (its header's) and the successor its seal names, if any."""
    cut = data.find(b"\n")  # not split(): that would copy the rest of the file
    first = data if cut < 0 else data[:cut]
    try:
        header = codec.loads(first) if first else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("type") != "session" or not isinstance(
            header.get("id"), str):
        raise TransferError(f"{path}: no session header with an id on its first line")
    if (why := long_id(str(header["id"]))) is not None:
        raise TransferError(f"{path}: its header holds {why}; nothing was written")
    successor = successor_file = None
    end = last_newline_end(io.BytesIO(data), len(data))
    last = data[data.rfind(b"\n", 0, end - 1) + 1:end]
    try:
        entry = codec.loads(last) if last else None
    except ValueError:
        entry = None
    if isinstance(entry, dict) and is_seal(entry):
        found = entry["data"].get("sessionId")
        successor = found if isinstance(found, str) else None
        successor_file = plain_name(entry["data"].get("file"))
    parent = header.get("parentSession")
    return _File(path, name, str(header["id"]), successor,
                 parent if isinstance(parent, str) and parent else None, successor_file)


def _version_of(data: bytes) -> int:
    """The session format version of the header on the first line of `data` (1: none)."""
    cut = data.find(b"\n")
    try:
        header = codec.loads(data if cut < 0 else data[:cut])
    except ValueError:
        return model.CURRENT_VERSION
    return model.header_version(header) if isinstance(header, dict) else model.CURRENT_VERSION


def _migrated_there(conn: psycopg.Connection[Any], session: str, data: bytes) -> bool:
    """Whether the file is of an older format version and the database's session of the
    current one: it was migrated in the database (a writer opened it) since it was pushed."""
    if _version_of(data) >= model.CURRENT_VERSION:
        return False
    row = conn.execute(
        "SELECT e.line FROM journal.entries e JOIN journal.streams s ON s.id = e.stream "
        "AND s.generation = e.generation WHERE s.session = %s ORDER BY e.byte_offset "
        "LIMIT 1", (session,)).fetchone()
    return row is not None and _version_of(str(row[0]).encode()) == model.CURRENT_VERSION


@dataclass
class _Stored:
    """A session as the database holds it, compared with a file's bytes."""

    generation: int
    size: int  # its bytes
    lines: int
    common: int  # the bytes the file and the database have alike from the start, line for line
    successor: str | None
    file_name: str | None
    moved_out: str | None  # the file it was moved out to


@dataclass
class _Plan:
    """What a push does with one file: its report row, and what it read to decide."""

    file: _File
    row: dict[str, Any]
    action: str  # NEW, APPENDED, UNCHANGED or REFUSED
    used: int = 0  # the file's bytes pushed (its complete lines)
    digest: str = ""  # their SHA-256, checked when they are read again to be stored
    stored: _Stored | None = None
    seal: str | None = None  # the successor this push points it at (it seals it)
    vanished: bool = False  # listed, then gone before it was read (a rotation moved it)

    def refuse(self, reason: str) -> None:
        self.action, self.row["action"], self.row["reason"] = REFUSED, REFUSED, reason
        self.seal = None
        for key in ("lines", "sealed"):
            self.row.pop(key, None)


def push(source: str | os.PathLike[str], url: str | None = None, *,
         lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
         progress: Progress | None = None) -> PushResult:
    """Bring the database `url` names up to date with session files (see the module
    docstring); each file is the session its header names, so a URL naming a session is
    refused.

    Per session: stored whole if the database lacks it (`new`), its new complete lines
    appended if the database holds a beginning of the file's bytes (`appended`), left as it
    is if it holds them all (`unchanged`), and refused if it holds more or other bytes (the
    row's `reason` says what differs). A file lineage is one unit, in one transaction: its
    files stored, appended and linked (a rotated one's sealed session pointed at its
    successor) together, or none of them if one is refused. The other lineages are pushed
    all the same; then PushRefused (a TransferError, with the `result`) names the refused.
    An append takes the session's lease (waiting up to `lock_timeout` seconds for a writer
    holding it), and its fencing epoch goes with every batch. `progress` is called with the
    bytes read of the files and their total. Each file is read and checked before the
    database is asked (`_Database`): a push that stores nothing never makes the journal
    schema in a database that has none.

    Raises PushRefused, TransferError (no database, a session URL), NotASession (no such
    file), DatabaseError (the connection lost: the lineages before it are stored, the one
    it was storing may be: push again).

    Example:
        >>> push("sessions/", "postgresql://me@db/journal")  # doctest: +SKIP
    """
    if url and names_session(url):
        raise TransferError(f"{shown(url)}: push takes a database URL (no session=, no "
                            "pg:<id>): each file becomes the session its header names")
    conninfo = database_of(url)
    result = PushResult(_safe(conninfo))
    database = _Database(conninfo)
    try:
        for attempt in range(1, PLAN_TRIES + 1):
            found = _files_to_push(os.fspath(source))
            meter = Meter(progress, sum(_size(path) for path, _ in found))
            done = 0
            plans = []
            for path, name in found:
                plans.append(_planned(database, path, name))
                done += _size(path)
                meter.advance_to(done)
            # a file a rotation moved while the folder was read: read the folder again
            if attempt == PLAN_TRIES or not any(plan.vanished for plan in plans):
                break
        result.sessions = [plan.row for plan in plans]
        for lineage_plans in _lineages(plans):
            _push_lineage(database, lineage_plans, lock_timeout)
        meter.finish()
    except psycopg.Error as e:
        if database.lost:
            raise DatabaseError(f"the connection was lost during the push: the lineages "
                                "before it are stored, the one it was storing may be: push "
                                f"again (what is there already is left as it is): "
                                f"{describe(e)}") from e
        raise DatabaseError(f"the push failed: {describe(e)}") from e
    finally:
        database.close()
    if result.refused:
        raise PushRefused(result)
    return result


class _Database:
    """A push's connection to its database, made when the first file that can be pushed is
    compared (a missing path, a folder with no session file and files refused as read never
    connect), without making the journal schema there: that is made only once a session is
    about to be stored (`writer`). A push that stores nothing leaves a database that had no
    schema (a misspelt name that exists, say) as it was."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._conn: psycopg.Connection[Any] | None = None
        self._schema: bool | None = None  # unknown until connected

    def reader(self) -> psycopg.Connection[Any] | None:
        """The connection files are compared on; None for a database without the journal
        schema (no session was ever stored there: every file is new to it)."""
        if self._schema is None:
            try:
                self._conn = connect(self.conninfo, create=False)
                self._schema = True
            except NoJournalSchema:
                self._schema = False
        return self._conn

    def writer(self) -> psycopg.Connection[Any]:
        """The connection sessions are stored on, the schema made first where there is none
        (with the warning `schema.ensure` gives)."""
        if self._conn is None:
            self._conn = connect(self.conninfo)
            self._schema = True
        return self._conn

    @property
    def lost(self) -> bool:
        """Whether the connection was made and is broken or closed."""
        return self._conn is not None and (self._conn.broken or self._conn.closed)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _planned(database: _Database, path: str, name: str) -> _Plan:
    """What the push does with the file `path` (stored as `name`), from its bytes and the
    database's session of its id (the file read and checked before the database is
    asked)."""
    conninfo = database.conninfo
    row: dict[str, Any] = {"file": path, "name": name, "session": None}
    try:
        data, torn = _read(path)
        described = _described(path, name, data)
    except (TransferError, OSError) as e:
        reason = str(e).removeprefix(f"{path}: ")
        if isinstance(e, _Damaged):
            reason = f"{reason}; {_DAMAGED_HINT}"
        plan = _Plan(_File(path, name, "", None), row, REFUSED,
                     vanished=isinstance(e, FileNotFoundError))
        plan.refuse(reason if isinstance(e, TransferError) else _os_reason(e))
        return plan
    row["session"] = PostgresStorage(conninfo, described.session).locator
    row["bytes"] = len(data)
    if torn:
        row["torn"] = torn
    plan = _Plan(described, row, UNCHANGED, len(data), hashlib.sha256(data).hexdigest())
    lines = data.count(b"\n")
    conn = database.reader()
    stored = None if conn is None else _compared(conn, described.session, data, plan.digest,
                                                 lines)
    plan.stored = stored
    if stored is None:
        plan.action, row["lines"] = NEW, lines
    elif stored.moved_out is not None:
        if stored.common != len(data) or stored.size != len(data):
            plan.refuse(f"moved out of the database (to {stored.moved_out}) with other bytes "
                        "than the file's; nothing of its lineage was pushed")
    elif stored.common == len(data) == stored.size:
        pass
    elif stored.common == stored.size:
        new = lines - stored.lines
        if stored.successor is not None:
            plan.refuse(f"sealed in the database (it continues in {stored.successor}), and "
                        f"the file has {new:,} more line(s); nothing of its lineage was pushed")
        else:
            plan.action, row["lines"] = APPENDED, new
    elif stored.common == len(data):
        plan.refuse(f"the database holds {stored.lines - lines:,} line(s) more than the file "
                    f"({stored.size - len(data):,} bytes, written in the database since it was "
                    "pushed?); nothing of its lineage was pushed")
    elif stored.common == 0 and conn is not None and _migrated_there(conn, described.session,
                                                                     data):
        plan.refuse(f"the database holds it as session format version {model.CURRENT_VERSION} "
                    f"and the file as version {_version_of(data)}: a writer that opened it "
                    "migrated it in the database; nothing of its lineage was pushed (migrate "
                    f"the file the same way, 'journal repair --migrate {path}', and push "
                    "again)")
    else:
        at = data.count(b"\n", 0, stored.common)
        plan.refuse(f"the database holds other bytes: line {at + 1:,} (at byte "
                    f"{stored.common:,}) differs from the file's; nothing of its lineage was "
                    "pushed")
    if plan.action in (NEW, APPENDED):
        # what could not be stored is refused here, before any lease moves the epoch on
        start = 0 if stored is None else stored.size
        try:
            check_storable(path, start, data[start:])
        except WriteFailed as e:
            plan.refuse(f"cannot be stored ({e.reason}), and the file is as it was; nothing "
                        "of its lineage was pushed")
    row["action"] = plan.action
    return plan


def _compared(conn: psycopg.Connection[Any], session: str, data: bytes, digest: str,
              lines_in_data: int) -> _Stored | None:
    """The session `session` as the database holds it (None: not there), compared with
    `data` (whose SHA-256 is `digest`, its lines `lines_in_data`) line for line, a batch of
    rows at a time, from the end of what an earlier push found alike (`_alike_before`), all
    in one snapshot (a replacement committed meanwhile deletes rows of the generation
    read). What is found alike is recorded for the next push. An archive moved out of the
    database has no rows: it is alike when `data` has the SHA-256 recorded as it moved out
    (its own file may be on another machine)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        row = conn.execute(
            "SELECT id, generation, moved_out_at, moved_out_sha256, exported_to, successor, "
            "file_name, size, entries, alike_generation, alike_size, alike_sha256 "
            "FROM journal.streams WHERE session = %s AND generation IS NOT NULL",
            (session,)).fetchone()
        if row is None:
            return None
        generation = int(row[1])
        successor = None if row[5] is None else str(row[5])
        name = None if row[6] is None else str(row[6])
        if row[2] is not None:
            alike = digest == row[3]
            size = int(row[7]) if not alike else len(data)
            return _Stored(generation, size, int(row[8]), len(data) if alike else 0,
                           successor, name, str(row[4]))
        known = _alike_before(data, digest, generation, row[9:12])
        size = known
        lines = lines_in_data if known == len(data) else data.count(b"\n", 0, known)
        common: int | None = None
        view = memoryview(data)
        with conn.cursor(name="journal_push_compare") as cursor:
            cursor.itersize = 2000
            cursor.execute("SELECT line FROM journal.entries WHERE stream = %s AND "
                           "generation = %s AND byte_offset >= %s ORDER BY byte_offset",
                           (int(row[0]), generation, known))
            for (line,) in cursor:
                raw = str(line).encode("utf-8") + b"\n"
                if common is None and view[size:size + len(raw)] != raw:
                    common = size
                size += len(raw)
                lines += 1
    alike = size if common is None else common
    if alike > known:
        try:
            _remember_alike(conn, session, generation, alike, digest if alike == len(data)
                            else hashlib.sha256(view[:alike]).hexdigest())
        except psycopg.errors.InsufficientPrivilege:
            pass  # a role that may only read: the next push compares the whole session again
    return _Stored(generation, size, lines, alike, successor, name, None)


def _alike_before(data: bytes, digest: str, generation: int,
                  recorded: tuple[Any, ...]) -> int:
    """How many of `data`'s first bytes an earlier push found alike in the session's current
    `generation` (0: none): the recorded (generation, size, SHA-256), if they are the
    current generation's and the SHA-256 of the file's bytes up to that size. A generation's
    lines are only appended to, so what was alike then still is."""
    at, size, sha = recorded
    if at is None or int(at) != generation or size is None or not 0 < int(size) <= len(data):
        return 0
    size = int(size)
    found = digest if size == len(data) else hashlib.sha256(memoryview(data)[:size]).hexdigest()
    return size if found == sha else 0


def _remember_alike(conn: psycopg.Connection[Any], session: str, generation: int | None,
                    size: int, sha256: str) -> None:
    """Record, inside the caller's transaction, that the first `size` bytes of the session's
    current generation (if it is still `generation`, when given) have the SHA-256 `sha256`,
    as a file pushed has them: the next push compares only what comes after (schema
    version 7). Not recorded while another transaction holds the row (a record is only a
    shortcut: a push does not wait for one)."""
    conn.execute("UPDATE journal.streams SET alike_generation = generation, alike_size = %s, "
                 "alike_sha256 = %s WHERE id = (SELECT id FROM journal.streams WHERE "
                 "session = %s AND generation = coalesce(%s, generation) "
                 "FOR NO KEY UPDATE SKIP LOCKED)", (size, sha256, session, generation))


def _lineages(plans: list[_Plan]) -> list[list[_Plan]]:
    """The plans grouped by file lineage (a sealed file with the successor its seal names,
    when that is pushed too), each in the order its files were found; files of one session
    id are refused (which of them is the session is not the push's to guess)."""
    by_id: dict[str, list[_Plan]] = {}
    for plan in plans:
        if plan.file.session:
            by_id.setdefault(plan.file.session, []).append(plan)
    for same in by_id.values():
        if len(same) > 1:
            for plan in same:
                others = ", ".join(o.file.path for o in same if o is not plan)
                plan.refuse(f"the same session ({plan.file.session}) as {others}; push one "
                            "of them")
    group = {id(plan): i for i, plan in enumerate(plans)}

    def root(i: int) -> int:
        while parents[i] != i:
            i = parents[i]
        return i

    parents = list(range(len(plans)))
    for plan in plans:
        after = plan.file.successor
        for successor in by_id.get(after or "", ()):  # a refused copy's refusal is its too
            parents[root(group[id(plan)])] = root(group[id(successor)])
    for plan, unreadable in _links_to_unreadable(plans, by_id):
        parents[root(group[id(plan)])] = root(group[id(unreadable)])
    out: dict[int, list[_Plan]] = {}
    for i, plan in enumerate(plans):
        out.setdefault(root(i), []).append(plan)
    return list(out.values())


def _links_to_unreadable(plans: list[_Plan], by_id: dict[str, list[_Plan]]
                         ) -> Iterator[tuple[_Plan, _Plan]]:
    """(a plan, the plan of a file it is linked to that cannot be read): such a file (a
    damaged archive) has no session id or seal to link it by, yet a lineage through it is
    one all the same, and must not be pushed in parts. A file is linked to it when its
    header's `parentSession` names it (as `lineage.parent_of` finds the file a pointer
    names), and a sealed file whose successor is among no file read when its seal gives
    the successor a file name it is an archive of (`lineage.archive_name_of`): which
    session it holds cannot be read, and refusing both is the safe side."""
    unreadable = {os.path.realpath(p.file.path): p for p in plans
                  if not p.file.session and os.path.lexists(p.file.path)}
    if not unreadable:
        return
    names = {uncompressed_name(os.path.basename(path)) for path in unreadable}
    for plan in plans:
        pointer = plan.file.parent
        if pointer is not None and uncompressed_name(posixpath.basename(pointer)) in names:
            found = parent_of(plan.file.path)
            if found is not None and os.path.realpath(found) in unreadable:
                yield plan, unreadable[os.path.realpath(found)]
        named = plan.file.successor_file
        if named is not None and plan.file.successor not in by_id:
            for path, other in unreadable.items():
                if archive_name_of(named, path):
                    yield plan, other


def _push_lineage(database: _Database, plans: list[_Plan], lock_timeout: float) -> None:
    """Store one lineage's changes in one transaction, under the lease of every session of
    it that the database had and that this push appends to or seals; on a refusal, none of
    them (each plan says why). The connection is the writer's (`_Database.writer`) only
    once something is to be stored."""
    conninfo = database.conninfo
    refused = [plan for plan in plans if plan.action == REFUSED]
    for plan in plans:
        if refused and plan.action != REFUSED:
            plan.refuse(f"not pushed: {refused[0].file.path} of its lineage is refused")
    if refused:
        return
    ids = {plan.file.session for plan in plans}
    for plan in plans:
        after = plan.file.successor
        if after in ids and (plan.stored is None or plan.stored.successor is None):
            plan.seal = after
            plan.row["sealed"] = PostgresStorage(conninfo, after).locator
    # a session the database had, which this push changes: under its lease
    leased = sorted((plan for plan in plans if plan.stored is not None
                     and (plan.action == APPENDED or plan.seal is not None)),
                    key=lambda plan: plan.file.session)
    # named anew: a session stored without a file name, or whose file was compressed since
    # (a push between a rotation and its compression): a pull writes what the folder holds
    unnamed = {id(plan) for plan in plans if plan.stored is not None
               and plan.stored.file_name in (None, uncompressed_name(plan.file.name))
               and plan.stored.file_name != plan.file.name}
    if not leased and not unnamed and all(plan.action != NEW for plan in plans):
        return
    conn = database.writer()
    leases: dict[str, Lease] = {}
    culprit: _Plan | None = None  # the plan being worked on when it failed
    try:
        for culprit in leased:
            leases[culprit.file.session] = PostgresStorage(
                conninfo, culprit.file.session).lock(lock_timeout)
        with conn.transaction():
            for culprit in plans:
                _store(conn, conninfo, culprit, leases.get(culprit.file.session))
            culprit = None
            for plan in plans:
                if plan.seal is not None:
                    seal_in(conn, plan.file.session, plan.seal, plan.file.name)
                elif plan.stored is None or id(plan) in unnamed:
                    conn.execute("UPDATE journal.streams SET file_name = %s WHERE session = %s"
                                 " AND file_name IS NOT DISTINCT FROM %s",
                                 (plan.file.name, plan.file.session,
                                  None if plan.stored is None else plan.stored.file_name))
                    if plan.stored is not None and plan.stored.file_name:
                        plan.row["renamed"] = plan.stored.file_name
    except DatabaseUnavailable:
        raise
    except (JournalError, OSError, psycopg.Error) as e:
        if isinstance(e, psycopg.Error) and (conn.broken or conn.closed):
            raise
        reason = (_os_reason(e) if isinstance(e, OSError)
                  else describe(e) if isinstance(e, psycopg.Error) else str(e))
        _refuse_lineage(plans, culprit or plans[0], reason)
        return
    finally:
        for lease in leases.values():
            lease.release()
    for plan in plans:
        log.info("%s: %s", plan.file.path, plan.action)


def _os_reason(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):  # listed, then gone: a rotation moved it meanwhile
        return ("removed or renamed while it was pushed (a rotation meanwhile?): push again "
                "to bring its lineage as it is now")
    return describe_os_error(e)


def _refuse_lineage(plans: list[_Plan], culprit: _Plan, reason: str) -> None:
    """Refuse every plan of a lineage: `culprit` for `reason`, the others for it."""
    said = reason.removeprefix(f"{culprit.file.path}: ")
    culprit.refuse(f"{said}; nothing of its lineage was pushed")
    for plan in plans:
        if plan is not culprit:
            plan.refuse(f"not pushed: {culprit.file.path} of its lineage is refused")


def _store(conn: psycopg.Connection[Any], conninfo: str, plan: _Plan,
           lease: Lease | None) -> None:
    """The plan's new session or new lines, from the file read again: its first `used`
    bytes must be those compared (a file that grew since is pushed as far as it was then);
    for a session sealed as it is, a check that it still is what was compared."""
    if plan.action == UNCHANGED and plan.seal is not None:
        # to be sealed as it is: checked, under its row lock, to be still what was compared
        assert plan.stored is not None and lease is not None
        PostgresStorage(conninfo, plan.file.session).extend_in(
            conn, b"", epoch=lease.epoch, generation=plan.stored.generation,
            end=plan.stored.size)
        return
    if plan.action not in (NEW, APPENDED):
        return
    path = plan.file.path
    data, _ = _read(path)
    data = data[:plan.used]
    if len(data) != plan.used or hashlib.sha256(data).hexdigest() != plan.digest:
        raise TransferError("changed while it was pushed (rewritten, or rotated?): push "
                            "again")
    storage = PostgresStorage(conninfo, plan.file.session)
    try:
        if plan.action == NEW:
            try:
                storage.create_in(conn, data)
            except FileExistsError:
                raise TransferError(f"{storage.locator}: made in the database while it was "
                                    "pushed: push again") from None
        else:
            assert plan.stored is not None and lease is not None
            storage.extend_in(conn, data[plan.stored.size:], epoch=lease.epoch,
                              generation=plan.stored.generation, end=plan.stored.size)
        _remember_alike(conn, plan.file.session, None, plan.used, plan.digest)
    except WriteFailed as e:
        raise TransferError(f"cannot be stored ({e.reason}), and the file is as it "
                            "was") from e


def push_bytes(data: bytes, url: str) -> None:
    """Store one session's bytes as the session `url` names (a benchmark's and a test's
    shortcut to a big session: one COPY)."""
    PostgresStorage.from_url(url).create(data)


def _safe(conninfo: str) -> str:
    """The database as results and messages name it: without the password."""
    return shown(session_url(conninfo, "-").rsplit("session=", 1)[0].rstrip("?&"))


# pull


def _links(conninfo: str) -> dict[str, tuple[str | None, str | None]]:
    """Every session's file name and successor, oldest first."""

    def query(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute("SELECT session, file_name, successor FROM journal.streams "
                            "WHERE generation IS NOT NULL ORDER BY created_at, id").fetchall()

    return {str(r[0]): (r[1], r[2]) for r in with_shared(conninfo, query)}


def _sessions(conninfo: str, session: str | None,
              by_id: dict[str, tuple[str | None, str | None]]) -> list[tuple[str, str | None]]:
    """(session, file name) of what a pull writes, oldest of a lineage first."""
    if session is None:
        return [(s, v[0]) for s, v in by_id.items()]
    if session not in by_id:
        raise no_such_session(shown(session_url(conninfo, session)))
    parents = {str(v[1]): k for k, v in by_id.items() if v[1]}
    chain = [session]
    while chain[0] in parents and parents[chain[0]] not in chain:
        chain.insert(0, parents[chain[0]])
    while (after := by_id.get(chain[-1], (None, None))[1]) and after in by_id \
            and after not in chain:
        chain.append(str(after))
    return [(s, by_id[s][0]) for s in chain]


def _targets(conninfo: str, directory: str, sessions: list[tuple[str, str | None]],
             links: dict[str, tuple[str | None, str | None]]
             ) -> list[tuple[PostgresStorage, str, str | None]]:
    """(session, the file it is written to, the name it had where that was another's too).

    Two sessions can have one file name: files of one name pushed from two folders, or a
    session pushed back after a pull under its header's id while the one it was pulled from
    is still there. The lineage met first (the oldest) keeps its names; a later lineage with
    a name taken is written whole into a folder of its own, named by its first session's id
    (`<id>/<name>`), its files keeping their names relative to each other, so that its live
    file's `parentSession` still finds its archives; a session whose name its own lineage
    has already goes into a folder named by its own id. So the whole database can be
    pulled, and no file is written twice.

    An archive's name also stands for the name it had while live (`_Taken`), and the folder
    is named by a session a rotation does not replace: so a lineage is placed as an earlier
    pull placed it, whichever lineage rotated since, and that pull's copy of a session
    rotated since is found beside the archive (`_earlier_names`)."""
    named: list[tuple[str, str, PostgresStorage]] = []
    for session, name in sessions:
        storage = PostgresStorage(conninfo, session)
        relative = os.path.normpath(name or file_name(storage))
        if _leads_out(relative):
            raise TransferError(f"{storage.locator}: its file name {name!r} leads out of the "
                                "folder; nothing was written")
        named.append((session, relative, storage))
    lineages: dict[str, list[tuple[str, str, PostgresStorage]]] = {}
    for item in named:
        lineages.setdefault(_live_of(item[0], links), []).append(item)
    out: list[tuple[PostgresStorage, str, str | None]] = []
    taken = _Taken()

    def place(group: list[tuple[str, str, PostgresStorage]], folder_of: str) -> None:
        prefix = ""
        if any(taken.clashes(relative) for _, relative, _ in group):
            prefix = _folder_for(folder_of, [relative for _, relative, _ in group], taken)
        for _, relative, storage in group:
            placed = os.path.join(prefix, relative) if prefix else relative
            taken.add(placed)
            out.append((storage, os.path.join(directory, placed),
                        relative if prefix else None))

    for members in lineages.values():
        # a second session of a lineage under a name the lineage has already (a sealed one
        # pushed back after a pull, beside the one it was pulled from) goes on its own
        names: set[str] = set()
        group: list[tuple[str, str, PostgresStorage]] = []
        strays: list[tuple[str, str, PostgresStorage]] = []
        for member in members:
            (strays if _key(member[1]) in names else group).append(member)
            names.add(_key(member[1]))
        place(group, group[0][0])
        for stray in strays:
            place([stray], stray[0])
    return out


def _leads_out(relative: str) -> bool:
    """Whether a normalised relative name leads out of the folder it is written into."""
    return (os.path.isabs(relative) or relative == os.pardir
            or relative.startswith(os.pardir + os.sep))


def _key(relative: str) -> str:
    """A name as a file system that ignores case sees it (macOS's, by default): two names
    alike here are one file there."""
    return os.path.normcase(relative).casefold()


def _live_of(session: str, links: dict[str, tuple[str | None, str | None]]) -> str:
    """The live session of the lineage `session` belongs to (its successors followed)."""
    seen = {session}
    while (after := links.get(session, (None, None))[1]) and after in links \
            and after not in seen:
        seen.add(after)
        session = after
    return session


class _Taken:
    """The names a pull writes so far. A name clashes with one written (`_key`: as a file
    system that ignores case sees them), and a live file's name with an archive's name as
    it was live (`archive/<name>.2.gz` was `<name>`), either way: a pull made before that
    rotation wrote the live file there. Two archives of one live name do not clash (rotation
    numbered them so)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.live: set[str] = set()
        self.were_live: set[str] = set()

    def clashes(self, relative: str) -> bool:
        key, was = _key(relative), _was_live(relative)
        if key in self.names:
            return True
        return was in self.live if was is not None else key in self.were_live

    def add(self, relative: str) -> None:
        self.names.add(_key(relative))
        was = _was_live(relative)
        if was is None:
            self.live.add(_key(relative))
        else:
            self.were_live.add(was)


def _was_live(relative: str) -> str | None:
    """The key (`_key`) of the name an archive (a name in an `archive/` folder) had while
    live, beside that folder; None for a name that is not an archive's."""
    folder, name = os.path.split(relative)
    if os.path.basename(folder) != ARCHIVE_DIR:
        return None
    return _key(os.path.join(os.path.dirname(folder), live_name(name)))


def _folder_for(first: str, names: list[str], taken: _Taken) -> str:
    """A folder, named by the lineage's first session id (what of it a name may hold), in
    which none of `names` is taken (numbered if need be)."""
    tag = model.file_name_part(first) or "session"
    folder, n = tag, 1
    while any(taken.clashes(os.path.join(folder, name)) for name in names):
        n += 1
        folder = f"{tag}-{n}"
    return folder


def pull(url: str, directory: str | os.PathLike[str], *,
         skip_elsewhere: bool = False) -> PullResult:
    """Write the sessions `url` names into `directory` (see the module docstring).

    Raises TransferError if `directory` (or a folder above it) is a file, a file to be
    written exists already (nothing is written), an earlier pull's copy of a session
    rotated since holds bytes the database lacks (nothing is written), or an archive was
    moved out of the database to a file not here (nothing is written, unless
    `skip_elsewhere`: it is left out, and listed in `skipped`), NotASession, DatabaseError.

    Example:
        >>> pull("postgresql://me@db/journal?session=4f1c...", "restored/")  # doctest: +SKIP
    """
    directory = os.fspath(directory)
    if names_session(url):
        parsed = parse_url(url)
        conninfo, session = parsed.conninfo, parsed.session
    else:
        conninfo, session = database_of(url), None
    made = _make_folders(directory)
    try:
        with _only_pull_into(directory):
            for _ in range(PULL_TRIES):
                links = _links(conninfo)
                sessions = _sessions(conninfo, session, links)
                result = _pull_once(conninfo, directory, sessions, links, skip_elsewhere)
                if result is not None:
                    return result
                log.info("%s: rotated while it was pulled; pulling again", shown(url))
    except BaseException:
        _undo([], made)
        raise
    _undo([], made)
    raise TransferError(f"{shown(url)}: its sessions were rotated each of the {PULL_TRIES} "
                        "times they were pulled; nothing was written: run it again")


@contextmanager
def _only_pull_into(directory: str) -> Iterator[None]:
    """Hold `directory` (a `flock` on the folder itself: nothing is written there, and the
    kernel lets go when the process ends) for the whole pull: a second pull into it is
    refused, since it would take the first one's files as already there, and the first one's
    undo would then remove what the second reported written."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TransferError(f"{directory}: another pull is writing into it; nothing was "
                                "written (run this one when it has ended)") from None
        yield
    finally:
        os.close(fd)


def _pull_once(conninfo: str, directory: str, sessions: list[tuple[str, str | None]],
               links: dict[str, tuple[str | None, str | None]],
               skip_elsewhere: bool) -> PullResult | None:
    """Write `sessions`; None, with nothing written, if one of them was rotated (or renamed)
    meanwhile: their `links` (file name, successor) are read again once the last file is
    written. A file read after a rotation holds the seal, and would be written under the
    live name the listing gave it, its successor left out.

    A target that exists already is compared first: holding the bytes this pull would write
    there, it counts as written (a pull killed before it finished left it: running it again
    finishes it); other bytes refuse the pull before anything is written. Such files are the
    earlier run's, so an undo never removes them.

    An earlier pull's copy of a session rotated since, at the name it had while live
    (`earlier_copies`), is checked (and locked) before anything is written, and removed once
    everything is written and the links are found unchanged: from then on the pull is no
    longer undone (its files hold the copy's bytes), and a rerun finishes it."""
    targets = _targets(conninfo, directory, sessions, links)
    present = _already_there(targets, skip_elsewhere)
    try:
        copies = earlier_copies.find(_earlier_names(targets, links),
                                     skip_elsewhere=skip_elsewhere)
    except earlier_copies.CopyDiffers as e:
        raise TransferError(str(e)) from e
    except LockTimeout as e:
        raise TransferError(f"{e}; nothing was written (an earlier pull's copy of a session "
                            "rotated since, which the pull would remove)") from e
    except ArchiveElsewhere as e:
        raise TransferError(f"{e}; nothing was written (--skip-elsewhere pulls the "
                            "rest)") from e
    try:
        return _write_all(conninfo, directory, sessions, links, skip_elsewhere, targets,
                          present, copies)
    finally:
        earlier_copies.release(copies)


def _write_all(conninfo: str, directory: str, sessions: list[tuple[str, str | None]],
               links: dict[str, tuple[str | None, str | None]], skip_elsewhere: bool,
               targets: list[tuple[PostgresStorage, str, str | None]],
               present: dict[str, int],
               copies: list[earlier_copies.EarlierCopy]) -> PullResult | None:
    """`_pull_once`'s writing, once every check is made."""
    earlier_copies.reached("checked")
    for folder in sorted({os.path.dirname(path) or "." for _, path, _ in targets}):
        if os.path.isdir(folder):  # what a killed pull left, never a live one's (flock)
            remove_stale_temps(folder, suffix=f".{PULL_TAG}{TEMP_SUFFIX}")
    # the files this pull publishes, each with its own file's identity, noted before it is
    # published: a SIGTERM landing just after the publication still finds it to undo, and
    # a file of another found at that name is told apart and left
    written: list[tuple[str, os.stat_result]] = []
    made: list[str] = []  # folders this pull created, outermost first
    result = PullResult(directory)
    try:
        for storage, path, shared in targets:
            already = path in present
            if already:
                size = present[path]
            else:
                try:
                    opened = storage.open_reader()
                except ArchiveElsewhere as e:
                    if not skip_elsewhere:
                        raise TransferError(f"{e}; nothing was written (--skip-elsewhere "
                                            "pulls the rest)") from e
                    result.skipped.append({"session": storage.locator, "file": path,
                                           "elsewhere": e.path})
                    continue
                made += _make_folders(os.path.dirname(path) or ".")
                with opened as reader, NewFile(path, PULL_TAG) as new:
                    parts = archivegz.chunks(reader.stream, reader.size, storage.locator)
                    with new.stream() as raw:  # a chunk at a time: an archive may be long
                        _write_as_pulled(parts, path, raw)
                        size = raw.tell()
                        written.append((path, os.fstat(raw.fileno())))
                    try:
                        new.publish(replace=False)
                    except FileExistsError:
                        # another pull of the same sessions, say: the same bytes are as good
                        if file_digest(path) != file_digest(new.path):
                            raise TransferError(f"{path} appeared meanwhile; nothing was "
                                                "written") from None
                        already = True
            relative = os.path.relpath(path, directory)
            row = {"session": storage.locator, "file": path, "bytes": size,
                   "archive": os.path.basename(os.path.dirname(relative)) == ARCHIVE_DIR,
                   "already": already}
            if shared is not None:
                row["renamed_from"] = os.path.join(directory, shared)
            result.files.append(row)
        now = _links(conninfo)
        if all(now.get(s) == links.get(s) for s, _ in sessions):
            _retire(copies, result, written, made)
            return result
    except BaseException:
        _undo(written, made)
        raise
    _undo(written, made)
    return None


def _earlier_names(targets: list[tuple[PostgresStorage, str, str | None]],
                   links: dict[str, tuple[str | None, str | None]]
                   ) -> list[tuple[PostgresStorage, str, str]]:
    """(sealed session, the archive it is written to, its live name beside the archive
    folder) for each sealed session a pull writes into an `archive/` folder: where an
    earlier pull, made while it was live, wrote it. A name this pull writes is not one."""
    written = {_key(path) for _, path, _ in targets}
    out = []
    for storage, path, _ in targets:
        folder, name = os.path.split(path)
        if links.get(storage.session, (None, None))[1] is None \
                or os.path.basename(folder) != ARCHIVE_DIR:
            continue
        live = os.path.join(os.path.dirname(folder), live_name(name))
        if _key(live) not in written:
            out.append((storage, path, live))
    return out


def _retire(copies: list[earlier_copies.EarlierCopy], result: PullResult,
            written: list[tuple[str, os.stat_result]], made: list[str]) -> None:
    """Remove the earlier copies (each a beginning of an archive this pull has written or
    found there), once checked to be as they were. From the first removal on, nothing
    the pull wrote is undone: its files hold the bytes of the copies removed."""
    earlier_copies.reached("written")
    try:
        earlier_copies.check_unchanged(copies)
    except earlier_copies.CopyDiffers as e:
        raise TransferError(str(e)) from e
    if not copies:
        return
    written.clear()
    made.clear()
    for copy in copies:
        earlier_copies.retire(copy)
        result.archived.append({"session": copy.session, "file": copy.path,
                                "archive": copy.archive, "bytes": copy.digest[0]})


def _write_as_pulled(parts: Iterable[bytes], path: str, raw: BinaryIO) -> None:
    """Write a session's bytes as the pull writes them to `path`: compressed as rotation
    compresses archives when the name ends in `.gz`."""
    if is_compressed(path):
        archivegz.write(parts, raw)
    else:
        for part in parts:
            raw.write(part)


class _Digest:
    """A write-only stream that keeps the length and SHA-256 of what is written to it."""

    def __init__(self) -> None:
        self.hasher, self.size = hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def digest(self) -> tuple[int, str]:
        return self.size, self.hasher.hexdigest()


def _already_there(targets: list[tuple[PostgresStorage, str, str | None]],
                   skip_elsewhere: bool) -> dict[str, int]:
    """The targets that exist and hold exactly the bytes the pull would write there (their
    sizes); TransferError, before anything is written, for one holding anything else."""
    present: dict[str, int] = {}
    for storage, path, _ in targets:
        if not os.path.lexists(path):
            continue
        there = file_digest(path)
        try:
            opened = storage.open_reader()
        except ArchiveElsewhere as e:
            if skip_elsewhere:
                continue  # left out, and the file there left as it is
            raise TransferError(f"{e}; nothing was written (--skip-elsewhere pulls the "
                                "rest)") from e
        with opened as reader:
            if there is not None and (is_compressed(path) or there[0] == reader.size):
                wanted = _Digest()
                _write_as_pulled(archivegz.chunks(reader.stream, reader.size,
                                                  storage.locator), path,
                                 cast(BinaryIO, wanted))
                if wanted.digest() == there:
                    present[path] = there[0]
                    continue
        raise TransferError(f"{path} already exists and is not what the pull would write "
                            "there; nothing was written (a copy of a session written to in "
                            "the database since an earlier pull, finished or killed, wrote "
                            "it? or another file of that name): to pull the sessions as they "
                            "are now, remove the folder's files or pull into an empty folder")
    return present


def _undo(written: list[tuple[str, os.stat_result]], made: list[str]) -> None:
    """Remove the files a pull wrote (where the name leads to the very file it wrote: never
    another's), then the folders it made (those still empty)."""
    for path, mine in written:
        try:
            if os.path.samestat(os.lstat(path), mine):
                os.unlink(path)
        except OSError:
            pass
    for folder in reversed(made):
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _make_folders(folder: str) -> list[str]:
    """Make `folder` and any missing folders above it: the ones made, outermost first.
    TransferError, with nothing made, where `folder` or a folder above it is something else
    (a session file named as the folder to pull into, say)."""
    missing: list[str] = []
    while folder and not os.path.isdir(folder):
        if os.path.lexists(folder):
            what = "a file, not a folder" if os.path.isfile(folder) else "not a folder"
            raise TransferError(f"{folder}: is {what}; a pull writes into a folder (made if "
                                "missing): name one; nothing was written")
        missing.insert(0, folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for each in missing:
        os.makedirs(each, exist_ok=True)
    return missing


# listing


def database_sessions(url: str | None = None) -> list[dict[str, Any]]:
    """One row per lineage in the database (`journal ls URL`): its live session, its file,
    how many sessions it spans (the sealed ones before), the live session's entries and
    bytes, when it was created and last written, and who holds its lease (if anyone: pid,
    host, since). Times are UTC with milliseconds, as the store writes them."""
    conninfo = database_of(url)

    def query(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute(
            f"SELECT s.session, s.successor, s.file_name, coalesce(e.entries, s.entries), "
            f"coalesce(e.size, s.size), s.created_at, s.updated_at, CASE WHEN EXISTS (SELECT 1 "
            f"FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND "
            f"l.pid = s.holder_backend) THEN s.holder_pid END, s.holder_host, s.holder_since "
            f"FROM "
            f"{schema.STREAMS_WITH_END} "
            f"WHERE s.generation IS NOT NULL ORDER BY s.created_at, s.id").fetchall()

    rows = with_shared(conninfo, query)
    before = {str(r[1]): str(r[0]) for r in rows if r[1]}
    present = {str(r[0]) for r in rows}
    out = []
    for r in rows:
        if r[1] and str(r[1]) in present:  # sealed: counted with its successor
            continue
        span, current = 1, str(r[0])
        while current in before and span < 10_000:
            current, span = before[current], span + 1
        out.append({"session": r[0], "url": session_url(_safe(conninfo), str(r[0])),
                    "file": r[2], "sessions": span, "entries": max(0, int(r[3]) - 1),
                    "size": r[4],
                    "created": _iso(r[5]), "updated": _iso(r[6]),
                    "holder": ({"pid": r[7], "host": r[8], "since": _iso(r[9])}
                               if r[7] is not None else None)})
    return out


def _iso(value: Any) -> str | None:
    """A database time as the store writes times (`model.iso_millis`)."""
    return model.iso_millis(value) if value is not None else None
