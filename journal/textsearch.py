"""Full-text search across sessions: live files and their archives, without an index.

`search(query, paths)` finds entries whose text matches: user and assistant text, thinking,
tool calls (name and arguments), tool results, `bashExecution` commands and output,
compaction and branch summaries, custom messages, session names and labels.

Speed comes from never parsing a line that cannot match. Each file is streamed in large
chunks and the chunk's bytes are scanned for a *needle*: the longest piece of the query that
every JSON writer stores byte for byte (ASCII letters, digits and punctuation that JSON never
escapes). Only a line holding the needle is parsed (by the codec, as every reader of the store
parses) and then matched exactly on its decoded text, so an escaped quote, a newline or a
`\\u00e9` written by another writer is found all the same. A query with no such piece (or a
regular expression with no literal every match must contain) parses every line.

Case follows ripgrep's smart case unless the caller says otherwise: a query with an upper-case
letter is matched case-sensitively, any other case-insensitively.

Database sessions are searched as files are (`paths` may hold a database URL or a session
URL, `journal.discovery`): each read through its storage, a lineage of sessions as one.

A rotated session is one lineage: its live file and its archives (`.gz` included) are searched
oldest first, and an entry a successor repeats (same id) is reported once, where it was first
written. A damaged file or line is reported in `problems` and the search goes on.

Example:
    >>> result = search("timeout", ["sessions"], role=["assistant"], limit=20)  # doctest: +SKIP
    >>> [(h.session, h.entry_id, h.snippet) for h in result.hits]
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import IO, Any

from . import archivegz, codec
from .archivegz import is_compressed
from .codec import Diagnostic, Line
from .discovery import find_lineages
from .errors import JournalError
from .header import is_header, stream_first_line
from .model import CURRENT_VERSION, Entry, header_version
from .pg.url import is_database_url, shown
from .render import content_text
from .snapshot import load, open_for_reading, stored_size

log = logging.getLogger(__name__)

CHUNK = 1 << 22
SNIPPET_BEFORE = 40
SNIPPET_WIDTH = 120

ROLES = ("user", "assistant", "toolResult", "bashExecution", "compaction", "branch_summary",
         "custom_message", "session_info", "label")
"""What `role` may name: a message's role, or the type of an entry that is not a message.
`summary` names both kinds of summary (compaction and branch_summary)."""

_ROLE_ALIASES = {"summary": ("compaction", "branch_summary")}

# bytes every JSON writer stores as they are (never escaped): a needle made of them is found
# in the raw line whatever the writer
_PLAIN = re.compile(r"[A-Za-z0-9 _\-.,:;!?#$%()*+=@\[\]^`{|}~]+")


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching entry.

    `session` is the live file of the entry's lineage (what names the logical session),
    `file` the file the entry was read from (an archive for an older entry, a subagent file
    for a Claude Code subagent's) and `offset` where its line starts in that file
    (uncompressed bytes for a `.gz` archive; -1 for a file read whole). `field` says
    which text matched (`text`, `thinking`, `toolCall`, `toolResult`, `bash`, `summary`,
    `name`, `label`), `snippet` is one line around the first match and `spans` the
    (start, end) of every match inside it; `matches` counts the matches in the whole entry.
    """

    session: str
    file: str
    offset: int
    entry_id: str | None
    timestamp: str | None
    role: str
    tool: str | None
    field: str
    snippet: str
    spans: tuple[tuple[int, int], ...]
    matches: int

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "file": self.file, "offset": self.offset,
                "entryId": self.entry_id, "timestamp": self.timestamp, "role": self.role,
                "tool": self.tool, "field": self.field, "snippet": self.snippet,
                "spans": [list(s) for s in self.spans], "matches": self.matches}


@dataclass(frozen=True, slots=True)
class SearchProblem:
    """A file, or a line of one, that could not be searched, and why."""

    path: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message}


@dataclass
class SearchResult:
    """The hits (in session order, then file order), what could not be read, and counts."""

    hits: list[Hit] = field(default_factory=list)
    problems: list[SearchProblem] = field(default_factory=list)
    sessions: int = 0
    files: int = 0
    bytes: int = 0
    truncated: bool = False
    """True when `limit` stopped the search before every file was read."""

    def to_json(self) -> dict[str, Any]:
        return {"hits": [h.to_json() for h in self.hits],
                "problems": [p.to_json() for p in self.problems],
                "sessions": self.sessions, "files": self.files, "bytes": self.bytes,
                "truncated": self.truncated}


@dataclass(frozen=True)
class _Query:
    pattern: re.Pattern[str]
    literal: str | None
    """The query as text to find with `str.find` (lower-cased when folding), unless a regex."""
    needle: bytes | None
    fold: bool
    roles: frozenset[str] | None
    tools: frozenset[str] | None
    since: datetime | None
    until: datetime | None

    def spans(self, text: str, start: int = 0, end: int | None = None) -> Iterator[
            tuple[int, int]]:
        """Where the query matches in `text[start:end]` (not empty, not overlapping).

        A literal is found with `str.find` (on the lower-cased text when folding: many
        times faster than a case-insensitive regular expression on long tool output)."""
        end = len(text) if end is None else end
        literal = self.literal
        if literal is not None:
            hay = text.lower() if self.fold else text
            if len(hay) == len(text):  # lower() kept every position (it nearly always does)
                n = len(literal)
                at = hay.find(literal, start, end)
                while at >= 0:
                    yield at, at + n
                    at = hay.find(literal, at + n, end)
                return
        for m in self.pattern.finditer(text, start, end):
            if m.end() > m.start():
                yield m.start(), m.end()


def search(
    query: str,
    paths: Sequence[str | os.PathLike[str]],
    *,
    role: Iterable[str] | None = None,
    tool: Iterable[str] | None = None,
    since: str | date | datetime | None = None,
    until: str | date | datetime | None = None,
    regex: bool = False,
    ignore_case: bool | None = None,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Search the sessions under `paths` for `query`.

    Args:
        query: the text to find (a regular expression with `regex=True`).
        paths: folders (their sessions at any depth, archives included, as
            `journal.discovery` finds them) or session files (a file brings its lineage).
        role: only entries of these roles (see `ROLES`; `summary` for both summaries).
        tool: only tool calls and tool results of these tool names.
        since, until: only entries from `since` (inclusive) up to `until` (a date alone
            includes that whole day); a `date`, a `datetime` or ISO text. Times without a zone
            are UTC.
        regex: `query` is a Python regular expression.
        ignore_case: True or False; None (the default) is smart case.
        limit: stop after this many hits.
        progress: called with (bytes done, bytes in all, as stored) after each file.

    Returns:
        A `SearchResult`; unreadable files and damaged candidate lines are in `problems`.

    Raises:
        JournalError: a bad query, role, date or limit, or a path that does not exist.
    """
    if not query:
        raise JournalError("the query is empty")
    if limit is not None and limit < 1:
        raise JournalError("--limit takes a number of hits, 1 or more")
    q = _compile(query, regex=regex, ignore_case=ignore_case, role=role, tool=tool,
                 since=since, until=until)
    result = SearchResult()
    groups = _lineages([os.fspath(p) for p in paths], result.problems)
    result.sessions = len(groups)
    total = sum(_size(f) for _, files in groups for f in files)
    done = 0
    for live, files in groups:
        seen: set[str] = set()
        for path in files:
            for hit in _search_file(path, live, q, seen, result):
                if is_database_url(path):  # named without the password it is read with
                    hit = replace(hit, session=shown(live), file=shown(path))
                result.hits.append(hit)
                if limit is not None and len(result.hits) >= limit:
                    result.truncated = True
                    return _named(result)
            done += _size(path)
            if progress is not None:
                progress(done, total)
    return _named(result)


def _named(result: SearchResult) -> SearchResult:
    """`result` with its problems' database sessions named without their password."""
    result.problems = [SearchProblem(shown(p.path), p.message) for p in result.problems]
    return result


def _size(path: str) -> int:
    return stored_size(path)


# the query


def _compile(query: str, *, regex: bool, ignore_case: bool | None,
             role: Iterable[str] | None, tool: Iterable[str] | None,
             since: str | date | datetime | None,
             until: str | date | datetime | None) -> _Query:
    fold = ignore_case if ignore_case is not None else not _has_upper(query, regex)
    flags = re.IGNORECASE if fold else 0
    try:
        pattern = re.compile(query if regex else re.escape(query), flags)
    except re.error as e:
        raise JournalError(f"not a regular expression: {query!r} ({e})") from e
    pieces = _required_literals(query) if regex else [query]
    plain = [m.group() for piece in pieces for m in _PLAIN.finditer(piece)]
    longest = max(plain, key=len, default="")
    needle = longest.encode("ascii") if longest.strip() else None
    if needle is not None and fold:
        needle = needle.lower()
    literal = None if regex else (query.lower() if fold else query)
    return _Query(pattern, literal, needle, fold, _roles(role), _tools(tool),
                  _moment(since, "since", end=False), _moment(until, "until", end=True))


def _has_upper(query: str, regex: bool) -> bool:
    text = re.sub(r"\\.", "", query) if regex else query  # \S, \W are classes, not letters
    return any(c.isupper() for c in text)


def _required_literals(pattern: str) -> list[str]:
    """Runs of literal characters every match of `pattern` must contain (a conservative
    reading: nothing at all when the pattern has alternatives or inline flags)."""
    if "|" in pattern or "(?" in pattern:
        return []
    runs: list[str] = []
    run: list[str] = []
    depth = 0
    i = 0

    def end_run(optional_last: bool = False) -> None:
        if optional_last and run:
            run.pop()
        if run:
            runs.append("".join(run))
        run.clear()

    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            end_run()
            i += 2
            continue
        if c == "[":
            end_run()
            close = pattern.find("]", i + 2)
            i = close + 1 if close >= 0 else len(pattern)
            continue
        if c in "({":
            end_run(optional_last=c == "{")
            depth += c == "("
            if c == "{":
                close = pattern.find("}", i)
                i = close + 1 if close >= 0 else len(pattern)
                continue
        elif c == ")":
            end_run()
            depth -= 1
        elif c in "?*":
            end_run(optional_last=True)
        elif c in ".^$+":
            end_run()
        elif depth == 0:
            run.append(c)
        i += 1
    end_run()
    return runs


def _roles(role: Iterable[str] | None) -> frozenset[str] | None:
    if role is None:
        return None
    names: set[str] = set()
    for r in role:
        if r in _ROLE_ALIASES:
            names.update(_ROLE_ALIASES[r])
        elif r in ROLES:
            names.add(r)
        else:
            raise JournalError(f"unknown role {r!r}: one of {', '.join(ROLES)}, summary")
    return frozenset(names) or None


def _tools(tool: Iterable[str] | None) -> frozenset[str] | None:
    names = frozenset(tool) if tool is not None else frozenset()
    return names or None


def _moment(value: str | date | datetime | None, name: str, *, end: bool) -> datetime | None:
    """A bound as an aware datetime; a date alone is the start of its day, or for an upper
    bound the start of the next day (so `until` includes the day named)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = (date.fromisoformat(value) if len(value) == 10
                     else datetime.fromisoformat(value))
        except ValueError:
            raise JournalError(f"--{name}: not a date or an ISO time: {value!r} "
                               "(for example 2026-01-15 or 2026-01-15T09:30)") from None
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=UTC) + (
            timedelta(days=1) if end else timedelta())
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# which files, grouped by session


def _lineages(paths: list[str], problems: list[SearchProblem]) -> list[tuple[str, list[str]]]:
    """(live file, its files oldest first) for every session under `paths`, each once, as
    `journal.discovery` finds them (the rule every catalog command shares)."""
    del problems  # a folder that cannot be listed is an error, as in the other commands
    return sorted((files[-1], files) for files in find_lineages(paths))


# one file


def _search_file(path: str, live: str, q: _Query, seen: set[str],
                 result: SearchResult) -> Iterator[Hit]:
    try:
        stream = open_for_reading(path)
    except (JournalError, OSError) as e:
        result.problems.append(SearchProblem(path, _reason(e, path)))
        return
    result.files += 1
    try:
        result.bytes += (stored_size(path) if is_database_url(path)
                         else os.fstat(stream.fileno()).st_size)
        with stream:
            if is_compressed(path):
                with archivegz.reader(stream) as unpacked:
                    yield from _search_stream(path, live, unpacked, q, seen, result)
            else:
                yield from _search_stream(path, live, stream, q, seen, result)
    except archivegz.UNREADABLE as e:
        what = archivegz.DAMAGED if is_compressed(path) else "unreadable"
        result.problems.append(SearchProblem(path, f"{what}: {_reason(e, path)}"))


def _reason(e: BaseException, path: str) -> str:
    text = str(e)
    return text.removeprefix(f"{path}: ") if text else type(e).__name__


def _search_stream(path: str, live: str, f: IO[bytes], q: _Query, seen: set[str],
                   result: SearchResult) -> Iterator[Hit]:
    first = stream_first_line(f)
    if first.header is None or header_version(first.header) != CURRENT_VERSION:
        # an older version (ids come from migration) or a damaged start: the store's loader
        yield from _search_loaded(path, live, q, seen, result)
        return
    damaged = 0
    for item in _candidate_lines(f, first.end, q):
        if isinstance(item, Diagnostic):
            result.problems.append(SearchProblem(path, item.describe()))
            continue
        value = codec.parse_line(item)
        if value is None:
            continue
        if isinstance(value, Diagnostic):
            problem: str | None = value.describe()
        else:
            problem = codec.check_entry(value, CURRENT_VERSION)
        if problem is not None or isinstance(value, Diagnostic):
            damaged += 1
            if damaged <= 20:
                result.problems.append(SearchProblem(path, f"byte {item.offset:,}: {problem}"))
            continue
        hit = _match(value, q, path, live, item.offset, seen)
        if hit is not None:
            yield hit
    if damaged > 20:
        result.problems.append(SearchProblem(path, f"{damaged - 20} more damaged line(s)"))


def _search_loaded(path: str, live: str, q: _Query, seen: set[str],
                   result: SearchResult) -> Iterator[Hit]:
    try:
        snap = load(path)
    except (JournalError, OSError) as e:
        result.problems.append(SearchProblem(path, _reason(e, path)))
        return
    if snap.header is None and not snap.entries:
        result.problems.append(SearchProblem(path, "not a session (no header, no entries)"))
        return
    if snap.claude is not None:  # its subagent files were read (and searched) with it
        result.files += len(snap.claude.subagent_files)
        result.bytes += sum(stored_size(f) for f in snap.claude.subagent_files)
    if snap.diagnostics:
        result.problems.append(SearchProblem(
            path, f"{len(snap.diagnostics)} damaged line(s) not searched "
            f"(first: {snap.diagnostics[0].describe()}); 'journal info' says more"))
    read = snap.claude
    for at, entry in enumerate(snap.entries):
        hit = _match(entry, q, path, live, -1, seen)
        if hit is not None and read is not None:
            # a transcript's entry names the file it is in: the transcript, or a subagent file
            hit = replace(hit, file=read.file_of(snap.lines[at]))
        if hit is not None:
            yield hit


def _candidate_lines(f: IO[bytes], start: int, q: _Query) -> Iterator[Line | Diagnostic]:
    """The complete lines from `start` that hold the query's needle (every line without
    one), and a torn tail as a Diagnostic. Chunks without the needle are never split."""
    needle = q.needle
    carry = b""
    base = start  # offset of carry[0]
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            carry = buf
            continue
        if needle is None:
            at = 0
            for raw in buf[:cut - 1].split(b"\n"):
                yield Line(base + at, 0, raw)
                at += len(raw) + 1
        else:
            hay = buf.lower() if q.fold else buf
            pos = 0
            while (at := hay.find(needle, pos, cut)) >= 0:
                begin = buf.rfind(b"\n", 0, at) + 1
                end = buf.find(b"\n", at)
                yield Line(base + begin, 0, buf[begin:end])
                pos = end + 1
        carry = buf[cut:]
        base += cut
    if carry.strip():
        yield Diagnostic(base, len(carry), codec.TORN_TAIL, None,
                         "no newline at end of file (not searched)")


# one entry


def _match(entry: Entry, q: _Query, path: str, live: str, offset: int,
           seen: set[str]) -> Hit | None:
    if not isinstance(entry, dict) or is_header(entry):
        return None
    entry_id = entry.get("id") if isinstance(entry.get("id"), str) else None
    if entry_id is not None and entry_id in seen:
        return None  # a successor's copy of an entry already reported
    first: tuple[str, str, str | None, tuple[int, int]] | None = None
    matches = 0
    role = _role_of(entry)
    if q.roles is not None and role not in q.roles:
        return None
    for name, text, tool in _texts(entry):
        if q.tools is not None and tool not in q.tools:
            continue
        for span in q.spans(text):
            matches += 1
            if first is None:
                first = (name, text, tool, span)
    if first is None:
        return None
    stamp = entry.get("timestamp") if isinstance(entry.get("timestamp"), str) else None
    if q.since is not None or q.until is not None:
        when = _parse_time(stamp)
        if when is None or (q.since is not None and when < q.since) or (
                q.until is not None and when >= q.until):
            return None
    if entry_id is not None:
        seen.add(entry_id)
    name, text, tool, m = first
    snippet, spans = _snippet(text, m, q)
    return Hit(live, path, offset, entry_id, stamp, role, tool, name, snippet, spans, matches)


def _role_of(entry: Entry) -> str:
    message = entry.get("message")
    if entry.get("type") == "message" and isinstance(message, dict):
        return str(message.get("role"))
    return str(entry.get("type"))


def _texts(entry: Entry) -> Iterator[tuple[str, str, str | None]]:
    """(field, text, tool name) for every searchable text of an entry."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        if not isinstance(message, dict):
            return
        role = message.get("role")
        content = message.get("content")
        if role == "assistant" and isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                btype = block.get("type")
                if btype == "text" and isinstance(block.get("text"), str):
                    yield "text", block["text"], None
                elif btype == "thinking" and isinstance(block.get("thinking"), str):
                    yield "thinking", block["thinking"], None
                elif btype == "toolCall":
                    name = block.get("name") if isinstance(block.get("name"), str) else None
                    yield "toolCall", f"{name} {_arguments(block.get('arguments'))}", name
        elif role == "toolResult":
            tool = message.get("toolName")
            yield "toolResult", content_text(content), tool if isinstance(tool, str) else None
        elif role == "bashExecution":
            command, output = message.get("command"), message.get("output")
            yield "bash", "\n".join(s for s in (command, output) if isinstance(s, str)), None
        else:
            yield "text", content_text(content), None
    elif kind in ("compaction", "branch_summary"):
        if isinstance(entry.get("summary"), str):
            yield "summary", entry["summary"], None
    elif kind == "custom_message":
        yield "text", content_text(entry.get("content")), None
    elif kind == "session_info" and isinstance(entry.get("name"), str):
        yield "name", entry["name"], None
    elif kind == "label" and isinstance(entry.get("label"), str):
        yield "label", entry["label"], None


def _arguments(arguments: Any) -> str:
    if arguments is None:
        return ""
    try:
        return codec.dumps(arguments).decode()
    except TypeError:  # an integer beyond 64 bits
        return repr(arguments)


def _parse_time(stamp: str | None) -> datetime | None:
    if stamp is None:
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _snippet(text: str, first: tuple[int, int],
             q: _Query) -> tuple[str, tuple[tuple[int, int], ...]]:
    """One line of text around the first match, and where the matches in it are."""
    start = max(0, first[0] - SNIPPET_BEFORE)
    end = max(first[1], min(len(text), start + SNIPPET_WIDTH))
    window = text[start:end]
    spans = tuple((s - start, e - start) for s, e in q.spans(text, start, end))
    flat = re.sub(r"\s", " ", window)  # same length: the spans stay where they are
    prefix = "…" if start > 0 else ""
    suffix = "…" if end < len(text) else ""
    shift = len(prefix)
    return prefix + flat + suffix, tuple((s + shift, e + shift) for s, e in spans)
