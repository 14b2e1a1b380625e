"""A :class:`~agent.models.Model` on the Anthropic Messages API, streamed through the SDK.

The request body comes from :mod:`agent.models.payload`. The reply is read as raw stream
events (``messages.create(stream=True)``) and assembled into a pi assistant message.

Errors: the SDK retries 408, 409, 429, 5xx (529 included) and connection failures
``max_retries`` times, honouring ``retry-after``/``retry-after-ms``, before anything surfaces
here. Then :func:`agent.models.errors.classify` (the classifier the summarizer uses too) names
the failure and it is raised as: :class:`ContextOverflow` for a request that does not fit
(413, ``request_too_large``, or a bad request whose message says the prompt is too long or
exceeds the context limit), :class:`Overloaded`, :class:`RateLimited` (with ``retry_after``),
:class:`AuthError` (401/403 or missing credentials), :class:`ModelTimeout`, and
:class:`ModelError` for anything else the SDK or the transport raises. An error event in the
middle of a stream is classified the same way by its ``error.type`` (it is not retried: part
of the reply was already read).

Abort: the ``abort`` event is checked before the request and between stream events, and a
watcher thread closes the HTTP response as soon as it is set, so a stalled stream stops too.
The SDK's own wait between retries is not interrupted. An aborted call raises
:class:`ModelAborted` whose ``partial`` holds the finished blocks plus the text and thinking
streamed so far, with stopReason "aborted".

Other outcomes are returned, not raised: ``refusal`` gives stopReason "error" with an
``errorMessage``; ``max_tokens`` and ``model_context_window_exceeded`` give "length". A tool
call whose streamed arguments are not valid JSON (a reply cut off by max_tokens) is left out,
since running it with half its arguments could do harm; a "toolUse" reply left with no calls
becomes "error".
"""

from __future__ import annotations

import json
import threading
from typing import Any

import anthropic

import journal
from agent.models.base import (
    AssistantMessage,
    AuthError,
    ContextOverflow,
    EventSink,
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
)
from agent.models.errors import Failure, classify
from agent.models.payload import API, build_params

PROVIDER = "anthropic"
DEFAULT_MODEL = "claude-sonnet-4-6"

Prices = tuple[tuple[str, Price], ...]
"""Dollars per million tokens by model id prefix, first match wins; unknown models cost 0."""


def default_prices() -> Prices:
    """The project's one price table (journal's data file, or the file ``$JOURNAL_PRICES``
    names), longest prefix first so that the first match is the most specific. Read on
    each call, so a changed environment is seen; a model reads it once, when made."""
    table = journal.load_prices()
    return tuple((m.prefix, Price(m.input, m.output, m.cache_read, m.cache_write))
                 for m in sorted(table.models, key=lambda m: -len(m.prefix)))

AUTH_HINT = (
    "Set ANTHROPIC_API_KEY to a valid Anthropic API key (or pass api_key=... or client=... "
    "to AnthropicModel)."
)

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "toolUse",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "error",
}
_ABORT_POLL_SECONDS = 0.05


def price_for(model_id: str, prices: Prices | None = None) -> Price | None:
    """The price of ``model_id``: the first prefix it starts with in ``prices`` (default:
    :func:`default_prices`), ids of gateways (``anthropic/claude-sonnet-4.5``) matched as
    journal matches them."""
    key = journal.canonical_model(model_id)
    for prefix, price in prices if prices is not None else default_prices():
        if key.startswith(prefix) or model_id.startswith(prefix):
            return price
    return None


class AnthropicModel:
    """Claude through the official SDK; see the module docstring for errors and abort."""

    provider = PROVIDER
    api = API

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL,
        *,
        client: anthropic.Anthropic | None = None,
        api_key: str | None = None,
        max_retries: int = 4,
        timeout: float = 600.0,
        context_window: int | None = None,
        prices: Prices | None = None,
        prompt_cache: bool = True,
        thinking_budgets: dict[str, int] | None = None,
    ) -> None:
        self.model_id = model_id
        self.context_window = context_window
        if client is None:
            try:
                client = anthropic.Anthropic(
                    api_key=api_key, max_retries=max_retries, timeout=timeout
                )
            except anthropic.CredentialsError as exc:
                raise AuthError(f"no usable Anthropic credentials ({exc}). {AUTH_HINT}") from exc
        self.client = client
        self.price = price_for(model_id, prices)
        self.prompt_cache = prompt_cache
        self.thinking_budgets = thinking_budgets

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments sent to ``messages.create`` for ``request``."""
        return build_params(
            request,
            self.model_id,
            prompt_cache=self.prompt_cache,
            thinking_budgets=self.thinking_budgets,
        )

    def complete(
        self,
        request: ModelRequest,
        *,
        on_event: EventSink | None = None,
        abort: threading.Event | None = None,
    ) -> AssistantMessage:
        turn = _Turn(self.model_id, self.price, on_event)
        if abort is not None and abort.is_set():
            raise ModelAborted("aborted before the request was sent", partial=turn.partial(True))
        params = self.request_params(request)
        try:
            stream = self.client.messages.create(**params, stream=True)
        except Exception as exc:
            mapped = _as_model_error(exc, turn, abort)
            if mapped is None:
                raise
            raise mapped from exc
        watcher = _AbortWatcher(abort, stream) if abort is not None else None
        try:
            if abort is not None and abort.is_set():
                raise ModelAborted("aborted before the reply arrived", partial=turn.partial(True))
            for event in stream:
                if abort is not None and abort.is_set():
                    break
                turn.feed(event)
            if not turn.finished and abort is not None and abort.is_set():
                raise ModelAborted("aborted while streaming", partial=turn.partial(True))
            if not turn.finished:
                text = "the stream ended before message_stop"
                raise ModelError(text, partial=turn.partial(False, text), kind="connection")
        except ModelError:
            raise
        except Exception as exc:
            mapped = _as_model_error(exc, turn, abort)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            if watcher is not None:
                watcher.stop()
            stream.close()
        message = turn.final()
        turn.emit("message_end", message)
        return message


class _AbortWatcher:
    """Closes the stream when `abort` is set, so a read blocked on the network returns."""

    def __init__(self, abort: threading.Event, stream: Any) -> None:
        self._abort = abort
        self._stream = stream
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="model-abort", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            if self._abort.wait(_ABORT_POLL_SECONDS):
                if not self._done.is_set():
                    try:
                        self._stream.close()
                    except Exception:  # noqa: BLE001 - closing is best effort
                        pass
                return

    def stop(self) -> None:
        # not joined: the thread sleeps up to one poll interval before it sees `_done`, and
        # waiting for it added that to every model call; once `_done` is set it closes nothing
        self._done.set()


class _Turn:
    """Assembles stream events into a pi assistant message."""

    def __init__(self, model_id: str, price: Price | None, on_event: EventSink | None) -> None:
        self.model_id = model_id
        self.price = price
        self.on_event = on_event
        self.blocks: dict[int, dict[str, Any]] = {}
        self.closed: set[int] = set()
        self.json: dict[int, str] = {}
        self.usage = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        self.stop_reason: str | None = None
        self.finished = False

    def emit(self, kind: str, data: Any) -> None:
        if self.on_event is not None:
            self.on_event(ModelEvent(kind, data))

    def feed(self, event: Any) -> None:
        kind = event.type
        if kind == "message_start":
            self._usage(event.message.usage)
            self.emit("message_start", {"model": self.model_id})
        elif kind == "content_block_start":
            self._start(event.index, event.content_block)
        elif kind == "content_block_delta":
            self._delta(event.index, event.delta)
        elif kind == "content_block_stop":
            self._stop(event.index)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._usage(event.usage)
        elif kind == "message_stop":
            self.finished = True

    def _usage(self, usage: Any) -> None:
        if usage is None:
            return
        for key, attr in (
            ("input", "input_tokens"),
            ("output", "output_tokens"),
            ("cacheRead", "cache_read_input_tokens"),
            ("cacheWrite", "cache_creation_input_tokens"),
        ):
            value = getattr(usage, attr, None)
            if value is not None:
                self.usage[key] = int(value)

    def _start(self, index: int, block: Any) -> None:
        kind = block.type
        if kind == "text":
            self.blocks[index] = {"type": "text", "text": block.text or ""}
        elif kind == "thinking":
            self.blocks[index] = {
                "type": "thinking",
                "thinking": block.thinking or "",
                "thinkingSignature": block.signature or "",
            }
        elif kind == "redacted_thinking":
            self.blocks[index] = {
                "type": "thinking",
                "thinking": "[Reasoning redacted]",
                "thinkingSignature": block.data,
                "redacted": True,
            }
        elif kind == "tool_use":
            self.blocks[index] = {
                "type": "toolCall",
                "id": block.id,
                "name": block.name,
                "arguments": dict(block.input or {}),
            }
            self.json[index] = ""

    def _delta(self, index: int, delta: Any) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        kind = delta.type
        if kind == "text_delta" and block["type"] == "text":
            block["text"] += delta.text
            self.emit("text_delta", delta.text)
        elif kind == "thinking_delta" and block["type"] == "thinking":
            block["thinking"] += delta.thinking
            self.emit("thinking_delta", delta.thinking)
        elif kind == "signature_delta" and block["type"] == "thinking":
            block["thinkingSignature"] += delta.signature
        elif kind == "input_json_delta" and index in self.json:
            self.json[index] += delta.partial_json

    def _stop(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        if block["type"] == "toolCall":
            raw = self.json.pop(index, "")
            try:
                arguments = json.loads(raw) if raw.strip() else block["arguments"]
            except ValueError:
                del self.blocks[index]
                return
            if not isinstance(arguments, dict):
                del self.blocks[index]
                return
            block["arguments"] = arguments
            self.closed.add(index)
            self.emit("tool_call", block)
            return
        self.closed.add(index)

    def content(self) -> list[dict[str, Any]]:
        out = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            kind = block["type"]
            if kind == "toolCall" and index not in self.closed:
                continue  # its arguments never finished streaming
            if kind == "text" and not block["text"].strip():
                continue
            if kind == "thinking" and not block["thinkingSignature"]:
                if not block["thinking"].strip():
                    continue
                block = {"type": "thinking", "thinking": block["thinking"]}
            out.append(block)
        return out

    def message(
        self, content: list[dict[str, Any]], stop: str, error: str | None
    ) -> AssistantMessage:
        u = self.usage
        return assistant_message(
            content,
            api=API,
            provider=PROVIDER,
            model=self.model_id,
            usage=make_usage(u["input"], u["output"], u["cacheRead"], u["cacheWrite"], self.price),
            stop_reason=stop,
            error_message=error,
        )

    def partial(self, aborted: bool, error: str | None = None) -> AssistantMessage:
        stop = "aborted" if aborted else "error"
        reason = error or ("Request was aborted" if aborted else "The model call failed")
        return self.message(self.content(), stop, reason)

    def final(self) -> AssistantMessage:
        content = self.content()
        stop = _STOP_REASONS.get(self.stop_reason or "end_turn", "stop")
        error = None
        if self.stop_reason == "refusal":
            error = "The model refused to continue (stop_reason: refusal)"
        has_calls = any(b["type"] == "toolCall" for b in content)
        if stop == "toolUse" and not has_calls:
            stop, error = "error", "The reply asked for tools but no tool call was complete"
        return self.message(content, stop, error)


def _as_model_error(
    exc: Exception, turn: _Turn, abort: threading.Event | None
) -> ModelError | None:
    """The ModelError for an exception from the SDK or the transport; None for any other."""
    if abort is not None and abort.is_set():
        return ModelAborted("aborted while streaming", partial=turn.partial(True))
    failure = classify(exc)
    if failure is None:
        return None
    text, status = failure.text, failure.status
    partial = turn.partial(False, text)
    match failure.kind:
        case Failure.OVERFLOW:
            return ContextOverflow(
                f"the prompt is too large for the model ({text})",
                partial=partial,
                status=status,
                tokens=failure.tokens,
                limit=failure.limit,
            )
        case Failure.AUTH if status is None:
            message = f"no usable Anthropic credentials were found ({text}). {AUTH_HINT}"
            return AuthError(message, partial=turn.partial(False, message))
        case Failure.AUTH:
            message = f"Anthropic rejected the credentials ({text}). {AUTH_HINT}"
            return AuthError(message, partial=turn.partial(False, message), status=status)
        case Failure.OVERLOADED:
            return Overloaded(f"the model is overloaded ({text})", partial=partial, status=status)
        case Failure.RATE_LIMIT:
            return RateLimited(
                f"rate limited ({text})",
                partial=partial,
                status=status,
                retry_after=failure.retry_after,
            )
        case Failure.TIMEOUT:
            message = f"the model call timed out ({text})"
            return ModelTimeout(message, partial=partial, status=status)
        case Failure.CONNECTION:
            message = f"could not reach the model: {text}"
            return ModelError(message, partial=partial, kind="connection")
        case Failure.OTHER:
            return ModelError(f"the model call failed: {text}", partial=partial)
    return ModelError(
        f"the model call failed ({text})",
        partial=partial,
        status=status,
        kind=failure.error_type or "api_error",
    )
