"""Moving sessions between the file backend and a database: `journal push` and `journal pull`.

`push(PATH, URL)` stores session files in the database: a file with its whole lineage (the
archived files it continues, compressed or not, and the live one), or every session file
under a folder. Each file becomes one session, named by its header's id, holding its bytes
verbatim (a compressed archive's uncompressed bytes), with its file name (relative to the
session's folder: `archive/<name>.jsonl.gz` for an archive) and, for a sealed file, its
successor when that is pushed too. Everything is pushed in one transaction: all of it or
nothing. A session already in the database with the same bytes is skipped (a push can be
repeated); with other bytes, the push is refused.

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
import re
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

import psycopg

from .. import archivegz, codec
from ..archivegz import is_compressed
from ..errors import ArchiveElsewhere, JournalError, NotASession, WriteFailed
from ..files import TEMP_SUFFIX, remove_stale_temps
from ..lineage import ARCHIVE_DIR, lineage
from ..publish import NewFile
from ..seal import is_seal
from ..snapshot import last_newline_end
from . import schema
from .connect import DatabaseError, connect, describe, with_shared
from .rotation import file_name
from .storage import PostgresStorage
from .url import (
    DATABASE_ENV,
    is_database_url,
    names_session,
    parse_database,
    parse_url,
    session_url,
    shown,
)

__all__ = ["PullResult", "PushResult", "TransferError", "database_of", "database_sessions",
           "pull", "push", "push_bytes"]

log = logging.getLogger(__name__)

PULL_TAG = "pull"
# times in all a pull writes its sessions when, each time, one of them was rotated meanwhile
PULL_TRIES = 3
_SIDE = (".quarantine", ".lock", ".bak", ".tmp", ".rotating", "~")


class TransferError(JournalError):
    """A push or pull that cannot be done; nothing was changed."""


@dataclass
class PushResult:
    """What a push stored (session URLs) and what it skipped (already there, same bytes)."""

    database: str
    pushed: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"database": self.database, "pushed": self.pushed, "skipped": self.skipped}


@dataclass
class PullResult:
    """The files a pull wrote (with those it found already there, holding the bytes it would
    have written: `already` true), and the archives it left out (`skip_elsewhere`): moved out
    of the database to a file not on this machine."""

    directory: str
    files: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"directory": self.directory, "files": self.files, "skipped": self.skipped}


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
    session: str
    successor: str | None


def _is_session_file(name: str) -> bool:
    return ((name.endswith(".jsonl") or name.endswith(".jsonl.gz"))
            and not name.startswith(".") and not any(p in name for p in _SIDE))


def _files_to_push(source: str) -> list[tuple[str, str]]:
    """(path, name relative to the session folder) of every file `source` stands for."""
    if os.path.isdir(source):
        found = []
        for root, dirs, names in os.walk(source):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(root, name)
                if _is_session_file(name) and not os.path.islink(path):
                    found.append((path, os.path.relpath(path, source)))
        return found
    if not os.path.isfile(source):
        raise NotASession(source, "no such file or directory")
    chain = lineage(os.path.realpath(source))
    folder = os.path.dirname(chain[-1])
    return [(path, _name_in(folder, path)) for path in chain]


def _name_in(folder: str, path: str) -> str:
    """The name `path` is stored under, relative to the live file's `folder`: an archive
    that rotation put outside that folder (`--archive-dir`) is named as rotation names one
    kept beside it (`archive/<name>`), so that a pull writes it inside the folder."""
    relative = os.path.relpath(path, folder)
    if _leads_out(relative):
        return posixpath.join(ARCHIVE_DIR, os.path.basename(path))
    return relative


def _read(path: str) -> bytes:
    """The session bytes of the file (an archive's uncompressed); TransferError for a torn
    tail or a damaged archive."""
    with open(path, "rb") as f:
        data = f.read()
    if is_compressed(path):
        try:
            data = archivegz.decompress(data, path)
        except NotASession as e:
            raise TransferError(str(e)) from e
    if data and not data.endswith(b"\n"):
        raise TransferError(f"{path}: its last line is incomplete (a torn tail); open it for "
                            "writing once (or run 'journal repair') before pushing it")
    return data


def _described(path: str, name: str, data: bytes) -> _File:
    """The file's session id (its header's) and the successor its seal names, if any."""
    first = data.split(b"\n", 1)[0]
    try:
        header = codec.loads(first) if first else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("type") != "session" or not isinstance(
            header.get("id"), str):
        raise TransferError(f"{path}: no session header with an id on its first line")
    successor = None
    end = last_newline_end(io.BytesIO(data), len(data))
    last = data[data.rfind(b"\n", 0, end - 1) + 1:end]
    try:
        entry = codec.loads(last) if last else None
    except ValueError:
        entry = None
    if isinstance(entry, dict) and is_seal(entry):
        found = entry["data"].get("sessionId")
        successor = found if isinstance(found, str) else None
    return _File(path, name, str(header["id"]), successor)


def push(source: str | os.PathLike[str], url: str | None = None) -> PushResult:
    """Store session files in the database `url` names (see the module docstring); each
    becomes the session its header names, so a URL naming a session is refused.

    Raises TransferError (a torn tail, no header, a session already in the database with
    other bytes, two files with one session id), NotASession, DatabaseError. Nothing is
    stored unless everything is.

    Example:
        >>> push("sessions/", "postgresql://me@db/journal")  # doctest: +SKIP
    """
    if url and names_session(url):
        raise TransferError(f"{shown(url)}: push takes a database URL (no session=, no "
                            "pg:<id>): each file becomes the session its header names")
    conninfo = database_of(url)
    # each file read twice, here and as it is stored, so that one is in memory at a time
    files = [_described(path, name, _read(path))
             for path, name in _files_to_push(os.fspath(source))]
    ids: dict[str, str] = {}
    for f in files:
        if f.session in ids:
            raise TransferError(f"{f.path} and {ids[f.session]} are the same session "
                                f"({f.session}); push one of them")
        ids[f.session] = f.path
    result = PushResult(_safe(conninfo))
    conn = connect(conninfo)
    try:
        with conn.transaction():
            for f in files:
                storage = PostgresStorage(conninfo, f.session)
                data = _read(f.path)
                if _described(f.path, f.name, data) != f:
                    raise TransferError(f"{f.path}: its header or seal changed while it was "
                                        "pushed; nothing was pushed")
                existing = _stored_bytes(conn, f.session, data)
                entry = {"file": f.path, "name": f.name, "session": storage.locator,
                         "bytes": len(data)}
                if existing is not None:
                    if existing != data:
                        raise TransferError(f"{f.path}: the session {f.session} is already "
                                            "in the database with other bytes; nothing was "
                                            "pushed")
                    result.skipped.append(entry)
                    continue
                try:
                    storage.create_in(conn, data)
                except WriteFailed as e:
                    raise TransferError(f"{f.path}: cannot be stored ({e.reason}); nothing "
                                        "was pushed, and the file is as it was") from e
                result.pushed.append(entry)
            # what a session skipped (already there) has, it keeps: its name and successor
            for f in files:
                successor = f.successor if f.successor in ids else None
                conn.execute(
                    "UPDATE journal.streams SET file_name = coalesce(file_name, %s), "
                    "successor = coalesce(successor, %s), sealed_at = CASE WHEN successor "
                    "IS NULL AND %s::text IS NOT NULL THEN coalesce(sealed_at, now()) ELSE "
                    "sealed_at END WHERE session = %s",
                    (f.name, successor, successor, f.session))
    except psycopg.Error as e:
        if conn.broken or conn.closed:
            raise DatabaseError(f"the connection was lost during the push, which may have "
                                "been stored all the same: push again (what is there "
                                f"already with the same bytes is skipped): {describe(e)}"
                                ) from e
        raise DatabaseError(f"the push was not stored (nothing changed): {describe(e)}") from e
    finally:
        conn.close()
    return result


def push_bytes(data: bytes, url: str) -> None:
    """Store one session's bytes as the session `url` names (a benchmark's and a test's
    shortcut to a big session: one COPY)."""
    PostgresStorage.from_url(url).create(data)


def _stored_bytes(conn: psycopg.Connection[Any], session: str, like: bytes) -> bytes | None:
    """The session's bytes in the database (None: not there). An archive moved out of the
    database has no rows: it is `like` (the file pushed) when that file's bytes have the
    SHA-256 recorded as it moved out (its own file may be on another machine)."""
    row = conn.execute("SELECT id, generation, moved_out_at, moved_out_sha256 FROM "
                       "journal.streams WHERE session = %s AND generation IS NOT NULL",
                       (session,)).fetchone()
    if row is None:
        return None
    if row[2] is not None:
        return like if hashlib.sha256(like).hexdigest() == row[3] else b""
    lines = conn.execute("SELECT line FROM journal.entries WHERE stream = %s AND "
                         "generation = %s ORDER BY position", (row[0], row[1])).fetchall()
    return b"".join(str(line[0]).encode("utf-8") + b"\n" for line in lines)


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
        raise NotASession(shown(session_url(conninfo, session)),
                          "no such session in the database")
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
    a name taken is written whole into a folder of its own, named by its live session's id
    (`<id>/<name>`), its files keeping their names relative to each other, so that its live
    file's `parentSession` still finds its archives; a session whose name its own lineage
    has already goes into a folder named by its own id. So the whole database can be
    pulled, and no file is written twice."""
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
    taken: set[str] = set()

    def place(group: list[tuple[str, str, PostgresStorage]], folder_of: str) -> None:
        prefix = ""
        if any(_key(relative) in taken for _, relative, _ in group):
            prefix = _folder_for(folder_of, [relative for _, relative, _ in group], taken)
        for _, relative, storage in group:
            placed = os.path.join(prefix, relative) if prefix else relative
            taken.add(_key(placed))
            out.append((storage, os.path.join(directory, placed),
                        relative if prefix else None))

    for live, members in lineages.items():
        # a second session of a lineage under a name the lineage has already (a sealed one
        # pushed back after a pull, beside the one it was pulled from) goes on its own
        names: set[str] = set()
        group: list[tuple[str, str, PostgresStorage]] = []
        strays: list[tuple[str, str, PostgresStorage]] = []
        for member in members:
            (strays if _key(member[1]) in names else group).append(member)
            names.add(_key(member[1]))
        place(group, live)
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


def _folder_for(live: str, names: list[str], taken: set[str]) -> str:
    """A folder, named by the lineage's live session id (what of it a name may hold), in
    which none of `names` is taken (numbered if need be)."""
    tag = re.sub(r"[^A-Za-z0-9._-]", "_", live).strip(".") or "session"
    folder, n = tag, 1
    while any(_key(os.path.join(folder, name)) in taken for name in names):
        n += 1
        folder = f"{tag}-{n}"
    return folder


def pull(url: str, directory: str | os.PathLike[str], *,
         skip_elsewhere: bool = False) -> PullResult:
    """Write the sessions `url` names into `directory` (see the module docstring).

    Raises TransferError if a file to be written exists already (nothing is written), or
    an archive was moved out of the database to a file not here (nothing is written, unless
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
    earlier run's, so an undo never removes them."""
    targets = _targets(conninfo, directory, sessions, links)
    present = _already_there(targets, skip_elsewhere)
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
                        if _file_digest(path) != _file_digest(new.path):
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
            return result
    except BaseException:
        _undo(written, made)
        raise
    _undo(written, made)
    return None


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


def _file_digest(path: str) -> tuple[int, str] | None:
    """The length and SHA-256 of the regular file `path` (never through a link); None for
    anything else there (a link, a folder, a FIFO): never a file this pull would write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = _Digest()
        while part := f.read(archivegz.CHUNK):
            digest.write(part)
    return digest.digest()


def _already_there(targets: list[tuple[PostgresStorage, str, str | None]],
                   skip_elsewhere: bool) -> dict[str, int]:
    """The targets that exist and hold exactly the bytes the pull would write there (their
    sizes); TransferError, before anything is written, for one holding anything else."""
    present: dict[str, int] = {}
    for storage, path, _ in targets:
        if not os.path.lexists(path):
            continue
        there = _file_digest(path)
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
                            "there; nothing was written (left by a pull killed before a "
                            "session it pulled changed? remove the folder's files, or pull "
                            "into an empty folder)")
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
    """Make `folder` and any missing folders above it: the ones made, outermost first."""
    missing: list[str] = []
    while folder and not os.path.isdir(folder):
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
    bytes, when it was created and last written, and who holds its lease (if anyone)."""
    conninfo = database_of(url)

    def query(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute(
            f"SELECT s.session, s.successor, s.file_name, coalesce(e.entries, s.entries), "
            f"coalesce(e.size, s.size), s.created_at, s.updated_at, CASE WHEN EXISTS (SELECT 1 "
            f"FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND "
            f"l.pid = s.holder_backend) THEN s.holder_pid END, s.holder_host FROM "
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
                    "holder": {"pid": r[7], "host": r[8]} if r[7] is not None else None})
    return out


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None
