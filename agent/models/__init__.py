"""agent.models: the interface every model speaks to the run loop, and its implementations.

- `base`: the `Model` protocol, `ModelRequest`, `ModelEvent`, the `ModelError` family and the
  helpers that build pi assistant messages (the bottom of the package: it imports none of the
  others);
- `payload`: pi-shaped messages to an Anthropic Messages API request body (pure functions);
- `errors`: the one classifier of Anthropic API errors, shared by the model and the summarizer;
- `anthropic`: `AnthropicModel`, Claude through the SDK;
- `scripted`: `ScriptedModel`, which replays a scenario file (tests and the offline demo).

`AnthropicModel` is imported on first use, so `import agent.models` does not load the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.models.base import (
    EVENT_KINDS,
    STOP_REASONS,
    THINKING_LEVELS,
    AssistantMessage,
    AuthError,
    ContextOverflow,
    EventSink,
    Model,
    ModelAborted,
    ModelError,
    ModelEvent,
    ModelRequest,
    ModelTimeout,
    Overloaded,
    Price,
    RateLimited,
    assistant_message,
    make_usage,
    now_ms,
    tool_calls,
)
from agent.models.payload import build_params, to_api_messages
from agent.models.scripted import ScenarioError, ScriptedModel, validate_scenario

if TYPE_CHECKING:
    from agent.models.anthropic import AnthropicModel

__all__ = [
    "EVENT_KINDS",
    "STOP_REASONS",
    "THINKING_LEVELS",
    "AnthropicModel",
    "AssistantMessage",
    "AuthError",
    "ContextOverflow",
    "EventSink",
    "Model",
    "ModelAborted",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelTimeout",
    "Overloaded",
    "Price",
    "RateLimited",
    "ScenarioError",
    "ScriptedModel",
    "assistant_message",
    "build_params",
    "make_usage",
    "now_ms",
    "to_api_messages",
    "tool_calls",
    "validate_scenario",
]


def __getattr__(name: str) -> Any:
    """`AnthropicModel` on first use: its module imports the Anthropic SDK, which is slow."""
    if name == "AnthropicModel":
        from agent.models.anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
