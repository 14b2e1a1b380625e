"""Request-level pruning of old tool results.

Pruning only shapes what is sent for one request; the session log is never
changed. The messages come back as a new list in which pruned tool results
are new dicts and everything else is the caller's original object.

Levels, by the context estimate as a share of the window, staged as in the design:

* below ``soft_trim_ratio`` (30%): nothing happens;
* from ``soft_trim_ratio``: old tool results with more than
  ``soft_trim_min_chars`` of text keep only their first and last
  ``soft_trim_head_chars`` / ``soft_trim_tail_chars`` characters, with a note
  in between saying how many characters were cut;
* from ``hard_clear_ratio`` (50%): soft-trimming runs first, and only if the
  estimate minus what it saved is still at or above ``hard_clear_ratio`` are old
  tool results replaced by ``[old tool result cleared: N chars]`` (images are
  dropped and counted), oldest first, one at a time, until the estimate is under
  the threshold. So between 50% and ~55% of the window, where trimming alone is
  enough, nothing is cleared.

What a trim or a clear saves is counted as its characters / ``chars_per_token``
plus ``image_tokens`` per dropped image (the estimator's own rule for "chars").

``limit_history_turns`` (the design's ``limitHistoryTurns``, off by default) keeps only the
last N user turns of a request.

"Old" means before the ``protected_assistant_turns`` (3) most recent assistant
messages: results that follow any of those belong to a recent turn and are
never touched. Assistant messages (and so thinking blocks) are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.tokens import ContextEstimate, Estimator, estimate_context
from agent.truncate import image_count, result_text, with_text


class PruneLevel(StrEnum):
    NONE = "none"
    SOFT_TRIM = "soft_trim"
    CLEAR = "clear"


@dataclass(frozen=True)
class PruneReport:
    level: PruneLevel
    estimate_tokens: int
    window: int
    protected_from: int
    """Index of the first message whose tool results are protected."""
    trimmed: tuple[int, ...] = ()
    cleared: tuple[int, ...] = ()
    chars_removed: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.trimmed or self.cleared)


def ratio_threshold(ratio: float, window: int) -> int:
    """Smallest token count at or above ``ratio`` of ``window``.

    Rounded first, because e.g. 0.3 * 100_000 is 30000.000000000004 in floats.
    """
    return math.ceil(round(ratio * window, 6))


def prune_level(
    estimate_tokens: int, window: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> PruneLevel:
    if estimate_tokens >= ratio_threshold(settings.hard_clear_ratio, window):
        return PruneLevel.CLEAR
    if estimate_tokens >= ratio_threshold(settings.soft_trim_ratio, window):
        return PruneLevel.SOFT_TRIM
    return PruneLevel.NONE


def protected_start(messages: Sequence[Message], turns: int) -> int:
    """Index of the ``turns``-th most recent assistant message (0 if there are fewer).

    Tool results at or after this index belong to a protected turn. With
    ``turns`` <= 0 nothing is protected and ``len(messages)`` is returned.
    """
    if turns <= 0:
        return len(messages)
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            seen += 1
            if seen == turns:
                return index
    return 0


def soft_trim_text(text: str, head: int, tail: int) -> str:
    cut = len(text) - head - tail
    if cut <= 0:
        return text
    end = text[len(text) - tail :] if tail > 0 else ""
    return f"{text[:head]}\n\n[... {cut} characters cut from this old tool result ...]\n\n{end}"


def clear_placeholder(chars: int, images: int = 0) -> str:
    if images:
        return f"[old tool result cleared: {chars} chars, {images} images]"
    return f"[old tool result cleared: {chars} chars]"


def _soft_trim(msg: Message, settings: ContextSettings) -> Message | None:
    text = result_text(msg)
    if len(text) <= settings.soft_trim_min_chars:
        return None
    trimmed = soft_trim_text(text, settings.soft_trim_head_chars, settings.soft_trim_tail_chars)
    if len(trimmed) >= len(text):
        return None
    return with_text(msg, trimmed)


def _clear(msg: Message) -> Message | None:
    text = result_text(msg)
    images = image_count(msg)
    placeholder = clear_placeholder(len(text), images)
    if not images and len(placeholder) >= len(text):
        return None
    return with_text(msg, placeholder, keep_images=False)


_SUMMARY_ROLES = frozenset({"compactionSummary", "branchSummary"})


def limit_history_turns(messages: Sequence[Message], limit: int) -> list[Message]:
    """The last ``limit`` user turns of ``messages`` (a turn starts at a ``user`` message and
    holds everything up to the next one); ``limit`` <= 0 keeps everything.

    A cut at a user message never separates a tool call from its result. Summaries at the
    start (the latest compaction's) stay in front of what is kept. Returns ``messages``
    itself (as a list) when nothing is cut.
    """
    whole = messages if isinstance(messages, list) else list(messages)
    if limit <= 0:
        return whole
    starts = [i for i, m in enumerate(whole) if m.get("role") == "user"]
    if len(starts) <= limit:
        return whole
    cut = starts[-limit]
    lead = 0
    while lead < cut and whole[lead].get("role") in _SUMMARY_ROLES:
        lead += 1
    return whole[:lead] + whole[cut:]


def _saved_tokens(before: Message, after: Message, settings: ContextSettings) -> int:
    chars = len(result_text(before)) - len(result_text(after))
    images = image_count(before) - image_count(after)
    return math.ceil(chars / settings.chars_per_token) + images * settings.image_tokens


def prune_messages(
    messages: Sequence[Message],
    window: int,
    estimate: int | ContextEstimate | None = None,
    settings: ContextSettings = DEFAULT_SETTINGS,
    estimator: Estimator | None = None,
) -> tuple[list[Message], PruneReport]:
    """Prune old tool results according to how full the window is (staged, see the module).

    ``estimate`` is the current context size in tokens; when omitted it is
    computed with :func:`agent.tokens.estimate_context`. When nothing needs pruning
    the input list itself is returned (no copy: this runs before every request).
    The report's ``level`` is the level actually applied: ``SOFT_TRIM`` when the
    estimate reached the hard-clear ratio but trimming brought it back under.
    """
    if estimate is None:
        estimate = estimate_context(
            messages,
            estimator or Estimator.from_settings(settings),
            safety_margin=settings.estimate_safety_margin,
        )
    tokens = estimate.tokens if isinstance(estimate, ContextEstimate) else estimate
    level = prune_level(tokens, window, settings)
    boundary = protected_start(messages, settings.protected_assistant_turns)
    if level is PruneLevel.NONE:
        unchanged = messages if isinstance(messages, list) else list(messages)
        return unchanged, PruneReport(level, tokens, window, boundary)
    out = list(messages)
    old = [i for i in range(boundary) if messages[i].get("role") == "toolResult"]

    trimmed: list[int] = []
    remaining = tokens
    for index in old:
        new = _soft_trim(messages[index], settings)
        if new is not None:
            remaining -= _saved_tokens(messages[index], new, settings)
            out[index] = new
            trimmed.append(index)

    cleared: list[int] = []
    hard = ratio_threshold(settings.hard_clear_ratio, window)
    if remaining >= hard:
        for index in old:
            if remaining < hard:
                break
            new = _clear(messages[index])
            if new is None:
                continue
            remaining -= _saved_tokens(out[index], new, settings)
            out[index] = new
            cleared.append(index)

    changed = set(trimmed) | set(cleared)
    removed = sum(len(result_text(messages[i])) - len(result_text(out[i])) for i in changed)
    if not changed:
        out = messages if isinstance(messages, list) else list(messages)
    return out, PruneReport(
        level=PruneLevel.CLEAR if cleared else PruneLevel.SOFT_TRIM if trimmed else level,
        estimate_tokens=tokens,
        window=window,
        protected_from=boundary,
        trimmed=tuple(i for i in trimmed if i not in cleared),
        cleared=tuple(cleared),
        chars_removed=removed,
    )
