"""What can be taken from messages without a model: identifiers, files, failures, decisions.

`extract_identifiers` finds ids, hashes, URLs, paths and ports verbatim (a summary must never
shorten one); `file_operations` and `tool_failures` read the tool calls and results;
`extract_facts` gathers these with the user's requests and the assistant's decisions for the
extractive summarizer and the memory flush.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.compaction.transcript import as_blocks, text_blocks
from agent.messages import Message
from agent.truncate import result_text

_FILE_EXTENSIONS = (
    "py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|md|rst|txt|toml|yaml|yml|ini|cfg|conf|env|"
    "sh|bash|zsh|ps1|rs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|scala|html|css|scss|sql|"
    "lock|log|csv|tsv|xml|proto|gradle|mk|dockerfile|tf|lua|pl|r|jl|dart|vue|svelte|patch|diff"
)
_IDENTIFIER = re.compile(
    r"""
    (?<!\w)  # every identifier starts after a non-word character: fail fast inside words
    (?:
      https?://[^\s<>"'`)\]]+                                   # URL
    | (?<![\w\\])[A-Za-z]:\\[\w.\-]+(?:\\[\w.\-]+)*            # Windows path
    | (?<![\w./~-])(?:~|\.{1,2})?/[\w.@+\-]+(?:/[\w.@+\-]+)+/?  # absolute path, 2+ parts
    | (?<![\w./-])[\w.\-]+(?:/[\w.@+\-]+)*/[\w.\-]+\.(?i:EXT)\b  # relative path with extension
    | (?<![\w.-])(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|[A-Za-z][\w-]*(?:\.[\w-]+)+):\d{2,5}\b
    | (?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w.])                # IPv4
    | \b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b  # UUID
    | \b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b       # hash (lowercase hex)
    | (?<![\w.-])[\w\-]+\.(?i:EXT)\b                           # bare file name
    | \b[A-Za-z][A-Za-z0-9]*[_\-][A-Za-z0-9_\-]*\d[A-Za-z0-9_\-]*\b  # prefixed id (toolu_01x)
    )
    """.replace("EXT", _FILE_EXTENSIONS),
    re.VERBOSE,
)
_TRAILING = ".,;:!?'\")]}>"
_WRAPPING = _TRAILING + "([{<`"
_CANDIDATE = re.compile(r"[/\\:.\d_-]")  # every identifier has one of these
_MIN_IDENTIFIER_CHARS = 6


def extract_identifiers(text: str) -> list[str]:
    """Ids, hashes, URLs, paths, host:port pairs and ports in `text`, in order, deduplicated.

    Meant to be over-inclusive: a word taken for an identifier only costs a few tokens when a
    summary lists it, while a shortened hash or path is an error the agent can't undo.

    Example:
        >>> extract_identifiers("see https://x.io/a?b=1, commit 3f9a2c1d and /srv/app/main.py:")
        ['https://x.io/a?b=1', '3f9a2c1d', '/srv/app/main.py']
    """
    seen: dict[str, None] = {}
    after_port = False
    # The pattern only runs on words that could hold an identifier: plain words (most of any
    # text) are skipped with cheap tests, which makes this several times faster than one scan.
    for word in text.split():
        bare = word.strip(_WRAPPING)
        if after_port and bare.isdigit() and 2 <= len(bare) <= 5:
            seen.setdefault(bare, None)
        after_port = len(bare) == 4 and bare.lower() == "port"
        if len(bare) < 4 or bare.isalpha() or not _CANDIDATE.search(bare):
            continue
        for match in _IDENTIFIER.finditer(word):
            value = match.group(0).rstrip(_TRAILING)
            if len(value) < _MIN_IDENTIFIER_CHARS and "." not in value and "/" not in value:
                continue
            seen.setdefault(value, None)
    return list(seen)


def _strings(value: Any) -> Iterable[str]:
    """The string values inside tool-call arguments, unescaped (newlines stay newlines)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def identifier_text(message: Message) -> str:
    """The parts of a message identifiers are taken from.

    User text, assistant text and tool-call arguments, failed tool results, shell commands and
    summaries; not the body of a successful tool result (a file listing would flood the list).
    """
    role = message.get("role")
    if role in ("user", "custom"):
        return "\n".join(text_blocks(message.get("content")))
    if role == "assistant":
        content = message.get("content")
        blocks = content if isinstance(content, list) else as_blocks(content)
        out = text_blocks(blocks)
        for block in blocks:
            if isinstance(block, Mapping) and block.get("type") == "toolCall":
                out.extend(_strings(block.get("arguments")))
        return "\n".join(out)
    if role == "toolResult" and message.get("isError"):
        return result_text(message)[:4_000]
    if role == "bashExecution":
        return str(message.get("command", ""))
    if role in ("branchSummary", "compactionSummary"):
        return str(message.get("summary", ""))
    return ""


def message_identifiers(messages: Iterable[Message], limit: int | None = None) -> list[str]:
    """Identifiers of several messages, in order of first appearance (at most `limit`)."""
    seen: dict[str, None] = {}
    for message in messages:
        for value in extract_identifiers(identifier_text(message)):
            seen.setdefault(value, None)
            if limit is not None and len(seen) >= limit:
                return list(seen)
    return list(seen)


# ---------------------------------------------------------------------------------------
# facts (used by the extractive summarizer and the memory flush)

_DECISION = re.compile(
    r"\b(?:decid\w*|chose|choos\w*|going with|will use|we'll|i'll|instead of|because|so that|"
    r"conclu\w*|root cause|the (?:bug|issue|problem|fix) (?:is|was)|turns out|fixed|resolved|"
    r"implemented|done|works now|all tests pass\w*|must|should not|don't|never|always|"
    r"todo|next step\w*|remaining|blocked|plan)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*\-])|\n+")
FILE_TOOLS_READ = frozenset({"read"})
FILE_TOOLS_MODIFY = frozenset({"write", "edit"})


@dataclass
class Facts:
    """What the extractive summarizer and the memory flush take from messages."""

    first_request: str | None = None
    latest_request: str | None = None
    requests: int = 0
    decisions: list[str] = field(default_factory=list)
    last_conclusion: str | None = None
    read_files: list[str] = field(default_factory=list)
    modified_files: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def file_operations(messages: Iterable[Message]) -> tuple[dict[str, None], dict[str, None]]:
    """Paths read and modified by `read`, `write` and `edit` tool calls, in call order."""
    read: dict[str, None] = {}
    modified: dict[str, None] = {}
    for message in messages:
        if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            # dict, not Mapping: this runs on every block of a long session (abc checks cost)
            if type(block) is not dict or block.get("type") != "toolCall":
                continue
            args = block.get("arguments")
            path = args.get("path") if isinstance(args, dict) else None
            if not isinstance(path, str) or not path:
                continue
            if block.get("name") in FILE_TOOLS_READ:
                read.setdefault(path, None)
            elif block.get("name") in FILE_TOOLS_MODIFY:
                modified.setdefault(path, None)
    return read, modified


def tool_failures(messages: Iterable[Message], line_chars: int = 160) -> list[str]:
    """One short line per failed tool result, deduplicated, oldest first."""
    seen_calls: set[str] = set()
    lines: dict[str, None] = {}
    for message in messages:
        if message.get("role") != "toolResult" or not message.get("isError"):
            continue
        call_id = message.get("toolCallId")
        if isinstance(call_id, str) and call_id:
            if call_id in seen_calls:
                continue
            seen_calls.add(call_id)
        text = _one_line(result_text(message), line_chars) or "failed (no output)"
        lines.setdefault(f"{message.get('toolName') or 'tool'}: {text}", None)
    return list(lines)


def extract_facts(messages: Sequence[Message], line_chars: int = 300) -> Facts:
    """Requests, decisions, files, failures and identifiers found in `messages`."""
    facts = Facts()
    decisions: dict[str, None] = {}
    for message in messages:
        role = message.get("role")
        if role == "user":
            text = "\n".join(text_blocks(message.get("content"))).strip()
            if text:
                facts.requests += 1
                if facts.first_request is None:
                    facts.first_request = _one_line(text, line_chars)
                facts.latest_request = _one_line(text, line_chars)
        elif role == "assistant":
            text = "\n".join(text_blocks(message.get("content"))).strip()
            if not text:
                continue
            facts.last_conclusion = _one_line(text, line_chars)
            for sentence in _SENTENCE.split(text):
                if sentence.lstrip().startswith(("|", "```")):
                    continue  # table rows and code fences are not conclusions
                sentence = sentence.strip(" -*#>\t")
                if len(sentence) >= 12 and _DECISION.search(sentence):
                    decisions.setdefault(_one_line(sentence, line_chars), None)
    facts.decisions = list(decisions)
    read, modified = file_operations(messages)
    facts.modified_files = list(modified)
    facts.read_files = [p for p in read if p not in modified]
    facts.failures = tool_failures(messages)
    facts.identifiers = message_identifiers(messages)
    return facts
