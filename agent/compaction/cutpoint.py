"""The projection of a branch, the cut point and the preparation of a compaction.

Everything here only reads: `projection` and the context estimates follow
`journal.build_context`; `find_cut_point` decides what a compaction keeps verbatim;
`duplicate_prompts` finds resubmitted user prompts that should count once; and
`prepare_compaction` puts these together into a `CompactionPreparation` saying what
`agent.compaction.compact` will summarize and keep.

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
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compaction.facts import file_operations
from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.tokens import ContextEstimate, Estimator, estimate_context
from agent.window import prompt_budget, resolve_window
from journal import Session, boundary, branch_context, entry_message, iso_to_millis

log = logging.getLogger(__name__)

Entry = dict[str, Any]

CUT_ROLES = frozenset({"user", "assistant", "bashExecution", "custom", "branchSummary"})
TURN_START_ROLES = frozenset({"user", "bashExecution", "custom", "branchSummary"})


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


def projection(branch: Sequence[Entry]) -> tuple[list[Message], list[str | None], int]:
    """The context messages of a branch, the entry id of each, and where the live part starts.

    `journal.branch_context` of the branch, with the summary keyed by the compaction's id. The
    third value is the index of the first message after the compaction entry (0 without
    one): usage figures reported before it are stale.
    """
    context = branch_context(branch)
    ids = context.entry_ids
    if context.compaction_id is not None:
        ids[0] = context.compaction_id
    return list(context.messages), ids, context.fresh_from


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
    return _estimate_live(context.messages, context.entry_ids, context.fresh_from,
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
    out: list[tuple[Message, Entry]] = []
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
    previous_at, start = boundary(branch)
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
