"""Overflow recovery in the journal: truncated copies of oversized tool results, on a new branch.

When a request still overflows after compaction, the tool results the context keeps verbatim
are the usual culprit, and truncating them per request is not enough: the next request would
carry them again. `truncate_session_tool_results` makes the cut part of the session without
editing a committed line:

1. find, in the live context of the active branch (from the latest compaction's kept boundary
   on), the tool results longer than the cap (`agent.truncate.max_result_chars` for the window,
   or `max_chars`), and with `budget_chars` also what aggregate truncation would cut;
2. move the leaf to the entry before the first of them, and append a copy of every entry from
   there to the old leaf, the oversized results replaced by truncated copies (the text rules
   are `agent.truncate`'s: head, marker, and an important tail kept);
3. append a `custom` entry (`journal.tool_results_truncated`: never in context) naming the old
   leaf and the originals, so the change can be traced.

The originals stay in the file as a dead branch. Copies get new ids and timestamps (messages
keep their own `timestamp` field). All copies and the marker are written in one commit, so a
crash leaves either the old leaf or the whole new branch.

A compaction among the copies keeps its `firstKeptEntryId` unchanged, and that is right: only
the live context is searched, which starts at the latest compaction's kept entry, so the new
branch forks after that entry and it stays on the path. (An earlier compaction's kept entry is
at or before it too, as the next compaction starts summarizing there.)

Example:
    >>> report = truncate_session_tool_results(session, 200_000)  # doctest: +SKIP
    >>> report.truncated, report.chars_cut, report.new_leaf_id  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.truncate import (
    max_result_chars,
    result_text,
    truncate_aggregate,
    truncate_tool_result,
)
from agent.window import resolve_window
from journal import Session, boundary

log = logging.getLogger(__name__)

Entry = dict[str, Any]

MARKER_TYPE = "journal.tool_results_truncated"
_STAMP_KEYS = ("id", "parentId", "timestamp")


@dataclass(frozen=True)
class SessionTruncationReport:
    """What `truncate_session_tool_results` did (nothing when `truncated` is 0)."""

    truncated: int
    chars_cut: int
    old_leaf_id: str | None
    new_leaf_id: str | None
    branched_from: str | None = None
    """The entry the new branch grows from (None: it starts a new root)."""
    copied: int = 0
    """Entries re-appended (the marker entry not counted)."""
    replaced: dict[str, str] = field(default_factory=dict)
    """Original tool-result entry id -> id of its truncated copy."""

    @property
    def changed(self) -> bool:
        return self.truncated > 0


def _tool_result(entry: Entry) -> Message | None:
    if entry.get("type") != "message":
        return None
    message = entry.get("message")
    if isinstance(message, dict) and message.get("role") == "toolResult":
        return message
    return None


def plan_truncation(
    branch: Sequence[Entry],
    window: int,
    settings: ContextSettings = DEFAULT_SETTINGS,
    *,
    max_chars: int | None = None,
    budget_chars: int | None = None,
) -> dict[int, tuple[Message, int]]:
    """Branch index -> (truncated tool result, chars cut), for the live context of `branch`."""
    start = boundary(branch).kept_start  # where the live context starts
    positions: list[int] = []
    messages: list[Message] = []
    for i in range(start, len(branch)):
        message = _tool_result(branch[i])
        if message is not None:
            positions.append(i)
            messages.append(message)
    cap = max_chars if max_chars is not None else max_result_chars(window, settings)
    current = list(messages)
    for k, message in enumerate(messages):
        current[k], _ = truncate_tool_result(message, cap, settings)
    if budget_chars is not None:
        current, _ = truncate_aggregate(current, budget_chars, settings)
    plan: dict[int, tuple[Message, int]] = {}
    for k, (old, new) in enumerate(zip(messages, current, strict=True)):
        if new is not old:
            plan[positions[k]] = (new, len(result_text(old)) - len(result_text(new)))
    return plan


def _copy(entry: Entry) -> Entry:
    return {k: v for k, v in entry.items() if k not in _STAMP_KEYS}


def truncate_session_tool_results(
    session: Session,
    window: int | None = None,
    settings: ContextSettings = DEFAULT_SETTINGS,
    *,
    max_chars: int | None = None,
    budget_chars: int | None = None,
) -> SessionTruncationReport:
    """Write truncated copies of the live context's oversized tool results as a new branch.

    Args:
        session: the open session (its active branch is rewritten as a new branch).
        window: the model's context window (default: resolved from the settings).
        settings: the truncation thresholds.
        max_chars: cap per tool result (default: `max_result_chars(window)`).
        budget_chars: also cut results (largest first) until all the live tool results
            together fit this many characters (`agent.truncate.truncate_aggregate`).

    Returns:
        A report; with nothing over the caps, nothing is written and `truncated` is 0.
    """
    window = window or resolve_window(None, settings)
    branch = session.get_branch()
    old_leaf = session.leaf_id
    plan = plan_truncation(branch, window, settings, max_chars=max_chars,
                           budget_chars=budget_chars)
    if not plan:
        return SessionTruncationReport(0, 0, old_leaf, old_leaf)
    first = min(plan)
    parent = branch[first - 1]["id"] if first > 0 else None
    copies: list[Entry] = []
    for i in range(first, len(branch)):
        entry = _copy(branch[i])
        if i in plan:
            entry["message"] = dict(plan[i][0])
        copies.append(entry)
    originals = [e.get("id") for e in branch[first:]]

    chars_cut = sum(cut for _, cut in plan.values())
    marker: Entry = {
        "type": "custom",
        "customType": MARKER_TYPE,
        "data": {"oldLeafId": old_leaf, "branchedFrom": parent, "charsCut": chars_cut,
                 "replaced": [str(branch[i]["id"]) for i in sorted(plan)]},
    }
    if parent is None:
        session.reset_leaf()
    else:
        session.branch(parent)
    try:
        new_ids = session.append_many([*copies, marker])
    except BaseException:
        if old_leaf is None:
            session.reset_leaf()
        else:
            session.branch(old_leaf)
        raise
    mapping = dict(zip(originals, new_ids, strict=False))
    replaced = {str(branch[i]["id"]): mapping[branch[i]["id"]] for i in sorted(plan)}
    leaf = new_ids[-1]
    log.info("truncated %d tool result(s) (%d chars) on a new branch from %s; leaf %s",
             len(plan), chars_cut, parent, leaf)
    return SessionTruncationReport(len(plan), chars_cut, old_leaf, leaf, parent,
                                   len(copies), replaced)
