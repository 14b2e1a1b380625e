"""Export a logical session (a rotated lineage read as one) to Markdown, HTML or JSONL.

`export(path, "md" | "html" | "jsonl")` reads every file of the lineage (archives in `.gz`
included) as a stream (`journal.entrystream`), keeps each entry id once (a successor repeats
the kept entries of its predecessor), drops the rotation seals, and renders. The files are
read twice and never held whole: a first pass keeps only the tree's skeleton (ids, parents,
names, labels) and the totals; the second writes each entry as it is read (`export_to`
writes into a stream, so a 100 MB session costs memory in proportion to its entry count,
not its size). Only Markdown of a branch whose entries are out of file order, and the
entries off the live branch with `all_branches`, are held in memory.

- **md**: a front matter block, one heading per turn (a turn starts at a user message), tool
  calls and results in fenced code, long output in `<details>`, compaction summaries where
  they apply; the live branch, or every branch with `all_branches`. Session text outside
  code fences is escaped (`md_prose`, `md_inline`): it can hold no heading, fence, quote,
  setext underline or HTML (`<` and `&` become entities), so nothing a session says can
  open or close a block of the document.
- **html**: one self-contained page (inline CSS and JS, a `default-src 'none'` content policy,
  no request at view time). The entries travel as JSONL inside a `<script type=
  "application/json">` element and are rendered by the page in chunks as it scrolls; every
  piece of session text reaches the page through `textContent`, never as markup.
- **jsonl**: the header of the first file and the entries (the live branch, or all with
  `all_branches`), one per line: a session file of the whole lineage.

`path` may name a database session (`...?session=<id>`, `pg:<id>`: its lineage of sessions,
`journal.pg.lineages`) or a database holding one lineage; it is read through its storage as
a file is.

`redact=True` replaces what looks like an API key, a token or an e-mail address in every
string with `[REDACTED:<kind>]` before anything is rendered.
"""

from __future__ import annotations

import datetime as _dt
import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from . import codec
from .entrystream import LineageStream
from .errors import JournalError, NotASession
from .export_page import PAGE
from .lineage import trace_to_live
from .model import Entry
from .pairing import is_synthetic_result
from .pg.url import DEFAULT_DATABASE, is_database_url, shown
from .render import content_text, describe_entry, first_line
from .tree import Tree

FORMATS = ("md", "html", "jsonl")
REPAIR_MARKER = "journal.repair"
LONG_CHARS = 2000
LONG_LINES = 30

_SECRETS: list[tuple[str, re.Pattern[str]]] = [
    ("anthropic-key", re.compile(r"sk-ant-[A-Za-z0-9_\-]{16,}")),
    ("api-key", re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}")),
    ("aws-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github-token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("slack-token", re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}")),
    ("google-key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer", re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/\-]{16,}=*")),
    ("email", re.compile(r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b")),
]


class _Stats:
    """Models, tokens (input, output, cache read and write) and the cost recorded on
    assistant messages, added up entry by entry."""

    def __init__(self) -> None:
        self.models: list[str] = []
        self.tokens = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        self.cost = 0.0
        self.has_cost = False

    def add(self, entry: Entry) -> None:
        if entry.get("type") == "model_change":
            _add_model(self.models, entry.get("provider"), entry.get("modelId"))
        message = entry.get("message")
        if entry.get("type") != "message" or not isinstance(message, dict):
            return
        if message.get("role") != "assistant":
            return
        _add_model(self.models, message.get("provider"), message.get("model"))
        usage = message.get("usage")
        if not isinstance(usage, dict):
            return
        for key in self.tokens:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.tokens[key] += value
        recorded = usage.get("cost")
        total = recorded.get("total") if isinstance(recorded, dict) else None
        if isinstance(total, int | float) and not isinstance(total, bool):
            self.cost += total
            self.has_cost = True

    def to_json(self) -> dict[str, Any]:
        return {"models": self.models, "tokens": self.tokens,
                "cost": round(self.cost, 6) if self.has_cost else None}


def _add_model(models: list[str], provider: Any, model: Any) -> None:
    if isinstance(model, str) and model:
        name = f"{provider}/{model}" if isinstance(provider, str) and provider else model
        if name not in models:
            models.append(name)


_SKELETON_KEYS = ("id", "parentId", "type", "targetId", "label", "name", "firstKeptEntryId")


def _skeleton(entry: Entry) -> Entry:
    """What the tree needs of an entry (its place, names, labels, compactions), not its
    text."""
    return {k: entry[k] for k in _SKELETON_KEYS if k in entry}


@dataclass
class Exported:
    """A logical session indexed for export: its files (the lineage, then a Claude Code
    transcript's subagent files), header, the tree of its entries'
    skeletons (each id once), the live leaf, the totals and what could not be read.
    `entries()` streams the entries themselves again."""

    files: list[str]
    header: Entry | None
    tree: Tree
    live_leaf: str | None
    stats: dict[str, Any]
    stream: LineageStream
    redact: bool = False
    warnings: list[str] = field(default_factory=list)
    title: str | None = None
    """A Claude Code transcript's title (its sessions have no `session_info`)."""

    @property
    def live_path(self) -> list[int]:
        index = None if self.live_leaf is None else self.tree.index_of(self.live_leaf)
        return self.tree.path(index)

    def entries(self) -> Iterator[tuple[int, Entry]]:
        """(index in the tree, entry) for each entry the index read, in file order, read
        again from the files (redacted if asked)."""
        for entry in self.stream.entries():
            index = self.tree.index_of(entry["id"])
            if index is None:  # written since the first pass: not exported
                continue
            yield index, redact_value(entry) if self.redact else entry


def read_lineage(path: str | os.PathLike[str], *, redact: bool = False) -> Exported:
    """Index every file of `path`'s lineage read as one session: entries in order, each id
    once; only their skeletons are kept.

    An archive that cannot be read (or has damaged lines) becomes a warning; the live file
    must be readable.
    """
    named = os.fspath(path)
    damaged: list[str] = []
    if is_database_url(named):
        files = database_lineage(named)
    else:
        files, damaged = _readable_lineage(named)
    live = files[-1]
    if not is_database_url(live) and not os.path.exists(live):
        raise NotASession(named, "no such file, and no successor of it was found")
    stream = LineageStream(files)
    stats = _Stats()
    skeletons: list[Entry] = []
    for entry in stream.entries():
        if redact:
            entry = redact_value(entry)
        stats.add(entry)
        skeletons.append(_skeleton(entry))
    tree = Tree(skeletons)
    header = redact_value(stream.header) if redact else stream.header
    live_leaf = stream.live_leaf if stream.live_leaf in tree else tree.leaf_id
    title = redact_text(stream.title) if redact and stream.title else stream.title
    read = [*files, *stream.subagent_files]  # a Claude Code transcript's are read with it
    return Exported([shown(f) for f in read], header, tree, live_leaf, stats.to_json(), stream,
                    redact, [*damaged, *stream.warnings], title)


def _readable_lineage(path: str) -> tuple[list[str], list[str]]:
    """The files of the lineage of `path` that can be read, and what a damaged archive
    behind the live file hides (one warning each: the lineage may go on before it, and is
    exported from after it). A damaged archive on the way to the live file is an error
    (`DamagedArchive`): which file is live cannot be told."""
    traced = trace_to_live(path)
    hidden = {d.path for d in traced.damaged}
    return [f for f in traced.files if f not in hidden], [str(d) for d in traced.damaged]


def database_lineage(url: str) -> list[str]:
    """The session URLs (oldest first) of the one lineage `url` names: a session's, or a
    database's when it holds exactly one (`journal.pg.lineages`)."""
    from .pg.lineages import database_lineages

    chains = database_lineages(url)
    if not chains:
        raise JournalError(f"{shown(url)}: the database holds no sessions; nothing to export")
    if len(chains) > 1:
        # counted as `journal ls` counts, a row a lineage, and named as one of its rows names it
        one = "pg:<id>" if url == DEFAULT_DATABASE else "...?session=<id>"
        raise JournalError(f"{shown(url)}: the database holds {len(chains)} lineages of "
                           "sessions, and export takes one: name one of its sessions "
                           f"({one}, or the URL 'journal ls {shown(url)}' gives the lineage)")
    return chains[0]


def redact_value(value: Any) -> Any:
    """`value` with every string passed through `redact_text` (keys of objects kept)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    return value


def redact_text(text: str) -> str:
    """`text` with API keys, tokens and e-mail addresses replaced by `[REDACTED:<kind>]`."""
    for secret, pattern in _SECRETS:
        if secret == "email" and "@" not in text:
            continue
        text = pattern.sub(f"[REDACTED:{secret}]", text)
    return text


@dataclass
class ExportResult:
    """What `export_session` made: the text, the files read, the entries (each id once) and
    what could not be read (damaged lines, an unreadable archive)."""

    data: bytes
    files: list[str]
    entries: int
    warnings: list[str]

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "surrogateescape")


@dataclass
class ExportReport:
    """What `export_to` wrote: bytes, the files read, the entries (each id once), warnings."""

    bytes: int
    files: list[str]
    entries: int
    warnings: list[str]


def export(path: str | os.PathLike[str], fmt: str, *, all_branches: bool = False,
           redact: bool = False) -> str:
    """The session at `path` (its whole lineage) as Markdown (`"md"`), one self-contained
    HTML page (`"html"`) or JSONL (`"jsonl"`) text; see `export_session` for the report.

    Example:
        >>> page = export("sessions/a.jsonl", "html")  # doctest: +SKIP
    """
    return export_session(path, fmt, all_branches=all_branches, redact=redact).text


def export_session(path: str | os.PathLike[str], fmt: str, *, all_branches: bool = False,
                   redact: bool = False) -> ExportResult:
    """`export`, with the files read, the entry count and the warnings (the text in
    memory; `export_to` writes it into a stream instead)."""
    buffer = io.BytesIO()
    report = export_to(path, fmt, buffer, all_branches=all_branches, redact=redact)
    return ExportResult(buffer.getvalue(), report.files, report.entries, report.warnings)


def export_to(path: str | os.PathLike[str], fmt: str, out: IO[bytes], *,
              all_branches: bool = False, redact: bool = False) -> ExportReport:
    """Write the session at `path` (its whole lineage) to the binary stream `out` as `fmt`,
    entry by entry: the files are read once to index them (nothing is written if that
    fails) and once more as they are written.

    Raises:
        JournalError: an unknown format, or a live file that is no readable session.
    """
    if fmt not in FORMATS:
        raise JournalError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    session = read_lineage(path, redact=redact)
    counted = _Counting(out)
    if fmt == "jsonl":
        write_jsonl(session, counted, all_branches=all_branches)
    elif fmt == "md":
        write_markdown(session, counted, all_branches=all_branches)
    else:
        write_html(session, counted)
    warnings = list(dict.fromkeys([*session.warnings, *session.stream.warnings]))
    return ExportReport(counted.count, session.files, len(session.tree.entries), warnings)


class _Counting:
    """A binary stream's `write`, counting the bytes."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.count = 0

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.count += len(data)


# JSONL


def _in_file_order(path: list[int]) -> bool:
    return all(a < b for a, b in zip(path, path[1:], strict=False))


def _header_line(session: Exported) -> bytes | None:
    if session.header is None:
        return None
    return codec.dumps({k: v for k, v in session.header.items() if k != "parentSession"})


def write_jsonl(session: Exported, out: _Counting, *, all_branches: bool = False) -> None:
    """The header (without `parentSession`) and the entries, one JSON per line."""
    header = _header_line(session)
    if header is not None:
        out.write(header + b"\n")
    path = session.live_path
    if all_branches or _in_file_order(path):
        wanted = None if all_branches else set(path)
        for index, entry in session.entries():
            if wanted is None or index in wanted:
                out.write(codec.dumps(entry) + b"\n")
        return
    held = {i: e for i, e in session.entries() if i in set(path)}
    for index in path:
        out.write(codec.dumps(held[index]) + b"\n")


# Markdown


def _fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _is_long(text: str) -> bool:
    return len(text) > LONG_CHARS or text.count("\n") >= LONG_LINES


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _block(text: str, title: str, lang: str = "") -> str:
    fenced = _fence(text, lang)
    if not _is_long(text):
        return f"{title}\n\n{fenced}"
    return (f"<details><summary>{_html_escape(title)} ({len(text):,} chars)</summary>\n\n"
            f"{fenced}\n\n</details>")


def _json_text(value: Any) -> str:
    try:
        return codec.dumps(value, orjson.OPT_INDENT_2).decode()
    except TypeError:
        return repr(value)


def _yaml_str(value: Any) -> str:
    return codec.dumps("" if value is None else str(value)).decode()


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLOCK_START = re.compile(r"^( {0,3})(#|>|`{3,}|~{3,})")
_UNDERLINE = re.compile(r"^( {0,3})([-=*_])[ \t]*(?:\2[ \t]*)*$")


def md_prose(text: str) -> str:
    """`text` as Markdown prose that reads as written and can change nothing around it:
    `&` and `<` become entities (no HTML, so no `</details>` or `<script>`), and a line that
    would start a heading, a quote or a code fence, or underline a heading (`---`, `===`),
    gets a backslash before that character. Line ends are `\\n` (a lone CR ends a line in
    Markdown too). Emphasis, links, lists and inline code stay as they are: none of them
    can reach past the paragraph they are in."""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    lines = _LINE_BREAK.split(text)
    for n, line in enumerate(lines):
        match = _BLOCK_START.match(line) or _UNDERLINE.match(line)
        if match is not None:
            at = len(match.group(1))
            lines[n] = line[:at] + "\\" + line[at:]
    return "\n".join(lines)


def md_inline(value: Any) -> str:
    """`value` as text inside one line of Markdown (a heading, a title): on one line, with
    `&` and `<` as entities."""
    text = " ".join(_LINE_BREAK.split(str(value)))
    return text.replace("&", "&amp;").replace("<", "&lt;")


def md_code(value: Any) -> str:
    """`value` as inline code, on one line, whatever backticks it holds."""
    text = " ".join(_LINE_BREAK.split(str(value)))
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _quote(text: str) -> str:
    return "> " + md_prose(text).replace("\n", "\n> ")


def _message_md(entry: Entry, message: dict[str, Any], out: list[str]) -> None:
    role = message.get("role")
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    if role == "toolResult":
        mark = " (synthetic: no result was recorded)" if is_synthetic_result(message) else ""
        status = "error" if message.get("isError") else "ok"
        title = (f"**Result** of {md_code(message.get('toolName'))} "
                 f"({md_inline(message.get('toolCallId'))}, {status}){mark}")
        out.append(_block(content_text(content), title))
        return
    if role == "bashExecution":
        text = f"$ {message.get('command')}\n{message.get('output', '')}"
        out.append(_block(text, f"**Bash** (exit {md_inline(message.get('exitCode'))})",
                          "console"))
        return
    if role in ("compactionSummary", "branchSummary"):
        out.append(f"> **{role}**: " + _quote(str(message.get("summary", "")))[2:])
        return
    if role == "assistant":
        out.append(f"**Assistant** ({md_inline(message.get('model', '?'))})")
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"].strip():
            out.append(md_prose(block["text"]))
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            out.append(_block(block["thinking"], "*Thinking*") if _is_long(block["thinking"])
                       else "<details><summary>Thinking</summary>\n\n"
                       + _fence(block["thinking"]) + "\n\n</details>")
        elif kind == "toolCall":
            title = f"**Tool call** {md_code(block.get('name'))} ({md_inline(block.get('id'))})"
            out.append(_block(_json_text(block.get("arguments")), title, "json"))
        elif kind == "image":
            out.append(f"*(image, {md_inline(block.get('mimeType', '?'))})*")


def _anchor(entry_id: object) -> str:
    return f"<a id=\"{_html_escape(str(entry_id)).replace(chr(34), '&quot;')}\"></a>"


def _entry_md(entry: Entry, out: list[str], compacted: set[str]) -> None:
    kind = entry.get("type")
    if entry["id"] in compacted:
        out.append(f"{_anchor(entry['id'])}*(replaced by a later compaction)*")
    else:
        out.append(_anchor(entry["id"]))
    if kind == "message" and isinstance(entry.get("message"), dict):
        _message_md(entry, entry["message"], out)
    elif kind == "compaction":
        tokens = entry.get("tokensBefore")
        out.append(f"### Compaction ({md_inline(tokens if tokens is not None else '?')} tokens "
                   f"before; the model sees this summary, then the entries from "
                   f"{md_code(entry.get('firstKeptEntryId'))} on)")
        out.append(_quote(str(entry.get("summary", ""))))
    elif kind == "branch_summary":
        out.append(f"### Branch summary (from {md_code(entry.get('fromId'))})")
        out.append(_quote(str(entry.get("summary", ""))))
    elif kind == "custom" and entry.get("customType") == REPAIR_MARKER:
        out.append(f"*Repair marker*: {md_code(_json_text(entry.get('data')))}")
    elif kind == "custom_message":
        out.append(f"**{md_inline(entry.get('customType'))}**: "
                   f"{md_prose(content_text(entry.get('content')))}")
    else:
        out.append(f"*{md_inline(describe_entry(entry))}*")


def compacted_ids(tree: Tree, path: list[int]) -> set[str]:
    """Ids on a branch that a later compaction on it replaced by its summary."""
    out: set[str] = set()
    start = 0
    for n, index in enumerate(path):
        entry = tree.entries[index]
        if entry.get("type") != "compaction":
            continue
        kept = entry.get("firstKeptEntryId")
        stop = next((m for m in range(start, n) if tree.entries[path[m]]["id"] == kept), n)
        out.update(tree.entries[path[m]]["id"] for m in range(start, stop)
                   if tree.entries[path[m]].get("type") not in ("compaction",))
        start = stop
    return out


class _Turns:
    """The Markdown of one branch, entry by entry: a heading at each user message."""

    def __init__(self, tree: Tree, path: list[int], level: str) -> None:
        self.compacted = compacted_ids(tree, path)
        self.first = path[0] if path else None
        self.level = level
        self.turn = 0

    def render(self, index: int, entry: Entry) -> list[str]:
        out: list[str] = []
        message = entry.get("message")
        if (entry.get("type") == "message" and isinstance(message, dict)
                and message.get("role") == "user"):
            self.turn += 1
            when = md_inline(entry.get("timestamp", ""))
            out.append(f"{self.level} Turn {self.turn} · user · {when}")
        elif self.turn == 0 and index == self.first:
            out.append(f"{self.level} Start")
        _entry_md(entry, out, self.compacted)
        return out


def _branch_leaves(tree: Tree, live: set[int]) -> list[int]:
    has_child = {p for p in tree.parents if p is not None}
    return [i for i in range(len(tree.entries)) if i not in has_child and i not in live]


class _Pieces:
    """Markdown blocks written one by one, a blank line between two."""

    def __init__(self, out: _Counting) -> None:
        self.out = out
        self.started = False

    def put(self, pieces: list[str]) -> None:
        for piece in pieces:
            text = ("\n\n" if self.started else "") + piece
            self.out.write(text.encode("utf-8", "backslashreplace"))
            self.started = True


def write_markdown(session: Exported, out: _Counting, *, all_branches: bool = False) -> None:
    """The session as Markdown, written as its entries are read."""
    tree = session.tree
    header = session.header or {}
    stats = session.stats
    path = session.live_path
    name = tree.name or session.title
    front = ["---", f"session: {_yaml_str(header.get('id'))}", f"name: {_yaml_str(name)}",
             f"cwd: {_yaml_str(header.get('cwd'))}",
             f"created: {_yaml_str(header.get('timestamp'))}",
             "models: [" + ", ".join(_yaml_str(m) for m in stats["models"]) + "]",
             "tokens: {" + ", ".join(f"{k}: {v}" for k, v in stats["tokens"].items()) + "}",
             f"cost: {stats['cost'] if stats['cost'] is not None else 'null'}",
             f"entries: {len(tree.entries)}", f"leaf: {_yaml_str(session.live_leaf)}",
             "files: [" + ", ".join(_yaml_str(f) for f in session.files) + "]",
             f"exported: {_yaml_str(_now())}", "---"]
    pieces = _Pieces(out)
    pieces.put(["\n".join(front), f"# {md_inline(name or header.get('id') or 'session')}"])
    pieces.put([f"> **Warning**: {md_inline(w)}" for w in session.warnings])
    on_path = set(path)
    turns = _Turns(tree, path, "##")
    elsewhere: dict[int, Entry] = {}
    if _in_file_order(path):
        for index, entry in session.entries():
            if index in on_path:
                pieces.put(turns.render(index, entry))
            elif all_branches:
                elsewhere[index] = entry
    else:  # a branch out of file order (a repaired file): its entries are held
        held = dict(session.entries())
        for index in path:
            pieces.put(turns.render(index, held[index]))
        elsewhere = held
    if all_branches:
        for leaf in _branch_leaves(tree, on_path):
            branch = tree.path(leaf)
            fork = next((n for n, i in enumerate(branch) if i not in on_path), len(branch))
            label = tree.label(tree.entries[leaf]["id"])
            pieces.put([f"## Branch ending at {md_code(tree.entries[leaf]['id'])}"
                        + (f" [{md_inline(label)}]" if label else "")
                        + (f" (forks after {md_code(tree.entries[branch[fork - 1]]['id'])})"
                           if fork else "")])
            rest = branch[fork:]
            branch_turns = _Turns(tree, rest, "###")
            for index in rest:
                pieces.put(branch_turns.render(index, elsewhere[index]))
    out.write(b"\n")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# HTML


def _script_safe(data: bytes) -> bytes:
    """JSON bytes that can sit inside a <script> element: `<` only occurs inside JSON strings,
    where `\\u003c` means the same, so no `</script` or `<!--` can close or confuse it."""
    return data.replace(b"<", b"\\u003c")


def write_html(session: Exported, out: _Counting) -> None:
    """The page (see `journal.export_page`) with the session's metadata and entries in it,
    the entries written as they are read."""
    tree = session.tree
    header = session.header or {}
    name = tree.name or session.title
    meta = {
        "id": header.get("id"), "cwd": header.get("cwd"), "created": header.get("timestamp"),
        "name": name, "liveLeaf": session.live_leaf, "labels": tree.labels,
        "lineage": session.files, "warnings": session.warnings,
        "exported": _now(), **session.stats,
    }
    before, rest = PAGE.split("{{TITLE}}", 1)
    middle, rest = rest.split("{{META}}", 1)
    between, end = rest.split("{{JSONL}}", 1)
    title = _html_escape(first_line(str(name or header.get("id") or "session"), 200))
    out.write((before + title + middle).encode())
    out.write(_script_safe(codec.dumps(meta)))
    out.write(between.encode())
    lines = _header_line(session)
    separator = b""
    if lines is not None:
        out.write(_script_safe(lines))
        separator = b"\n"
    for _, entry in session.entries():
        out.write(separator + _script_safe(codec.dumps(entry)))
        separator = b"\n"
    out.write(end.encode())
