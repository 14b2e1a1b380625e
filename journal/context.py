"""Projection of a branch into what the model sees: messages, model, thinking level.

Follows pi's `buildSessionContext` exactly on well-formed files:
- walk root to leaf; the last `thinking_level_change` sets the thinking level (default "off");
  the last `model_change` or assistant message sets the model (an assistant message counts as
  a model change, so a model_change before it is overridden);
- if compactions are on the path, only the latest applies: its summary comes first, then the
  entries it keeps up to the compaction, then everything after it (`journal.boundary` owns
  which entries a compaction keeps);
- `message` entries contribute their message, `custom_message` entries a `custom` message,
  `branch_summary` entries a `branchSummary` message only when their summary is non-empty;
  every other entry (including earlier compactions) contributes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .boundary import boundary
from .errors import UnknownEntry
from .model import Entry, Message
from .tree import Tree

if TYPE_CHECKING:
    from .pairing import PairingReport

@dataclass
class Context:
    """What a model is sent for one leaf: messages in pi's shape plus the settings."""

    messages: list[Message] = field(default_factory=list)
    thinking_level: str = "off"
    model: dict[str, Any] | None = None
    leaf_id: str | None = None
    compaction_id: str | None = None
    pairing: PairingReport | None = None
    """What the sanitizer changed, on a context made by `for_model` (None otherwise)."""
    entry_ids: list[str | None] = field(default_factory=list)
    fresh_from: int = 0
    """Index of the first message written after the applied compaction (0 without one):
    usage reported by earlier assistant messages measured a longer, uncompacted history."""

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "thinkingLevel": self.thinking_level,
            "model": self.model,
            "leafId": self.leaf_id,
        }

    def same_as(self, other: Context) -> bool:
        """Equal for a model: same messages, model and thinking level."""
        return (
            self.messages == other.messages
            and self.model == other.model
            and self.thinking_level == other.thinking_level
        )


def for_model(context: Context) -> Context:
    """The same context with its messages passed through the pairing sanitizer."""
    from .pairing import sanitize

    messages, report = sanitize(context.messages)
    ids = context.entry_ids if not report.changed else []
    return Context(messages, context.thinking_level, context.model, context.leaf_id,
                   context.compaction_id, report, ids, context.fresh_from)


_MISSING = object()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_to_millis(timestamp: Any = _MISSING) -> int | float | None:
    """`new Date(timestamp).getTime()` as JSON would carry it; None where JS gives NaN.

    Like JS: a number passes through, null is 0, milliseconds are truncated, and a time without
    a zone is local time.
    """
    if timestamp is None:
        return 0
    if isinstance(timestamp, int | float) and not isinstance(timestamp, bool):
        return timestamp
    if not isinstance(timestamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()
    return (parsed - _EPOCH) // timedelta(milliseconds=1)


def _copy_present(entry: Entry, out: Message, *keys: str) -> Message:
    """Copy the keys an entry has: JSON.stringify leaves undefined fields out."""
    for key in keys:
        if key in entry:
            out[key] = entry[key]
    return out


def compaction_summary_message(entry: Entry) -> Message:
    message = _copy_present(entry, {"role": "compactionSummary"}, "summary", "tokensBefore")
    message["timestamp"] = iso_to_millis(entry.get("timestamp", _MISSING))
    return message


def branch_summary_message(entry: Entry) -> Message:
    message = _copy_present(entry, {"role": "branchSummary"}, "summary", "fromId")
    message["timestamp"] = iso_to_millis(entry.get("timestamp", _MISSING))
    return message


def custom_message(entry: Entry) -> Message:
    message = _copy_present(entry, {"role": "custom"}, "customType", "content", "display",
                            "details")
    message["timestamp"] = iso_to_millis(entry.get("timestamp", _MISSING))
    return message


def entry_message(entry: Entry) -> Message | None:
    """The message an entry contributes to the context, if any."""
    kind = entry.get("type")
    if kind == "message":
        return entry.get("message")
    if kind == "custom_message":
        return custom_message(entry)
    if kind == "branch_summary" and entry.get("summary"):
        return branch_summary_message(entry)
    return None


def build_context(tree: Tree, leaf_id: str | None) -> Context:
    """Project the branch ending at the entry `leaf_id`, as pi's `buildSessionContext` does.

    None projects nothing (pi's null leaf). An id the tree does not hold raises UnknownEntry;
    a duplicated id names its latest definition, as a lookup by id does everywhere.
    """
    if leaf_id is None:
        return Context()
    position = tree.index_of(leaf_id)
    if position is None:
        raise UnknownEntry(leaf_id)
    return branch_context([tree.entries[i] for i in tree.path(position)])


def branch_context(branch: Sequence[Entry]) -> Context:
    """Project a branch given as its entries, root first (empty: nothing)."""
    if not branch:
        return Context()
    thinking_level: str = "off"
    model: dict[str, Any] | None = None
    for entry in branch:
        kind = entry.get("type")
        if kind == "thinking_level_change":
            thinking_level = entry.get("thinkingLevel")  # type: ignore[assignment]
        elif kind == "model_change":
            model = _model(entry, "provider", "modelId")
        elif kind == "message" and entry["message"].get("role") == "assistant":
            model = _model(entry["message"], "provider", "model")

    messages: list[Message] = []
    ids: list[str | None] = []
    compaction_id = None
    compaction_at, kept_from = boundary(branch)
    if compaction_at is None:
        emit_from = 0
    else:
        compaction = branch[compaction_at]
        compaction_id = compaction["id"]
        messages.append(compaction_summary_message(compaction))
        ids.append(None)
        _emit(branch[kept_from:compaction_at], messages, ids)
        emit_from = compaction_at + 1
    fresh_from = len(messages) if compaction_at is not None else 0
    _emit(branch[emit_from:], messages, ids)
    return Context(messages, thinking_level, model, branch[-1]["id"], compaction_id,
                   entry_ids=ids, fresh_from=fresh_from)


def advance(context: Context, entry: Entry) -> bool:
    """Extend `context` in place by an entry appended under its leaf.

    Returns False when that is not possible (the entry is not a child of the leaf, or it is a
    compaction, which reshapes the projection); the caller then rebuilds. This keeps the cost
    of the next context independent of the session's length.
    """
    if entry.get("parentId") != context.leaf_id or entry.get("type") == "compaction":
        return False
    kind = entry.get("type")
    if kind == "thinking_level_change":
        context.thinking_level = entry.get("thinkingLevel")  # type: ignore[assignment]
    elif kind == "model_change":
        context.model = _model(entry, "provider", "modelId")
    elif kind == "message" and entry["message"].get("role") == "assistant":
        context.model = _model(entry["message"], "provider", "model")
    message = entry_message(entry)
    if message is not None:
        context.messages.append(message)
        context.entry_ids.append(entry["id"])
    context.leaf_id = entry["id"]
    return True


def _model(source: dict[str, Any], provider_key: str, model_key: str) -> dict[str, Any]:
    """pi builds `{provider, modelId}` from fields that may be absent; JSON then omits them."""
    model = {}
    if provider_key in source:
        model["provider"] = source[provider_key]
    if model_key in source:
        model["modelId"] = source[model_key]
    return model


def _emit(entries: Sequence[Entry], out: list[Message], ids: list[str | None]) -> None:
    for entry in entries:
        message = entry_message(entry)
        if message is not None:
            out.append(message)
            ids.append(entry["id"])


SUMMARY_INTRO = (
    "Earlier parts of this conversation were condensed to save space. "
    "This is the condensed account of them:\n\n<summary>\n"
)
BRANCH_INTRO = (
    "Before returning to this point, the conversation explored another path. "
    "What happened there, in brief:\n\n<summary>\n"
)
SUMMARY_OUTRO = "\n</summary>"


def bash_execution_text(message: Mapping[str, Any]) -> str:
    """A shell command the user ran, with its output, as text for the model."""
    lines = [f"The user ran a shell command: `{message.get('command', '')}`"]
    output = message.get("output") or ""
    lines.append(f"Output:\n```\n{output}\n```" if output else "It printed nothing.")
    if message.get("cancelled"):
        lines.append("The command was cancelled before it finished.")
    elif message.get("exitCode") not in (0, None):
        lines.append(f"Exit code: {message.get('exitCode')}")
    if message.get("truncated"):
        lines.append("The output was truncated.")
    return "\n".join(lines)


def to_model_messages(messages: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Turn summaries, custom and shell messages into user-role text a model accepts.

    User, assistant and tool-result messages pass through unchanged; a shell execution marked
    `excludeFromContext` is left out, as pi does.
    """
    out: list[Mapping[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role in ("user", "assistant", "toolResult"):
            out.append(m)
            continue
        if role == "compactionSummary":
            text = SUMMARY_INTRO + str(m.get("summary", "")) + SUMMARY_OUTRO
        elif role == "branchSummary":
            text = BRANCH_INTRO + str(m.get("summary", "")) + SUMMARY_OUTRO
        elif role == "bashExecution":
            if m.get("excludeFromContext"):
                continue
            text = bash_execution_text(m)
        elif role == "custom":
            content = m.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            out.append({"role": "user", "content": blocks, "timestamp": m.get("timestamp")})
            continue
        else:
            continue
        out.append({"role": "user", "content": [{"type": "text", "text": text}],
                    "timestamp": m.get("timestamp")})
    return out
