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

`OverflowLadder` is the order of recovery for one model call that overflows: compaction (at
most `settings.overflow_compactions`), then this truncation, then giving up. It never sends the
same request twice: a rung that changes nothing (a compaction that finds nothing to compact, a
truncation that truncates nothing, or a rung after which the request is still identical)
moves straight to the next rung. When a compaction already ran while the failed request was
built, another one is not run at once for the same overflow: it counts as one of the
compactions and truncation comes first. Each rung and its outcome is recorded in the session
as a `journal.overflow_rung` custom entry, with a readable `text` that `journal tail` and
`journal show` print.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
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
RUNG_TYPE = "journal.overflow_rung"
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
        if branch[i].get("type") == "custom" and branch[i].get("customType") == RUNG_TYPE:
            continue  # the ladder's notes stay on the old branch; they are not history
        entry = _copy(branch[i])
        if i in plan:
            entry["message"] = dict(plan[i][0])
        copies.append(entry)
    originals = [e.get("id") for e in branch[first:]
                 if not (e.get("type") == "custom" and e.get("customType") == RUNG_TYPE)]

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


class Rung(StrEnum):
    COMPACT = "compact"
    TRUNCATE = "truncate"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class RungOutcome:
    """What one rung did: `changed` says whether the next request can differ."""

    changed: bool
    outcome: str
    """One word or two: compacted, nothing to compact, truncated, nothing to truncate."""
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


class OverflowLadder:
    """The recovery rungs for one model call; see the module docstring.

    The runner calls `overflowed(request, reason, compacted_in_attempt)` when a request
    overflows and `repeats(request)` before sending the next one; both climb to the next rung
    that changes something and return False when none is left.
    """

    def __init__(
        self,
        session: Session,
        settings: ContextSettings,
        *,
        compact: Callable[[], RungOutcome],
        truncate: Callable[[], RungOutcome],
    ) -> None:
        self.session = session
        self.max_compactions = settings.overflow_compactions
        self._compact = compact
        self._truncate = truncate
        self.compactions = 0
        """Compaction rungs used (run, or skipped because one ran in the attempt)."""
        self.compaction_exhausted = False
        """A compaction found nothing: another on the same branch would find nothing too."""
        self.truncated = False
        self.steps = 0
        self.failed: Any = None
        """The request that overflowed last."""
        self.reason = ""
        self.gave_up = False
        self._last = Rung.COMPACT

    def overflowed(self, request: Any, reason: str, compacted_in_attempt: bool) -> bool:
        """`request` overflowed: run rungs until one changes the session (True) or none is
        left (False, recorded as a give-up)."""
        self.failed, self.reason = request, reason
        if compacted_in_attempt:
            if self._can_compact():
                self.compactions += 1
                self._record(Rung.COMPACT, "skipped",
                             "a compaction already ran in this attempt")
            return self._climb((Rung.TRUNCATE, Rung.COMPACT))
        return self._climb((Rung.COMPACT, Rung.TRUNCATE))

    def repeats(self, request: Any) -> bool:
        """Whether `request` is the one that overflowed last (the rung changed nothing the
        model sees); when it is, the ladder has already climbed on (check `gave_up`)."""
        if self.failed is None or request != self.failed:
            return False
        self._record(self._last, "request unchanged",
                     "the request after this rung is identical; next rung")
        self.gave_up = not self._climb((Rung.COMPACT, Rung.TRUNCATE))
        return True

    def _can_compact(self) -> bool:
        return not self.compaction_exhausted and self.compactions < self.max_compactions

    def _climb(self, order: tuple[Rung, ...]) -> bool:
        for rung in order:
            if rung is Rung.COMPACT and self._can_compact():
                self.compactions += 1
                result = self._compact()
                if not result.changed:
                    self.compaction_exhausted = True
            elif rung is Rung.TRUNCATE and not self.truncated:
                self.truncated = True
                result = self._truncate()
            else:
                continue
            self._last = rung
            self._record(rung, result.outcome, result.detail, result.data)
            if result.changed:
                return True
        self.gave_up = True
        self._record(Rung.GIVE_UP, "gave up",
                     f"after {self.compactions} compaction rung(s) and "
                     f"{'a' if self.truncated else 'no'} truncation")
        return False

    def advice(self) -> str:
        return (
            "The conversation no longer fits the model's context window, even after "
            f"{self.compactions} compaction rung(s) and truncating tool results "
            f"({self.reason}). Start a new session, or use a model with a larger window."
        )

    def _record(self, rung: Rung, outcome: str, detail: str = "",
                extra: dict[str, Any] | None = None) -> None:
        self.steps += 1
        text = f"overflow rung {self.steps}: {rung.value}: {outcome}"
        if detail:
            text += f" ({detail})"
        data: dict[str, Any] = {"step": self.steps, "rung": rung.value, "outcome": outcome,
                                "reason": self.reason[:300], "text": text, **(extra or {})}
        try:
            self.session.append_custom_entry(RUNG_TYPE, data)
        except Exception:  # a note must never stop the recovery
            log.exception("could not record %s", text)
        log.info("%s", text)
