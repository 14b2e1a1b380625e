"""pi-shaped messages to an Anthropic Messages API request body (pure functions).

:func:`to_api_messages` runs the messages through ``journal.to_model_messages`` (summaries,
custom and shell messages become user text), then converts each one:

- user content (a string or text/image blocks) becomes text and base64 image blocks;
- assistant content: text stays text; a thinking block with a signature goes back unchanged as
  ``{"type": "thinking", "thinking", "signature"}``; a redacted one (``"redacted": true``, or a
  ``redactedThinking``/``redacted_thinking`` block) as ``{"type": "redacted_thinking",
  "data"}``; thinking without a signature, or from another provider's API, becomes plain text
  (its signature would be rejected); a toolCall becomes ``tool_use`` ``{id, name, input}``;
- each ``toolResult`` becomes a ``tool_result`` block (``tool_use_id``, text and image content,
  ``is_error``), and a run of them lands in one user message;
- adjacent messages of the same role are merged into one (``tool_result`` blocks first), and a
  message left without blocks (blank text only) is left out.

Tool call ids are made safe for the API (letters, digits, ``_`` and ``-``, at most 64
characters), consistently for a call and its result. Nothing is mutated.

:func:`build_params` adds the rest of the request: model, max_tokens, system prompt, tools,
extended thinking and prompt-cache breakpoints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import journal
from agent.messages import Message
from agent.models.base import ModelRequest

Block = dict[str, Any]

API = "anthropic-messages"
THINKING_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
}
"""Thinking budget in tokens per thinking level."""
MIN_THINKING_BUDGET = 1024
DEFAULT_MAX_OUTPUT = 64_000
MAX_OUTPUT_TOKENS: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4-2", 32_000),
    ("claude-opus-4-0", 32_000),
    ("claude-3-5", 8_192),
    ("claude-3-opus", 4_096),
    ("claude-3-haiku", 4_096),
)
"""Largest output per model id prefix (first match wins); others get DEFAULT_MAX_OUTPUT."""
ADAPTIVE_THINKING_MODELS = ("claude-opus-4-6", "claude-mythos")
"""Model id prefixes that take ``thinking={"type": "adaptive"}`` instead of a fixed budget."""

_CACHE = {"type": "ephemeral"}
_CACHEABLE = frozenset({"text", "image", "tool_result", "tool_use"})
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


THINKING_TYPES = frozenset({"thinking", "redactedThinking", "redacted_thinking"})


def drop_replayed_thinking(messages: Sequence[Message], before: int) -> list[Message]:
    """``messages`` with the thinking blocks of assistant messages before index ``before``
    (where the latest compaction's kept part ends) dropped; later messages untouched.

    A signed thinking block is tied to the conversation that preceded it; after a compaction
    that conversation is a summary, and the API rejects the replayed block ("Invalid
    signature in thinking block"). The design: drop the thinking of turns before the latest
    compaction, keep the latest turns' thinking (signature and all) as it is. A message that
    held nothing but thinking keeps its readable thinking unsigned, which the payload sends as
    plain text (a message left with nothing at all is left out by the sanitizer). Returns
    ``messages`` itself (as a list) when there is nothing to drop.
    """
    out: list[Message] | None = None
    for index in range(min(before, len(messages))):
        message = messages[index]
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        if not any(isinstance(b, dict) and b.get("type") in THINKING_TYPES for b in content):
            continue
        kept = [b for b in content
                if not (isinstance(b, dict) and b.get("type") in THINKING_TYPES)]
        if not kept:
            kept = [{"type": "thinking", "thinking": b["thinking"]} for b in content
                    if isinstance(b, dict) and b.get("type") == "thinking"
                    and b.get("redacted") is not True
                    and isinstance(b.get("thinking"), str) and b["thinking"].strip()]
        if out is None:
            out = list(messages)
        out[index] = {**message, "content": kept}
    if out is not None:
        return out
    return messages if isinstance(messages, list) else list(messages)


def to_api_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The ``messages`` of an Anthropic request for pi-shaped ``messages``."""
    ids = _IdMap()
    out: list[dict[str, Any]] = []
    for message in journal.to_model_messages(messages):
        role = message.get("role")
        if role == "user":
            api_role, blocks = "user", _user_blocks(message.get("content"))
        elif role == "assistant":
            api_role, blocks = "assistant", _assistant_blocks(message, ids)
        elif role == "toolResult":
            api_role, blocks = "user", [_tool_result(message, ids)]
        else:
            continue
        if not blocks:
            continue
        if out and out[-1]["role"] == api_role:
            merged = out[-1]["content"] + blocks
            results = [b for b in merged if b.get("type") == "tool_result"]
            others = [b for b in merged if b.get("type") != "tool_result"]
            out[-1] = {"role": api_role, "content": results + others}
        else:
            out.append({"role": api_role, "content": blocks})
    return out


class _IdMap:
    """Original tool call id -> an id the API accepts, unique within one request."""

    def __init__(self) -> None:
        self._map: dict[str, str] = {}
        self._used: set[str] = set()

    def __call__(self, original: Any) -> str:
        key = str(original)
        if key in self._map:
            return self._map[key]
        safe = _UNSAFE_ID.sub("_", key)[:64] or "call"
        candidate, n = safe, 1
        while candidate in self._used:
            n += 1
            suffix = f"_{n}"
            candidate = safe[: 64 - len(suffix)] + suffix
        self._map[key] = candidate
        self._used.add(candidate)
        return candidate


def _text(text: Any) -> list[Block]:
    return [{"type": "text", "text": text}] if isinstance(text, str) and text.strip() else []


def _image(block: dict[str, Any]) -> list[Block]:
    data = block.get("data")
    if not isinstance(data, str) or not data:
        return []
    media_type = block.get("mimeType") or block.get("mediaType") or "image/png"
    return [{"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}]


def _user_blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return _text(content)
    blocks: list[Block] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            blocks += _text(block.get("text"))
        elif block.get("type") == "image":
            blocks += _image(block)
    return blocks


def _assistant_blocks(message: Message, ids: _IdMap) -> list[Block]:
    native = message.get("api") in (None, API)
    content = message.get("content")
    if isinstance(content, str):
        return _text(content)
    blocks: list[Block] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            blocks += _text(block.get("text"))
        elif kind in ("thinking", "redactedThinking", "redacted_thinking"):
            blocks += _thinking(block, native)
        elif kind == "toolCall":
            arguments = block.get("arguments")
            blocks.append(
                {
                    "type": "tool_use",
                    "id": ids(block.get("id")),
                    "name": block.get("name"),
                    "input": arguments if isinstance(arguments, dict) else {},
                }
            )
    return blocks


def _thinking(block: dict[str, Any], native: bool) -> list[Block]:
    kind = block.get("type")
    if kind in ("redactedThinking", "redacted_thinking"):
        data = block.get("data")
        return [{"type": "redacted_thinking", "data": data}] if native and data else []
    signature = block.get("thinkingSignature")
    signed = isinstance(signature, str) and bool(signature.strip())
    if block.get("redacted") is True:
        return [{"type": "redacted_thinking", "data": signature}] if native and signed else []
    if native and signed:
        return [{"type": "thinking", "thinking": block.get("thinking", ""), "signature": signature}]
    return _text(block.get("thinking"))


def _tool_result(message: Message, ids: _IdMap) -> Block:
    content = message.get("content")
    blocks = _user_blocks(content)
    result: Block = {"type": "tool_result", "tool_use_id": ids(message.get("toolCallId"))}
    if blocks:
        result["content"] = blocks
    result["is_error"] = bool(message.get("isError"))
    return result


def max_output_tokens(model_id: str) -> int:
    for prefix, limit in MAX_OUTPUT_TOKENS:
        if model_id.startswith(prefix):
            return limit
    return DEFAULT_MAX_OUTPUT


def thinking_config(
    level: str, max_tokens: int, model_id: str, budgets: dict[str, int] | None = None
) -> tuple[dict[str, Any] | None, int]:
    """The ``thinking`` parameter and the max_tokens to send for a thinking level.

    The budget is added to ``max_tokens`` so the visible reply keeps its own budget, within the
    model's output limit; the budget always stays below the max_tokens sent, as the API requires.
    """
    if level in ("off", "", None):
        return None, max_tokens
    table = budgets or THINKING_BUDGETS
    if level not in table:
        known = ", ".join(["off", *table])
        raise ValueError(f"unknown thinking level {level!r}; choose one of: {known}")
    if model_id.startswith(ADAPTIVE_THINKING_MODELS):
        return {"type": "adaptive"}, max_tokens
    ceiling = max_output_tokens(model_id)
    total = min(max_tokens + table[level], ceiling)
    budget = min(table[level], total - MIN_THINKING_BUDGET)
    if budget < MIN_THINKING_BUDGET:
        budget = MIN_THINKING_BUDGET
        total = max(total, budget + MIN_THINKING_BUDGET)
    return {"type": "enabled", "budget_tokens": budget}, total


def build_params(
    request: ModelRequest,
    model_id: str,
    *,
    prompt_cache: bool = True,
    thinking_budgets: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``client.messages.create`` (without ``stream``)."""
    messages = to_api_messages(request.messages)
    thinking, max_tokens = thinking_config(
        request.thinking_level, request.max_tokens, model_id, thinking_budgets
    )
    params: dict[str, Any] = {"model": model_id, "max_tokens": max_tokens}
    tools = [
        {
            "name": t["name"],
            "description": t.get("description", ""),
            "input_schema": t.get("input_schema") or {"type": "object", "properties": {}},
        }
        for t in request.tools
    ]
    if request.system:
        system: Block = {"type": "text", "text": request.system}
        if prompt_cache:
            system["cache_control"] = _CACHE
        params["system"] = [system]
    elif prompt_cache and tools:
        tools[-1] = {**tools[-1], "cache_control": _CACHE}
    if tools:
        params["tools"] = tools
    if thinking is not None:
        params["thinking"] = thinking
    if prompt_cache and messages and messages[-1]["role"] == "user":
        last = messages[-1]
        blocks = list(last["content"])
        if blocks[-1].get("type") in _CACHEABLE:
            blocks[-1] = {**blocks[-1], "cache_control": _CACHE}
            messages[-1] = {"role": "user", "content": blocks}
    params["messages"] = messages
    return params
