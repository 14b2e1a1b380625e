"""Reading a Claude Code transcript: the whole of it (`read`) or only its live tail (`resume`).

Neither locks nor writes. Lines that are not JSON objects are reported as diagnostics and
skipped, the way the pi readers report them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from .. import codec
from ..codec import Diagnostic, Line, last_newline_end
from ..errors import NotASession
from ..identity import first_names
from ..model import Entry
from ..storage import FileStorage, Storage
from .records import Record, is_compact_boundary, is_main_message, parent_of, uuid_of
from .translate import Translator

SUBAGENTS = "subagents"
UNREADABLE = "unreadable"
"""The reason of a subagent file that could not be opened (gone since it was listed, no
longer a regular file, its permission refused)."""


@dataclass
class ClaudeRead:
    """What was read from one transcript (and its subagent files).

    `entries` are in the store's model (see `journal.claude.translate`), `lines` the line of
    each (1-based in the transcript; a subagent file's records are numbered on after the
    transcript's last line, file by file; 0 after a reverse scan). `translator` continues
    where the reading stopped (a `View` feeds it what is appended later).
    """

    path: str
    entries: list[Entry]
    translator: Translator
    diagnostics: list[Diagnostic] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    size: int = 0
    end: int = 0
    complete: bool = True
    subagent_files: list[str] = field(default_factory=list)
    """The subagent files read after the transcript (`subagent_files`); what in them could not
    be used is in `diagnostics` too, each naming its file (`Diagnostic.file`)."""
    line_base: dict[str, int] = field(default_factory=dict)
    """For each subagent file, the number its lines are counted on from in `lines` (its
    line n is `line_base[file] + n` there)."""

    @property
    def leaf_id(self) -> str | None:
        return self.translator.leaf_id

    def file_of(self, line: int) -> str:
        """The file an entry numbered `line` in `lines` was read from: the subagent file
        whose numbering it falls in, else the transcript."""
        found = self.path
        for sub, base in self.line_base.items():
            if line <= base:
                break
            found = sub
        return found

    @property
    def metadata(self) -> list[Record]:
        return self.translator.metadata

    def first(self, key: str) -> Any:
        """The first value of a common field (`sessionId`, `cwd`, `version`, ...) found."""
        for records in self.translator.raw.values():
            value = records[0].get(key)
            if value is not None:
                return value
        for record in self.translator.metadata:
            if record.get(key) is not None:
                return record[key]
        return None

    @property
    def title(self) -> str | None:
        """The latest `ai-title` (or a `summary` record's text, in older transcripts)."""
        title = None
        for record in self.translator.metadata:
            kind = record.get("type")
            if kind == "ai-title" and isinstance(record.get("aiTitle"), str):
                title = record["aiTitle"]
            elif kind == "summary" and title is None and isinstance(record.get("summary"), str):
                title = record["summary"]
        return title


def subagent_files(path: str | os.PathLike[str]) -> list[str]:
    """The subagent transcripts of a session: `<dir>/<session>/subagents/agent-*.jsonl`.

    Each file once: one reached there under two names (a symbolic or hard link to another)
    is listed under the first name in sorted order, known by the file a name leads to
    (device and inode: `journal.identity.first_names`), so its records, bytes and damage are
    not counted twice.
    """
    p = Path(path)
    folder = p.parent / p.name.removesuffix(".jsonl") / SUBAGENTS
    if not folder.is_dir():
        return []
    names = sorted(str(f) for f in folder.glob("agent-*.jsonl"))
    return [name for name in first_names(names) if os.path.isfile(name)]


def feed_lines(translator: Translator, items: Any, entries: list[Entry], lines: list[int],
               diagnostics: list[Diagnostic], number_from: int = 0) -> int:
    """Feed lines (from `codec.iter_lines` or a reader, or `(line, parsed value)` pairs) to
    the translator; returns the end offset just past the last complete line consumed (0 when
    none)."""
    end = 0
    for item in items:
        if isinstance(item, Diagnostic):
            diagnostics.append(item)
            continue
        if isinstance(item, tuple) and not isinstance(item, Line):
            item, value = item
        else:
            try:  # the common case in one call; anything unusual goes the careful way
                value = orjson.loads(item.raw)
            except orjson.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                value = codec.parse_line(item)
        end = item.offset + len(item.raw) + 1
        if value is None:
            continue
        if isinstance(value, Diagnostic):
            diagnostics.append(value)
            continue
        if not isinstance(value, dict):
            diagnostics.append(Diagnostic(item.offset, len(item.raw), codec.NOT_OBJECT,
                                          item.number, f"not a record: {type(value).__name__}"))
            continue
        invalid = len(translator.invalid)
        new = translator.feed(value)
        if len(translator.invalid) > invalid:
            diagnostics.append(Diagnostic(item.offset, len(item.raw), codec.BAD_FIELD,
                                          item.number or None,
                                          "message is not an object; the record is skipped"))
        if new:
            entries.extend(new)
            lines.extend([number_from + item.number] * len(new))
    return end


_BOUNDARY = b'"compact_boundary"'


def _holds(f: Any, size: int, needle: bytes, block: int = 1 << 20) -> bool:
    """Whether the bytes hold `needle`, searched from the end (where a recent one is)."""
    pos = size
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        if f.read(min(size, pos + len(needle)) - start).find(needle) >= 0:
            return True
        pos = start
    return False


def _note_relink(boundary: Record, relink: dict[str, str]) -> None:
    meta = boundary.get("compactMetadata")
    segment = meta.get("preservedSegment") if isinstance(meta, dict) else None
    if isinstance(segment, dict):
        head, anchor = segment.get("headUuid"), segment.get("anchorUuid")
        if isinstance(head, str) and isinstance(anchor, str):
            relink[head] = anchor


def _unterminated(f: Any, end: int, size: int) -> Line | None:
    """The last line when it lacks its newline but is a whole JSON object: Claude Code reads
    such a line (hand-made transcripts end so), and so do these readers. `end` stays before
    it, so a reader that goes on sees it again once its newline arrives (and skips its uuid,
    already seen)."""
    if end >= size or size - end > 64 << 20:
        return None
    f.seek(end)
    raw = f.read(size - end)
    if not raw.rstrip().endswith(b"}"):
        return None
    line = Line(end, 0, raw)
    return line if isinstance(codec.parse_line(line), dict) else None


def read(storage: Storage, *, subagents: bool = True) -> ClaudeRead:
    """Read a whole transcript (and, with `subagents`, its subagent files after it)."""
    with codec.bulk_parsing():  # one pause of the collector for every file read
        return _read(storage, subagents)


def _read(storage: Storage, subagents: bool) -> ClaudeRead:
    translator = Translator()
    entries: list[Entry] = []
    lines: list[int] = []
    diagnostics: list[Diagnostic] = []
    with storage.open_reader() as reader:
        size = reader.size
        end = feed_lines(translator, reader.lines(0), entries, lines, diagnostics)
        last = _unterminated(reader.stream, end, size)
        if last is not None:
            diagnostics[:] = [d for d in diagnostics if d.reason != codec.TORN_TAIL]
            feed_lines(translator, [Line(last.offset, max(lines, default=0) + 1, last.raw)],
                       entries, lines, diagnostics)
    out = ClaudeRead(storage.locator, entries, translator, diagnostics, lines, size=size,
                     end=end)
    if subagents:
        number = max(lines, default=0)
        for sub in subagent_files(storage.locator):
            out.subagent_files.append(sub)
            out.line_base[sub] = number
            sub_diags: list[Diagnostic] = []
            try:
                with FileStorage(sub).open_stream() as f:
                    before = len(lines)
                    feed_lines(translator, codec.iter_lines(f), entries, lines, sub_diags,
                               number)
                    number = max(lines[before:], default=number)
            except (NotASession, OSError) as e:  # gone, or no longer a regular file
                reason = e.reason if isinstance(e, NotASession) else (e.strerror or str(e))
                sub_diags.append(Diagnostic(0, 0, UNREADABLE, None, reason))
            # a subagent file's damage is the session's: said as the transcript's is
            diagnostics.extend(replace(d, file=sub) for d in sub_diags)
    return out


def resume(storage: Storage) -> ClaudeRead:
    """Read only the tail a live context needs, scanning backwards from the end.

    The leaf is the last main-chain user or assistant record; the scan walks its chain up
    `parentUuid` until it meets a `compact_boundary` (the latest compaction on the branch:
    nothing before it reaches the model) or a root, then translates everything from there
    on. A file in which no compaction is written is read forward, whole (cheaper than
    backwards when the walk would reach its start anyway). Subagent files are not read.
    """
    with storage.open_reader() as reader:
        if not _holds(reader.stream, reader.size, _BOUNDARY):
            return read(storage, subagents=False)
    with storage.open_reader() as reader, codec.bulk_parsing():
        size = reader.size
        f = reader.stream
        end = last_newline_end(f, size)
        last = _unterminated(f, end, size)
        collected: list[tuple[Line, Any]] = []
        seen: dict[str, Record] = {}
        relink: dict[str, str] = {}  # a kept segment's head -> its anchor (see translate)
        wanted: str | None = None
        leaf_found = False
        stop = False
        backward = reader.lines_backward(end)
        for line in [last, *backward] if last is not None else backward:
            value = codec.parse_line(line)
            collected.append((line, value))
            if not isinstance(value, dict):
                continue
            uid = uuid_of(value)
            if uid is None:
                continue
            seen.setdefault(uid, value)
            if is_compact_boundary(value):
                _note_relink(value, relink)
            if not leaf_found and is_main_message(value):
                leaf_found = True
                wanted = uid
            while wanted is not None and wanted in seen:
                record = seen[wanted]
                if is_compact_boundary(record):
                    stop = True
                    break
                wanted = relink.get(wanted) or parent_of(record)
                if wanted is None:
                    stop = True
            if stop:
                break
        complete = not stop or (bool(collected) and collected[-1][0].offset == 0)
        collected.reverse()
    translator = Translator()
    entries: list[Entry] = []
    lines: list[int] = []
    diagnostics: list[Diagnostic] = []
    with codec.bulk_parsing():
        feed_lines(translator, collected, entries, lines, diagnostics)
    if end < size and last is None:
        diagnostics.append(Diagnostic(end, size - end, codec.TORN_TAIL, None,
                                      "no newline at end of file"))
    return ClaudeRead(storage.locator, entries, translator, diagnostics, [0] * len(entries),
                      size=size, end=end, complete=complete)


