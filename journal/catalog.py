"""The catalog: every logical session under some folders, one row each, and retention.

A logical session is a lineage (`journal.lineage`): the live file plus the sealed files it
continues (archived beside it or in `archive/`, possibly `.gz`). `sessions(dirs)` finds them
and summarises each in a `SessionRow`; it is what `journal ls` prints and what other catalog
commands use to enumerate sessions. `prune(...)` removes (or moves away) whole lineages that
have been at rest longer than a given age, never one a writer holds, and the lock files left
beside session files that are gone (`journal.stray_locks`).

Speed: a row reads the header of each file of its lineage, the tail of the live file
(`resume`: back to its latest compaction), and one byte scan per file for the entry ids (the
only way to count entries without counting twice the ones a rotated successor repeats). No
JSON is parsed beyond the header and the tail. Tokens and cost (`prices=`) need every file
read whole (`journal.accounting`), and so does a Claude Code transcript (it has no tail to
stop at); a `RowCache` keeps what was read while the files stay the same.

Which files are sessions, and how they group into lineages, is `journal.discovery`'s rule,
shared with `search` and `usage`. A database's lineages (`database_rows`) are read by the
same code, session URLs standing for files, so each field of their rows means the same.

What a row says about damage is what the header and the tail show (a torn last line, bad
lines in the tail, a missing header, a rotation left half done); `journal repair --check`
reads the whole file.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from .accounting import Tally, UsageWarning, lineage_usage
from .claude import CLAUDE, PI, subagent_files
from .discovery import find_lineages, session_paths, subagents_of
from .errors import ArchiveElsewhere, JournalError, LockTimeout, describe_os_error
from .files import hold_unless_busy, remove_if_unheld
from .header import HEADER_LIMIT, read_header, stream_first_line
from .idscan import entry_ids
from .info import current_holder
from .lineage import inbox_path, intent_path, live_names, pending_rotations
from .lock import WriterLock
from .model import Entry
from .pg.url import is_database_url, shown
from .prices import PriceTable
from .progress import Progress
from .rowcache import RowCache, file_signature, prices_key
from .seal import is_seal
from .snapshot import Snapshot, find_last_of_type, load, open_for_reading, resume
from .storage import as_storage
from .stray_locks import StrayLock, clear_stray_locks

__all__ = ["DatabaseRow", "PruneItem", "PruneReport", "SessionRow", "database_rows", "parse_age",
           "prune", "session_paths", "sessions", "sort_rows"]

T = TypeVar("T")
R = TypeVar("R", bound="SessionRow")

STATES = ("live", "locked", "sealed", "needs-repair")
"""`live`: nobody writes it now and it can be continued; `locked`: a writer holds it;
`sealed`: its last file is sealed and no successor was found; `needs-repair`: the header or
tail is damaged, or a rotation was left half done (`journal repair` fixes it)."""

PENDING_ROTATION = "an interrupted rotation is pending"
"""The problem of a lineage an interrupted rotation concerns (`_pending_rotation`)."""

SIDE_SUFFIXES = (".quarantine", ".bak")
"""Side files that belong to a session file and go with it when it is pruned."""


@dataclass(frozen=True)
class SessionRow:
    """One logical session. `path` is its live file, `files` every file of its lineage,
    oldest first (the live one last). Times are the ISO strings the files record."""

    path: str
    files: tuple[str, ...]
    session_id: str | None
    name: str | None
    cwd: str | None
    models: tuple[str, ...]
    first: str | None
    """The header time of the lineage's first file."""
    last: str | None
    """The time of the live file's last entry (its header's if it has none)."""
    entries: int
    """Distinct entry ids across the lineage (an entry a successor repeats counts once)."""
    size: int
    """Bytes on disk, live file and archives together (compressed size for `.gz`)."""
    state: str
    holder_pid: int | None = None
    problems: tuple[str, ...] = ()
    mtime: float = 0.0
    """The latest modification time of any file of the lineage (seconds since the epoch)."""
    usage: Tally | None = None
    """Tokens and cost, when asked for (`sessions(prices=...)`); None if not asked for or no
    file of the lineage could be counted."""
    dialect: str = PI
    """`pi`, or `claude` for a Claude Code transcript (read in place; never pruned)."""
    subagent_files: tuple[str, ...] = ()
    """A Claude Code transcript's subagent files, read with it (`files` is the transcript)."""

    @property
    def read_files(self) -> tuple[str, ...]:
        """Every file the row was read from: its lineage, then a transcript's subagent files
        (what `journal ls` counts and lists as the row's files)."""
        return self.files + self.subagent_files

    @property
    def tokens(self) -> int | None:
        return self.usage.total_tokens if self.usage is not None else None

    @property
    def cost(self) -> float | None:
        return self.usage.cost if self.usage is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "files": list(self.read_files), "id": self.session_id,
            "name": self.name, "cwd": self.cwd, "models": list(self.models),
            "first": self.first, "last": self.last, "entries": self.entries, "size": self.size,
            "state": self.state, "holderPid": self.holder_pid, "problems": list(self.problems),
            "tokens": self.tokens, "cost": self.cost, "dialect": self.dialect,
            "usage": self.usage.to_json() if self.usage is not None else None,
        }


@dataclass(frozen=True)
class DatabaseRow(SessionRow):
    """One lineage of database sessions (`database_rows`), its fields meaning what a
    `SessionRow`'s mean for files: `path` is its live session's URL and `files` its
    sessions' URLs, oldest first (named without the password), `size` their bytes in file
    form; then what only a database says."""

    session: str = ""
    """The live session's id in the database (the `session` of its URL)."""
    file_name: str | None = None
    """The file name `journal pull` writes the live session to (None: made in the database
    without one)."""
    created: str | None = None
    updated: str | None = None
    """When the live session's row was made and last written (the server's clock)."""
    holder: dict[str, Any] | None = None
    """Who holds the live session's lease (pid, host, since), or None."""

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "session": self.session, "url": self.path,
                "file": self.file_name, "sessions": len(self.files), "created": self.created,
                "updated": self.updated, "holder": self.holder}


def sessions(dirs: Iterable[str], *, progress: Progress | None = None,
             prices: PriceTable | None = None, cache: RowCache | None = None
             ) -> list[SessionRow]:
    """One row per logical session under `dirs` (folders, searched recursively, or files;
    see `journal.discovery` for which files are sessions).

    A rotated session is one row however many files it has. A file that cannot be read is a
    row in state `needs-repair` with its problem; nothing raises for one bad file. A folder
    given that does not exist or cannot be entered raises `JournalError`. `progress`, if
    given, is called with (bytes done, bytes in all) as the files are read, a Claude Code
    transcript's subagent files included (they are read with it).

    With `prices`, each row also has its `usage` (tokens and cost, as `journal usage` counts
    them: every file of the lineage is read whole, each entry once). With `cache` (a
    `RowCache`), a lineage none of whose files changed since a run that cached it is not read
    again; the caller saves the cache.
    """
    dirs = list(dirs)
    named = next((d for d in dirs if is_database_url(d)), None)
    if named is not None:  # rows of files (their locks, their times): not a database's
        raise JournalError(f"{shown(named)}: a database; 'journal ls URL' "
                           "(journal.catalog.database_rows) lists its sessions")
    known = cache.files_of if cache is not None else None
    chains = find_lineages(dirs, known=known)
    to_read = [[*chain, *subagents_of(chain)] for chain in chains]
    total = sum(_size_of(f) for files in to_read for f in files)
    done = 0
    key = prices_key(prices.to_json()) if prices is not None else None
    rows: list[SessionRow] = []
    for files, with_subagents in zip(chains, to_read, strict=True):
        rows.append(_row(files, prices, key, cache))
        done += sum(_size_of(f) for f in with_subagents)
        if progress is not None:
            progress(done, total)
    if progress is not None:
        progress(total, total)
    return rows


def _row(files: list[str], prices: PriceTable | None, key: str | None,
         cache: RowCache | None) -> SessionRow:
    live = files[-1]
    entry = cache.lookup(live) if cache is not None else None
    if entry is not None and cache is not None and cache.files_of(live) != files:
        entry = None
    facts = entry.get("facts") if entry is not None else None
    cached_usage = entry.get("usage") if entry is not None else None
    signatures = None
    extra = subagent_files(live)
    if not isinstance(facts, dict):
        # taken before reading: a change while reading shows next time
        signatures = [file_signature(f) for f in [*files, *extra]]
        facts = _read_facts(files, extra)
    tally: Tally | None = None
    if prices is not None:
        if isinstance(cached_usage, dict) and cached_usage.get("prices") == key:
            raw = cached_usage.get("tally")
            tally = Tally(**raw) if isinstance(raw, dict) else None
        else:
            if signatures is None:  # the facts came from the cache: keep what it checked,
                # so a change since is seen next time
                signatures = list(entry["files"]) if entry is not None else [
                    file_signature(f) for f in [*files, *extra]]
            counted = lineage_usage(files, prices)
            tally = counted.total if counted is not None else None
            cached_usage = {"prices": key, "tally": asdict(tally) if tally else None}
    if cache is not None and signatures is not None:
        data: dict[str, Any] = {"facts": facts}
        if isinstance(cached_usage, dict):
            data["usage"] = cached_usage
        cache.store(live, signatures, data, lineage=len(files))
    return _finish(files, facts, tally, extra)


def _size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _stamp(entry: Entry | None) -> str | None:
    value = entry.get("timestamp") if entry else None
    return value if isinstance(value, str) else None


def _models(entries: list[Entry]) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for entry in entries:
        model: object = None
        if entry.get("type") == "model_change":
            model = entry.get("modelId")
        elif entry.get("type") == "message":
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "assistant":
                model = message.get("model")
        if isinstance(model, str) and model:
            found[model] = None
    return tuple(found)


def _name(snap: Snapshot) -> str | None:
    """The session's name: its latest `session_info` (rotation copies it into a successor,
    so the live file holds it); a byte search when the tail read does not have it."""
    entry = next((e for e in reversed(snap.entries) if e.get("type") == "session_info"), None)
    if entry is None and not snap.complete:
        with open_for_reading(snap.path) as f:
            entry = find_last_of_type(f, snap.end, "session_info")
    name = entry.get("name") if entry else None
    return name.strip() or None if isinstance(name, str) else None


def _id_key(value: object) -> int | str:
    """An entry id as `scan_ids` keeps it (8 hex digits as an integer), so ids read from
    entries and ids scanned from bytes compare."""
    text = str(value)
    if len(text) == 8 and all(c in "0123456789abcdef" for c in text):
        return int(text, 16)
    return text


def row_for(files: list[str]) -> SessionRow:
    """The row of one lineage (`files` oldest first, the live one last), read now."""
    extra = subagent_files(files[-1])
    return _finish(files, _read_facts(files, extra), None, extra)


def _header_of(path: str) -> Entry | None:
    """The session header of a file (`read_header`) or of a database session (its first
    line, read through the storage); None when there is none or it cannot be read."""
    if not is_database_url(path):
        return read_header(path)
    try:
        with open_for_reading(path) as stream:
            return stream_first_line(stream, HEADER_LIMIT).header
    except (JournalError, OSError):
        return None


def _read_facts(files: list[str], extra: list[str]) -> dict[str, Any]:
    """What reading the files of a lineage says about it: everything of a row but what
    changes without the files changing (the lock holder, a pending rotation). `extra` are
    a Claude Code transcript's subagent files (their size counts)."""
    live = files[-1]
    snap: Snapshot | None = None
    problems: list[str] = []
    try:
        snap = resume(live)  # it tells a Claude Code transcript by itself
    except (JournalError, OSError) as e:
        problems.append(str(e) if isinstance(e, JournalError) else describe_os_error(e))
    if snap is not None and snap.claude is not None and len(files) == 1:
        return _claude_facts(live, extra)
    size, mtime = _size_and_mtime(files, problems)
    first_header = _header_of(files[0])
    header = snap.header if snap is not None else None
    if snap is not None and header is None:
        problems.append("no session header")
    if snap is not None:
        problems.extend(f"{d.reason} at byte {d.offset:,}" for d in snap.diagnostics)
    ids: set[int | str] = set()
    for f in files:
        if f == live and snap is not None and snap.complete:
            ids.update(_id_key(e.get("id")) for e in snap.entries)  # all read already
            continue
        try:
            ids |= entry_ids(f)
        except ArchiveElsewhere:
            continue  # moved out of a database to a file not here: usage warns of it
        except (OSError, EOFError, JournalError, ValueError) as e:
            problems.append(f"{shown(f)}: ids unreadable ({e})")
    entries = snap.entries if snap is not None else []
    name: str | None = None
    if snap is not None:
        try:
            name = _name(snap)
        except (JournalError, OSError):
            name = None
    last = next((t for t in map(_stamp, reversed(entries)) if t), None) or _stamp(header)
    cwd = (header or first_header or {}).get("cwd")
    sid = (header or {}).get("id")
    return {"id": sid if isinstance(sid, str) else None, "name": name,
            "cwd": cwd if isinstance(cwd, str) else None, "models": list(_models(entries)),
            "first": _stamp(first_header) or _stamp(header), "last": last,
            "entries": len(ids), "size": size, "mtime": mtime, "problems": problems,
            "sealed": bool(entries) and is_seal(entries[-1]), "dialect": PI}


def _claude_facts(live: str, extra: list[str]) -> dict[str, Any]:
    """A Claude Code transcript's row: read whole (with its subagent files) by
    `journal.claude`, as `journal info` reads it; its id, cwd and first time come from its
    records, its name from its latest title (`ai-title`, or an older `summary`)."""
    problems: list[str] = []
    size, mtime = _size_and_mtime([live, *extra], problems)
    facts: dict[str, Any] = {"id": None, "name": None, "cwd": None, "models": [],
                             "first": None, "last": None, "entries": 0, "size": size,
                             "mtime": mtime, "problems": problems, "sealed": False,
                             "dialect": CLAUDE}
    try:
        snap = load(live, dialect=CLAUDE)
    except (JournalError, OSError) as e:
        problems.append(str(e) if isinstance(e, JournalError) else describe_os_error(e))
        return facts
    read = snap.claude
    problems.extend(f"{d.reason} at byte {d.offset:,}"
                    + (f" of {shown(d.file)}" if d.file is not None else "")
                    for d in snap.diagnostics)
    stamps = [t for t in map(_stamp, snap.entries) if t]

    def text(value: object) -> str | None:
        return value if isinstance(value, str) and value else None

    facts.update(
        id=text(read.first("sessionId")) if read else None,
        name=text(read.title) if read else None,
        cwd=text(read.first("cwd")) if read else None,
        models=list(_models(snap.entries)),
        first=min(stamps) if stamps else None, last=max(stamps) if stamps else None,
        entries=len(snap.entries))
    return facts


def _pending_rotation(files: list[str]) -> bool:
    """Whether an interrupted rotation concerns the lineage: an intent beside any of its
    files (an old file sealed but not yet archived is still one of them), or beside the file
    its live one continues (an old file not yet sealed is a lineage of its own, or was
    archived already). A database rotation is one transaction: it leaves no intent behind."""
    live = files[-1]
    if is_database_url(live):
        return False
    return bool(pending_rotations(live)) or any(os.path.lexists(intent_path(f))
                                                for f in files[:-1])


def _finish(files: list[str], facts: dict[str, Any], tally: Tally | None,
            extra: list[str] | None = None) -> SessionRow:
    """The row of a lineage from what its files say; `extra`: a Claude Code transcript's
    subagent files (`journal.claude.subagent_files`)."""
    live = files[-1]
    problems = list(facts["problems"])
    if _pending_rotation(files):
        problems.append(PENDING_ROTATION)
    holder = current_holder(live)
    if holder is not None:
        state = "locked"
    elif problems and facts.get("dialect") == CLAUDE:
        state = "live"  # Claude Code owns it: damage is said, never repaired by journal
    elif problems:
        state = "needs-repair"
    elif facts["sealed"]:
        state = "sealed"
    else:
        state = "live"
    pid = holder.get("pid") if holder else None
    return SessionRow(
        path=live, files=tuple(files), session_id=facts["id"], name=facts["name"],
        cwd=facts["cwd"], models=tuple(facts["models"]), first=facts["first"],
        last=facts["last"], entries=facts["entries"], size=facts["size"], state=state,
        holder_pid=pid if isinstance(pid, int) else None, problems=tuple(problems),
        mtime=facts["mtime"], usage=tally, dialect=facts.get("dialect", PI),
        subagent_files=tuple(extra or ()) if facts.get("dialect") == CLAUDE else (),
    )


SORT_KEYS = ("last", "first", "size", "entries", "name", "path")


def sort_rows(rows: list[R], key: str = "last", reverse: bool = False) -> list[R]:
    """Rows by `key` (one of `SORT_KEYS`): times, size and entries newest/largest first,
    name and path A to Z; `reverse` turns the order round. Missing values go last. A
    database's rows (`DatabaseRow`) sort as a folder's: their fields mean the same."""
    return _ordered(rows, key, reverse, lambda row: getattr(row, key), lambda row: row.path)


def _ordered(rows: list[T], key: str, reverse: bool, value: Callable[[T], Any],
             tie: Callable[[T], str]) -> list[T]:
    if key not in SORT_KEYS:
        raise JournalError(f"cannot sort by {key!r}; choose one of {', '.join(SORT_KEYS)}")
    descending = key in ("last", "first", "size", "entries")
    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    present.sort(key=lambda r: (value(r), tie(r)), reverse=descending != reverse)
    return present + missing


# retention

_AGE = re.compile(r"([0-9]+)\s*([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """`90d`, `12h`, `2w`, `30m`, `45s` as a duration."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise JournalError(f"{text!r} is not an age; write a number and a unit: 90d, 12h, 2w, "
                           "30m or 45s")
    return timedelta(seconds=int(match.group(1)) * _UNIT[match.group(2)])


@dataclass
class PruneItem:
    """What prune did (or would do) with one lineage: `action` is `remove`, `archive` or
    `skip` (with `reason`); `files` every file concerned (side files included), and for
    `archive` where each went."""

    row: SessionRow
    action: str
    reason: str | None = None
    files: list[str] = field(default_factory=list)
    moved_to: list[str] = field(default_factory=list)
    done: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.row.path, "id": self.row.session_id, "last": self.row.last,
                "action": self.action, "reason": self.reason, "files": self.files,
                "movedTo": self.moved_to, "done": self.done, "error": self.error}


@dataclass
class PruneReport:
    """`items`: one per lineage; `locks`: one per lock file whose session file is gone
    (`journal.stray_locks`), removed whatever the cutoff (it holds no session data)."""

    cutoff: str
    dry_run: bool
    items: list[PruneItem]
    locks: list[StrayLock] = field(default_factory=list)

    @property
    def pruned(self) -> list[PruneItem]:
        return [i for i in self.items if i.action != "skip"]

    @property
    def failed(self) -> bool:
        """Whether removing or moving anything failed."""
        return any(i.error for i in self.items) or any(lock.error for lock in self.locks)

    def to_json(self) -> dict[str, Any]:
        return {"cutoff": self.cutoff, "dryRun": self.dry_run,
                "items": [i.to_json() for i in self.items],
                "locks": [lock.to_json() for lock in self.locks]}


def _last_time(row: SessionRow) -> datetime | None:
    if row.last is None:
        return None
    try:
        when = datetime.fromisoformat(row.last.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _side_files(files: Iterable[str]) -> list[str]:
    found: list[str] = []
    for f in files:
        found.append(f)
        for suffix in SIDE_SUFFIXES:
            side = f + suffix
            try:
                if stat.S_ISREG(os.lstat(side).st_mode):
                    found.append(side)
            except OSError:
                pass
    return found


def _size_and_mtime(files: Iterable[str], problems: list[str]) -> tuple[int, float]:
    """The bytes the files hold together and the latest of their modification times; a file
    that cannot be looked at is a problem (and counts nothing). A database session counts
    the bytes of its file form (a database keeps no modification time of its own)."""
    size, mtime = 0, 0.0
    for f in files:
        if is_database_url(f):
            try:
                size += as_storage(f).size()
            except JournalError as e:
                problems.append(str(e))
            continue
        try:
            st = os.stat(f)
        except OSError as e:
            problems.append(describe_os_error(e))
            continue
        size += st.st_size
        mtime = max(mtime, st.st_mtime)
    return size, mtime


def database_rows(url: str, prices: PriceTable,
                  warnings: list[UsageWarning] | None = None) -> list[DatabaseRow]:
    """`journal ls URL`: one row per lineage in the database (`journal.pg.lineages.
    database_lineages`), or the one a session URL names, read as `sessions` reads a folder's
    lineages (the same facts, each field meaning what it means for files: entries are the
    distinct entry ids of the whole lineage, size its sessions' bytes, models those of the
    live session's tail, first the first session's header time, state from the live
    session's lease, seal and tail), with the database's own facts (`DatabaseRow`).

    Nothing is cached: a database has no file signatures to tell a change by. What could not
    be counted (an archive moved out to a file not on this machine: its entries and tokens)
    is added to `warnings`."""
    from .pg.lineages import database_lineages
    from .pg.transfer import database_sessions
    from .pg.url import parse_url

    chains = {parse_url(chain[-1]).session: chain for chain in database_lineages(url)}
    rows: list[DatabaseRow] = []
    for listed in database_sessions(url):
        chain = chains.get(str(listed["session"]))
        if chain is None:
            continue  # another lineage than the one a session URL names
        counted = lineage_usage(chain, prices, warnings)
        row = _finish(chain, _read_facts(chain, []), counted.total if counted else None)
        fields = {f.name: getattr(row, f.name) for f in dataclass_fields(SessionRow)}
        fields.update(path=shown(row.path), files=tuple(shown(f) for f in row.files))
        rows.append(DatabaseRow(
            **fields, session=str(listed["session"]), file_name=listed["file"],
            created=listed["created"], updated=listed["updated"], holder=listed["holder"]))
    return rows


def _inbox_entries(files: Sequence[str]) -> tuple[list[str], list[str]]:
    """(inbox folders of a lineage's files, the names waiting in them): see
    `lineage.INBOX_SUFFIX`. Each file's by its name now and by the name it had while live
    (`lineage.live_names`), where a message queued to it waits for the agent on the live
    file."""
    folders: list[str] = []
    waiting: list[str] = []
    sessions = list(files) if any(is_database_url(f) for f in files) else \
        [*files, *live_names(list(files))]
    for f in dict.fromkeys(sessions):
        folder = inbox_path(f)
        try:
            held = os.listdir(folder)
        except OSError:
            continue
        folders.append(folder)
        waiting.extend(os.path.join(folder, n) for n in held)
    return folders, waiting


def _why_kept(row: SessionRow, cutoff: datetime) -> str | None:
    if row.dialect == CLAUDE:
        return "a Claude Code transcript: Claude Code owns it"
    _, waiting = _inbox_entries(row.files)
    if waiting:
        return (f"{len(waiting)} message(s) queued for an agent wait in "
                f"{os.path.dirname(waiting[0])}")
    if row.state == "locked":
        return f"locked by pid {row.holder_pid}" if row.holder_pid else "locked by a writer"
    if PENDING_ROTATION in row.problems:
        # its files (the old one, a successor already published, the intent) are one unit
        # until the rotation is finished or undone: none of them is removed before
        return f"{PENDING_ROTATION}: run journal repair or journal rotate first"
    if row.state == "sealed":
        # e.g. an archive moved out of a database (`journal rotate --keep`): its lines are
        # nowhere else, and its live session is in the database
        return ("sealed, and its successor is not here: it goes on elsewhere (a database, "
                "another folder), and this file may be the only copy of what it holds")
    if row.state == "needs-repair":
        return "needs repair: " + "; ".join(row.problems[:3])
    when = _last_time(row)
    if when is None:
        return "no readable time of last activity"
    if when >= cutoff:
        return "active since the cutoff"
    if datetime.fromtimestamp(row.mtime, UTC) >= cutoff:
        return "a file was modified since the cutoff"
    return None


def prune(dirs: Iterable[str], older_than: timedelta, *, dry_run: bool = False,
          archive_to: str | None = None, now: datetime | None = None) -> PruneReport:
    """Remove (or, with `archive_to`, move there) every whole lineage under `dirs` whose last
    activity, and every file's modification time, is older than `older_than`.

    A lineage a writer holds, or one that needs repair, is skipped with its reason. Each one
    pruned is done under its writer lock (taken without waiting; the lineage is read again
    under it, and skipped if it changed), oldest file first, with its `.quarantine` and
    `.bak` side files. Moved files keep their path relative to the folder given; a move never
    replaces a file. Then the lock files under `dirs` whose session file is gone are removed
    (`journal.stray_locks.clear_stray_locks`: only when nobody holds them; also with
    `archive_to`, as they hold nothing to keep). `dry_run` says what would happen and touches
    nothing.
    """
    now = now or datetime.now(UTC)
    cutoff = now - older_than
    tops = list(dirs)
    report = PruneReport(cutoff.isoformat(), dry_run, [])
    for row in sort_rows(sessions(tops), "path"):
        action = "archive" if archive_to is not None else "remove"
        reason = _why_kept(row, cutoff)
        item = PruneItem(row, "skip" if reason else action, reason, _side_files(row.files))
        report.items.append(item)
        if reason is None and archive_to is not None:
            item.moved_to = [_destination(f, tops, archive_to) for f in item.files]
        if reason is None and not dry_run:
            _prune_one(item, cutoff)
    # after the lineages: a lineage pruned lets go of its lock, whose file goes with it
    report.locks = clear_stray_locks(tops, dry_run=dry_run)
    return report


def _destination(path: str, tops: list[str], archive_to: str) -> str:
    for top in tops:
        base = os.path.realpath(top)
        if os.path.isdir(base) and path.startswith(base + os.sep):
            return os.path.join(archive_to, os.path.basename(base), os.path.relpath(path, base))
    return os.path.join(archive_to, os.path.basename(path))


def _prune_one(item: PruneItem, cutoff: datetime) -> None:
    lock = WriterLock(item.row.path, timeout=0)
    try:
        lock.acquire()
    except LockTimeout:
        item.action, item.reason = "skip", "a writer took the lock"
        return
    except JournalError as e:
        item.action, item.reason = "skip", str(e)
        return
    try:
        again = row_for(list(item.row.files))
        reason = _why_kept(again, cutoff) if again.state != "locked" else None
        if reason is None and (again.size, again.mtime, again.entries) != (
                item.row.size, item.row.mtime, item.row.entries):
            reason = "changed while being pruned"
        busy = next((f for f in item.files if _being_compressed(f)), None)
        if busy is not None:  # kept whole: a rotation compressing an archive of it is not done
            reason = f"{busy}: a rotation is compressing it; prune again once it is done"
        if reason is not None:
            item.action, item.reason = "skip", reason
            return
        for i, f in enumerate(item.files):
            try:
                if item.moved_to:
                    _move(f, item.moved_to[i])
                elif remove_if_unheld(f) is None and os.path.lexists(f):
                    os.unlink(f)  # not a file it can lock (no compression can read it either)
            except OSError as e:
                item.error = describe_os_error(e)
                return
            if os.path.lexists(f):  # held: a rotation is compressing this archive
                item.error = (f"{f}: another process is compressing it; the rest of its "
                              "lineage is kept: prune again once it is done")
                return
        for folder in _inbox_entries(item.row.files)[0]:
            try:
                os.rmdir(folder)  # empty: _why_kept keeps a session with messages waiting
            except OSError:
                pass
        item.done = True
    finally:
        lock.release()


def _being_compressed(path: str) -> bool:
    """Whether another process holds `path`'s flock (a rotation compressing the archive)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return not hold_unless_busy(fd, path) and os.path.lexists(path)
    finally:
        os.close(fd)


def _move(src: str, dst: str) -> None:
    """Move `src` to `dst` (never replacing a file there), unless another process holds
    `src`'s flock (a rotation compressing it): then it is left where it is."""
    if os.path.lexists(dst):
        raise FileExistsError(17, "already exists; not replaced", dst)
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        fd = None  # a link, or a file it cannot open: moved as it is
    try:
        if fd is not None and not hold_unless_busy(fd, src):
            return
        os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
        shutil.move(src, dst)
    finally:
        if fd is not None:
            os.close(fd)
