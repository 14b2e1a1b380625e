"""Tool-result truncation: per-result caps and a shared character budget.

Everything here is pure: messages come back as new dicts, inputs are never
mutated, and untouched messages are returned as the same objects (treat the
returned list as read-only or copy it before editing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.tokens import message_parts

_IMPORTANT_TAIL = re.compile(
    r"""
      \b(?:errors?|exceptions?|traceback|failed|failures?|fatal|panic(?:ked)?)\b
    | \bstack\s*trace\b | \berrno\b
    | \b(?:done|complete[d]?|finished|summary|results?)\b
    | \berr!
    | (?-i:[A-Za-z0-9_](?:Error|Exception))\b
    | \bexit(?:ed)?(?:\s+with)?(?:\s+(?:code|status))?\s*[:=]?\s*-?\d+\b
    | \b(?:return\s*code|returncode|exit_code|exitcode)\b
    | \b\d+\s+(?:passed|failed|errors?|skipped|warnings?|tests?|files?\s+changed)\b
    | \btotal\b
    """,
    re.IGNORECASE | re.VERBOSE,
)


def result_text(msg: Message) -> str:
    """All text of a tool result, text blocks joined by newlines."""
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(b.get("text", ""))
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "text"
    )


def image_count(msg: Message) -> int:
    content = msg.get("content")
    if not isinstance(content, list):
        return 0
    return sum(1 for b in content if isinstance(b, Mapping) and b.get("type") == "image")


def with_text(msg: Message, text: str, *, keep_images: bool = True) -> dict[str, Any]:
    """A copy of ``msg`` whose text blocks are replaced by one block holding ``text``.

    The new block takes the place of the first text block, so the order of
    text and images is kept.
    """
    content = msg.get("content")
    blocks = content if isinstance(content, list) else []
    new_block = {"type": "text", "text": text}
    out: list[Any] = []
    placed = False
    for block in blocks:
        is_text = isinstance(block, Mapping) and block.get("type") == "text"
        if is_text:
            if not placed:
                out.append(new_block)
                placed = True
        elif keep_images or not (isinstance(block, Mapping) and block.get("type") == "image"):
            out.append(block)
    if not placed:
        out.insert(0, new_block)
    return {**msg, "content": out}


def max_result_chars(window: int, settings: ContextSettings = DEFAULT_SETTINGS) -> int:
    """Largest size of one tool result: the tighter of the window share and the size cap."""
    share = int(window * settings.tool_result_window_share * settings.chars_per_token)
    cap = 0
    for min_window, chars in sorted(settings.tool_result_char_caps):
        if window >= min_window:
            cap = chars
    return min(share, cap)


def tail_looks_important(text: str, settings: ContextSettings = DEFAULT_SETTINGS) -> bool:
    """Does the end of ``text`` carry the outcome (errors, stack traces, errno, exit codes,
    totals, result words such as done, complete, finished, summary, result; a closing brace)?

    Command output usually ends with its verdict, so cutting the tail of such a
    result would remove the one part the model needs.
    """
    tail = text[-settings.tail_scan_chars :]
    if tail.rstrip().endswith("}"):
        return True
    return _IMPORTANT_TAIL.search(tail) is not None


def _middle_marker(cut: int) -> str:
    return f"\n\n[... {cut} characters truncated ...]\n\n"


def _end_marker(cut: int) -> str:
    return f"\n\n[... {cut} more characters truncated]"


def _head_end(text: str, n: int) -> int:
    """Where to end a head of at most ``n`` chars: on a line break if one is near."""
    newline = text.rfind("\n", 0, n)
    return newline + 1 if newline >= n * 0.8 else n


def _tail_start(text: str, n: int) -> int:
    """Where to start a tail of at most ``n`` chars: after a line break if one is near."""
    start = len(text) - n
    newline = text.find("\n", start, start + n // 5)
    return newline + 1 if newline != -1 else start


def truncate_text(
    text: str,
    max_chars: int,
    settings: ContextSettings = DEFAULT_SETTINGS,
    *,
    keep_tail: bool | None = None,
) -> tuple[str, int]:
    """Shorten ``text`` to at most ``max_chars`` characters, marker included.

    With an important tail (see :func:`tail_looks_important`, or forced by
    ``keep_tail``) the result is head + middle marker + tail; otherwise head +
    end marker. Returns the new text and how many original characters were cut.
    """
    if len(text) <= max_chars:
        return text, 0
    if keep_tail is None:
        keep_tail = tail_looks_important(text, settings)
    marker_for = _middle_marker if keep_tail else _end_marker
    # The cut can't exceed len(text), so this marker is at least as long as the real one.
    keep = max_chars - len(marker_for(len(text)))
    if keep <= 0:
        return text[:max_chars], len(text) - max(max_chars, 0)
    if keep_tail:
        tail_n = int(keep * settings.truncate_tail_share)
        head_end = _head_end(text, keep - tail_n)
        tail_start = _tail_start(text, tail_n) if tail_n > 0 else len(text)
        cut = tail_start - head_end
        return text[:head_end] + marker_for(cut) + text[tail_start:], cut
    head_end = _head_end(text, keep)
    cut = len(text) - head_end
    return text[:head_end] + marker_for(cut), cut


_M = TypeVar("_M", bound=Message)


def truncate_tool_result(
    msg: _M, max_chars: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> tuple[_M | dict[str, Any], int]:
    """``msg`` with its text cut to ``max_chars`` (the same object if it already fits)."""
    text = result_text(msg)
    new_text, cut = truncate_text(text, max_chars, settings)
    if cut == 0:
        return msg, 0
    return with_text(msg, new_text), cut


@dataclass(frozen=True)
class TruncationReport:
    truncated: tuple[int, ...]
    """Indices of the tool results that were cut, in the order they were cut."""
    chars_before: int
    """Total tool-result text before truncation."""
    chars_after: int
    fits: bool
    """Whether the total now fits the budget (always True for per-result caps)."""

    @property
    def chars_cut(self) -> int:
        return self.chars_before - self.chars_after


def _tool_result_sizes(messages: Sequence[Message], start: int = 0) -> dict[int, int]:
    return {
        i: len(result_text(m))
        for i, m in enumerate(messages)
        if i >= start and m.get("role") == "toolResult"
    }


def truncate_tool_results(
    messages: Sequence[Message], window: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> tuple[list[Message], TruncationReport]:
    """Cap every tool result at :func:`max_result_chars` for ``window``."""
    cap = max_result_chars(window, settings)
    out = list(messages)
    sizes = _tool_result_sizes(messages)
    after = dict(sizes)
    cut_indices: list[int] = []
    for i in sizes:
        new_msg, cut = truncate_tool_result(messages[i], cap, settings)
        if cut:
            out[i] = new_msg
            after[i] = len(result_text(new_msg))
            cut_indices.append(i)
    report = TruncationReport(
        truncated=tuple(cut_indices),
        chars_before=sum(sizes.values()),
        chars_after=sum(after.values()),
        fits=True,
    )
    return out, report


def aggregate_order(messages: Sequence[Message]) -> list[int]:
    """Indices of tool results in the order aggregate truncation visits them.

    Largest text first; among results of equal size, the newest (highest
    index) first.
    """
    sizes = _tool_result_sizes(messages)
    return sorted(sizes, key=lambda i: (-sizes[i], -i))


def truncate_aggregate(
    messages: Sequence[Message], budget_chars: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> tuple[list[Message], TruncationReport]:
    """Cut tool results until their combined text fits ``budget_chars``.

    Results are visited in :func:`aggregate_order` (largest first, newest
    first among equals). Each visited result is cut only by the amount still
    over budget, and never below ``settings.aggregate_min_keep_chars``, so
    the walk stops as soon as the total fits; if every result is already at
    that floor the report says ``fits=False``.
    """
    out = list(messages)
    sizes = _tool_result_sizes(messages)
    before = sum(sizes.values())
    total = before
    cut_indices: list[int] = []
    for i in aggregate_order(messages):
        excess = total - budget_chars
        if excess <= 0:
            break
        target = max(settings.aggregate_min_keep_chars, sizes[i] - excess)
        if target >= sizes[i]:
            continue
        new_msg, cut = truncate_tool_result(messages[i], target, settings)
        if cut:
            new_size = len(result_text(new_msg))
            total -= sizes[i] - new_size
            out[i] = new_msg
            cut_indices.append(i)
    report = TruncationReport(
        truncated=tuple(cut_indices),
        chars_before=before,
        chars_after=total,
        fits=total <= budget_chars,
    )
    return out, report


def oversized_tool_result_tokens(
    messages: Sequence[Message],
    window: int,
    settings: ContextSettings = DEFAULT_SETTINGS,
    start: int = 0,
) -> int:
    """Tokens above the per-result cap in tool results from index ``start`` on.

    Pass the first kept index after compaction as ``start`` to ask whether the
    kept tail would still hold oversized results.
    """
    cap = max_result_chars(window, settings)
    over = sum(max(0, n - cap) for n in _tool_result_sizes(messages, start).values())
    return over // settings.chars_per_token


def cuttable_tool_result_tokens(
    messages: Sequence[Message], settings: ContextSettings = DEFAULT_SETTINGS, start: int = 0
) -> int:
    """Tokens aggregate truncation could recover (text above the per-result floor)."""
    floor = settings.aggregate_min_keep_chars
    over = sum(max(0, n - floor) for n in _tool_result_sizes(messages, start).values())
    return over // settings.chars_per_token


def aggregate_budget_chars(
    messages: Sequence[Message], window: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> int:
    """Characters all tool results together may keep so that the whole input stays within
    ``aggregate_input_headroom`` (0.75) of ``window``: that share in characters, minus the
    text of every message that is not a tool result."""
    total = int(window * settings.aggregate_input_headroom * settings.chars_per_token)
    other = sum(len(text) for m in messages if m.get("role") != "toolResult"
                for text in message_parts(m)[0])
    return max(0, total - other)
