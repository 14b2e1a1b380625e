"""Facts about a session file for people and scripts: `journal info` as a function.

Its problems are repair's (`journal.repair.assess`): `journal info` and `journal repair --check`
count damage in one place, so they agree. The reader's diagnostics and the tree's issues are
kept too, for what they say about how the file reads as it is.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from .anywhere import is_sealed, live, successor
from .claude import CLAUDE, PI
from .claude.reading import UNREADABLE
from .codec import Diagnostic, bulk_parsing
from .errors import BrokenLineage, DamagedArchive, JournalError, describe_os_error
from .lineage import pending_note, trace
from .lock import current_holder as file_holder
from .lock import lock_state
from .model import Entry
from .pg.url import is_database_url
from .repair import Problem, assess
from .seal import is_seal
from .snapshot import load, require_session
from .tree import TreeIssue


@dataclass
class SessionInfo:
    path: str
    header: Entry | None
    version: int
    size: int
    entries: int
    by_type: dict[str, int]
    leaf_id: str | None
    name: str | None
    labels: dict[str, str]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    tree_issues: list[TreeIssue] = field(default_factory=list)
    lock_holder: dict[str, Any] | None = None
    lock_file: str = "none"
    """`none`, `held` (a writer holds the lock) or `stale` (a lock file nobody holds); a
    database session's, which has a lease and no lock file, is `held` or `none`."""
    pending_rotation: str | None = None
    """A left-over rotation intent, said in words (the next writer, rotation or repair
    finishes or clears it)."""
    sealed: bool = False
    """A rotation sealed it (its last entry is the seal): nothing is appended to it again."""
    successor: str | None = None
    """Where a sealed session continues (`journal.anywhere.successor`); None if it is not
    sealed or its successor is not there."""
    live: str | None = None
    """The live session a sealed one's seals lead to (the successor, or a later one after
    several rotations); None if it is not sealed or a successor on the way is not there
    (archives copied or exported without their live session)."""
    missing_successor: str | None = None
    """A database lineage broken out of band: the id of the successor a seal on the way
    names that is not in the database (`BrokenLineage`); None otherwise."""
    problems: list[Problem] = field(default_factory=list)
    """Damage, counted as `journal repair --check` counts it (one per damaged range); a
    Claude Code transcript's include its subagent files' (each naming its `file`), which
    `journal repair` of the transcript repairs too."""
    notes: list[Problem] = field(default_factory=list)
    """States pi handles itself when it sends a request: not damage."""
    dialect: str = PI
    """`pi`, or `claude` for a Claude Code transcript (its `header` is then made from its
    records' `sessionId`, `cwd` and first timestamp, for display; `version` is 0)."""
    subagent_files: list[str] = field(default_factory=list)
    damaged_archives: list[dict[str, Any]] = field(default_factory=list)
    """The damaged compressed archives that stop its file lineage (`journal.lineage.trace`):
    each `path`, `reason`, and `blocks`: `before` (the files before it cannot be found) or
    `after` (nor the files after it, the live one among them). Not damage of this file:
    `journal repair` does not rewrite archives."""

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(p.kind for p in self.problems))

    @property
    def note_counts(self) -> dict[str, int]:
        return dict(Counter(n.kind for n in self.notes))

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "id": self.header.get("id") if self.header else None,
            "version": self.version,
            "cwd": self.header.get("cwd") if self.header else None,
            "created": self.header.get("timestamp") if self.header else None,
            "parentSession": self.header.get("parentSession") if self.header else None,
            "size": self.size,
            "entries": self.entries,
            "byType": self.by_type,
            "leafId": self.leaf_id,
            "name": self.name,
            "labels": self.labels,
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "treeIssues": [i.to_json() for i in self.tree_issues],
            "lockHolder": self.lock_holder,
            "lockFile": self.lock_file,
            "pendingRotation": self.pending_rotation,
            "sealed": self.sealed,
            "successor": self.successor,
            "live": self.live,
            "missingSuccessor": self.missing_successor,
            "problems": [p.to_json() for p in self.problems],
            "counts": self.counts,
            "notes": [n.to_json() for n in self.notes],
            "noteCounts": self.note_counts,
            "dialect": self.dialect,
            "subagentFiles": self.subagent_files,
            "damagedArchives": self.damaged_archives,
        }


def inspect(path: str | os.PathLike[str], *, dialect: str | None = None) -> SessionInfo:
    """Read a session without locking it and summarise it.

    The file is read twice, once as a session and once by repair's planner; the first
    reading is summarised and let go before the second, so the peak is one reading's. A
    Claude Code transcript (detected, or forced with `dialect`) is assessed by its own
    repair planner (`journal.claude.assess_claude`), so `info` and `repair --check` agree.
    """
    info = _summary(path, dialect)
    if info.sealed:
        info.successor = successor(info.path)
        try:
            if info.successor is not None:
                info.live = live(info.successor)
            elif is_database_url(info.path):
                live(info.path)  # its successor is not in the database: which one, then
        except BrokenLineage as e:
            info.live, info.missing_successor = None, e.missing_id
        except DamagedArchive:
            info.live = None  # which is live cannot be told: `damaged_archives` says why
        if info.live is not None and is_sealed(info.live):
            info.live = None  # the seals lead to a sealed session whose successor is not here
    info.damaged_archives = _damaged_archives(info)
    found = assess(info.path, dialect=info.dialect)
    info.problems, info.notes = found.problems, found.notes
    for sub in info.subagent_files:  # a transcript's subagent files are the session's too
        info.problems.extend(_subagent_problems(sub))
    return info


def _damaged_archives(info: SessionInfo) -> list[dict[str, Any]]:
    """`SessionInfo.damaged_archives` of a pi session file that continues or was continued
    (a header's `parentSession`, or sealed); none for others, whose lineage is themselves."""
    if (is_database_url(info.path) or info.dialect != PI
            or not (info.sealed or (info.header or {}).get("parentSession"))):
        return []
    try:
        traced = trace(info.path)
    except (JournalError, OSError):
        return []  # a lineage that cannot be followed otherwise: `journal lineage` says why
    return [{"path": d.path, "reason": d.reason, "blocks": "after" if d.after else "before"}
            for d in traced.damaged]


def _subagent_problems(path: str) -> list[Problem]:
    """A subagent file's damage, as `journal repair` of it would count it, each naming it."""
    try:
        found = assess(path, dialect=CLAUDE)
    except (JournalError, OSError) as e:
        reason = describe_os_error(e) if isinstance(e, OSError) else str(e)
        return [Problem(UNREADABLE, "not checked: " + reason.removeprefix(f"{path}: "),
                        file=path)]
    return [replace(p, file=path) for p in found.problems]


def _summary(path: str | os.PathLike[str], dialect: str | None = None) -> SessionInfo:
    snap = load(path, dialect=dialect)
    require_session(snap)
    with bulk_parsing():  # many small objects, no cycles: see codec.bulk_parsing
        tree = snap.tree()
        tree.finish_forward_check()
    holder = current_holder(snap.path)
    header, version, name = snap.header, snap.version, tree.name
    if snap.claude is not None:
        read = snap.claude
        header = {"id": read.first("sessionId"), "cwd": read.first("cwd"),
                  "timestamp": read.first("timestamp"), "version": read.first("version")}
        version, name = 0, read.title
    return SessionInfo(
        path=snap.path,
        header=header,
        version=version,
        size=snap.size,
        entries=len(snap.entries),
        by_type=dict(Counter(str(e.get("type")) for e in snap.entries)),
        leaf_id=tree.leaf_id,
        name=name,
        labels=tree.labels,
        diagnostics=sorted([*snap.diagnostics, *snap.field_issues], key=lambda d: d.offset),
        tree_issues=tree.issues,
        lock_holder=holder,
        lock_file=(("held" if holder else "none") if is_database_url(snap.path)
                   else lock_state(snap.path)),
        pending_rotation=pending_note(snap.path),
        sealed=bool(snap.entries) and is_seal(snap.entries[-1]),
        dialect=snap.dialect,
        subagent_files=list(snap.claude.subagent_files) if snap.claude is not None else [],
    )


def current_holder(path: str) -> dict[str, Any] | None:
    """Who holds the session's writer lock right now (pid, host, since), or None if nobody
    does: a file's lock holder (`journal.lock.current_holder`), or a database session's
    lease holder (its URL or `pg:<id>`)."""
    if is_database_url(path):
        from .pg.storage import PostgresStorage

        return PostgresStorage.from_url(path).holder()
    return file_holder(path)


