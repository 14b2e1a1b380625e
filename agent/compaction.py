"""Compaction: summarize the older part of the active branch into a `compaction` entry.

Nothing is deleted: the summary is appended to the journal with the id of the first entry kept
verbatim, and the projection (see `journal.build_context`) then shows the summary followed by
the kept entries. Four steps, each usable alone:

1. **prepare** (`prepare_compaction`): find the cut point on the active branch and collect what
   to summarize, starting at the previous compaction's kept boundary (its `firstKeptEntryId`):
   the messages kept verbatim last time are summarized this time, together with the previous
   summary, so nothing falls between two summaries.
2. **summarize** (`summarize_messages`): chunked, staged and merged calls to a `Summarizer`, with
   retries and three levels of fallback (see below).
3. **record** (`record_compaction`): the summary, plus the tool failures and the cumulative lists
   of files read and modified, through `Session.append_compaction`.
4. `compact` runs the three, with hooks and the optional memory flush around them.

The cut point (`find_cut_point`)
--------------------------------
Walk back from the newest entry, adding up the token estimate of every entry that puts a
message in the context. The entry at which the running total first reaches
`keep_recent_tokens` (total >= keep) is the *threshold* entry. The cut goes before the first
valid cut point at or after the threshold entry: the threshold entry is kept when it is itself
a valid cut point, otherwise the cut moves forward (towards the newest entry), so the kept part
may hold fewer than `keep_recent_tokens` but never part of a call group. Only when no valid cut
point exists at or after the threshold does the cut move back to the nearest one before it.
When the total never reaches `keep_recent_tokens`, everything is kept and nothing is
summarized (no model call).

A valid cut point is an entry whose message is a user, assistant, bashExecution, custom or
branchSummary message (so `custom_message` and `branch_summary` entries too), never a tool
result, and never an entry between a tool call and any of its results. Cutting anywhere but
before a turn's first message (user, bashExecution, custom, branchSummary) splits the turn: its
prefix, from that first message up to the cut, is summarized separately and appended as the
turn context, and the history before it is summarized as usual.

Example, six messages of 100 tokens (user, assistant, user, assistant+call, its result,
assistant): keeping 150 reaches 200 at the tool result (index 4), which is no cut point, so the
cut moves forward to the last assistant (index 5): a split turn whose prefix starts at the
second user message (index 2). Keeping 250 reaches 300 at the second assistant (index 3), a
valid cut point: again a split turn with its prefix starting at index 2.

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
import os
import random
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from pathlib import Path
from typing import Any

from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.summarize import (
    SummarizerError,
    SummaryAborted,
    extract_facts,
    extract_identifiers,
    file_operations,
    message_identifiers,
    message_text,
    tool_failures,
)
from agent.tokens import ContextEstimate, Estimator, estimate_context
from agent.window import clamp_reserve, prompt_budget, resolve_window
from journal import Session, compaction_summary_message, entry_message, iso_to_millis

log = logging.getLogger(__name__)

Entry = dict[str, Any]
Message = Mapping[str, Any]

CUT_ROLES = frozenset({"user", "assistant", "bashExecution", "custom", "branchSummary"})
TURN_START_ROLES = frozenset({"user", "bashExecution", "custom", "branchSummary"})
_FAILED_STOPS = frozenset({"error", "aborted"})

NO_HISTORY = "No earlier history."
SPLIT_TURN_HEADING = "**Turn context (split turn):**"

TURN_PREFIX_INSTRUCTIONS = (
    "These messages are the first part of a turn that was too long to keep whole; its later "
    "part stays in the conversation verbatim, right after this summary. Say what the user "
    "asked for in this turn, what was done and decided so far, and what the agent needs to "
    "know to understand the part that is kept. Be brief."
)

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
# entries and the projection


def entry_role(entry: Entry) -> str | None:
    """The role of the message an entry stands for (`branch_summary` even when empty)."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        return message.get("role") if isinstance(message, dict) else None
    if kind == "custom_message":
        return "custom"
    if kind == "branch_summary":
        return "branchSummary"
    return None


def _latest_compaction(branch: Sequence[Entry]) -> int | None:
    for i in range(len(branch) - 1, -1, -1):
        if branch[i].get("type") == "compaction":
            return i
    return None


def _kept_start(branch: Sequence[Entry], compaction_at: int) -> int:
    """Where the kept part of the compaction at `compaction_at` starts (itself if not found)."""
    first_kept = branch[compaction_at].get("firstKeptEntryId")
    for i in range(compaction_at - 1, -1, -1):  # ids are unique on a path; it is usually near
        if branch[i].get("id") == first_kept:
            return i
    return compaction_at


def projection(branch: Sequence[Entry]) -> tuple[list[Message], list[str | None], int]:
    """The context messages of a branch, the entry id of each, and where the live part starts.

    Follows `journal.build_context`: the latest compaction's summary (keyed by the compaction's
    id), the entries it kept, then everything after it. The third value is the index of the
    first message after the compaction entry (0 without one): usage figures reported before it
    are stale.
    """
    messages: list[Message] = []
    ids: list[str | None] = []

    def emit(entries: Sequence[Entry]) -> None:
        for entry in entries:
            message = entry_message(entry)
            if message is not None:
                messages.append(message)
                ids.append(entry.get("id"))

    at = _latest_compaction(branch)
    if at is None:
        emit(branch)
        return messages, ids, 0
    compaction = branch[at]
    messages.append(compaction_summary_message(compaction))
    ids.append(compaction.get("id"))
    emit(branch[_kept_start(branch, at):at])
    live = len(messages)
    emit(branch[at + 1:])
    return messages, ids, live


def estimate_branch_context(
    branch: Sequence[Entry],
    estimator: Estimator | None = None,
    settings: ContextSettings = DEFAULT_SETTINGS,
) -> ContextEstimate:
    """Estimate the context of a branch with `agent.tokens.estimate_context`.

    Per-message estimates are cached in `estimator` by entry id. A provider-reported usage is
    only trusted when it was reported after the latest compaction: one from before describes
    the context as it was before the summary replaced most of it.
    """
    messages, ids, live = projection(branch)
    return _estimate_live(messages, ids, live, estimator or Estimator.from_settings(settings),
                          settings)


def estimate_session_context(
    session: Session,
    estimator: Estimator | None = None,
    settings: ContextSettings = DEFAULT_SETTINGS,
) -> ContextEstimate:
    """`estimate_branch_context` for the session's leaf, from `session.context(raw=True)`.

    Cheaper on a session resumed from its tail: it walks only the kept part of the latest
    compaction instead of the whole branch. Use this (not `estimate_context` on the context
    messages) after a compaction: the kept assistant messages still carry the usage reported
    before it, which would count the summarized messages again.
    """
    context = session.context(raw=True)
    ids = context.entry_ids if len(context.entry_ids) == len(context.messages) else None
    live = 0
    if context.compaction_id is not None:
        compaction = session.get_entry(context.compaction_id) or {}
        first_kept = compaction.get("firstKeptEntryId")
        kept: set[str] = set()
        parent = compaction.get("parentId")
        while first_kept is not None and parent is not None:
            kept.add(parent)
            if parent == first_kept:
                break
            entry = session.get_entry(parent)
            parent = entry.get("parentId") if entry else None
        else:
            kept.clear()  # the kept entry is not on the path: nothing before it is shown
        if ids is None:
            live = len(context.messages)  # cannot tell kept from new: trust no usage
        else:
            live = 1
            while live < len(ids) and ids[live] in kept:
                live += 1
    return _estimate_live(context.messages, ids or [None] * len(context.messages), live,
                          estimator or Estimator.from_settings(settings), settings)


def _estimate_live(
    messages: Sequence[Message],
    ids: Sequence[str | None],
    live: int,
    estimator: Estimator,
    settings: ContextSettings,
) -> ContextEstimate:
    margin = settings.estimate_safety_margin
    estimate = estimate_context(messages, estimator, ids, safety_margin=margin)
    if estimate.from_usage and estimate.usage_index is not None and estimate.usage_index < live:
        total = estimator.estimate_messages(messages, ids)
        return ContextEstimate(math.ceil(round(total * margin, 6)), False, None,
                               trailing_tokens=total)
    return estimate


def _model_id(branch: Sequence[Entry]) -> str | None:
    for i in range(len(branch) - 1, -1, -1):
        entry = branch[i]
        if entry.get("type") == "model_change" and entry.get("modelId"):
            return str(entry["modelId"])
        if entry.get("type") == "message":
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "assistant":
                if message.get("model"):
                    return str(message["model"])
    return None


# ---------------------------------------------------------------------------------------
# the cut point


@dataclass(frozen=True)
class CutPoint:
    """Where a compaction cuts a branch (indices into the entries given)."""

    first_kept_index: int
    turn_start_index: int | None
    """The first message of the turn the cut splits; None when the cut splits no turn."""
    is_split_turn: bool
    kept_tokens: int
    """Estimated tokens of the messages from the cut to the end."""


def _split_boundaries(entries: Sequence[Entry], start: int, end: int) -> set[int]:
    """Indices k such that cutting before k separates a tool call from one of its results."""
    call_at: dict[str, int] = {}
    marks = [0] * (end - start + 1)
    for i in range(start, end):
        message = entry_message(entries[i])
        if message is None:
            continue
        role = message.get("role")
        if role == "assistant" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if type(block) is dict and block.get("type") == "toolCall":
                    call_id = block.get("id")
                    if isinstance(call_id, str):
                        call_at[call_id] = i
        elif role == "toolResult":
            called = call_at.get(message.get("toolCallId"))  # type: ignore[arg-type]
            if called is not None and called < i:
                marks[called + 1 - start] += 1
                marks[i + 1 - start] -= 1
    blocked: set[int] = set()
    running = 0
    for offset, mark in enumerate(marks[:-1]):
        running += mark
        if running > 0:
            blocked.add(start + offset)
    return blocked


def find_cut_point(
    entries: Sequence[Entry],
    start: int,
    end: int,
    keep_recent_tokens: int,
    estimator: Estimator | None = None,
) -> CutPoint:
    """Where to cut `entries[start:end]` to keep about `keep_recent_tokens` verbatim.

    See the module docstring for the rule. `start` is where summarizing may begin (the
    previous compaction's kept boundary); the cut is never before it.
    """
    estimator = estimator or Estimator()
    blocked = _split_boundaries(entries, start, end)

    def valid(k: int) -> bool:
        return entry_role(entries[k]) in CUT_ROLES and k not in blocked

    total = 0
    threshold: int | None = None
    sizes: dict[int, int] = {}
    for i in range(end - 1, start - 1, -1):
        message = entry_message(entries[i])
        if message is None:
            continue
        sizes[i] = estimator.estimate_message(message, entries[i].get("id"))
        total += sizes[i]
        if total >= keep_recent_tokens:
            threshold = i
            break
    if threshold is None:
        return CutPoint(start, None, False, total)
    cut = next((k for k in range(threshold, end) if valid(k)), None)
    if cut is None:
        cut = next((k for k in range(threshold - 1, start - 1, -1) if valid(k)), start)
        for k in range(cut, threshold):
            message = entry_message(entries[k])
            if message is not None:
                total += estimator.estimate_message(message, entries[k].get("id"))
    else:
        total -= sum(size for k, size in sizes.items() if k < cut)
    turn_start: int | None = None
    if entry_role(entries[cut]) not in TURN_START_ROLES:
        for k in range(cut - 1, start - 1, -1):
            if entry_role(entries[k]) in TURN_START_ROLES:
                turn_start = k
                break
    return CutPoint(cut, turn_start, turn_start is not None, total)


# ---------------------------------------------------------------------------------------
# duplicate prompts


def _prompt_key(message: Message) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for block in content:
            if not isinstance(block, Mapping) or block.get("type") == "image":
                return None
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        text = "\n".join(parts)
    else:
        return None
    return unicodedata.normalize("NFC", " ".join(text.split())).lower()


def duplicate_prompts(
    messages: Sequence[Message],
    timestamps: Sequence[int | None],
    min_chars: int = DEFAULT_SETTINGS.duplicate_prompt_min_chars,
    window_seconds: float = DEFAULT_SETTINGS.duplicate_prompt_window_seconds,
) -> set[int]:
    """Indices of user prompts that repeat an earlier one and should count once.

    A prompt is a repeat when its text, after folding whitespace, Unicode NFC and
    lower-casing, has at least `min_chars` characters and equals a prompt seen at most
    `window_seconds` earlier (measured from that prompt's latest repeat, so a burst of
    resubmissions counts once). Prompts with images or without a timestamp always count.
    Assistant replies in between do not matter: a prompt resent after a failed reply is the
    typical repeat.
    """
    last_seen: dict[str, int] = {}
    repeats: set[int] = set()
    window_ms = window_seconds * 1000
    for i, message in enumerate(messages):
        if message.get("role") != "user" or timestamps[i] is None:
            continue
        key = _prompt_key(message)
        if key is None or len(key) < min_chars:
            continue
        now = timestamps[i]
        assert now is not None
        seen = last_seen.get(key)
        if seen is not None and 0 <= now - seen <= window_ms:
            repeats.add(i)
        last_seen[key] = now if seen is None else max(seen, now)
    return repeats


# ---------------------------------------------------------------------------------------
# prepare


@dataclass(frozen=True)
class CompactionPreparation:
    """What a compaction will summarize and keep. Hooks get it: treat it as read-only."""

    leaf_id: str | None
    first_kept_entry_id: str
    first_kept_index: int
    summarize_from: int
    """Branch index where summarizing starts (the previous compaction's kept boundary)."""
    is_split_turn: bool
    turn_start_index: int | None
    messages_to_summarize: tuple[Message, ...]
    message_ids: tuple[str | None, ...]
    turn_prefix_messages: tuple[Message, ...]
    turn_prefix_ids: tuple[str | None, ...]
    previous_summary: str | None
    previous_compaction_id: str | None
    tokens_before: int
    kept_tokens: int
    keep_recent_tokens: int
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]
    duplicates_dropped: int
    model: str | None
    window: int

    @property
    def has_work(self) -> bool:
        """False when there is nothing to summarize (no model call is made)."""
        return bool(self.messages_to_summarize or self.turn_prefix_messages)

    @property
    def all_messages(self) -> tuple[Message, ...]:
        return self.messages_to_summarize + self.turn_prefix_messages


def _between(branch: Sequence[Entry], start: int, end: int) -> list[tuple[Message, Entry]]:
    out = []
    for entry in branch[start:end]:
        message = entry_message(entry)
        if message is not None:
            out.append((message, entry))
    return out


def _timestamp(message: Message, entry: Entry) -> int | None:
    value = message.get("timestamp")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    millis = iso_to_millis(entry.get("timestamp"))
    return int(millis) if millis is not None else None


def _previous_files(details: Any) -> tuple[list[str], list[str]]:
    if not isinstance(details, Mapping):
        return [], []

    def strings(key: str) -> list[str]:
        value = details.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    return strings("readFiles"), strings("modifiedFiles")


def prepare_compaction(
    source: Session | Sequence[Entry],
    settings: ContextSettings = DEFAULT_SETTINGS,
    estimator: Estimator | None = None,
    *,
    keep_recent_tokens: int | None = None,
) -> CompactionPreparation | None:
    """Plan a compaction of the active branch of `source` (a Session, or a branch of entries).

    Returns None when the branch is empty or already ends with a compaction; otherwise a
    preparation, whose `has_work` is False when there is nothing to summarize.
    `keep_recent_tokens` defaults to `settings.keep_recent_tokens`, clamped to
    `settings.keep_recent_max_share` of the prompt budget.
    """
    branch = source.get_branch() if isinstance(source, Session) else list(source)
    if not branch or branch[-1].get("type") == "compaction":
        return None
    estimator = estimator or Estimator.from_settings(settings)
    previous_at = _latest_compaction(branch)
    start = 0 if previous_at is None else _kept_start(branch, previous_at)
    if previous_at is not None and start == previous_at:
        start = previous_at + 1
    model = _model_id(branch)
    window = resolve_window(model, settings)
    if keep_recent_tokens is None:
        share = math.floor(prompt_budget(window, settings) * settings.keep_recent_max_share)
        keep_recent_tokens = min(settings.keep_recent_tokens, share)
    cut = find_cut_point(branch, start, len(branch), keep_recent_tokens, estimator)
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_index
    assert history_end is not None
    history = _between(branch, start, history_end)
    prefix = _between(branch, history_end, cut.first_kept_index) if cut.is_split_turn else []

    both = history + prefix
    repeats = duplicate_prompts(
        [m for m, _ in both], [_timestamp(m, e) for m, e in both],
        settings.duplicate_prompt_min_chars, settings.duplicate_prompt_window_seconds,
    )
    if repeats:
        log.info("%d repeated user prompt(s) count once in the summary", len(repeats))
    history = [pair for i, pair in enumerate(history) if i not in repeats]
    prefix = [pair for i, pair in enumerate(prefix, len(both) - len(prefix)) if i not in repeats]

    previous = branch[previous_at] if previous_at is not None else None
    old_read, old_modified = _previous_files(previous.get("details") if previous else None)
    read, modified = file_operations(m for m, _ in history + prefix)
    modified_all = dict.fromkeys(old_modified) | modified
    read_all = [p for p in dict.fromkeys(old_read) | read if p not in modified_all]

    return CompactionPreparation(
        leaf_id=branch[-1].get("id"),
        first_kept_entry_id=str(branch[cut.first_kept_index].get("id")),
        first_kept_index=cut.first_kept_index,
        summarize_from=start,
        is_split_turn=cut.is_split_turn,
        turn_start_index=cut.turn_start_index,
        messages_to_summarize=tuple(m for m, _ in history),
        message_ids=tuple(e.get("id") for _, e in history),
        turn_prefix_messages=tuple(m for m, _ in prefix),
        turn_prefix_ids=tuple(e.get("id") for _, e in prefix),
        previous_summary=previous.get("summary") if previous else None,
        previous_compaction_id=previous.get("id") if previous else None,
        tokens_before=estimate_branch_context(branch, estimator, settings).tokens,
        kept_tokens=cut.kept_tokens,
        keep_recent_tokens=keep_recent_tokens,
        read_files=tuple(sorted(read_all)),
        modified_files=tuple(sorted(modified_all)),
        duplicates_dropped=len(repeats),
        model=model,
        window=window,
    )


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
    summarizer: Any
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
        if small and count:
            notes = [
                f"[Left out of this summary: a {m.get('role')} message of about "
                f"{sizes[i]:,} tokens, too large to summarize]"
                for i, m in enumerate(messages) if oversized[i]
            ]
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
    summarizer: Any,
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


# ---------------------------------------------------------------------------------------
# record


def missing_identifiers_section(summary: str, identifiers: Sequence[str]) -> str:
    """A section listing the identifiers `summary` does not contain verbatim ('' if none)."""
    missing = [i for i in identifiers if i not in summary]
    if not missing:
        return ""
    return "\n\n## Exact identifiers\n" + "\n".join(f"- {i}" for i in missing)


def tool_failures_section(
    messages: Sequence[Message], settings: ContextSettings = DEFAULT_SETTINGS
) -> str:
    """Up to `max_tool_failures` failed tool calls, one short line each ('' if none)."""
    failures = tool_failures(messages, settings.tool_failure_chars)
    if not failures:
        return ""
    limit = settings.max_tool_failures
    lines = [f"- {f}" for f in failures[:limit]]
    if len(failures) > limit:
        lines.append(f"- ...and {len(failures) - limit} more")
    return "\n\n## Tool failures\n" + "\n".join(lines)


def file_lists_section(read_files: Sequence[str], modified_files: Sequence[str]) -> str:
    """pi's `<read-files>` and `<modified-files>` blocks ('' if both are empty)."""
    parts = []
    if read_files:
        parts.append("<read-files>\n" + "\n".join(read_files) + "\n</read-files>")
    if modified_files:
        parts.append("<modified-files>\n" + "\n".join(modified_files) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(parts) if parts else ""


def preserved_identifiers(
    preparation: CompactionPreparation, settings: ContextSettings = DEFAULT_SETTINGS
) -> list[str]:
    """The identifiers a summary must name: newest first from the summarized messages, then
    those of the previous summary, at most `max_preserved_identifiers`."""
    limit = settings.max_preserved_identifiers
    found = message_identifiers(reversed(preparation.all_messages), limit)
    if preparation.previous_summary and len(found) < limit:
        found += [i for i in extract_identifiers(preparation.previous_summary) if i not in found]
    return found[:limit]


def compose_summary(
    preparation: CompactionPreparation,
    history: str,
    turn_prefix: str | None,
    settings: ContextSettings = DEFAULT_SETTINGS,
) -> str:
    """The text recorded: summaries, missing identifiers, tool failures and file lists."""
    text = history
    if turn_prefix:
        text += f"\n\n---\n\n{SPLIT_TURN_HEADING}\n\n{turn_prefix}"
    failures = tool_failures_section(preparation.all_messages, settings)
    files = file_lists_section(preparation.read_files, preparation.modified_files)
    missing = missing_identifiers_section(text + failures + files,
                                          preserved_identifiers(preparation, settings))
    return text + missing + failures + files


def record_compaction(
    session: Session,
    preparation: CompactionPreparation,
    summary: str,
    *,
    extra_details: Mapping[str, Any] | None = None,
) -> str:
    """Append the compaction entry (the session then records its model and thinking level).

    `details` carries pi's `readFiles` and `modifiedFiles` (cumulative: the next compaction
    starts from them) plus any `extra_details`.
    """
    details: dict[str, Any] = {"readFiles": list(preparation.read_files),
                               "modifiedFiles": list(preparation.modified_files)}
    details.update(extra_details or {})
    return session.append_compaction(summary, preparation.first_kept_entry_id,
                                     preparation.tokens_before, details)


# ---------------------------------------------------------------------------------------
# hooks and the memory flush


@dataclass(frozen=True)
class CompactionHooks:
    """Callbacks around a compaction. They can neither block it nor break it.

    Each runs in its own thread; compaction waits at most `timeout` seconds (default
    `settings.hook_timeout_seconds`) and then goes on, leaving a slow hook running. Errors are
    logged. `before_compaction` gets the `CompactionPreparation`, `after_compaction` the
    `CompactionResult`.
    """

    before_compaction: Callable[[CompactionPreparation], Any] | None = None
    after_compaction: Callable[[CompactionResult], Any] | None = None
    timeout: float | None = None


def run_hook(name: str, hook: Callable[[Any], Any] | None, argument: Any, timeout: float
             ) -> bool:
    """Run `hook(argument)` in a daemon thread for at most `timeout` seconds.

    Returns True when it finished without error. Never raises.
    """
    if hook is None:
        return True
    outcome: list[bool] = []

    def target() -> None:
        try:
            hook(argument)
            outcome.append(True)
        except BaseException:
            log.exception("%s hook failed; compaction goes on", name)
            outcome.append(False)

    thread = threading.Thread(target=target, name=f"compaction-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        log.warning("%s hook still running after %.1f s; compaction goes on without it",
                    name, timeout)
        return False
    return bool(outcome and outcome[0])


def memory_file(workspace: str | os.PathLike[str], now: datetime | None = None) -> Path:
    """`<workspace>/memory/YYYY-MM-DD.md` for the local date of `now`."""
    now = now or datetime.now().astimezone()
    return Path(workspace) / "memory" / f"{now:%Y-%m-%d}.md"


def flush_memory(
    workspace: str | os.PathLike[str],
    messages: Sequence[Message],
    *,
    session_id: str | None = None,
    reason: str = "threshold",
    now: datetime | None = None,
) -> Path | None:
    """Append the key facts of `messages` to the day's memory file, append-only.

    One `write` on an `O_APPEND` descriptor per flush (retried for the rest after a short
    write); nothing already in the file is read or rewritten. Returns the file, or None when
    there was nothing to write or writing failed (logged: a flush never stops a compaction).
    """
    facts = extract_facts(messages)
    lines = []
    if facts.first_request:
        lines.append(f"- First request: {facts.first_request}")
    if facts.latest_request and facts.latest_request != facts.first_request:
        lines.append(f"- Latest request: {facts.latest_request}")
    lines += [f"- Decision: {d}" for d in facts.decisions[-8:]]
    if facts.modified_files:
        lines.append("- Modified: " + ", ".join(facts.modified_files))
    if facts.read_files:
        lines.append("- Read: " + ", ".join(facts.read_files))
    lines += [f"- Tool failure: {f}" for f in facts.failures[:8]]
    if facts.identifiers:
        lines.append("- Identifiers: " + ", ".join(f"`{i}`" for i in facts.identifiers[-40:]))
    if not lines:
        return None
    now = now or datetime.now().astimezone()
    path = memory_file(workspace, now)
    where = f" of session {session_id}" if session_id else ""
    block = f"\n## {now:%H:%M:%S} compaction ({reason}){where}\n\n" + "\n".join(lines) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size == 0:
                block = f"# Memory {now:%Y-%m-%d}\n" + block
            data = block.encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("memory flush to %s failed: %s", path, e)
        return None
    return path


# ---------------------------------------------------------------------------------------
# compact


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction wrote."""

    entry_id: str
    summary: str
    first_kept_entry_id: str
    tokens_before: int
    tokens_after: int
    fallback_level: FallbackLevel
    reason: str
    summarized_messages: int
    turn_prefix_messages: int
    is_split_turn: bool
    duplicates_dropped: int
    model_calls: int
    details: dict[str, Any] = field(default_factory=dict)
    memory_file: str | None = None


def compact(
    session: Session,
    summarizer: Any,
    settings: ContextSettings = DEFAULT_SETTINGS,
    *,
    estimator: Estimator | None = None,
    focus: str | None = None,
    reason: str = "threshold",
    hooks: CompactionHooks | None = None,
    workspace: str | os.PathLike[str] | None = None,
    sleep: Callable[[float], Any] | None = None,
    abort: threading.Event | None = None,
    rng: random.Random | None = None,
) -> CompactionResult | None:
    """Compact the active branch of `session`; None when there is nothing to summarize.

    Args:
        session: an open session (the writer).
        summarizer: an `agent.summarize.Summarizer`.
        settings: thresholds (`keep_recent_tokens`, chunking, retries, `memory_flush`, ...).
        estimator: token estimator; pass the same one each time to reuse its per-entry cache.
        focus: an extra instruction for the summary (as pi's `/compact <focus>`).
        reason: why ("threshold", "overflow", "manual"): recorded in details and logs.
        hooks: before/after callbacks (bounded in time, errors logged).
        workspace: where `memory/YYYY-MM-DD.md` is written when `settings.memory_flush`.
        sleep: replaces the backoff sleep (tests); abort: an event that stops the compaction.
        rng: source of backoff jitter.

    Raises:
        SummaryAborted: `abort` was set or the summarizer was aborted; nothing was written.
    """
    estimator = estimator or Estimator.from_settings(settings)
    preparation = prepare_compaction(session, settings, estimator)
    if preparation is None or not preparation.has_work:
        log.debug("nothing to compact in %s", session.path)
        return None
    hook_timeout = settings.hook_timeout_seconds
    if hooks is not None and hooks.timeout is not None:
        hook_timeout = hooks.timeout
    if hooks is not None:
        run_hook("before_compaction", hooks.before_compaction, preparation, hook_timeout)
    flushed = None
    if settings.memory_flush and workspace is not None:
        flushed = flush_memory(workspace, preparation.all_messages,
                               session_id=session.session_id, reason=reason)

    window = preparation.window
    common: dict[str, Any] = dict(window=window, estimator=estimator, sleep=sleep, abort=abort,
                                  rng=rng)
    history = summarize_messages(
        preparation.messages_to_summarize, summarizer, settings,
        previous_summary=preparation.previous_summary, focus=focus,
        max_tokens=summary_max_tokens(window, settings), **common,
    )
    prefix: SummaryOutcome | None = None
    if preparation.is_split_turn and preparation.turn_prefix_messages:
        prefix_focus = TURN_PREFIX_INSTRUCTIONS + (f"\n\n{focus.strip()}" if focus else "")
        prefix = summarize_messages(
            preparation.turn_prefix_messages, summarizer, settings, focus=prefix_focus,
            max_tokens=summary_max_tokens(window, settings, settings.turn_prefix_reserve_share),
            **common,
        )
    if abort is not None and abort.is_set():
        raise SummaryAborted("compaction aborted")
    level = max(history.level, prefix.level if prefix else FallbackLevel.NONE)
    summary = compose_summary(preparation, history.text, prefix.text if prefix else None,
                              settings)
    extra = {"reason": reason, "fallbackLevel": int(level)}
    entry_id = record_compaction(session, preparation, summary, extra_details=extra)
    after = estimate_branch_context(session.get_branch(), estimator, settings).tokens
    result = CompactionResult(
        entry_id=entry_id,
        summary=summary,
        first_kept_entry_id=preparation.first_kept_entry_id,
        tokens_before=preparation.tokens_before,
        tokens_after=after,
        fallback_level=FallbackLevel(level),
        reason=reason,
        summarized_messages=len(preparation.messages_to_summarize),
        turn_prefix_messages=len(preparation.turn_prefix_messages),
        is_split_turn=preparation.is_split_turn,
        duplicates_dropped=preparation.duplicates_dropped,
        model_calls=history.calls + (prefix.calls if prefix else 0),
        details={"readFiles": list(preparation.read_files),
                 "modifiedFiles": list(preparation.modified_files), **extra},
        memory_file=str(flushed) if flushed else None,
    )
    log.info("compacted %s (%s): %d -> %d tokens, level %d, %d call(s)", session.path, reason,
             result.tokens_before, after, level, result.model_calls)
    if hooks is not None:
        run_hook("after_compaction", hooks.after_compaction, result, hook_timeout)
    return result
