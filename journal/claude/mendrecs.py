"""The records of a Claude Code transcript being repaired (`journal.claude.mendplan`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from .. import codec
from ..progress import Meter
from ..quarantine import Quarantined
from ..repair_report import Problem


@dataclass(slots=True)
class Rec:
    """One record of the transcript being rebuilt; `raw` is its original line while unchanged."""

    value: dict[str, Any]
    raw: bytes | memoryview | None
    line: int | None
    offset: int | None
    original: bytes | None = None
    reason: str = ""
    dropped: bool = False
    uuid: str | None = field(init=False, default=None)
    """The record's `uuid` (None if it has no string one); repair never changes it."""

    def __post_init__(self) -> None:
        found = self.value.get("uuid")
        self.uuid = found if isinstance(found, str) else None

    def edit(self, reason: str) -> dict[str, Any]:
        """The record's value, to be changed: its original bytes are kept for the quarantine."""
        if self.raw is not None:
            self.original, self.raw = bytes(self.raw), None
            self.value = dict(self.value)
            self.reason = reason
        return self.value

    @property
    def parent(self) -> Any:
        return self.value.get("parentUuid")

    def bytes_now(self) -> bytes:
        return bytes(self.raw) if self.raw is not None else codec.dumps(self.value)


@dataclass
class MendPlan:
    """The records of the repaired transcript, with every problem and every dropped range."""

    path: str
    records: list[Rec]
    problems: list[Problem] = field(default_factory=list)
    dropped: list[Quarantined] = field(default_factory=list)
    consequences: list[Problem] = field(default_factory=list)
    meter: Meter = field(default_factory=lambda: Meter(None, 0))
    size: int = 0
    """The bytes planned on (the file's size when it was read)."""

    def problem(self, kind: str, action: str, rec: Rec | None = None, *,
                consequence: bool = False, **kw: Any) -> None:
        if rec is not None:
            kw.setdefault("line", rec.line)
            kw.setdefault("offset", rec.offset)
            kw.setdefault("entry_id", rec.uuid)
        (self.consequences if consequence else self.problems).append(Problem(kind, action, **kw))

    def drop(self, rec: Rec, kind: str, detail: str) -> None:
        rec.dropped = True
        data = rec.original if rec.original is not None else (
            bytes(rec.raw) if rec.raw is not None else None)
        if data is not None:
            self.dropped.append(Quarantined(self.path, rec.offset or 0, data, kind, detail))

    def kept(self) -> list[Rec]:
        return [r for r in self.records if not r.dropped]

    def render(self) -> bytes:
        """The repaired file's bytes: kept lines as they were, changed ones re-encoded."""
        parts: list[bytes | memoryview] = []
        for rec in self.records:
            if rec.dropped:
                continue
            if rec.raw is not None:
                parts.append(rec.raw)
                parts.append(b"\n")
            else:
                parts.append(codec.dumps(rec.value, orjson.OPT_APPEND_NEWLINE))
        return b"".join(parts)

    def rewritten(self) -> list[Quarantined]:
        """The original bytes of every kept line the repair rewrote."""
        return [Quarantined(self.path, r.offset or 0, r.original, r.reason or "rewritten",
                            "original bytes of a line the repair rewrote")
                for r in self.records if r.original is not None and not r.dropped]


__all__ = ["MendPlan", "Rec"]
