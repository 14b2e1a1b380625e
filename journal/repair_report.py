"""What a repair found in one file and what it did: `Problem` and `RepairReport`.

Shared by every dialect's repair (pi files in `journal.repair`, Claude Code transcripts in
`journal.claude.mend`), so the command line prints and counts them one way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import model

BACKUP_SUFFIX = ".bak"
NOTE_LEFT = "left as is: pi handles it when it sends a request"


@dataclass
class Problem:
    """One thing repair found, and what it did about it."""

    kind: str
    action: str
    line: int | None = None
    offset: int | None = None
    entry_id: str | None = None
    detail: str = ""
    file: str | None = None
    """The file it is in when it is not the report's own file but one that goes with it (a
    Claude Code transcript's subagent file, in `journal info`); line and offset are that
    file's."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "action": self.action, "line": self.line,
                               "offset": self.offset, "entryId": self.entry_id,
                               "detail": self.detail}
        if self.file is not None:
            out["file"] = self.file
        return out


@dataclass
class RepairReport:
    """What repair found in one file and what it did (or, in a dry run, would do)."""

    path: str
    changed: bool
    problems: list[Problem] = field(default_factory=list)
    version: int = model.CURRENT_VERSION
    backup: str | None = None
    quarantine: str | None = None
    dry_run: bool = False
    rewritten: list[Problem] = field(default_factory=list)
    """Every original line written back changed (its old bytes are quarantined), with the
    reason: the problem lines themselves and what fixing them touched (a re-parented child,
    a renamed result, a reference that follows a renamed id)."""
    notes: list[Problem] = field(default_factory=list)
    """States the file's own client handles when it sends a request (not damage): left in
    the file as they are unless `strict`, with or without damage beside them."""
    consequences: list[Problem] = field(default_factory=list)
    """What repair changed only because a damaged range was dropped (not counted again)."""
    strict: bool = False
    dialect: str = "pi"
    """The file's format: "pi" or "claude" (a Claude Code transcript, repaired in its own
    format: `journal.claude.mend`)."""

    @property
    def counts(self) -> dict[str, int]:
        """Damage found, per kind (what `--check` and `journal info` count)."""
        return dict(Counter(p.kind for p in self.problems))

    @property
    def note_counts(self) -> dict[str, int]:
        return dict(Counter(p.kind for p in self.notes))

    @property
    def notes_left(self) -> bool:
        """True when the notes stay in the file as they are: always, unless `strict` (which
        fixes them) and there are some."""
        return all(n.action == NOTE_LEFT for n in self.notes)

    @property
    def rewritten_as_consequence(self) -> list[Problem]:
        """The rewritten lines that hold no problem of their own (none found at their offset):
        what fixing the problems touched, a reference following a renamed id, a child
        re-parented, a line whose parent's bytes were dropped. The other rewritten lines are
        the problem lines themselves; the quarantine keeps the original bytes of all of them."""
        fixed = [*self.problems, *(self.notes if self.strict else [])]
        found = {p.offset for p in fixed if p.offset is not None}
        return [r for r in self.rewritten if r.offset not in found]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "dialect": self.dialect, "changed": self.changed,
                "dryRun": self.dry_run,
                "strict": self.strict,
                # a pi file's format version (a Claude Code transcript has none)
                "version": self.version if self.dialect == "pi" else None,
                "problems": [p.to_json() for p in self.problems], "counts": self.counts,
                "notes": [n.to_json() for n in self.notes], "noteCounts": self.note_counts,
                "consequences": [c.to_json() for c in self.consequences],
                "rewritten": [r.to_json() for r in self.rewritten],
                "backup": self.backup, "quarantine": self.quarantine}
