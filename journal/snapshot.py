"""Read-only loading of a session file: header, entries (migrated to v3) and diagnostics."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from . import archivegz, claude, codec
from .archivegz import is_compressed
from .boundary import is_compaction, is_first_kept
from .codec import Diagnostic, Line, last_newline_end
from .errors import ForeignSession, JournalError, NotASession
from .header import is_header, stream_first_line
from .model import CURRENT_VERSION, Entry, header_version, migrate
from .pg.url import is_database_url, names_session, shown
from .storage import FileStorage, Storage, as_storage
from .tree import Tree

__all__ = ["Snapshot", "last_newline_end", "load", "resume", "read_stream", "open_for_reading",
           "stored_size", "find_last_of_type", "dialect_of_storage",
           "refuse_foreign", "refuse_misread", "require_session"]


@dataclass
class Snapshot:
    """A session file as read at one moment. Loading never takes the lock or rewrites the file.

    `end` is the offset just past the last complete line: everything a reader consumed.
    `complete` is False when only the tail needed for the live context was read (`resume`).
    `lines` holds each entry's line number (1-based; 0 where unknown, after a reverse scan).
    `field_issues` names entries that were kept although some field has the wrong JSON type
    (`model.bad_fields`): unlike `diagnostics`, no byte of the file went unused.
    """

    path: str
    header: Entry | None
    entries: list[Entry]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    size: int = 0
    end: int = 0
    complete: bool = True
    lines: list[int] = field(default_factory=list)
    field_issues: list[Diagnostic] = field(default_factory=list)
    dialect: str = claude.PI
    leaf_id: str | None = None
    """The leaf a resume continues from, when it is not the last entry (a Claude Code
    transcript's); None: the last entry."""
    claude: claude.ClaudeRead | None = None
    """For a Claude Code transcript, what `journal.claude` read (records, metadata, and the
    translator that continues with what is appended)."""

    def tree(self) -> Tree:
        """The entry tree of what was read, its leaf where a resume continues."""
        tree = Tree(self.entries, complete=self.complete)
        if self.leaf_id is not None:
            tree.leaf = tree.index_of(self.leaf_id)
        return tree

    @property
    def version(self) -> int:
        return header_version(self.header)

    @property
    def session_id(self) -> str | None:
        return self.header.get("id") if self.header else None


def open_for_reading(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a session file read-only, turning OS errors into clear `NotASession` errors.

    A database session URL (`journal.pg.url`) is opened as its reader's byte stream.
    Only a regular file is opened: a FIFO, device or socket raises NotASession at once
    (it is opened non-blocking and checked with fstat), so nothing hangs or reads forever.
    """
    if is_database_url(path):  # a database session: its bytes through the storage seam
        return as_storage(path).open_reader().stream
    return FileStorage(os.fspath(path)).open_stream()


def stored_size(path: str | os.PathLike[str]) -> int:
    """The bytes `path` holds as stored (a file's size, a database session's size); 0 when
    it cannot be told."""
    try:
        return as_storage(path).size() if is_database_url(path) else os.stat(path).st_size
    except (OSError, JournalError):
        return 0


def dialect_of_storage(storage: Storage, dialect: str | None = None) -> str:
    """The dialect of a session's bytes (`journal.claude.detect`), or `dialect` if given.

    Compressed archives are pi's, and so is every session of another backend (`_pi_by_kind`),
    which is not read twice to tell.
    """
    if claude.check_dialect(dialect) is not None:
        return dialect  # type: ignore[return-value]
    if _pi_by_kind(storage):
        return claude.PI
    with storage.open_reader() as reader:
        return claude.detect_stream(reader.stream)


def _pi_by_kind(storage: Storage) -> bool:
    """Whether `storage` holds a pi session whatever its bytes say: a compressed archive, or
    a session of another backend (only this library writes them)."""
    return not isinstance(storage, FileStorage) or is_compressed(storage.locator)


def refuse_foreign(target: str | os.PathLike[str] | Storage) -> None:
    """Refuse to write to a session another program writes (a Claude Code transcript):
    raises `ForeignSession`. Every writer (`Session.open`, rotation) asks before it takes a
    lock, so nothing is left behind. A path that is not an existing file passes (the opening
    says why it cannot be used, or follows it where a rotation moved it: also when that
    happens between the look and the read)."""
    path: str | None = None
    if isinstance(target, (str, os.PathLike)):
        path = os.path.realpath(target)
        if not os.path.isfile(path):
            return
        storage: Storage = FileStorage(path)
    else:
        storage = target
    try:
        dialect = dialect_of_storage(storage)
    except NotASession:
        if path is not None and not os.path.lexists(path):
            return  # moved away (rotated) since it was looked at
        raise
    if dialect != claude.PI:
        raise ForeignSession(storage.locator, "Claude Code")


_KINDS = {claude.PI: ("a pi session", "pi's"),
          claude.CLAUDE: ("a Claude Code transcript", "Claude Code's")}


def refuse_misread(target: str | os.PathLike[str] | Storage, dialect: str, *,
                   reading: bool = False) -> None:
    """Refuse to take a session for `dialect` when it is of the other one (a pi session
    forced as `"claude"`, a Claude Code transcript forced as `"pi"`): raises `NotASession`
    before anything is locked or written. The one rule of a forced dialect, for repair and
    every reader; the counterpart of `refuse_foreign`. A database session and a compressed
    archive are pi's (only this library writes them), and a whole database (its URL without
    `session`, `pg:`) is refused as a database; a file's own records say what it is,
    and one whose records state no dialect passes (empty, or cut in its first write: a
    subagent file is a transcript by where it is, whatever such bytes say).

    The message says what the session is and what to do instead: a repair (the default)
    names `journal repair --dialect D PATH`; a reader (`reading`: every read command) names
    `--dialect D`, or none, where reading on would only find "not a session". (Repair does
    not offer "none": it takes a subagent file for a transcript unless told otherwise.)
    """
    claude.check_dialect(dialect)
    stated: str | None = claude.PI
    if is_database_url(target):
        locator = shown(target)
        if dialect != stated and not names_session(str(target)):
            raise _misread_database(locator, reading)
    else:
        storage = as_storage(target)
        locator = storage.locator
        if not _pi_by_kind(storage):
            with storage.open_reader() as reader:
                stated = claude.stated_dialect(reader.stream)
    if stated is None or stated == dialect:
        return
    kind, owner = _KINDS[stated]
    flag = f"--dialect {stated}"
    remedy = (f"read it as {kind} ({flag}, or no --dialect)" if reading else
              f"nothing was changed: repair it as {kind} ('journal repair {flag} "
              f"{locator}')")
    raise NotASession(locator, f"{kind}, not {_KINDS[dialect][0]} (its records are "
                      f"{owner}); {remedy}")


def _misread_database(locator: str, reading: bool) -> NotASession:
    """A whole database forced as Claude Code's: it is no session, and holds pi's only."""
    remedy = ("read its sessions as pi sessions (--dialect pi, or no --dialect)" if reading
              else f"nothing was changed: repair its sessions as pi sessions ('journal repair "
              f"{locator}', or --dialect pi)")
    return NotASession(locator, f"a database, not a Claude Code transcript (it holds pi "
                       f"sessions only); {remedy}")


def require_session(snap: Snapshot) -> None:
    """Refuse a reading in which nothing looks like a session (no header, no entry):
    raises `NotASession`. A Claude Code transcript read as a pi session (`dialect="pi"`
    forced) is what such a reading is too, and is said to be one (`refuse_misread`)."""
    if snap.header is not None or snap.entries:
        return
    if snap.dialect == claude.PI:
        refuse_misread(snap.path, claude.PI, reading=True)
    what = "a session" if is_database_url(snap.path) else "a session file"
    raise NotASession(snap.path, f"not {what} (no session header, no entries)")


def _read_as_claude(storage: Storage, dialect: str | None) -> bool:
    """Whether `load`/`resume` read `storage` as a Claude Code transcript; a pi session file
    forced as one is refused (`refuse_misread`)."""
    if dialect_of_storage(storage, dialect) != claude.CLAUDE:
        return False
    if dialect is not None:
        refuse_misread(storage, claude.CLAUDE, reading=True)
    return True


def from_claude(read: claude.ClaudeRead) -> Snapshot:
    """A Snapshot of a Claude Code transcript (no header: its entries are translated)."""
    return Snapshot(read.path, None, read.entries, list(read.diagnostics), size=read.size,
                    end=read.end, complete=read.complete, lines=read.lines,
                    dialect=claude.CLAUDE, leaf_id=read.leaf_id, claude=read)


def load(path: str | os.PathLike[str] | Storage, *, dialect: str | None = None) -> Snapshot:
    """Read a whole session (a file path, or any `Storage`) without locking it.

    A Claude Code transcript is detected from its records (or forced with
    `dialect="claude"`) and read by `journal.claude`, its subagent files included. A file
    whose records are pi's is not taken for one: forcing it raises `NotASession` saying so.

    Version 1 and 2 files are migrated in memory; the file is never rewritten. Bad lines are
    reported in `diagnostics`, never raised. A `.gz` file (a compressed archive) is read
    through gzip; its `size` is the compressed size, its offsets are those of the
    uncompressed data.

    Example:
        >>> snap = load("sessions/a.jsonl")  # doctest: +SKIP
        >>> len(snap.entries), [d.reason for d in snap.diagnostics]
    """
    storage = as_storage(path)
    locator = storage.locator
    if _read_as_claude(storage, dialect):
        return from_claude(claude.read(storage))
    with storage.open_reader() as reader, codec.bulk_parsing():
        if not is_compressed(locator):
            return read_stream(locator, reader.stream)
        with archivegz.unpacked(reader.stream, locator) as unpacked:
            return read_stream(locator, unpacked)


def read_stream(path: str, f: IO[bytes], start: int = 0, version: int | None = None) -> Snapshot:
    """Read entries from byte `start`. Given `version`, the stream is a continuation (no
    header expected, entries of a version 3 file as they are); otherwise it is a whole file."""
    continuation = version is not None
    header: Entry | None = None
    raw_entries: list[Entry] = []
    positions: list[int] = []
    line_numbers: list[int] = []
    diagnostics: list[Diagnostic] = []
    field_issues: list[Diagnostic] = []
    parsed_count = 1 if continuation else 0
    end = start
    version = CURRENT_VERSION if version is None else version
    for item in codec.iter_lines(f, start):
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
            continue
        end = item.offset + len(item.raw) + 1
        value = codec.parse_line(item)
        if value is None:
            continue
        if isinstance(value, Diagnostic):
            diagnostics.append(value)
            continue
        parsed_count += 1
        if parsed_count == 1:
            if is_header(value):
                header = value
                version = header_version(header)
                continue
            diagnostics.append(
                Diagnostic(0, 0, codec.MISSING_HEADER, 1, "first line is not a session header")
            )
        if is_header(value):
            diagnostics.append(
                Diagnostic(item.offset, len(item.raw), codec.EXTRA_HEADER, item.number,
                           "a session header after the first line")
            )
            continue
        problem = codec.check_entry(value, version)
        if problem is not None:
            diagnostics.append(
                Diagnostic(item.offset, len(item.raw), problem.split(":")[0], item.number, problem)
            )
            continue
        _note_bad_fields(value, item, field_issues)
        raw_entries.append(value)
        positions.append(parsed_count - 1)
        line_numbers.append(item.number)
    entries = raw_entries if continuation else migrate(header, raw_entries, positions)
    size = f.seek(0, os.SEEK_END)  # any seekable stream, not only a file's
    return Snapshot(path, header, entries, diagnostics, size=size, end=end, lines=line_numbers,
                    field_issues=field_issues)


def _note_bad_fields(entry: Entry, line: Line, issues: list[Diagnostic]) -> None:
    """Report wrongly typed fields; the entry itself is kept, as pi keeps it."""
    problem = codec.field_problem(entry)
    if problem is not None:
        issues.append(Diagnostic(line.offset, len(line.raw), codec.BAD_FIELD,
                                      line.number or None, problem))


@dataclass
class _PathState:
    """What the reverse scan has found on the leaf's branch so far.

    The first compaction met walking back is the latest; the kept entry is the nearest one
    before it that `is_first_kept` accepts (the rule of `journal.boundary`).
    """

    wanted: str | None = None
    compaction: Entry | None = None
    kept_found: bool = False
    thinking_found: bool = False
    model_found: bool = False
    at_root: bool = False

    def visit(self, entry: Entry) -> None:
        kind = entry.get("type")
        if kind == "thinking_level_change":
            self.thinking_found = True
        elif kind == "model_change" or (
            kind == "message" and entry["message"].get("role") == "assistant"
        ):
            self.model_found = True
        if self.compaction is not None and is_first_kept(self.compaction, entry):
            self.kept_found = True
        if self.compaction is None and is_compaction(entry):
            self.compaction = entry
        self.wanted = entry.get("parentId")
        self.at_root = self.wanted is None

    @property
    def done(self) -> bool:
        if self.at_root:
            return True
        return (
            self.compaction is not None
            and self.kept_found
            and self.thinking_found
            and self.model_found
        )


def resume(path: str | os.PathLike[str] | Storage, *, dialect: str | None = None) -> Snapshot:
    """Read only the tail a live context needs, scanning backwards from the end.

    A Claude Code transcript is resumed by `journal.claude.resume` (back to the latest
    `compact_boundary` on the leaf's chain); forcing `dialect="claude"` on a pi session
    raises `NotASession`, as for `load`.

    Walks the branch of the last entry back until it has the latest compaction's kept boundary
    plus the latest model and thinking-level settings, or reaches the root. Files written by
    this library record both settings right after each compaction, so they resume from their
    tail; others may need a longer scan. Version 1 and 2 files are loaded whole (their ids
    depend on position), and so are compressed archives (`.gz`: gzip cannot read backwards).
    `Snapshot.complete` says whether every entry was read.
    """
    storage = as_storage(path)
    path = storage.locator
    if is_compressed(path):
        return load(storage, dialect=dialect)
    if _read_as_claude(storage, dialect):
        return from_claude(claude.resume(storage))
    with storage.open_reader() as reader:
        f = reader.stream
        size = reader.size
        end = last_newline_end(f, size)
        first = stream_first_line(f)
        header, body_start = first.header, first.end
        if header is None or body_start > end or header_version(header) < CURRENT_VERSION:
            return read_stream(path, f)
        diagnostics: list[Diagnostic] = []
        if end < size:
            diagnostics.append(
                Diagnostic(end, size - end, codec.TORN_TAIL, None, "no newline at end of file")
            )
        reversed_entries: list[Entry] = []
        field_issues: list[Diagnostic] = []
        state = _PathState()
        reached_start = True
        for line in reader.lines_backward(end):
            if line.offset < body_start:
                break
            entry = _parse_entry(line, diagnostics, field_issues)
            if entry is None:
                continue
            reversed_entries.append(entry)
            if len(reversed_entries) == 1 or entry["id"] == state.wanted:
                state.visit(entry)
                if state.done:
                    reached_start = line.offset == body_start
                    break
        reversed_entries.reverse()
        diagnostics.reverse()
        field_issues.reverse()
        snap = Snapshot(path, header, reversed_entries, diagnostics, size=size, end=end,
                        field_issues=field_issues)
        snap.complete = reached_start
        snap.lines = [0] * len(reversed_entries)
        return snap


def _parse_entry(line: Line, diagnostics: list[Diagnostic],
                 field_issues: list[Diagnostic]) -> Entry | None:
    value = codec.parse_line(line)
    if value is None:
        return None
    if isinstance(value, Diagnostic):
        diagnostics.append(value)
        return None
    problem = codec.check_entry(value, CURRENT_VERSION)
    if problem is None and is_header(value):
        problem = codec.EXTRA_HEADER
    if problem is not None:
        diagnostics.append(
            Diagnostic(line.offset, len(line.raw), problem.split(":")[0], None, problem)
        )
        return None
    _note_bad_fields(value, line, field_issues)
    entry: Entry = value
    return entry


def find_last_of_type(
    f: IO[bytes], end: int, kind: str, start_at: int = 0, block: int = 1 << 20
) -> Entry | None:
    """The last complete entry of a type in [start_at, end), found by a byte search backwards.

    Cheaper than parsing every line: only lines containing `"type":"<kind>"` are parsed.
    """
    needle = b'"type":"' + kind.encode() + b'"'
    pos = end
    overlap = len(needle)
    while pos > start_at:
        start = max(start_at, pos - block)
        f.seek(start)
        buf = f.read(min(end, pos + overlap) - start)
        hit = buf.rfind(needle)
        while hit >= 0:
            at = start + hit
            line_start = last_newline_end(f, at)
            if line_start < start_at:
                return None
            f.seek(line_start)
            raw = f.readline()
            if raw.endswith(b"\n") and line_start + len(raw) <= end:
                line = Line(line_start, 0, raw[:-1])
                value = codec.parse_line(line)
                if isinstance(value, dict) and value.get("type") == kind:
                    if codec.check_entry(value, CURRENT_VERSION) is None:
                        return value
            hit = buf.rfind(needle, 0, hit)
        pos = start
    return None
