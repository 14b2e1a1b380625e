"""`journal import`: a Claude Code transcript as a pi v3 session of the same projected context.

The transcript (with its subagent files) is read as `journal.claude.read` reads it, and the
entries it gives are written, in that order, under a new pi header: the tree, every branch
(rewinds, sidechains, subagents), the compactions and the projection are the same. Records
that are not messages stay as `custom` entries (`claude.<type>`, the record as `data`), which
pi ignores. pi takes a file's last entry as its leaf: when the transcript's leaf is not the
last entry, a `journal.import` custom entry is appended under it, so the session resumes where
Claude Code would. The new session is an ordinary pi session: `Session.open` appends to it,
`journal-agent` continues it. Records without a uuid (`summary`, `ai-title`,
`file-history-snapshot`, `queue-operation`) are not imported (see docs/claude.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .. import codec, model
from ..codec import Diagnostic
from ..errors import JournalError, NotASession
from ..identity import real_path
from ..publish import create_file
from ..storage import FileStorage
from .detect import CLAUDE, dialect_of
from .reading import read

IMPORT_MARKER = "journal.import"


@dataclass
class ImportReport:
    """What `import_claude` wrote."""

    source: str
    path: str
    session_id: str
    entries: int
    messages: int
    leaf: str | None
    subagent_files: list[str]
    problems: list[Diagnostic] = field(default_factory=list)
    """The lines of the transcript (and its subagent files) that were not imported because
    they are not records (not JSON, not an object, a field of the wrong type, a torn line)."""

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "sessionId": self.session_id,
                "entries": self.entries, "messages": self.messages, "leaf": self.leaf,
                "subagentFiles": self.subagent_files,
                "problems": [d.describe() for d in self.problems]}


def import_claude(source: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None,
                  *, subagents: bool = True) -> ImportReport:
    """Convert the Claude Code transcript `source` into a new pi session.

    `dest` is a folder (the session gets pi's `<timestamp>_<uuid>.jsonl` name in it; default:
    the current folder) or a `.jsonl` path; an existing file is never overwritten.
    `subagents`: bring in `<session>/subagents/agent-*.jsonl` too, as branches of their own.

    Example:
        >>> report = import_claude("~/.claude/projects/p/1c.jsonl", "s")  # doctest: +SKIP
        >>> Session.open(report.path)  # doctest: +SKIP
    """
    path = real_path(source)
    if os.path.isdir(path):
        raise NotASession(path, "is a directory; name the transcript (<session>.jsonl)")
    if dialect_of(path) != CLAUDE:
        raise NotASession(path, "not a Claude Code transcript (use it as a pi session as it is)")
    got = read(FileStorage(path), subagents=subagents)
    entries = [_pi_order(e, got.first("timestamp")) for e in got.entries]
    if not entries:
        raise NotASession(path, "holds no conversation to import")
    leaf = got.leaf_id
    if leaf is not None and entries[-1]["id"] != leaf:
        taken = {e["id"] for e in entries}
        entries.append(model.custom_entry(
            model.new_id(taken), leaf, IMPORT_MARKER,
            {"leaf": leaf, "reason": "the transcript's leaf is not its last entry"}))
    stamp = got.first("timestamp")
    cwd = got.first("cwd")
    header = model.make_header(cwd if isinstance(cwd, str) else os.getcwd(),
                               timestamp=stamp if isinstance(stamp, str) else None)
    target = _target(dest, header)
    data = codec.encode(header) + codec.encode_many(entries)
    try:
        create_file(target, data)
    except FileExistsError as e:
        raise JournalError(f"{target}: already exists; nothing was written") from e
    messages = sum(1 for e in entries if e.get("type") == "message")
    return ImportReport(path, target, header["id"], len(entries), messages, leaf,
                        list(got.subagent_files), list(got.diagnostics))


_FIRST = ("type", "id", "parentId", "timestamp")
_CUSTOM_FIRST = ("type", "customType", "data", "id", "parentId", "timestamp")


def _pi_order(entry: dict[str, Any], fallback_stamp: Any) -> dict[str, Any]:
    """The entry in pi's key order (`journal.model`'s constructors: a custom entry's type,
    customType, data, id, parentId, timestamp; any other's type, id, parentId, timestamp,
    then the rest) with a timestamp (a record without one gets the transcript's first)."""
    first = _CUSTOM_FIRST if entry.get("type") == "custom" else _FIRST
    out = {k: entry[k] for k in first if k in entry}
    out.update((k, v) for k, v in entry.items() if k not in first)
    if not isinstance(out.get("timestamp"), str):
        out["timestamp"] = fallback_stamp if isinstance(fallback_stamp, str) else model.now_iso()
    return out


def _target(dest: str | os.PathLike[str] | None, header: dict[str, Any]) -> str:
    where = os.fspath(dest) if dest is not None else os.getcwd()
    if not where.endswith(".jsonl"):
        os.makedirs(where, exist_ok=True)
        where = os.path.join(where, model.session_file_name(header["timestamp"], header["id"]))
    folder = os.path.dirname(os.path.abspath(where))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(real_path(folder), os.path.basename(where))


__all__ = ["IMPORT_MARKER", "ImportReport", "import_claude"]
