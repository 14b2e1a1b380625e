"""A model that replays a scenario file: for tests and the offline demo, no network.

Scenario format (JSON)::

    {
      "name": "demo",                 # free text
      "model": "scripted-1",          # model id written into each message (default scripted-1)
      "provider": "scripted",         # provider written into each message (default scripted)
      "prompt": "Build ...",          # optional: the user message a demo starts with
      "context_window": 24000,        # optional: the window the model claims (None if absent)
      "overflow_above": 20000,        # optional: ContextOverflow whenever the prompt estimate
                                      # exceeds this many tokens (simulates a small real window)
      "turns": [                      # one turn per complete() call, in order
        {
          "text": "Let me look.",     # optional visible reply
          "thinking": "...",          # optional thinking (unsigned: no thinkingSignature)
          "tool_calls": [             # optional; ids are generated: call_<turn>_<n>
            {"name": "read", "arguments": {"path": "a.py"}, "expect_error": false}
          ],
          "stop": "length",           # optional stopReason override (default: toolUse when
                                      # there are tool calls, else stop)
          "fail": null                # optional: overflow | timeout | abort | error |
                                      # overloaded | rate_limit | auth
        }
      ]
    }

``<turn>`` is the 0-based index of the turn in ``turns`` and ``<n>`` the 0-based index of the call
in the turn, so ids are deterministic and unique within one replay. ``expect_error`` is ignored
by the model; it tells a scenario checker that the tool is expected to fail (say, a test run
that finds the bug the next turns fix).

Failure injection: a turn with ``fail`` raises the matching :class:`~agent.models.ModelError`
the first time it is played and does not advance; the next call plays the same turn normally,
as a retry would. "abort" raises :class:`~agent.models.ModelAborted` whose partial message
holds the first half of the turn's text. ``overflow_above`` is checked before every turn and
raises :class:`~agent.models.ContextOverflow` as often as the prompt is too big, without
advancing. An ``abort`` event set before or during a call (the reply is streamed as
``text_delta`` events in small chunks, so a callback can set it) raises ModelAborted with
the text produced so far.

Usage comes from the token estimator: ``input`` is the estimate of the request's messages
plus its tools and system prompt, ``output`` the estimate of the produced message; the cost
is 0. When the turns run out every call returns the text "(scenario finished)" with
stopReason "stop".
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    RateLimited,
    assistant_message,
    make_usage,
)
from agent.tokens import Estimator

API = "scripted"
DEFAULT_MODEL = "scripted-1"
FINISHED_TEXT = "(scenario finished)"
FAILURES = ("overflow", "timeout", "abort", "error", "overloaded", "rate_limit", "auth")
STOPS = ("stop", "length", "toolUse", "error")
CHUNK_CHARS = 24
"""Size of the text pieces a reply is streamed in."""

_TOP_KEYS = frozenset(
    {
        "name",
        "model",
        "provider",
        "prompt",
        "context_window",
        "overflow_above",
        "turns",
        "description",
    }
)
_TURN_KEYS = frozenset({"text", "thinking", "tool_calls", "stop", "fail", "note"})
_CALL_KEYS = frozenset({"name", "arguments", "expect_error"})


class ScenarioError(ValueError):
    """A scenario file that does not follow the format."""


class ScriptedModel:
    """Replays a scenario; see the module docstring for the format and failure injection."""

    api = API

    def __init__(
        self,
        scenario: dict[str, Any],
        *,
        estimator: Estimator | None = None,
        context_window: int | None = None,
        overflow_above: int | None = None,
        clock: Callable[[], float] = time.time,
        call_id_prefix: str = "call_",
    ) -> None:
        validate_scenario(scenario)
        self.scenario = scenario
        self.call_id_prefix = call_id_prefix
        """Call ids are `<prefix><turn>_<n>`: give a scenario replayed after another one in
        the same session its own prefix, since call ids must be unique in a history."""
        self.name: str = scenario.get("name", "")
        self.model_id: str = scenario.get("model", DEFAULT_MODEL)
        self.provider: str = scenario.get("provider", "scripted")
        self.prompt: str | None = scenario.get("prompt")
        self.turns: list[dict[str, Any]] = scenario["turns"]
        self.context_window = (
            context_window if context_window is not None else scenario.get("context_window")
        )
        self.overflow_above = (
            overflow_above if overflow_above is not None else scenario.get("overflow_above")
        )
        self.estimator = estimator or Estimator()
        self.clock = clock
        self.turn = 0
        """Index of the next turn to play; set it to resume a replay part way."""
        self.calls = 0
        """How many times complete() was called."""
        self.last_request: ModelRequest | None = None
        self._failed: set[int] = set()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedModel:
        text = Path(path).read_text(encoding="utf-8")
        try:
            scenario = json.loads(text)
        except ValueError as exc:
            raise ScenarioError(f"{path}: not valid JSON: {exc}") from exc
        try:
            return cls(scenario, **kwargs)
        except ScenarioError as exc:
            raise ScenarioError(f"{path}: {exc}") from exc

    @property
    def finished(self) -> bool:
        return self.turn >= len(self.turns)

    def prompt_tokens(self, request: ModelRequest) -> int:
        """The estimate used as ``usage.input`` and against ``overflow_above``."""
        est = self.estimator
        tokens = est.estimate_messages(request.messages)
        if request.tools:
            tokens += est.count_text(json.dumps(request.tools, separators=(",", ":")))
        if request.system:
            tokens += est.count_text(request.system)
        return tokens

    def complete(
        self,
        request: ModelRequest,
        *,
        on_event: EventSink | None = None,
        abort: threading.Event | None = None,
    ) -> AssistantMessage:
        self.calls += 1
        self.last_request = request
        index = self.turn
        input_tokens = self.prompt_tokens(request)

        def message(
            content: list[dict[str, Any]], stop: str, error: str | None = None
        ) -> AssistantMessage:
            output = self.estimator.estimate_message({"role": "assistant", "content": content})
            return assistant_message(
                content,
                api=API,
                provider=self.provider,
                model=self.model_id,
                usage=make_usage(input_tokens, output),
                stop_reason=stop,
                timestamp=int(self.clock() * 1000),
                error_message=error,
            )

        if abort is not None and abort.is_set():
            raise ModelAborted(
                "aborted before the request was sent",
                partial=message([], "aborted", "Request was aborted"),
            )
        if self.overflow_above is not None and input_tokens > self.overflow_above:
            text = f"prompt is too long: {input_tokens} tokens > {self.overflow_above} maximum"
            raise ContextOverflow(
                text,
                partial=message([], "error", text),
                status=400,
                tokens=input_tokens,
                limit=self.overflow_above,
            )
        turn = self.turns[index] if index < len(self.turns) else {"text": FINISHED_TEXT}
        fail = turn.get("fail")
        if fail and index not in self._failed:
            self._failed.add(index)
            raise _failure(fail, turn, message)

        emit = on_event or (lambda event: None)
        emit(ModelEvent("message_start", {"model": self.model_id}))
        content: list[dict[str, Any]] = []

        def aborted() -> ModelAborted:
            return ModelAborted(
                "aborted while streaming",
                partial=message(_visible(content), "aborted", "Request was aborted"),
            )

        for kind, key in (("thinking", "thinking"), ("text", "text")):
            body = turn.get(key)
            if not body:
                continue
            block = {"type": kind, kind: ""}
            content.append(block)
            for piece in _chunks(body):
                if abort is not None and abort.is_set():
                    raise aborted()
                block[kind] += piece
                emit(ModelEvent(f"{kind}_delta", piece))
        for n, spec in enumerate(turn.get("tool_calls") or ()):
            if abort is not None and abort.is_set():
                raise aborted()
            call = {
                "type": "toolCall",
                "id": f"{self.call_id_prefix}{index}_{n}",
                "name": spec["name"],
                "arguments": json.loads(json.dumps(spec.get("arguments") or {})),
            }
            content.append(call)
            emit(ModelEvent("tool_call", call))
        if abort is not None and abort.is_set():
            raise aborted()
        has_calls = any(b["type"] == "toolCall" for b in content)
        result = message(content, turn.get("stop") or ("toolUse" if has_calls else "stop"))
        if index < len(self.turns):
            self.turn += 1
        emit(ModelEvent("message_end", result))
        return result


def _chunks(text: str) -> list[str]:
    return [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]


def _visible(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content fit to record: no blank text or thinking blocks."""
    out = []
    for block in content:
        kind = block["type"]
        if kind in ("text", "thinking") and not block[kind].strip():
            continue
        out.append(dict(block))
    return out


def _failure(
    fail: str, turn: dict[str, Any], message: Callable[..., AssistantMessage]
) -> ModelError:
    if fail == "abort":
        text = turn.get("text") or ""
        half = text[: math.ceil(len(text) / 2)]
        content = [{"type": "text", "text": half}] if half.strip() else []
        return ModelAborted(
            "aborted while streaming (scripted)",
            partial=message(content, "aborted", "Request was aborted"),
        )
    texts = {
        "overflow": "prompt is too long (scripted failure)",
        "timeout": "the model call timed out (scripted failure)",
        "error": "the model call failed (scripted failure)",
        "overloaded": "the model is overloaded (scripted failure)",
        "rate_limit": "rate limited (scripted failure)",
        "auth": "the credentials were rejected (scripted failure)",
    }
    text = texts[fail]
    partial = message([], "error", text)
    if fail == "overflow":
        return ContextOverflow(text, partial=partial, status=400)
    if fail == "timeout":
        return ModelTimeout(text, partial=partial)
    if fail == "overloaded":
        return Overloaded(text, partial=partial, status=529)
    if fail == "rate_limit":
        return RateLimited(text, partial=partial, status=429)
    if fail == "auth":
        return AuthError(text, partial=partial, status=401)
    return ModelError(text, partial=partial, status=500)


def validate_scenario(scenario: Any) -> None:
    """Raise :class:`ScenarioError` naming the first thing that breaks the format."""
    if not isinstance(scenario, dict):
        raise ScenarioError("a scenario is a JSON object")
    unknown = set(scenario) - _TOP_KEYS
    if unknown:
        raise ScenarioError(f"unknown top-level keys: {sorted(unknown)}")
    turns = scenario.get("turns")
    if not isinstance(turns, list):
        raise ScenarioError("'turns' must be a list")
    for key in ("context_window", "overflow_above"):
        value = scenario.get(key)
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ScenarioError(f"{key!r} must be a positive integer")
    for i, turn in enumerate(turns):
        _validate_turn(i, turn)


def _validate_turn(i: int, turn: Any) -> None:
    where = f"turns[{i}]"
    if not isinstance(turn, dict):
        raise ScenarioError(f"{where} must be an object")
    unknown = set(turn) - _TURN_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("text", "thinking", "note"):
        if turn.get(key) is not None and not isinstance(turn[key], str):
            raise ScenarioError(f"{where}.{key} must be a string")
    if turn.get("fail") is not None and turn["fail"] not in FAILURES:
        raise ScenarioError(f"{where}.fail must be one of {FAILURES}")
    if turn.get("stop") is not None and turn["stop"] not in STOPS:
        raise ScenarioError(f"{where}.stop must be one of {STOPS}")
    calls = turn.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ScenarioError(f"{where}.tool_calls must be a list")
    for n, call in enumerate(calls):
        at = f"{where}.tool_calls[{n}]"
        if not isinstance(call, dict) or set(call) - _CALL_KEYS:
            raise ScenarioError(f"{at} must be an object with name, arguments, expect_error")
        if not isinstance(call.get("name"), str) or not call["name"].strip():
            raise ScenarioError(f"{at}.name must be a non-empty string")
        if not isinstance(call.get("arguments", {}), dict):
            raise ScenarioError(f"{at}.arguments must be an object")
    if not (turn.get("text") or "").strip() and not calls:
        raise ScenarioError(f"{where} produces nothing: give it text or tool_calls")
