"""`journal export --dialect claude`: a pi session written back as a Claude Code transcript.

Every entry is written in file order as the records Claude Code would have written for it,
chained through `parentUuid`:

- a `user` message: a `user` record (text and images; an image as a base64 `source`);
- an `assistant` message: one `assistant` record per content block, sharing one `message.id`
  and `requestId` (a `toolCall` as `tool_use`, `thinking` with its signature, a redacted one
  as `redacted_thinking`), the usage on each line, the stop reason on the last;
- a `toolResult` message: a `user` record with one `tool_result` block;
- a `compaction`: a `compact_boundary` system record (`parentUuid` null, `logicalParentUuid`
  the entry before) and the `isCompactSummary` user record holding its summary;
- a `custom` entry `claude.<type>` (what `journal import` made of a record): that record.

The entries' ids are kept as uuids where they are UUIDs (an imported session's are), else new
random UUIDs are given. What does not round-trip is in docs/claude.md: settings changes,
labels, names, branch summaries, custom messages and other extension entries have no Claude
Code record and are left out (their children hang on their parent); a pi compaction's kept
entries are not part of Claude Code's context after the boundary; per-line uuids and
`requestId`s of an assistant message, `toolUseResult` and metadata records without a uuid were
not kept by the import and are made anew or left out.
"""

from __future__ import annotations

import os
import re
import secrets
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import codec
from ..errors import NotASession
from ..identity import real_path
from ..model import Entry
from ..pg.url import is_database_url, names_session, shown
from ..publish import create_file
from ..snapshot import load
from .detect import CLAUDE, dialect_of
from .synthetic import later_timestamp, new_uuid

DEFAULT_VERSION = "2.0.76"
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_STOP = {"stop": "end_turn", "toolUse": "tool_use", "length": "max_tokens"}
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass
class ClaudeExportReport:
    """What `export_claude` wrote, and what it had to leave out."""

    source: str
    path: str
    session_id: str
    records: int
    skipped: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "sessionId": self.session_id,
                "records": self.records, "skipped": self.skipped}


def export_claude(source: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None,
                  ) -> ClaudeExportReport:
    """Write the pi session `source` as a Claude Code transcript.

    `dest` is a folder (the transcript is `<sessionId>.jsonl` in it, as Claude Code names it;
    default: the current folder) or a `.jsonl` path; an existing file is never overwritten.

    `source` may be a database session (`postgresql://...?session=ID`, `pg:ID`: that session,
    as a file is read as named), or a database holding one lineage (its live session); a
    database holds pi sessions only.

    Example:
        >>> export_claude("sessions/a.jsonl", "~/.claude/projects/p")  # doctest: +SKIP
    """
    path = _session_of(source)
    snap = load(path)
    if snap.header is None and not snap.entries:
        raise NotASession(shown(path), "holds no session")
    writer = _Writer(snap.header or {}, snap.entries)
    for entry in snap.entries:
        writer.entry(entry)
    where = os.fspath(dest) if dest is not None else os.getcwd()
    if not where.endswith(".jsonl"):
        os.makedirs(where, exist_ok=True)
        where = os.path.join(where, writer.session_id + ".jsonl")
    create_file(where, b"".join(codec.encode(r) for r in writer.records))
    return ClaudeExportReport(shown(path), where, writer.session_id, len(writer.records),
                              dict(writer.skipped))


def _session_of(source: str | os.PathLike[str]) -> str:
    """The pi session `source` names: a file's real path (NotASession for a Claude Code
    transcript), a session URL as it is, a database URL's one lineage's live session. A URL
    is never taken for a path (it was: `pg:ID` made relative to the current folder)."""
    named = os.fspath(source)
    if is_database_url(named):
        if names_session(named):
            return named
        from ..exporting import database_lineage  # it reads through this package

        return database_lineage(named)[-1]
    path = real_path(named)
    if dialect_of(path) == CLAUDE:
        raise NotASession(path, "is already a Claude Code transcript")
    return path


class _Writer:
    def __init__(self, header: Entry, entries: list[Entry]) -> None:
        self.records: list[dict[str, Any]] = []
        self.skipped: Counter[str] = Counter()
        self.alias: dict[str, str | None] = {}
        self.taken = {e["id"] for e in entries if isinstance(e.get("id"), str)}
        raw: dict[str, Any] = next((e["data"] for e in entries if e.get("type") == "custom"
                    and str(e.get("customType", "")).startswith("claude.")
                    and isinstance(e.get("data"), dict)), {})
        found = raw.get("sessionId")
        self.session_id: str = found if isinstance(found, str) else new_uuid(self.taken)
        self.envelope = {"isSidechain": False, "userType": "external",
                         "cwd": header.get("cwd", raw.get("cwd", "")),
                         "sessionId": self.session_id,
                         "version": raw.get("version", DEFAULT_VERSION),
                         "gitBranch": raw.get("gitBranch", "")}
        self.side = _sidechains(entries)
        self.summarised = {e.get("parentId") for e in entries if e.get("type") == "custom"
                           and e.get("customType") == "claude.compact_summary"}

    def _uuid(self, entry_id: Any) -> str:
        if isinstance(entry_id, str) and _UUID_RE.match(entry_id):
            return entry_id
        value = new_uuid(self.taken)
        self.taken.add(value)
        return value

    def _record(self, parent: str | None, kind: str, stamp: Any, uid: str,
                **fields: Any) -> str:
        record = {"parentUuid": parent, **self.envelope, "type": kind, **fields, "uuid": uid,
                  "timestamp": stamp if isinstance(stamp, str) else later_timestamp(None)}
        self.records.append(record)
        return uid

    def entry(self, entry: Entry) -> None:
        entry_id = entry.get("id")
        self.envelope["isSidechain"] = entry_id in self.side
        parent_id = entry.get("parentId")
        parent = self.alias.get(parent_id) if isinstance(parent_id, str) else None
        kind = entry.get("type")
        stamp = entry.get("timestamp")
        last: str | None
        if kind == "message" and isinstance(entry.get("message"), dict):
            last = self._message(entry, parent, stamp)
        elif kind == "compaction":
            last = self._compaction(entry, parent, stamp)
        elif (kind == "custom" and str(entry.get("customType", "")).startswith("claude.")
              and isinstance(entry.get("data"), dict)):
            record = dict(entry["data"])
            if "parentUuid" in record:
                record["parentUuid"] = parent
            self.records.append(record)
            last = record.get("uuid") if isinstance(record.get("uuid"), str) else parent
        else:
            last = None
        if last is None:
            self.skipped[str(entry.get("customType") or kind)] += 1
            last = parent
        if isinstance(entry_id, str):
            self.alias[entry_id] = last

    def _message(self, entry: Entry, parent: str | None, stamp: Any) -> str | None:
        message = entry["message"]
        role = message.get("role")
        uid = self._uuid(entry.get("id"))
        if role == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = [_user_block(b) for b in content]
            return self._record(parent, "user", stamp, uid,
                                message={"role": "user", "content": content})
        if role == "toolResult":
            block: dict[str, Any] = {"tool_use_id": message.get("toolCallId"),
                                     "type": "tool_result",
                                     "content": [_user_block(b) for b in message.get("content")
                                                 or []]}
            if message.get("isError") is True:
                block["is_error"] = True
            return self._record(parent, "user", stamp, uid,
                                message={"role": "user", "content": [block]})
        if role == "assistant":
            return self._assistant(message, parent, stamp, uid)
        return None

    def _assistant(self, message: dict[str, Any], parent: str | None, stamp: Any,
                   uid: str) -> str:
        blocks = [_assistant_block(b) for b in message.get("content") or []] or [
            {"type": "text", "text": ""}]
        mid = "msg_01" + "".join(secrets.choice(_B62) for _ in range(22))
        request = "req_011C" + "".join(secrets.choice(_B62) for _ in range(22))
        stop = _STOP.get(str(message.get("stopReason")), "end_turn")
        at: str | None = parent
        for n, block in enumerate(blocks):
            line_uid = uid if n == 0 else self._uuid(None)
            body = {"model": message.get("model"), "id": mid, "type": "message",
                    "role": "assistant", "content": [block],
                    "stop_reason": stop if n == len(blocks) - 1 else None,
                    "stop_sequence": None, "usage": _usage(message.get("usage"))}
            record = {"parentUuid": at, **self.envelope, "message": body,
                      "requestId": request, "type": "assistant", "uuid": line_uid,
                      "timestamp": stamp if isinstance(stamp, str) else _iso(message)}
            if message.get("stopReason") == "error":
                record["isApiErrorMessage"] = True
            self.records.append(record)
            at = line_uid
        return str(at)

    def _compaction(self, entry: Entry, parent: str | None, stamp: Any) -> str:
        uid = self._uuid(entry.get("id"))
        tokens = entry.get("tokensBefore")
        self.records.append({"parentUuid": None, "logicalParentUuid": parent, **self.envelope,
                             "type": "system", "subtype": "compact_boundary",
                             "content": "Conversation compacted", "level": "info",
                             "compactMetadata": {"trigger": "manual", "preTokens":
                                                 tokens if isinstance(tokens, int) else 0},
                             "isMeta": False, "timestamp": stamp, "uuid": uid})
        if entry.get("id") in self.summarised:
            return uid
        summary = entry.get("summary") if isinstance(entry.get("summary"), str) else ""
        return self._record(uid, "user", later_timestamp(stamp), self._uuid(None),
                            message={"role": "user", "content": summary},
                            isVisibleInTranscriptOnly=True, isCompactSummary=True)


def _sidechains(entries: list[Entry]) -> set[str]:
    """The ids of entries in a tree other than the leaf's (the last entry's): the subagents'
    and sidechains' conversations of an imported transcript, which Claude Code must not take
    for its main chain (it resumes from the last main-chain message)."""
    parent_of = {e["id"]: e.get("parentId") for e in entries if isinstance(e.get("id"), str)}
    root_of: dict[str, str] = {}

    def root(entry_id: str) -> str:
        path = []
        at: Any = entry_id
        while isinstance(at, str) and at in parent_of and at not in root_of:
            path.append(at)
            parent = parent_of[at]
            if not isinstance(parent, str) or parent not in parent_of or parent in path:
                break
            at = parent
        top = root_of.get(at, path[-1] if path else entry_id)
        for step in path:
            root_of[step] = top
        return top

    if not entries or not isinstance(entries[-1].get("id"), str):
        return set()
    main = root(entries[-1]["id"])
    return {i for i in parent_of if root(i) != main}


def _user_block(block: Any) -> Any:
    if isinstance(block, dict) and block.get("type") == "image" and "data" in block:
        return {"type": "image", "source": {"type": "base64",
                                            "media_type": block.get("mimeType", ""),
                                            "data": block.get("data", "")}}
    return block


def _assistant_block(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "toolCall":
        return {"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                "input": block.get("arguments")}
    if kind == "thinking":
        if block.get("redacted") is True:
            return {"type": "redacted_thinking", "data": block.get("thinkingSignature", "")}
        out = {"type": "thinking", "thinking": block.get("thinking", "")}
        if "thinkingSignature" in block:
            out["signature"] = block["thinkingSignature"]
        return out
    return block


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    return {"input_tokens": usage.get("input", 0),
            "cache_creation_input_tokens": usage.get("cacheWrite", 0),
            "cache_read_input_tokens": usage.get("cacheRead", 0),
            "output_tokens": usage.get("output", 0)}


def _iso(message: dict[str, Any]) -> str:
    millis = message.get("timestamp")
    if isinstance(millis, int):
        return later_timestamp(_millis_iso(millis), 0)
    return later_timestamp(None, 0)


def _millis_iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat()


__all__ = ["ClaudeExportReport", "export_claude"]
