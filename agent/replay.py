"""Replaying a scenario into a session that already holds some of its turns."""

from __future__ import annotations

from typing import Any

from agent.models import Model
from journal import Session


def continue_scripted(model: Model, session: Session) -> None:
    """A replayed scenario resumes after the turns it already played in this session.

    Its turns are counted from the latest user message that is the scenario's prompt; a
    session that never saw that prompt starts the scenario at its first turn.
    """
    prompt = getattr(model, "prompt", None)
    if getattr(model, "provider", "") != "scripted" or not prompt:
        return
    played = 0
    for entry in reversed(session.get_branch()):
        message = entry.get("message") if entry.get("type") == "message" else None
        if not message:
            continue
        if message.get("role") == "user" and _text(message) == prompt:
            model.turn = played  # type: ignore[attr-defined]
            return
        if message.get("role") == "assistant" and message.get("stopReason") not in (
                "aborted", "error"):
            played += 1


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))
