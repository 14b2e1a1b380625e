"""Export a logical session (a rotated lineage read as one) to Markdown, HTML or JSONL.

`export(path, "md" | "html" | "jsonl")` reads every file of the lineage with `load` (archives
in `.gz` included), keeps each entry id once (a successor repeats the kept entries of its
predecessor), drops the rotation seals, and renders:

- **md**: a front matter block, one heading per turn (a turn starts at a user message), tool
  calls and results in fenced code, long output in `<details>`, compaction summaries where
  they apply; the live branch, or every branch with `all_branches`.
- **html**: one self-contained page (inline CSS and JS, a `default-src 'none'` content policy,
  no request at view time). The entries travel as JSONL inside a `<script type=
  "application/json">` element and are rendered by the page in chunks as it scrolls; every
  piece of session text reaches the page through `textContent`, never as markup.
- **jsonl**: the header of the first file and the entries (the live branch, or all with
  `all_branches`), one per line: a session file of the whole lineage.

`redact=True` replaces what looks like an API key, a token or an e-mail address in every
string with `[REDACTED:<kind>]` before anything is rendered.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import codec
from .errors import JournalError, NotASession
from .export_page import PAGE
from .lineage import lineage
from .model import Entry
from .pairing import is_synthetic_result
from .render import content_text, describe_entry, first_line
from .seal import is_seal
from .snapshot import load
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


@dataclass
class Exported:
    """A logical session read for export: its files, its entries (each id once), the live
    leaf, and what could not be read."""

    files: list[str]
    header: Entry | None
    tree: Tree
    live_leaf: str | None
    warnings: list[str] = field(default_factory=list)

    @property
    def live_path(self) -> list[int]:
        index = None if self.live_leaf is None else self.tree.index_of(self.live_leaf)
        return self.tree.path(index)

    def stats(self) -> dict[str, Any]:
        """Models, tokens (input, output, cache read and write) and the cost recorded on
        assistant messages, each entry once."""
        models: list[str] = []
        tokens = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        cost = 0.0
        has_cost = False
        for entry in self.tree.entries:
            if entry.get("type") == "model_change":
                _add_model(models, entry.get("provider"), entry.get("modelId"))
            message = entry.get("message")
            if entry.get("type") != "message" or not isinstance(message, dict):
                continue
            if message.get("role") != "assistant":
                continue
            _add_model(models, message.get("provider"), message.get("model"))
            usage = message.get("usage")
            if not isinstance(usage, dict):
                continue
            for key in tokens:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    tokens[key] += value
            recorded = usage.get("cost")
            total = recorded.get("total") if isinstance(recorded, dict) else None
            if isinstance(total, int | float) and not isinstance(total, bool):
                cost += total
                has_cost = True
        return {"models": models, "tokens": tokens, "cost": round(cost, 6) if has_cost else None}


def _add_model(models: list[str], provider: Any, model: Any) -> None:
    if isinstance(model, str) and model:
        name = f"{provider}/{model}" if isinstance(provider, str) and provider else model
        if name not in models:
            models.append(name)


def read_lineage(path: str | os.PathLike[str]) -> Exported:
    """Every file of `path`'s lineage read as one session: entries in order, each id once.

    An archive that cannot be read (or has damaged lines) becomes a warning; the live file
    must be readable.
    """
    named = os.fspath(path)
    files = lineage(named)
    live = files[-1]
    if not os.path.exists(live):
        raise NotASession(named, "no such file, and no successor of it was found")
    seen: set[str] = set()
    entries: list[Entry] = []
    warnings: list[str] = []
    header: Entry | None = None
    live_leaf: str | None = None
    for file in files:
        try:
            snap = load(file)
        except (NotASession, OSError) as e:
            if file == live:
                raise
            warnings.append(f"{file}: not read ({e})")
            continue
        if snap.header is None and not snap.entries:
            if file == live:
                raise NotASession(file, "not a session file (no session header, no entries)")
            warnings.append(f"{file}: not a session file")
            continue
        if header is None:
            header = snap.header
        for d in snap.diagnostics:
            warnings.append(f"{file}: line {d.line or '?'}: {d.reason} ({d.detail})")
        for entry in snap.entries:
            if is_seal(entry) or entry["id"] in seen:
                continue
            seen.add(entry["id"])
            entries.append(entry)
        if file == live:
            own = [e for e in snap.entries if not is_seal(e)]
            live_leaf = own[-1]["id"] if own else None
    tree = Tree(entries)
    if live_leaf is None:
        live_leaf = tree.leaf_id
    return Exported(files, header, tree, live_leaf, warnings)


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
    """`export`, with the files read, the entry count and the warnings."""
    if fmt not in FORMATS:
        raise JournalError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    session = read_lineage(path)
    if redact:
        session = Exported(session.files, redact_value(session.header),
                           Tree(redact_value(e) for e in session.tree.entries),
                           session.live_leaf, session.warnings)
    if fmt == "jsonl":
        data = jsonl_bytes(session, all_branches=all_branches)
    elif fmt == "md":
        data = to_markdown(session, all_branches=all_branches).encode("utf-8", "backslashreplace")
    else:
        data = html_bytes(session)
    return ExportResult(data, session.files, len(session.tree.entries), session.warnings)


# JSONL


def _selected(session: Exported, all_branches: bool) -> list[Entry]:
    if all_branches:
        return session.tree.entries
    return [session.tree.entries[i] for i in session.live_path]


def jsonl_bytes(session: Exported, *, all_branches: bool = False) -> bytes:
    """The header (without `parentSession`) and the entries, one JSON per line."""
    lines: list[bytes] = []
    if session.header is not None:
        header = {k: v for k, v in session.header.items() if k != "parentSession"}
        lines.append(codec.dumps(header))
    lines.extend(codec.dumps(e) for e in _selected(session, all_branches))
    lines.append(b"")
    return b"\n".join(lines)


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


def _message_md(entry: Entry, message: dict[str, Any], out: list[str]) -> None:
    role = message.get("role")
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    if role == "toolResult":
        mark = " (synthetic: no result was recorded)" if is_synthetic_result(message) else ""
        status = "error" if message.get("isError") else "ok"
        title = (f"**Result** of `{message.get('toolName')}` "
                 f"({message.get('toolCallId')}, {status}){mark}")
        out.append(_block(content_text(content), title))
        return
    if role == "bashExecution":
        text = f"$ {message.get('command')}\n{message.get('output', '')}"
        out.append(_block(text, f"**Bash** (exit {message.get('exitCode')})", "console"))
        return
    if role in ("compactionSummary", "branchSummary"):
        out.append(f"> **{role}**: " + str(message.get("summary", "")).replace("\n", "\n> "))
        return
    if role == "assistant":
        out.append(f"**Assistant** ({message.get('model', '?')})")
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str) and block["text"].strip():
            out.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            out.append(_block(block["thinking"], "*Thinking*") if _is_long(block["thinking"])
                       else "<details><summary>Thinking</summary>\n\n"
                       + _fence(block["thinking"]) + "\n\n</details>")
        elif kind == "toolCall":
            title = f"**Tool call** `{block.get('name')}` ({block.get('id')})"
            out.append(_block(_json_text(block.get("arguments")), title, "json"))
        elif kind == "image":
            out.append(f"*(image, {block.get('mimeType', '?')})*")


def _entry_md(entry: Entry, out: list[str], compacted: set[str]) -> None:
    kind = entry.get("type")
    if entry["id"] in compacted:
        out.append(f"<a id=\"{entry['id']}\"></a>*(replaced by a later compaction)*")
    else:
        out.append(f"<a id=\"{entry['id']}\"></a>")
    if kind == "message" and isinstance(entry.get("message"), dict):
        _message_md(entry, entry["message"], out)
    elif kind == "compaction":
        tokens = entry.get("tokensBefore")
        out.append(f"### Compaction ({tokens if tokens is not None else '?'} tokens before; "
                   f"the model sees this summary, then the entries from "
                   f"`{entry.get('firstKeptEntryId')}` on)")
        out.append("> " + str(entry.get("summary", "")).replace("\n", "\n> "))
    elif kind == "branch_summary":
        out.append(f"### Branch summary (from `{entry.get('fromId')}`)")
        out.append("> " + str(entry.get("summary", "")).replace("\n", "\n> "))
    elif kind == "custom" and entry.get("customType") == REPAIR_MARKER:
        out.append(f"*Repair marker*: `{_json_text(entry.get('data'))}`")
    elif kind == "custom_message":
        out.append(f"**{entry.get('customType')}**: {content_text(entry.get('content'))}")
    else:
        out.append(f"*{describe_entry(entry)}*")


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


def _turns_md(tree: Tree, path: list[int], out: list[str], level: str) -> None:
    compacted = compacted_ids(tree, path)
    turn = 0
    for index in path:
        entry = tree.entries[index]
        message = entry.get("message")
        if (entry.get("type") == "message" and isinstance(message, dict)
                and message.get("role") == "user"):
            turn += 1
            when = entry.get("timestamp", "")
            out.append(f"{level} Turn {turn} · user · {when}")
        elif turn == 0 and index == path[0]:
            out.append(f"{level} Start")
        _entry_md(entry, out, compacted)


def _branch_leaves(tree: Tree, live: set[int]) -> list[int]:
    has_child = {p for p in tree.parents if p is not None}
    return [i for i in range(len(tree.entries)) if i not in has_child and i not in live]


def to_markdown(session: Exported, *, all_branches: bool = False) -> str:
    tree = session.tree
    header = session.header or {}
    stats = session.stats()
    path = session.live_path
    out = ["---", f"session: {_yaml_str(header.get('id'))}", f"name: {_yaml_str(tree.name)}",
           f"cwd: {_yaml_str(header.get('cwd'))}", f"created: {_yaml_str(header.get('timestamp'))}",
           "models: [" + ", ".join(_yaml_str(m) for m in stats["models"]) + "]",
           "tokens: {" + ", ".join(f"{k}: {v}" for k, v in stats["tokens"].items()) + "}",
           f"cost: {stats['cost'] if stats['cost'] is not None else 'null'}",
           f"entries: {len(tree.entries)}", f"leaf: {_yaml_str(session.live_leaf)}",
           "files: [" + ", ".join(_yaml_str(f) for f in session.files) + "]",
           f"exported: {_yaml_str(_now())}", "---"]
    out = ["\n".join(out), f"# {tree.name or header.get('id') or 'session'}"]
    for warning in session.warnings:
        out.append(f"> **Warning**: {warning}")
    _turns_md(tree, path, out, "##")
    if all_branches:
        live = set(path)
        for leaf in _branch_leaves(tree, live):
            branch = tree.path(leaf)
            fork = next((n for n, i in enumerate(branch) if i not in live), len(branch))
            label = tree.label(tree.entries[leaf]["id"])
            out.append(f"## Branch ending at `{tree.entries[leaf]['id']}`"
                       + (f" [{label}]" if label else "")
                       + (f" (forks after `{tree.entries[branch[fork - 1]]['id']}`)"
                          if fork else ""))
            _turns_md(tree, branch[fork:], out, "###")
    return "\n\n".join(out) + "\n"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# HTML


def _script_safe(data: bytes) -> bytes:
    """JSON bytes that can sit inside a <script> element: `<` only occurs inside JSON strings,
    where `\\u003c` means the same, so no `</script` or `<!--` can close or confuse it."""
    return data.replace(b"<", b"\\u003c")


def html_bytes(session: Exported) -> bytes:
    """The page (see `journal.export_page`) with the session's metadata and entries in it."""
    tree = session.tree
    header = session.header or {}
    meta = {
        "id": header.get("id"), "cwd": header.get("cwd"), "created": header.get("timestamp"),
        "name": tree.name, "liveLeaf": session.live_leaf, "labels": tree.labels,
        "lineage": session.files, "warnings": session.warnings,
        "exported": _now(), **session.stats(),
    }
    raw = jsonl_bytes(session, all_branches=True).rstrip(b"\n")
    before, rest = PAGE.split("{{TITLE}}", 1)
    middle, rest = rest.split("{{META}}", 1)
    between, end = rest.split("{{JSONL}}", 1)
    title = _html_escape(first_line(str(tree.name or header.get("id") or "session"), 200))
    return b"".join([(before + title + middle).encode(), _script_safe(codec.dumps(meta)),
                     between.encode(), _script_safe(raw), end.encode()])
