"""The compaction boundary of a branch: which compaction applies and which entries it keeps.

The one rule every reader of a branch follows (the projection, rotation, repair, the reverse
scan of `resume`, and the agent's cut point):

- only the latest compaction on the branch applies;
- it keeps the entries from the one whose id is its `firstKeptEntryId` up to itself, then
  everything after it. The kept entry is looked for among the entries before the compaction,
  nearest first; when it is not there, nothing before the compaction is kept.

What a new compaction may keep (`orphaned_by_keeping`, checked by every append): its
`firstKeptEntryId` is null or an entry on the branch it is appended to, and the entries kept
hold no tool result whose call the compaction summarises away (the model API refuses a
`tool_result` without its `tool_use`, and `journal repair` would have to move the boundary).

pi looks for the kept entry from the root down; on any branch pi can walk, ids on it are
unique and both searches find the same entry. Searching nearest first also lets a reverse
scan (`snapshot.resume`) stop at the first match and still agree with a full load on
damaged files whose branch repeats an id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .model import Message
from .pairing import ORPHAN_RESULT, sanitize

EntryLike = Mapping[str, Any]


class Boundary(NamedTuple):
    """Where a branch's latest compaction sits and where the entries it keeps start.

    Both are indices into the branch. Without a compaction, `compaction` is None and
    `kept_start` is 0 (everything is kept).
    """

    compaction: int | None
    kept_start: int


def is_compaction(entry: EntryLike) -> bool:
    return entry.get("type") == "compaction"


def is_first_kept(compaction: EntryLike, entry: EntryLike) -> bool:
    """Whether `entry` is the first one `compaction` keeps (its `firstKeptEntryId`)."""
    return entry.get("id") == compaction.get("firstKeptEntryId")


def latest_compaction(branch: Sequence[EntryLike]) -> int | None:
    """The index of the latest compaction on the branch (None without one)."""
    for i in range(len(branch) - 1, -1, -1):
        if is_compaction(branch[i]):
            return i
    return None


def kept_start(branch: Sequence[EntryLike], compaction_at: int) -> int:
    """Where the entries kept by the compaction at `compaction_at` start (itself if none)."""
    compaction = branch[compaction_at]
    for i in range(compaction_at - 1, -1, -1):
        if is_first_kept(compaction, branch[i]):
            return i
    return compaction_at


def boundary(branch: Sequence[EntryLike]) -> Boundary:
    """The compaction boundary of a branch given root first."""
    at = latest_compaction(branch)
    if at is None:
        return Boundary(None, 0)
    return Boundary(at, kept_start(branch, at))


def orphaned_by_keeping(before: Sequence[Message], kept: Sequence[Message]) -> list[str]:
    """The tool call ids whose results a new compaction would keep without their calls.

    Args:
        before: the context messages of the branch the compaction is appended to.
        kept: the messages of the entries it keeps (from its `firstKeptEntryId` on).

    Returns:
        The ids, in order, of kept results that no kept call answers although the branch
        answered them before: the compaction would summarise their calls away. Empty when
        the compaction is valid (a result already orphaned before it is older damage, not
        this compaction's).

    Example:
        >>> call = {"role": "assistant", "content": [
        ...     {"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}]}
        >>> result = {"role": "toolResult", "toolCallId": "t1", "content": []}
        >>> orphaned_by_keeping([call, result], [result])
        ['t1']
    """
    already = _orphans(before)
    return [call_id for call_id in _orphans(kept) if call_id not in already]


def _orphans(messages: Sequence[Message]) -> list[str]:
    report = sanitize(list(messages))[1]
    return [f.call_id for f in report.fixes if f.rule == ORPHAN_RESULT and f.call_id]
