"""Replaying a scenario into a session that already holds some of its turns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.models import Model
from journal import Session


def continue_scripted(model: Model, session: Session) -> None:
    """A replayed scenario resumes after the last of its turns this session's branch holds.

    The branch's finished assistant messages are matched to the scenario's turns in order
    (a turn is known by its text and its tool calls; the turn index in the calls' ids,
    `call_<turn>_<n>`, places it outright), so the resume does not depend on the task the
    run was started with, nor on how often it was resumed (turns counted from the latest
    prompt fell short after a second resume: finished turns ran again, their call ids
    twice), nor on turns that repeat their text. A branch holding none of its turns starts
    the scenario at its first turn.
    """
    turns = getattr(model, "turns", None)
    if getattr(model, "provider", "") != "scripted" or not isinstance(turns, list):
        return
    prefix = str(getattr(model, "call_id_prefix", "call_"))
    played = 0  # the next turn to play
    for entry in session.get_branch():
        message = entry.get("message") if entry.get("type") == "message" else None
        if not message or message.get("role") != "assistant" or message.get(
                "stopReason") in ("aborted", "error"):
            continue
        found = _played_turn(message, turns, prefix, played)
        if found is not None:
            played = found + 1
    if played:
        model.turn = played  # type: ignore[attr-defined]


def _played_turn(message: dict[str, Any], turns: Sequence[dict[str, Any]], prefix: str,
                 expected: int) -> int | None:
    """The index of the scenario turn that wrote `message`: the one its calls' ids name, or
    else the `expected` one (the turn after the last matched) if it wrote the same."""
    content = message.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [b for b in blocks if b.get("type") == "toolCall"]
    k = expected
    first_id = calls[0].get("id") if calls else None
    if isinstance(first_id, str) and first_id.startswith(prefix):
        index = first_id[len(prefix):].split("_", 1)[0]
        if not index.isdigit():
            return None
        k = int(index)
    if k < len(turns) and (turns[k].get("text") or "") == text and len(
            turns[k].get("tool_calls") or ()) == len(calls):
        return k
    return None
