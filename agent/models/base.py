"""The one interface every model speaks to the run loop, and the errors it raises.

A model takes a :class:`ModelRequest` (pi-shaped messages that already went through
``journal.sanitize``, Anthropic-style tool schemas, a system prompt, an output budget and a
thinking level) and returns one pi assistant message dict, the same shape pi writes::

    {"role": "assistant", "content": [...], "api": ..., "provider": ..., "model": ...,
     "usage": {"input", "output", "cacheRead", "cacheWrite", "totalTokens",
               "cost": {"input", "output", "cacheRead", "cacheWrite", "total"}},
     "stopReason": "stop" | "length" | "toolUse" | "error" | "aborted",
     "timestamp": <ms>}          # plus "errorMessage" when stopReason is error or aborted

Content blocks are ``{"type": "text", "text"}``, ``{"type": "thinking", "thinking",
"thinkingSignature"}`` (a redacted block is a thinking block with ``"redacted": true`` and its
opaque data in ``thinkingSignature``, as pi stores it) and ``{"type": "toolCall", "id", "name",
"arguments"}``.

Failures raise a :class:`ModelError` subclass. Every error raised by the models here carries
``partial``: a complete assistant message holding what had been produced before the failure,
with ``stopReason`` "aborted" (for :class:`ModelAborted`) or "error", ready to be recorded in
the journal so the log shows the interrupted turn.

Progress is reported through the optional ``on_event`` callback as :class:`ModelEvent` values:
``message_start`` (data: ``{"model": id}``), ``text_delta`` and ``thinking_delta`` (data: the new
text), ``tool_call`` (data: the finished toolCall block), ``message_end`` (data: the final
message). An exception raised by the callback propagates unchanged.

This module is the bottom of :mod:`agent.models`: the implementations
(:mod:`agent.models.anthropic`, :mod:`agent.models.scripted`) import it, it imports none of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent.messages import Message

AssistantMessage = dict[str, Any]
"""What a model returns: a pi assistant message, a fresh dict the caller owns (and may edit)."""

THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")
STOP_REASONS = ("stop", "length", "toolUse", "error", "aborted")
EVENT_KINDS = ("message_start", "text_delta", "thinking_delta", "tool_call", "message_end")


@dataclass
class ModelRequest:
    """Everything one model call needs."""

    messages: list[Message]
    """pi-shaped projection, already passed through ``journal.sanitize``."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Tool schemas ``{name, description, input_schema}``."""
    system: str = ""
    max_tokens: int = 8192
    """Budget for the visible reply; a thinking budget is added on top when thinking is on."""
    thinking_level: str = "off"
    """One of :data:`THINKING_LEVELS`; anything but "off" turns extended thinking on."""


@dataclass(frozen=True)
class ModelEvent:
    kind: str
    data: Any = None


EventSink = Callable[[ModelEvent], None]


@runtime_checkable
class Model(Protocol):
    provider: str
    model_id: str
    context_window: int | None

    def complete(
        self,
        request: ModelRequest,
        *,
        on_event: EventSink | None = None,
        abort: threading.Event | None = None,
    ) -> AssistantMessage: ...


class ModelError(Exception):
    """A model call failed. ``kind`` names the failure; ``partial`` is the turn so far."""

    kind: str = "error"
    retryable: bool = False
    """True for failures that may pass when the same request is sent again later."""

    def __init__(
        self,
        message: str,
        *,
        partial: AssistantMessage | None = None,
        status: int | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.partial = partial
        self.status = status
        if kind is not None:
            self.kind = kind


class ContextOverflow(ModelError):
    """The prompt does not fit the model's context window (or the request is too large)."""

    kind = "overflow"

    def __init__(
        self,
        message: str,
        *,
        partial: AssistantMessage | None = None,
        status: int | None = None,
        tokens: int | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(message, partial=partial, status=status)
        self.tokens = tokens
        """The size the provider counted against the window (the prompt, plus the output
        budget when its message adds them), when its message says so."""
        self.limit = limit
        """The window the provider reported, when its message says so."""


class Overloaded(ModelError):
    """The provider is overloaded (HTTP 529); raised after the client's own retries."""

    kind = "overloaded"
    retryable = True


class RateLimited(ModelError):
    """Too many requests (HTTP 429); raised after the client's own retries."""

    kind = "rate_limit"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        partial: AssistantMessage | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, partial=partial, status=status)
        self.retry_after = retry_after


class AuthError(ModelError):
    """The credentials are missing or were rejected (HTTP 401/403)."""

    kind = "auth"


class ModelTimeout(ModelError):
    """The request or the stream timed out."""

    kind = "timeout"
    retryable = True


class ModelAborted(ModelError):
    """The abort event was set; ``partial`` has stopReason "aborted"."""

    kind = "aborted"


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


def now_ms() -> int:
    return int(time.time() * 1000)


def make_usage(
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read: int = 0,
    cache_write: int = 0,
    price: Price | None = None,
) -> dict[str, Any]:
    """pi's usage record; cost is 0 when the price is unknown."""
    p = price or Price(0.0, 0.0, 0.0, 0.0)
    cost = {
        "input": input_tokens * p.input / 1_000_000,
        "output": output_tokens * p.output / 1_000_000,
        "cacheRead": cache_read * p.cache_read / 1_000_000,
        "cacheWrite": cache_write * p.cache_write / 1_000_000,
    }
    cost["total"] = sum(cost.values())
    return {
        "input": input_tokens,
        "output": output_tokens,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": input_tokens + output_tokens + cache_read + cache_write,
        "cost": cost,
    }


def assistant_message(
    content: list[dict[str, Any]],
    *,
    api: str,
    provider: str,
    model: str,
    usage: dict[str, Any] | None = None,
    stop_reason: str = "stop",
    timestamp: int | None = None,
    error_message: str | None = None,
) -> AssistantMessage:
    """An assistant message with pi's keys in pi's order."""
    message: AssistantMessage = {
        "role": "assistant",
        "content": content,
        "api": api,
        "provider": provider,
        "model": model,
        "usage": usage if usage is not None else make_usage(),
        "stopReason": stop_reason,
        "timestamp": now_ms() if timestamp is None else timestamp,
    }
    if error_message is not None:
        message["errorMessage"] = error_message
    return message


def tool_calls(message: AssistantMessage) -> list[dict[str, Any]]:
    """The toolCall blocks of an assistant message."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "toolCall"]


__all__ = [
    "EVENT_KINDS",
    "STOP_REASONS",
    "THINKING_LEVELS",
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
    "assistant_message",
    "make_usage",
    "now_ms",
    "tool_calls",
]
