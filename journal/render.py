"""One-line, human-readable descriptions of entries and messages (shared by show and tail)."""

from __future__ import annotations

from typing import Any

from . import codec
from .model import Entry

WIDTH = 100


def first_line(text: str, width: int = WIDTH) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 1] + "…"


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            b["text"] for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


def content_size(content: Any) -> int:
    return len(content_text(content))


def summarize_arguments(arguments: Any, width: int = 60) -> str:
    if isinstance(arguments, dict):
        for key in ("path", "command", "pattern", "file_path"):
            if isinstance(arguments.get(key), str):
                return first_line(arguments[key], width)
    try:
        text = codec.dumps(arguments).decode() if arguments is not None else ""
    except TypeError:  # an integer beyond 64 bits: show it the way Python writes it
        text = repr(arguments)
    return first_line(text, width)


def count(value: Any) -> str:
    """A number with thousands separators; any other value as it is."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:,}"
    return "?" if value is None else str(value)


def describe_message(message: dict[str, Any]) -> str:
    role = message.get("role")
    content = message.get("content")
    if role == "assistant":
        parts = []
        text = content_text(content)
        if text.strip():
            parts.append(first_line(text))
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                args = summarize_arguments(block.get("arguments"))
                parts.append(f"→ {block.get('name')}({args})")
            elif isinstance(block, dict) and block.get("type") == "thinking" and not parts:
                parts.append("(thinking)")
        stop = message.get("stopReason")
        suffix = f" [{stop}]" if stop in ("error", "aborted", "length") else ""
        return ("; ".join(parts) or "(empty)") + suffix
    if role == "toolResult":
        status = "error" if message.get("isError") else "ok"
        size = content_size(content)
        preview = first_line(content_text(content), 60)
        return f"{message.get('toolName')} {status}, {size:,} chars: {preview}"
    if role == "bashExecution":
        return f"$ {first_line(str(message.get('command', '')))} (exit {message.get('exitCode')})"
    if role in ("compactionSummary", "branchSummary"):
        return first_line(str(message.get("summary", "")))
    return first_line(content_text(content))


def custom_text(entry: Entry) -> str:
    """The readable line a `custom` entry offers in `data.text` ('' when it offers none)."""
    data = entry.get("data")
    text = data.get("text") if isinstance(data, dict) else None
    return first_line(text) if isinstance(text, str) else ""


def describe_entry(entry: Entry) -> str:
    """A short description of what an entry holds, without its type or id."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message") or {}
        if not isinstance(message, dict):
            return f"(message is not an object: {type(message).__name__})"
        return f"{message.get('role')}: {describe_message(message)}"
    if kind == "model_change":
        return f"model {entry.get('provider')}/{entry.get('modelId')}"
    if kind == "thinking_level_change":
        return f"thinking {entry.get('thinkingLevel')}"
    if kind == "compaction":
        return (
            f"compaction: {count(entry.get('tokensBefore'))} tokens before, keeps from "
            f"{entry.get('firstKeptEntryId')}: {first_line(str(entry.get('summary', '')), 60)}"
        )
    if kind == "branch_summary":
        return f"branch summary from {entry.get('fromId')}: {first_line(str(entry.get('summary')))}"
    if kind == "label":
        label = entry.get("label")
        return f"label {entry.get('targetId')} = {label!r}" if label else (
            f"label {entry.get('targetId')} cleared"
        )
    if kind == "session_info":
        return f"name {entry.get('name')!r}"
    if kind == "custom":
        text = custom_text(entry)
        return f"custom {entry.get('customType')}" + (f": {text}" if text else "")
    if kind == "custom_message":
        text = first_line(content_text(entry.get("content")))
        return f"custom message {entry.get('customType')}: {text}"
    return f"{kind} (unknown type, kept as is)"
