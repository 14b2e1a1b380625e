"""Which context window applies, and how much of it the prompt may use."""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass, replace
from typing import Protocol

from agent.settings import DEFAULT_SETTINGS, ContextSettings

log = logging.getLogger(__name__)


class ContextWindowTooSmall(ValueError):
    """The window cannot hold a useful prompt plus a reply."""

    def __init__(self, window: int, minimum: int) -> None:
        self.window = window
        self.minimum = minimum
        super().__init__(
            f"context window of {window:,} tokens is below the minimum of {minimum:,}: "
            "choose a model with a larger window, or if the model's window really is larger, "
            "set ContextSettings.context_window to its actual size"
        )


def model_window(model: str | None, settings: ContextSettings = DEFAULT_SETTINGS) -> int | None:
    """Look a model id up in the settings' model table; None if nothing matches."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    for pattern, window in settings.model_windows:
        if fnmatch.fnmatchcase(name, pattern.lower()):
            return window
    return None


def check_window(window: int, settings: ContextSettings = DEFAULT_SETTINGS) -> int:
    """Refuse windows below the minimum and log a warning for merely small ones."""
    if window < settings.min_context_window:
        raise ContextWindowTooSmall(window, settings.min_context_window)
    if window < settings.warn_context_window:
        log.warning(
            "context window of %s tokens is small (under %s): expect frequent compaction",
            f"{window:,}",
            f"{settings.warn_context_window:,}",
        )
    return window


def resolve_window(model: str | None = None, settings: ContextSettings = DEFAULT_SETTINGS) -> int:
    """Explicit setting, else the model table, else the default; then checked."""
    window = settings.context_window
    if window is None:
        window = model_window(model, settings)
    if window is None:
        window = settings.default_context_window
    return check_window(window, settings)


def clamp_reserve(window: int, settings: ContextSettings = DEFAULT_SETTINGS) -> int:
    """The reply reserve, shrunk so min(min_prompt_tokens, window / 2) is left for the prompt."""
    prompt_floor = min(settings.min_prompt_tokens, window // 2)
    return max(0, min(settings.reserve_tokens, window - prompt_floor))


def prompt_budget(window: int, settings: ContextSettings = DEFAULT_SETTINGS) -> int:
    """Tokens the prompt may occupy: the window minus the (clamped) reserve."""
    return window - clamp_reserve(window, settings)


@dataclass(frozen=True)
class Budget:
    """A resolved window split into the reply reserve and the prompt budget."""

    window: int
    reserve: int
    prompt: int


def resolve_budget(
    model: str | None = None, settings: ContextSettings = DEFAULT_SETTINGS
) -> Budget:
    """Window, clamped reserve and prompt budget for ``model`` in one go."""
    window = resolve_window(model, settings)
    reserve = clamp_reserve(window, settings)
    return Budget(window=window, reserve=reserve, prompt=window - reserve)


class HasWindow(Protocol):
    """What `run_settings` reads of a model (`agent.models.Model` has both)."""

    @property
    def model_id(self) -> str: ...

    @property
    def context_window(self) -> int | None: ...


def run_window(model: HasWindow | None, settings: ContextSettings = DEFAULT_SETTINGS) -> int:
    """The one window of a run: the explicit setting, else the model object's own window,
    else the model table for its id, else the default; then checked.

    The model object's window comes before the table because it is the more specific: a
    model made with ``context_window=40_000`` is believed over the table's 200,000.
    """
    window = settings.context_window
    if window is None and model is not None:
        window = model.context_window
    if window is None:
        return resolve_window(model.model_id if model is not None else None, settings)
    return check_window(window, settings)


def run_settings(model: HasWindow | None, settings: ContextSettings = DEFAULT_SETTINGS,
                 ) -> ContextSettings:
    """`settings` with `context_window` pinned to `run_window(model, settings)`.

    Everything of a run (the runner's budget, compaction's cut point and summary sizes,
    pruning, truncation, the overflow rungs) takes these settings, so all of them resolve the
    same window: nothing downstream can fall back to the model table or the default and plan
    with another number.
    """
    window = run_window(model, settings)
    if settings.context_window == window:
        return settings
    return replace(settings, context_window=window)
