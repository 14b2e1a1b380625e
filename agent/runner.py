"""The run loop: every turn persisted as it happens, the context kept inside the window.

One `Runner.run(prompt)`:
1. appends the user prompt;
2. before each model call, routes the request (fits / truncate / compact / compact then
   truncate) from the context estimate and the prompt budget, then prunes old tool results on
   the copy it sends (the journal is never edited), and leaves out the thinking of turns
   written before the latest compaction (`agent.models.payload.drop_replayed_thinking`);
3. sends the sanitized projection; around the call runs the recovery ladder
   (`agent.overflow.OverflowLadder`): on a context overflow compact and retry (at most 3
   times), then truncate oversized tool results in the session (a new branch), then stop with
   a message that says what to do; a rung that changes nothing moves straight to the next, so
   no request is sent twice, and each rung is recorded in the session; on a timeout with the
   prompt above 65% of the window compact and retry (at most 2 times);
4. appends the assistant message when it completes (an interrupted one with stopReason
   "aborted", a failed one with "error"), then runs its tool calls one by one, appending each
   result as soon as it exists; an interrupted tool call still gets a result, so the file never
   holds a call without one. Tools run only when the reply stopped to use them (stopReason
   "toolUse", as the design says): a complete call in a reply that stopped for another reason
   (the output limit, ...) is answered with a result saying why it was not run, and the
   model is asked again;
5. repeats until the model stops calling tools.

Steering and follow-up messages (`agent.steering`): queued from any thread or process
(`Runner.steer`, `Runner.follow_up`, `agent.steering.queue_message`) and recorded in the
session, steering messages are delivered after the tool call running now (the rest of that
turn's calls are answered as skipped) or before the next request; follow-ups, one at a time,
when the run would end.

Model fallback: when the model fails with an overload, a rate limit or a server error after
its client's own retries, the runner switches to the next of `fallback_models`, records a
`model_change` entry and sends the same request again; the next run starts on the primary
model again (recording that change too).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from agent.compaction import CompactionHooks, CompactionResult, MemoryFlusher, compact
from agent.compaction.summarize import Summarizer, SummaryAborted, default_summarizer
from agent.models import (
    ContextOverflow,
    Model,
    ModelAborted,
    ModelError,
    ModelEvent,
    ModelRequest,
    ModelTimeout,
    Overloaded,
    RateLimited,
    assistant_message,
    tool_calls,
)
from agent.models.payload import drop_replayed_thinking
from agent.overflow import OverflowLadder, RungOutcome, truncate_session_tool_results
from agent.prune import limit_history_turns, prune_messages
from agent.routing import Route, decide_route
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.steering import FOLLOW_UP, STEER, MessageQueues, inbox_is_for, queue_message
from agent.tokens import ContextEstimate, Estimator, estimate_context
from agent.truncate import (
    aggregate_budget_chars,
    cuttable_tool_result_tokens,
    max_result_chars,
    oversized_tool_result_tokens,
    truncate_aggregate,
    truncate_tool_result,
    truncate_tool_results,
)
from agent.window import resolve_budget, run_settings
from journal import Context, Session, predecessors, sanitize
from journal.interrupt import Terminated
from tools import Tool, ToolResult, run_tool, tool_schemas

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful coding agent working in a workspace directory. Use the tools to read, "
    "write and edit files and to run shell commands there. Keep answers short; say what you "
    "changed and why."
)
MAX_OVERFLOW_COMPACTIONS = DEFAULT_SETTINGS.overflow_compactions
MAX_TIMEOUT_COMPACTIONS = DEFAULT_SETTINGS.timeout_compactions
TIMEOUT_COMPACT_SHARE = DEFAULT_SETTINGS.timeout_compact_share


@dataclass(frozen=True)
class RunnerEvent:
    """Something observers may want to show: turns, tools, compactions, retries."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    """How a run ended."""

    stop_reason: str
    turns: int = 0
    compactions: int = 0
    message: str = ""
    final_text: str = ""


class OverflowUnrecoverable(ModelError):
    kind = "overflow"


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}],
            "timestamp": int(time.time() * 1000)}


def tool_result_message(call: dict[str, Any], result: ToolResult) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": call.get("id"),
        "toolName": call.get("name"),
        "content": [{"type": "text", "text": result.content}],
    }
    if result.details:
        message["details"] = result.details
    message["isError"] = result.is_error
    message["timestamp"] = int(time.time() * 1000)
    return message


def _error_result(call: dict[str, Any], text: str) -> dict[str, Any]:
    return tool_result_message(call, ToolResult(text, is_error=True,
                                                details={"interrupted": True}))


def _not_run_result(call: dict[str, Any], text: str, why: str) -> dict[str, Any]:
    return tool_result_message(call, ToolResult(text, is_error=True, details={"notRun": why}))


_NOT_RUN = {
    "length": "Not run: the reply reached the output limit (max_tokens) before it finished, "
              "so this call was not executed. Send it again if it is still needed.",
}
SKIPPED_FOR_STEERING = ("Skipped: the user sent a new message while the previous tool call ran; "
                        "read it before running this call.")


def falls_back(error: ModelError) -> bool:
    """Whether a model failure moves the run to its next fallback model: an overload, a rate
    limit or a server error (5xx) that outlasted the client's own retries."""
    if isinstance(error, Overloaded | RateLimited):
        return True
    return type(error) is ModelError and error.status is not None and error.status >= 500


class Runner:
    """Runs an agent on a journal session. Collaborators are injected so tests swap them."""

    def __init__(
        self,
        session: Session,
        model: Model,
        tools: list[Tool],
        *,
        settings: ContextSettings = DEFAULT_SETTINGS,
        summarizer: Summarizer | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        workspace: str | None = None,
        on_event: Callable[[RunnerEvent], None] | None = None,
        on_model_event: Callable[[ModelEvent], None] | None = None,
        estimator: Estimator | None = None,
        max_turns: int = 200,
        compaction_hooks: CompactionHooks | None = None,
        fallback_models: Sequence[Model] = (),
    ) -> None:
        self.session = session
        self.model = model
        self.primary = model
        """The model every run starts on; `model` is the one in use (a fallback after one
        failed)."""
        self.fallback_models = list(fallback_models)
        self.queues = MessageQueues()
        self._inboxes: list[str] = [*predecessors(session.path), *session.followed,
                                    session.path]
        """Paths whose inbox folders are read: the sessions this one continues, each by the
        name it had while live, and those it was followed from (a message queued to one
        before it rotated, by an older version, or racing its rotation), and each one it has
        written to."""
        self.tools = {tool.name: tool for tool in tools}
        self.schemas = tool_schemas(tools)
        self.settings = settings = run_settings(model, settings)  # one window for the run
        self.summarizer = summarizer or default_summarizer()
        self.system_prompt = system_prompt
        self.workspace = workspace
        self.on_event = on_event
        self.on_model_event = on_model_event
        self.estimator = estimator or Estimator.from_settings(settings)
        self.max_turns = max_turns
        self.compaction_hooks = compaction_hooks
        self.compactions = 0
        self.auto_compact = True
        self._sanitized = _IncrementalSanitizer()
        self.budget = resolve_budget(model.model_id, settings)
        self._memory = MemoryFlusher(settings, workspace)

    # observers

    def _emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            try:
                self.on_event(RunnerEvent(kind, data))
            except Exception:  # an observer must never break a run
                log.exception("event observer failed on %s", kind)

    # queued messages

    def steer(self, text: str) -> str:
        """Queue a steering message; safe from any thread. Returns its id."""
        return queue_message(self.session.path, text, STEER, follow=False)

    def follow_up(self, text: str) -> str:
        """Queue a follow-up message; safe from any thread. Returns its id."""
        return queue_message(self.session.path, text, FOLLOW_UP, follow=False)

    def _ingest(self) -> None:
        """Record the messages other threads and processes left in the session's inbox."""
        self._watch_inbox()
        live = self.session.path
        self.queues.ingest(self.session, [path for path in self._inboxes
                                          if inbox_is_for(path, live)])  # emptied ones go too

    def _watch_inbox(self) -> None:
        """Read the inbox of the session written to now from here on. Called after every
        compaction too: each may rotate the session, and a message queued to its name in
        between goes to the successor live then, which a second rotation before the next
        read would otherwise leave behind."""
        if self.session.path not in self._inboxes:
            self._inboxes.append(self.session.path)

    def _deliver(self, kind: str, *, limit: int | None = None) -> int:
        delivered = 0
        for item in self.queues.pending(kind)[:limit]:
            entry_id = self.queues.deliver(self.session, item)
            delivered += 1
            self._emit("queued_delivered", queue=kind, queue_id=item.id, entry_id=entry_id,
                       text=item.text)
        return delivered

    # the loop

    def run(self, prompt: str | None, *, abort: threading.Event | None = None) -> RunResult:
        """Append `prompt` (None: continue the session as it is) and run until the model stops."""
        abort = abort or threading.Event()
        self._start_on_primary()
        if prompt is not None:
            self.session.append_message(user_message(prompt))
        self.queues.load(self.session.entries)
        turns = 0
        while turns < self.max_turns:
            turns += 1
            self._ingest()
            self._deliver(STEER)
            self._emit("turn_start", turn=turns)
            try:
                assistant = self._complete(abort)
            except OverflowUnrecoverable as e:
                return RunResult("overflow", turns, self.compactions, e.message)
            except (KeyboardInterrupt, Terminated) as e:
                assistant = assistant_message(
                    [], api="unknown", provider=self.model.provider, model=self.model.model_id,
                    stop_reason="aborted", error_message="interrupted by the user"
                    if isinstance(e, KeyboardInterrupt) else "stopped by SIGTERM")
                if isinstance(e, Terminated):  # recorded as Ctrl-C's is, then the exit 143
                    self.session.append_message(assistant)
                    raise
            entry_id = self.session.append_message(assistant)
            stop = assistant.get("stopReason")
            self._emit("turn_end", turn=turns, entry_id=entry_id, stop_reason=stop)
            calls = tool_calls(assistant)
            if stop in ("aborted", "error"):
                for call in calls:
                    self.session.append_message(_error_result(
                        call, "Not run: the assistant turn was interrupted before it finished."))
                message = assistant.get("errorMessage") or f"the model turn ended with {stop}"
                return RunResult(stop, turns, self.compactions, message)
            if calls and stop != "toolUse":
                for call in calls:
                    self.session.append_message(_not_run_result(call, _NOT_RUN.get(
                        str(stop), f"Not run: the reply ended with stopReason {stop!r}, not "
                        "toolUse, so this call was not executed."), str(stop)))
                continue
            if not calls:
                self._ingest()
                if self.queues.pending(STEER) or self._deliver(FOLLOW_UP, limit=1):
                    continue
                return RunResult("stop", turns, self.compactions,
                                 final_text=_text_of(assistant))
            if not self._run_tools(calls, abort):
                return RunResult("aborted", turns, self.compactions,
                                 "interrupted while a tool was running")
        return RunResult("max_turns", turns, self.compactions,
                         f"stopped after {self.max_turns} model turns")

    def _run_tools(self, calls: list[dict[str, Any]], abort: threading.Event) -> bool:
        for index, call in enumerate(calls):
            if abort.is_set():
                self._interrupt_rest(calls[index:], "Not run: the user interrupted the agent.")
                return False
            self._emit("tool_start", name=call.get("name"), call_id=call.get("id"),
                       arguments=call.get("arguments"))
            try:
                result = run_tool(self.tools, str(call.get("name")), call.get("arguments"))
            except KeyboardInterrupt:
                self._interrupt_rest(calls[index:], "Interrupted by the user while running.")
                return False
            except Terminated:  # every call answered, as after Ctrl-C, then the exit 143
                self._interrupt_rest(calls[index:], "Stopped by SIGTERM while running.")
                raise
            except Exception as e:  # a bug in a tool: its call still gets a result
                log.exception("tool %s raised", call.get("name"))
                result = ToolResult(f"{call.get('name')}: the tool failed: {e!r}",
                                    is_error=True)
            message = tool_result_message(call, result)
            message, _ = truncate_tool_result(
                message, max_result_chars(self.budget.window, self.settings), self.settings)
            self.session.append_message(message)
            self._emit("tool_end", name=call.get("name"), call_id=call.get("id"),
                       is_error=result.is_error, chars=len(result.content))
            self._ingest()
            if self.queues.pending(STEER):  # delivered before the next request
                for rest in calls[index + 1:]:
                    self.session.append_message(
                        _not_run_result(rest, SKIPPED_FOR_STEERING, "steering"))
                break
        return True

    def _interrupt_rest(self, calls: list[dict[str, Any]], text: str) -> None:
        for call in calls:
            self.session.append_message(_error_result(call, text))

    # one model call with routing and recovery

    def _complete(self, abort: threading.Event) -> dict[str, Any]:
        ladder = OverflowLadder(self.session, self.settings, compact=self._overflow_compact,
                                truncate=self._overflow_truncate)
        timeout_compactions = 0
        while True:
            compactions = self.compactions
            request = self._request()
            if ladder.repeats(request):  # the last rung changed nothing the model would see
                if ladder.gave_up:
                    raise OverflowUnrecoverable(ladder.advice())
                continue
            try:
                return self._call_model(request, abort)
            except ContextOverflow as e:
                if ladder.overflowed(request, e.message, self.compactions > compactions):
                    continue
                raise OverflowUnrecoverable(ladder.advice(), status=e.status) from e
            except ModelTimeout as e:
                share = self._estimate() / self.budget.window
                if (share > self.settings.timeout_compact_share
                        and timeout_compactions < self.settings.timeout_compactions):
                    timeout_compactions += 1
                    self._compact("timeout", will_retry=True)
                    continue
                return self._failed_turn(e, "error")
            except ModelAborted as e:
                return self._failed_turn(e, "aborted")
            except ModelError as e:
                return self._failed_turn(e, "error")

    def _call_model(self, request: ModelRequest, abort: threading.Event) -> dict[str, Any]:
        """One model call; on a failure that `falls_back`, the same request to the next
        fallback model, until one answers or none is left."""
        while True:
            try:
                return self.model.complete(request, on_event=self.on_model_event, abort=abort)
            except ModelError as e:
                chain = [self.primary, *self.fallback_models]
                at = next((i for i, m in enumerate(chain) if m is self.model), len(chain))
                if not falls_back(e) or abort.is_set() or at + 1 >= len(chain):
                    raise
                self._switch_model(chain[at + 1], f"{e.kind}: {e.message}")

    def _switch_model(self, model: Model, reason: str) -> None:
        previous = self.model
        self.model = model
        entry_id = self.session.append_model_change(model.provider, model.model_id)
        self._emit("model_change", provider=model.provider, model=model.model_id,
                   previous=previous.model_id, reason=reason, entry_id=entry_id)

    def _start_on_primary(self) -> None:
        """A run starts on the primary model, recording the change back from a fallback
        (also one a previous process switched to, as the session says)."""
        primary = self.primary
        if self.model is not primary:
            self._switch_model(primary, "a new run starts on the primary model")
            return
        recorded = self.session.live_context().model
        if recorded and (recorded.get("provider"), recorded.get("modelId")) != (
                primary.provider, primary.model_id) and self.fallback_models and any(
                (m.provider, m.model_id) == (recorded.get("provider"), recorded.get("modelId"))
                for m in self.fallback_models):
            self._switch_model(primary, "a new run starts on the primary model")

    def _overflow_compact(self) -> RungOutcome:
        result = self._compact("overflow", will_retry=True)
        if result is None:
            return RungOutcome(False, "nothing to compact")
        return RungOutcome(True, "compacted",
                           f"{result.tokens_before:,} -> {result.tokens_after:,} tokens",
                           {"tokensBefore": result.tokens_before,
                            "tokensAfter": result.tokens_after, "entryId": result.entry_id})

    def _overflow_truncate(self) -> RungOutcome:
        budget = aggregate_budget_chars(self.session.live_context().messages,
                                        self.budget.window, self.settings)
        report = truncate_session_tool_results(self.session, self.budget.window, self.settings,
                                               budget_chars=budget)
        self._emit("session_truncated", report=report)
        if not report.changed:
            return RungOutcome(False, "nothing to truncate")
        return RungOutcome(True, "truncated",
                           f"{report.truncated} tool result(s), {report.chars_cut:,} chars",
                           {"truncated": report.truncated, "charsCut": report.chars_cut})

    def _failed_turn(self, error: ModelError, stop: str) -> dict[str, Any]:
        partial = error.partial
        if partial is not None:
            message = dict(partial)
            message["stopReason"] = stop
            message.setdefault("errorMessage", error.message)
            return message
        return assistant_message([], api="unknown", provider=self.model.provider,
                                 model=self.model.model_id, stop_reason=stop,
                                 error_message=error.message)

    def current_tokens(self) -> int:
        """The estimated size of the context the next request would carry."""
        return self._estimate()

    def _estimate(self) -> int:
        return self._estimate_of(self.session.live_context()).tokens

    def _estimate_of(self, context: Context) -> ContextEstimate:
        return estimate_context(context.messages, self.estimator, context.entry_ids,
                                safety_margin=self.settings.estimate_safety_margin,
                                usage_from=context.fresh_from)

    def _request(self) -> ModelRequest:
        """Route, then build what is sent: sanitized, pruned, truncated copies."""
        raw = self.session.live_context()
        estimate = self._estimate_of(raw)
        self._memory.before_request(raw.messages, raw.compaction_id, estimate.tokens,
                                    self.budget.window, self.session.session_id)
        # the two tool-result sizes only matter over budget: skip their walk of the context
        over = estimate.tokens > self.budget.prompt
        decision = decide_route(
            estimate, self.budget.prompt,
            cuttable_tool_result_tokens(raw.messages, self.settings) if over else 0,
            oversized_tool_result_tokens(raw.messages, self.budget.window, self.settings)
            if over else 0,
        )
        wants_compaction = decision.route in (Route.COMPACT_ONLY, Route.COMPACT_THEN_TRUNCATE)
        if wants_compaction and self.auto_compact:
            if self._compact("threshold", will_retry=False) is not None:
                raw = self.session.live_context()
                estimate = self._estimate_of(raw)
        sendable = drop_replayed_thinking(raw.messages, raw.fresh_from)
        if sendable is not raw.messages:
            raw = dataclasses.replace(raw, messages=cast(list[dict[str, Any]], sendable))
        sanitized = limit_history_turns(self._sanitized(raw), self.settings.history_turn_limit)
        messages, _ = prune_messages(sanitized, self.budget.window, estimate,
                                     self.settings, self.estimator)
        if decision.route != Route.FITS:
            messages, _ = truncate_tool_results(messages, self.budget.window, self.settings)
            chars = aggregate_budget_chars(messages, self.budget.window, self.settings)
            excess = estimate.tokens - self.budget.prompt
            if excess > 0:
                chars = min(chars, _result_chars(messages) - excess * self.settings.chars_per_token)
            messages, _ = truncate_aggregate(messages, max(0, chars), self.settings)
        if messages is raw.messages:
            messages = list(messages)  # the request must not share the session's live list
        return ModelRequest(
            messages=messages,
            tools=self.schemas,
            system=self.system_prompt,
            max_tokens=min(self.budget.reserve, 8192),
            thinking_level=raw.thinking_level or "off",
        )

    def compact_now(self, focus: str | None = None) -> CompactionResult | None:
        """A compaction the user asked for (`/compact [focus]`)."""
        return self._compact("manual", will_retry=False, focus=focus)

    def _compact(self, reason: str, *, will_retry: bool, focus: str | None = None,
                 ) -> CompactionResult | None:
        before = self._estimate()
        self._emit("compaction_start", reason=reason, tokens_before=before)
        try:
            result = compact(self.session, self.summarizer, self.settings,
                             estimator=self.estimator, focus=focus, reason=reason,
                             hooks=self.compaction_hooks, workspace=self.workspace,
                             flush=not self._memory.flushed(
                                 self.session.live_context().compaction_id))
        except SummaryAborted:
            result = None
        after = self._estimate()
        self._watch_inbox()
        if result is not None:
            self.compactions += 1
            self.queues.carry(self.session)
        self._emit("compaction_end", reason=reason, tokens_before=before, tokens_after=after,
                   will_retry=will_retry, compacted=result is not None,
                   session=self.session.path)
        return result


class _IncrementalSanitizer:
    """`journal.sanitize` of the raw context, re-checking only what was appended since.

    A full `sanitize` walks the whole history, so running it before every request made each
    turn cost more as the session grew. A valid history comes back from `sanitize` unchanged,
    and a valid history stays valid when what follows its last non-result message passes
    `sanitize` unchanged on its own and uses no tool call id seen before that message (no run
    of results crosses that message). So while the context only grows (same latest
    compaction, the entry last checked still at its place) just that tail is sanitized;
    anything else (a compaction, another branch, a history that needed fixing) takes the
    full pass.
    """

    def __init__(self) -> None:
        self._key: tuple[str | None, int, str] | None = None
        """(compaction id, length, id of the last entry) of the history last found valid."""
        self._mark = 0
        """Index of its last message that is not a tool result."""
        self._ids: set[str] = set()
        """Tool call ids of the messages before `_mark`."""

    def __call__(self, raw: Context) -> list[dict[str, Any]]:
        messages, ids = raw.messages, raw.entry_ids
        key = self._key
        if (key is not None and key[0] == raw.compaction_id and len(ids) == len(messages)
                and len(messages) >= key[1] and ids[key[1] - 1] == key[2]):
            tail = messages[self._mark:]
            _, report = sanitize(tail)
            if not report.changed and self._ids.isdisjoint(_call_ids(tail)):
                self._remember(raw)
                return messages
        self._key, self._mark, self._ids = None, 0, set()
        out, report = sanitize(messages)
        if not report.changed:
            self._remember(raw)
        return out

    def _remember(self, raw: Context) -> None:
        messages, ids = raw.messages, raw.entry_ids
        if not messages or len(ids) != len(messages) or not isinstance(ids[-1], str):
            self._key = None
            return
        mark = len(messages) - 1
        while mark > 0 and _role(messages[mark]) == "toolResult":
            mark -= 1
        self._ids.update(_call_ids(messages[self._mark:mark]))
        self._key, self._mark = (raw.compaction_id, len(messages), ids[-1]), mark


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _call_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [b["id"] for m in messages if _role(m) == "assistant"
            for b in m.get("content") or () if isinstance(b, dict)
            and b.get("type") == "toolCall" and isinstance(b.get("id"), str)]


def _result_chars(messages: Sequence[Mapping[str, Any]]) -> int:
    total = 0
    for m in messages:
        if m.get("role") == "toolResult":
            for block in m.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "text":
                    total += len(block.get("text", ""))
    return total


def _text_of(message: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in message.get("content") or []
                   if isinstance(b, dict) and b.get("type") == "text")
