"""The summarization pipeline of a compaction: chunking, staging, retries and fallbacks.

`summarize_messages` turns a list of messages into one summary with calls to a `Summarizer`
(`agent.compaction.summarize`). Messages are split into chunks that fit the window, never inside
a call group (`chunk_messages`); a long history is summarized in two halves whose partial
summaries are then merged (staged); each call is retried on transient errors with jittered
exponential backoff (`backoff_delay`); and when the model still fails, the fallback levels below
apply. It never raises for a failed summarization (the last level needs no model), only when
aborted.

Fallback levels
---------------
1. everything (chunked and staged as needed);
2. only the messages that fit: each message too large to summarize on its own
   (`oversized_message_share` of the window) is left out with a one-line note;
3. no model: a plain text saying how many messages (and how many oversized) could not be
   summarized, followed by the previous summary, if any, so that it is never lost.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from agent.compaction.summarize import Summarizer, SummarizerError, SummaryAborted
from agent.compaction.transcript import message_text
from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.tokens import Estimator
from agent.window import clamp_reserve, prompt_budget, resolve_window

log = logging.getLogger(__name__)

NO_HISTORY = "No earlier history."

MERGE_INSTRUCTIONS = (
    "The messages are partial summaries of consecutive parts of one conversation, oldest "
    "first. Merge them into one checkpoint. It must keep: the active tasks and their status "
    "(in progress, blocked, pending); progress counts exactly as given (such as '5 of 17 "
    "files done'); the last thing the user asked for and what was being done about it; "
    "decisions and their rationale; TODOs and open questions; constraints the user set and "
    "promises or follow-ups the agent made. Where parts disagree, prefer the more recent one: "
    "the agent needs to know what it was doing, not only what was discussed."
)


class FallbackLevel(IntEnum):
    """How a summary was made (see the module docstring)."""

    NONE = 0
    """No model call was needed (only a previous summary carried over)."""
    FULL = 1
    PARTIAL = 2
    PLAIN = 3


# ---------------------------------------------------------------------------------------
# chunking


def call_groups(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """`[start, end)` ranges that must stay together: an assistant message and its results."""
    groups = []
    i, n = 0, len(messages)
    while i < n:
        j = i + 1
        if messages[i].get("role") == "assistant":
            while j < n and messages[j].get("role") == "toolResult":
                j += 1
        groups.append((i, j))
        i = j
    return groups


def chunk_messages(
    messages: Sequence[Message], sizes: Sequence[int], max_tokens: int, max_chunks: int = 0
) -> list[list[Message]]:
    """Split into chunks of at most `max_tokens`, never inside a call group.

    A group larger than `max_tokens` gets a chunk of its own. With `max_chunks`, the last
    chunk takes whatever is left.
    """
    chunks: list[list[Message]] = []
    chunk_start, current = 0, 0
    for start, end in call_groups(messages):
        tokens = sum(sizes[start:end])
        room = not max_chunks or len(chunks) < max_chunks - 1
        if start > chunk_start and room and current + tokens > max_tokens:
            chunks.append(list(messages[chunk_start:start]))
            chunk_start, current = start, 0
        current += tokens
    if chunk_start < len(messages):
        chunks.append(list(messages[chunk_start:]))
    return chunks


def drop_oldest_history(
    messages: Sequence[Message], budget_tokens: int, estimator: Estimator
) -> tuple[list[Message], list[Message]]:
    """(kept, dropped): while `messages` exceed `budget_tokens`, drop the oldest half (by
    tokens, at a call-group boundary), then re-check pairing: a tool result whose call was
    dropped goes with it. Stops when one group is left. `dropped` is in history order."""
    kept = list(messages)
    dropped: list[Message] = []
    while True:
        sizes = [estimator.estimate_message(m) for m in kept]
        total = sum(sizes)
        groups = call_groups(kept)
        if total <= budget_tokens or len(groups) < 2:
            return kept, dropped
        cut, running = groups[1][0], 0
        for start, end in groups[:-1]:
            running += sum(sizes[start:end])
            cut = end
            if running * 2 >= total:
                break
        dropped += kept[:cut]
        gone = {b.get("id") for m in dropped if m.get("role") == "assistant"
                for b in m.get("content") or () if isinstance(b, dict)
                and b.get("type") == "toolCall"}
        rest = kept[cut:]
        orphans = [m for m in rest if m.get("role") == "toolResult"
                   and m.get("toolCallId") in gone]
        dropped += orphans
        kept = [m for m in rest if not any(m is o for o in orphans)]


def adaptive_chunk_ratio(
    sizes: Sequence[int], window: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> float:
    """`chunk_ratio`, lowered towards `min_chunk_ratio` when messages are large on average.

    When the average message (times the safety margin) exceeds `large_message_share` of the
    window, the ratio drops by twice that average share, but not below `min_chunk_ratio`.
    """
    base, floor = settings.chunk_ratio, settings.min_chunk_ratio
    if not sizes or window <= 0:
        return base
    average = sum(sizes) / len(sizes) * settings.summary_safety_margin / window
    if average > settings.large_message_share:
        return max(floor, base - min(average * 2, base - floor))
    return base


def chunk_budget(
    sizes: Sequence[int], window: int, settings: ContextSettings = DEFAULT_SETTINGS
) -> int:
    """Tokens one summarization request may carry: window x ratio, minus prompt overhead."""
    ratio = adaptive_chunk_ratio(sizes, window, settings)
    return max(1, math.floor(window * ratio) - settings.summarization_overhead_tokens)


def is_oversized(tokens: int, window: int, settings: ContextSettings = DEFAULT_SETTINGS) -> bool:
    """Too large to summarize on its own (level 2 leaves it out)."""
    return tokens * settings.summary_safety_margin > window * settings.oversized_message_share


# ---------------------------------------------------------------------------------------
# summarize


def backoff_delay(
    attempt: int,
    settings: ContextSettings = DEFAULT_SETTINGS,
    rng: random.Random | None = None,
    retry_after: float | None = None,
) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based).

    Doubles from `retry_min_delay`, with jitter, and stays within
    [`retry_min_delay`, `retry_max_delay`]. A server's Retry-After wins, within those bounds.
    """
    low, high = settings.retry_min_delay, settings.retry_max_delay
    if retry_after is not None:
        return min(high, max(low, retry_after))
    base = min(high, low * 2 ** (attempt - 1))
    jitter = settings.retry_jitter
    factor = 1 + (rng or random).uniform(-jitter, jitter)
    return min(high, max(low, base * factor))


@dataclass
class SummaryOutcome:
    """A summary and how it was made."""

    text: str
    level: FallbackLevel
    calls: int = 0
    """Successful summarizer calls."""
    attempts: int = 0
    """All summarizer calls, failed ones included."""
    oversized: int = 0


@dataclass
class _Pipeline:
    summarizer: Summarizer
    settings: ContextSettings
    window: int
    estimator: Estimator
    sleep: Callable[[float], Any] | None = None
    abort: threading.Event | None = None
    rng: random.Random | None = None
    calls: int = 0
    attempts: int = 0

    @property
    def unbounded(self) -> bool:
        return bool(getattr(self.summarizer, "unbounded_input", False))

    def _check_abort(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise SummaryAborted("compaction aborted")

    def _wait(self, seconds: float) -> None:
        if self.sleep is not None:
            self.sleep(seconds)
        elif self.abort is not None:
            self.abort.wait(seconds)
        else:
            time.sleep(seconds)

    def call(self, messages: Sequence[Message], previous: str | None, focus: str | None,
             max_tokens: int) -> str:
        """One summarizer call with retries on transient errors."""
        attempts = max(1, self.settings.summary_attempts)
        for attempt in range(1, attempts + 1):
            self._check_abort()
            self.attempts += 1
            retry_after = None
            try:
                text = self.summarizer.summarize(list(messages), previous_summary=previous,
                                                 focus=focus, max_tokens=max_tokens)
            except SummaryAborted:
                raise
            except SummarizerError as e:
                if not e.retryable or attempt == attempts:
                    raise
                retry_after = e.retry_after
                log.warning("summarization attempt %d of %d failed: %s", attempt, attempts, e)
            except Exception as e:
                if attempt == attempts:
                    raise SummarizerError(f"summarizer failed: {e!r}") from e
                log.warning("summarization attempt %d of %d failed: %r", attempt, attempts, e)
            else:
                if isinstance(text, str) and text.strip():
                    self.calls += 1
                    return text.strip()
                if attempt == attempts:
                    raise SummarizerError("the summarizer returned an empty summary")
                log.warning("summarization attempt %d of %d returned nothing", attempt, attempts)
            self._check_abort()
            self._wait(backoff_delay(attempt, self.settings, self.rng, retry_after))
        raise AssertionError("unreachable")

    def sizes(self, messages: Sequence[Message]) -> list[int]:
        limit = self.settings.summary_tool_result_chars
        return [self.estimator.count_text(message_text(m, limit)) for m in messages]

    def chunked(self, messages: Sequence[Message], sizes: Sequence[int], previous: str | None,
                focus: str | None, max_tokens: int, budget: int) -> str:
        if self.unbounded:
            chunks = [list(messages)]
        else:
            effective = max(1, math.floor(budget / self.settings.summary_safety_margin))
            chunks = chunk_messages(messages, sizes, effective)
        summary = previous
        for chunk in chunks:
            summary = self.call(chunk, summary, focus, max_tokens)
        assert summary is not None
        return summary

    def staged(self, messages: Sequence[Message], sizes: Sequence[int], previous: str | None,
               focus: str | None, max_tokens: int) -> str:
        budget = chunk_budget(sizes, self.window, self.settings)
        if self.unbounded or sum(sizes) <= budget or len(messages) < 4:
            return self.chunked(messages, sizes, previous, focus, max_tokens, budget)
        total = sum(sizes)
        halves = chunk_messages(messages, sizes, math.ceil(total / 2), max_chunks=2)
        if len(halves) < 2:
            return self.chunked(messages, sizes, previous, focus, max_tokens, budget)
        partials = []
        offset = 0
        for half in halves:
            part_sizes = sizes[offset:offset + len(half)]
            offset += len(half)
            partials.append(self.chunked(half, part_sizes, None, focus, max_tokens, budget))
        labels = ["oldest messages"] + ["later messages"] * (len(partials) - 2) + [
            "most recent messages"]
        merge_input = [
            {"role": "user", "content": f"[Part {i + 1} of {len(partials)}, {labels[i]}]\n{p}"}
            for i, p in enumerate(partials)
        ]
        merge_focus = MERGE_INSTRUCTIONS + (f"\n\n{focus.strip()}" if focus else "")
        return self.call(merge_input, previous, merge_focus, max_tokens)

    def run(self, messages: Sequence[Message], previous: str | None, focus: str | None,
            max_tokens: int) -> SummaryOutcome:
        sizes = self.sizes(messages)
        try:
            text = self.staged(messages, sizes, previous, focus, max_tokens)
            return SummaryOutcome(text, FallbackLevel.FULL)
        except SummaryAborted:
            raise
        except SummarizerError as e:
            log.warning("full summarization of %d messages failed: %s", len(messages), e)
        oversized = [is_oversized(s, self.window, self.settings) for s in sizes]
        count = sum(oversized)
        small = [m for m, big in zip(messages, oversized, strict=True) if not big]
        notes = [
            f"[Left out of this summary: a {m.get('role')} message of about "
            f"{sizes[i]:,} tokens, too large to summarize]"
            for i, m in enumerate(messages) if oversized[i]
        ]
        if count and not small:  # nothing but oversized messages: the notes are the summary
            lead = f"{previous}\n\n" if previous else ""
            return SummaryOutcome(lead + "\n".join(notes), FallbackLevel.PARTIAL,
                                  oversized=count)
        if small and count:
            small_sizes = [s for s, big in zip(sizes, oversized, strict=True) if not big]
            try:
                text = self.staged(small, small_sizes, previous, focus, max_tokens)
                return SummaryOutcome(text + "\n\n" + "\n".join(notes), FallbackLevel.PARTIAL,
                                      oversized=count)
            except SummaryAborted:
                raise
            except SummarizerError as e:
                log.warning("summarization without %d oversized messages failed: %s", count, e)
        return SummaryOutcome(plain_summary(len(messages), count, previous),
                              FallbackLevel.PLAIN, oversized=count)


def plain_summary(messages: int, oversized: int, previous: str | None = None) -> str:
    """The third fallback level: what could not be summarized, and the previous summary."""
    text = (
        f"Summary unavailable: {messages} earlier message(s) could not be summarized "
        f"({oversized} of them too large to summarize). They remain in the session file, on "
        "the branch before this point."
    )
    if previous:
        text += f"\n\nSummary of the conversation before them:\n\n{previous}"
    return text


def summarize_messages(
    messages: Sequence[Message],
    summarizer: Summarizer,
    settings: ContextSettings = DEFAULT_SETTINGS,
    *,
    window: int | None = None,
    previous_summary: str | None = None,
    focus: str | None = None,
    max_tokens: int | None = None,
    estimator: Estimator | None = None,
    sleep: Callable[[float], Any] | None = None,
    abort: threading.Event | None = None,
    rng: random.Random | None = None,
) -> SummaryOutcome:
    """Summarize `messages` with chunking, staging, retries and the fallback levels.

    Raises SummaryAborted when `abort` is set or the summarizer raises it; never raises for a
    failed summarization (the third level needs no model).
    """
    window = window or resolve_window(None, settings)
    if max_tokens is None:
        max_tokens = summary_max_tokens(window, settings)
    pipeline = _Pipeline(summarizer, settings, window,
                         estimator or Estimator.from_settings(settings), sleep, abort, rng)
    if not messages:
        return SummaryOutcome(previous_summary or NO_HISTORY, FallbackLevel.NONE)
    outcome = pipeline.run(messages, previous_summary, focus, max_tokens)
    outcome.calls, outcome.attempts = pipeline.calls, pipeline.attempts
    return outcome


def summary_max_tokens(
    window: int, settings: ContextSettings = DEFAULT_SETTINGS, share: float | None = None
) -> int:
    """Largest summary: a share of the reply reserve, and at most a share of the prompt."""
    share = settings.summary_reserve_share if share is None else share
    by_reserve = math.floor(clamp_reserve(window, settings) * share)
    by_budget = math.floor(prompt_budget(window, settings) * settings.summary_budget_share)
    return max(256, min(by_reserve, by_budget))

