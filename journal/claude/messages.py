"""Claude Code messages in pi's message model, so every reader of a context works unchanged.

What maps to what (the table is in docs/format.md):

- a user record's content (a string, or text and image blocks): a `user` message; each of
  its `tool_result` blocks: a `toolResult` message (`toolCallId`, `toolName` from the call,
  `content` as text and image blocks, `isError`);
- the lines of one API response (same `message.id`), merged: one `assistant` message;
  `text`, `thinking` (`signature` -> `thinkingSignature`), `redacted_thinking` (a `thinking`
  block with `redacted: true`, its data as the signature), `tool_use` (a `toolCall`,
  `arguments` = `input`);
- usage `input_tokens`, `output_tokens`, `cache_read_input_tokens`,
  `cache_creation_input_tokens`: `input`, `output`, `cacheRead`, `cacheWrite`, `totalTokens`;
- `stop_reason` `end_turn`, `tool_use`, `max_tokens`, `stop_sequence`: `stopReason` `stop`,
  `toolUse`, `length`, `stop`; `isApiErrorMessage`: `error`, with `errorMessage`;
- an image `source` (base64): `data` and `mimeType`.

Other blocks (server tool blocks, documents, ...) are kept as they are.
"""

from __future__ import annotations

from typing import Any

from ..context import iso_to_millis
from ..model import Message
from .records import Record

PROVIDER = "anthropic"
API = "anthropic-messages"

_STOP = {"end_turn": "stop", "tool_use": "toolUse", "max_tokens": "length",
         "stop_sequence": "stop", "pause_turn": "stop", "refusal": "stop"}


_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
               "cache_creation_input_tokens")
_MINUTES: dict[str, Any] = {}


def _millis(record: Record) -> Any:
    """`iso_to_millis` of the record's timestamp; Claude Code's own form
    (`2026-01-15T09:00:03.405Z`) is read from a per-minute cache (a load reads thousands)."""
    stamp = record.get("timestamp")
    if (type(stamp) is str and len(stamp) == 24 and stamp[23] == "Z" and stamp[19] == "."
            and stamp[16] == ":" and stamp[17:23].isascii() and stamp[17:19].isdigit()
            and stamp[20:23].isdigit() and stamp[17] < "6"):
        minute = _MINUTES.get(stamp[:16])
        if minute is None:
            minute = iso_to_millis(stamp[:16] + ":00.000Z")
            if len(_MINUTES) < 100_000:
                _MINUTES[stamp[:16]] = minute
        if isinstance(minute, int):
            return minute + int(stamp[17:19]) * 1000 + int(stamp[20:23])
    return iso_to_millis(stamp)


def image_block(block: dict[str, Any]) -> dict[str, Any]:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return {"type": "image", "data": source.get("data", ""),
                "mimeType": source.get("media_type", "")}
    return block


def _user_block(block: Any) -> Any:
    if isinstance(block, dict) and block.get("type") == "image":
        return image_block(block)
    if isinstance(block, str):  # a bare string in a content list reads as its text
        return {"type": "text", "text": block}
    return block


def result_content(content: Any) -> list[Any]:
    """A tool_result's content as pi's list of text and image blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [_user_block(b) for b in content]
    return [{"type": "text", "text": str(content)}]


def user_messages(record: Record, tool_names: dict[str, str]) -> list[Message]:
    """The messages one user record contributes: a toolResult per tool_result block, then
    one user message for whatever else it holds (none when nothing else)."""
    message = record["message"]
    content = message.get("content")
    stamp = _millis(record)
    if isinstance(content, str):
        return [{"role": "user", "content": content, "timestamp": stamp}]
    if not isinstance(content, list):
        return [{"role": "user", "content": [], "timestamp": stamp}]
    out: list[Message] = []
    rest: list[Any] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            call_id = block.get("tool_use_id")
            out.append({"role": "toolResult", "toolCallId": call_id,
                        "toolName": tool_names.get(call_id, "unknown")
                        if isinstance(call_id, str) else "unknown",
                        "content": result_content(block.get("content")),
                        "isError": block.get("is_error") is True, "timestamp": stamp})
        else:
            rest.append(_user_block(block))
    if rest or not out:
        out.append({"role": "user", "content": rest, "timestamp": stamp})
    return out


def assistant_block(block: Any) -> Any:
    """One content block of an assistant record in pi's shape."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "tool_use":
        return {"type": "toolCall", "id": block.get("id"), "name": block.get("name"),
                "arguments": block.get("input")}
    if kind == "thinking":
        out = {"type": "thinking", "thinking": block.get("thinking", "")}
        if "signature" in block:
            out["thinkingSignature"] = block["signature"]
        return out
    if kind == "redacted_thinking":
        return {"type": "thinking", "thinking": "", "thinkingSignature": block.get("data", ""),
                "redacted": True}
    return block


def usage(raw: Any) -> dict[str, Any] | None:
    """Claude's usage counters under pi's names (None when the record has none)."""
    if not isinstance(raw, dict):
        return None
    get = raw.get
    counts = [get(key) for key in _USAGE_KEYS]
    n_in, n_out, n_read, n_write = (v if type(v) is int else 0 for v in counts)
    return {"input": n_in, "output": n_out, "cacheRead": n_read, "cacheWrite": n_write,
            "totalTokens": n_in + n_out + n_read + n_write}


def assistant_message(record: Record) -> Message:
    """The pi message of one assistant record (one line: usually one block)."""
    message = record["message"]
    content = message.get("content")
    blocks = [assistant_block(b) for b in content] if isinstance(content, list) else (
        [{"type": "text", "text": content}] if isinstance(content, str) else [])
    out: Message = {"role": "assistant", "content": blocks, "api": API, "provider": PROVIDER,
                    "model": message.get("model")}
    found = usage(message.get("usage"))
    if found is not None:
        out["usage"] = found
    out["stopReason"] = stop_reason(record, blocks)
    if record.get("isApiErrorMessage") is True:
        out["stopReason"] = "error"
        out["errorMessage"] = " ".join(b.get("text", "") for b in blocks
                                       if isinstance(b, dict) and b.get("type") == "text")
    out["timestamp"] = _millis(record)
    return out


def stop_reason(record: Record, blocks: list[Any]) -> str:
    raw = record["message"].get("stop_reason")
    if isinstance(raw, str) and raw in _STOP:
        return _STOP[raw]
    calls = any(isinstance(b, dict) and b.get("type") == "toolCall" for b in blocks)
    return "toolUse" if calls else "stop"


def merge_assistant(into: Message, record: Record) -> None:
    """Add the next line of the same API response to its message: its blocks after the
    ones before, its usage, stop reason and model replacing theirs (the last line has the
    final counts)."""
    message = record["message"]
    content = message.get("content")
    blocks = [assistant_block(b) for b in content] if isinstance(content, list) else (
        [{"type": "text", "text": content}] if isinstance(content, str) else [])
    into["content"] = [*into["content"], *blocks]
    found = usage(message.get("usage"))
    if found is not None:
        into["usage"] = found
    raw = message.get("stop_reason")
    into["stopReason"] = _STOP[raw] if isinstance(raw, str) and raw in _STOP else (
        stop_reason({"message": {}}, into["content"]))
    if record.get("isApiErrorMessage") is True:
        into["stopReason"] = "error"
        into["errorMessage"] = " ".join(b.get("text", "") for b in blocks
                                        if isinstance(b, dict) and b.get("type") == "text")
    into["model"] = message.get("model")
