"""Messages as labelled text: what a summarizer reads.

`message_text` renders one pi-shaped message as ``[Role]: text`` lines (tool calls as
``name(key=value)``, tool results and shell output cut to a limit keeping an important tail,
thinking cut to `THINKING_CHARS`); `serialize_conversation` joins them with blank lines.
`text_blocks` and `as_blocks` read a message's content whatever its shape (a string or a list
of blocks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from agent.messages import Message
from agent.truncate import result_text, truncate_text

THINKING_CHARS = 4_000
"""Thinking blocks are cut to this many characters in the text sent to a summarizer."""


def text_blocks(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(b.get("text", ""))
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "text" and b.get("text")
    ]


def _images(content: Any) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, Mapping) and b.get("type") == "image")


def _cut(text: str, limit: int) -> str:
    return truncate_text(text, limit)[0] if limit > 0 else text


def tool_call_text(block: Mapping[str, Any]) -> str:
    """`name(key=value, ...)` with JSON values, as a summarizer reads a tool call."""
    args = block.get("arguments")
    if isinstance(args, Mapping):
        shown = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()
        )
    else:
        shown = json.dumps(args, ensure_ascii=False) if args is not None else ""
    return f"{block.get('name', '?')}({shown})"


def message_text(message: Message, tool_result_chars: int = 2_000) -> str:
    """One message as labelled text (empty when it says nothing a summary could use).

    Tool results are cut to `tool_result_chars` (keeping an important tail, see
    `agent.truncate`), thinking to `THINKING_CHARS`.
    """
    role = message.get("role")
    content = message.get("content")
    parts: list[str] = []
    if role == "user":
        text = "\n".join(text_blocks(content))
        images = _images(content)
        if images:
            text += f"{chr(10) if text else ''}[{images} image(s) attached]"
        if text:
            parts.append(f"[User]: {text}")
    elif role == "assistant":
        blocks = content if isinstance(content, list) else as_blocks(content)
        thinking = [str(b.get("thinking", "")) for b in blocks
                    if isinstance(b, Mapping) and b.get("type") == "thinking" and b.get("thinking")]
        texts = text_blocks(blocks)
        calls = [tool_call_text(b) for b in blocks
                 if isinstance(b, Mapping) and b.get("type") == "toolCall"]
        if thinking:
            parts.append(f"[Assistant thinking]: {_cut(chr(10).join(thinking), THINKING_CHARS)}")
        if texts:
            parts.append(f"[Assistant]: {chr(10).join(texts)}")
        for call in calls:
            parts.append(f"[Assistant called a tool]: {call}")
        if message.get("stopReason") in ("error", "aborted"):
            why = message.get("errorMessage") or message.get("stopReason")
            parts.append(f"[Assistant turn ended early]: {why}")
    elif role == "toolResult":
        label = "Tool error" if message.get("isError") else "Tool result"
        text = _cut(result_text(message), tool_result_chars)
        images = _images(content)
        if images:
            text += f"\n[{images} image(s)]"
        parts.append(f"[{label} from {message.get('toolName', 'tool')}]: {text or '(empty)'}")
    elif role == "bashExecution":
        line = f"[User ran a shell command]: {message.get('command', '')}"
        code = message.get("exitCode")
        if message.get("cancelled"):
            line += " (cancelled)"
        elif code not in (None, 0):
            line += f" (exit code {code})"
        output = _cut(str(message.get("output") or ""), tool_result_chars)
        parts.append(f"{line}\n{output}" if output else line)
    elif role == "custom":
        text = "\n".join(text_blocks(content))
        if text:
            parts.append(f"[Note ({message.get('customType', 'custom')})]: {text}")
    elif role == "branchSummary":
        parts.append(f"[Summary of a path explored and abandoned]: {message.get('summary', '')}")
    elif role == "compactionSummary":
        parts.append(f"[Summary of earlier conversation]: {message.get('summary', '')}")
    return "\n".join(parts)


def as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return []


def serialize_conversation(messages: Iterable[Message], tool_result_chars: int = 2_000) -> str:
    """Messages as labelled text blocks separated by blank lines."""
    texts = (message_text(m, tool_result_chars) for m in messages)
    return "\n\n".join(t for t in texts if t)
