"""Compaction: summarize the older part of the active branch into a `compaction` entry.

Nothing is deleted: the summary is appended to the journal with the id of the first entry kept
verbatim, and the projection (see `journal.build_context`) then shows the summary followed by
the kept entries. Four steps, each usable alone:

1. **prepare** (`prepare_compaction`, in `agent.compaction.cutpoint`): find the cut point on
   the active branch and collect what to summarize, starting at the previous compaction's kept
   boundary (its `firstKeptEntryId`): the messages kept verbatim last time are summarized this
   time, together with the previous summary, so nothing falls between two summaries.
2. **summarize** (`summarize_messages`, in `agent.compaction.staged`): chunked, staged and
   merged calls to a `Summarizer`, with retries and three levels of fallback.
3. **record** (`record_compaction`, here): the summary, plus the tool failures and the
   cumulative lists of files read and modified, through `Session.append_compaction`.
4. `compact` (here) runs the three, with hooks and the optional memory flush around them.

`agent.compaction` (the package) exports these together with the names of its other modules.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.compaction.cutpoint import (
    CompactionPreparation,
    estimate_branch_context,
    prepare_compaction,
)
from agent.compaction.facts import (
    extract_facts,
    extract_identifiers,
    message_identifiers,
    tool_failures,
)
from agent.compaction.staged import (
    FallbackLevel,
    SummaryOutcome,
    drop_oldest_history,
    summarize_messages,
    summary_max_tokens,
)
from agent.compaction.summarize import Summarizer, SummaryAborted
from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.tokens import Estimator
from agent.window import prompt_budget
from journal import Session

__all__ = [
    "AGENTS_HEADING",
    "SPLIT_TURN_HEADING",
    "agents_rules",
    "TURN_PREFIX_INSTRUCTIONS",
    "CompactionHooks",
    "CompactionResult",
    "MemoryFlusher",
    "compact",
    "compose_summary",
    "file_lists_section",
    "flush_memory",
    "memory_file",
    "missing_identifiers_section",
    "preserved_identifiers",
    "record_compaction",
    "run_hook",
    "tool_failures_section",
]

log = logging.getLogger(__name__)

_FAILED_STOPS = frozenset({"error", "aborted"})

SPLIT_TURN_HEADING = "**Turn context (split turn):**"

TURN_PREFIX_INSTRUCTIONS = (
    "These messages are the first part of a turn that was too long to keep whole; its later "
    "part stays in the conversation verbatim, right after this summary. Say what the user "
    "asked for in this turn, what was done and decided so far, and what the agent needs to "
    "know to understand the part that is kept. Be brief."
)


# ---------------------------------------------------------------------------------------
# record


def missing_identifiers_section(summary: str, identifiers: Sequence[str]) -> str:
    """A section listing the identifiers `summary` does not contain verbatim ('' if none)."""
    missing = [i for i in identifiers if i not in summary]
    if not missing:
        return ""
    return "\n\n## Exact identifiers\n" + "\n".join(f"- {i}" for i in missing)


def tool_failures_section(
    messages: Sequence[Message], settings: ContextSettings = DEFAULT_SETTINGS
) -> str:
    """Up to `max_tool_failures` failed tool calls, one short line each ('' if none)."""
    failures = tool_failures(messages, settings.tool_failure_chars)
    if not failures:
        return ""
    limit = settings.max_tool_failures
    lines = [f"- {f}" for f in failures[:limit]]
    if len(failures) > limit:
        lines.append(f"- ...and {len(failures) - limit} more")
    return "\n\n## Tool failures\n" + "\n".join(lines)


def file_lists_section(read_files: Sequence[str], modified_files: Sequence[str]) -> str:
    """pi's `<read-files>` and `<modified-files>` blocks ('' if both are empty)."""
    parts = []
    if read_files:
        parts.append("<read-files>\n" + "\n".join(read_files) + "\n</read-files>")
    if modified_files:
        parts.append("<modified-files>\n" + "\n".join(modified_files) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(parts) if parts else ""


def preserved_identifiers(
    preparation: CompactionPreparation, settings: ContextSettings = DEFAULT_SETTINGS
) -> list[str]:
    """The identifiers a summary must name: newest first from the summarized messages, then
    those of the previous summary, at most `max_preserved_identifiers`."""
    limit = settings.max_preserved_identifiers
    found = message_identifiers(reversed(preparation.all_messages), limit)
    if preparation.previous_summary and len(found) < limit:
        found += [i for i in extract_identifiers(preparation.previous_summary) if i not in found]
    return found[:limit]


def compose_summary(
    preparation: CompactionPreparation,
    history: str,
    turn_prefix: str | None,
    settings: ContextSettings = DEFAULT_SETTINGS,
) -> str:
    """The text recorded: summaries, missing identifiers, tool failures and file lists."""
    text = history
    if turn_prefix:
        text += f"\n\n---\n\n{SPLIT_TURN_HEADING}\n\n{turn_prefix}"
    failures = tool_failures_section(preparation.all_messages, settings)
    files = file_lists_section(preparation.read_files, preparation.modified_files)
    missing = missing_identifiers_section(text + failures + files,
                                          preserved_identifiers(preparation, settings))
    return text + missing + failures + files


def record_compaction(
    session: Session,
    preparation: CompactionPreparation,
    summary: str,
    *,
    extra_details: Mapping[str, Any] | None = None,
) -> str:
    """Append the compaction entry (the session then records its model and thinking level).

    `details` carries pi's `readFiles` and `modifiedFiles` (cumulative: the next compaction
    starts from them) plus any `extra_details`.
    """
    details: dict[str, Any] = {"readFiles": list(preparation.read_files),
                               "modifiedFiles": list(preparation.modified_files)}
    details.update(extra_details or {})
    return session.append_compaction(summary, preparation.first_kept_entry_id,
                                     preparation.tokens_before, details)


AGENTS_HEADING = "## Workspace rules (AGENTS.md)"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def agents_rules(workspace: str | os.PathLike[str] | None,
                 settings: ContextSettings = DEFAULT_SETTINGS) -> str:
    """The rules of the workspace's AGENTS.md that a summary must carry ('' if none).

    The sections under `settings.agents_sections` headings (each up to the next heading of
    the same or a higher level), else the file's opening; at most `agents_facts_chars`.
    A compaction drops the conversation in which the agent read them, and the agent must
    still follow them afterwards.
    """
    if workspace is None or not settings.agents_file:
        return ""
    try:
        text = (Path(workspace) / settings.agents_file).read_text(encoding="utf-8",
                                                                  errors="replace")
    except OSError:
        return ""
    wanted = {name.strip().lower() for name in settings.agents_sections}
    lines = text.splitlines()
    picked: list[str] = []
    level = 0
    for line in lines:
        heading = _HEADING.match(line)
        if heading:
            depth, title = len(heading.group(1)), heading.group(2).strip().lower()
            if level and depth <= level:
                level = 0
            if not level and title in wanted:
                level = depth
        if level:
            picked.append(line)
    chosen = "\n".join(picked).strip() or text.strip()
    limit = settings.agents_facts_chars
    if len(chosen) > limit:
        chosen = chosen[:limit].rstrip() + "\n[... AGENTS.md continues]"
    return chosen


# ---------------------------------------------------------------------------------------
# hooks and the memory flush


@dataclass(frozen=True)
class CompactionHooks:
    """Callbacks around a compaction. They can neither block it nor break it.

    Each runs in its own thread; compaction waits at most `timeout` seconds (default
    `settings.hook_timeout_seconds`) and then goes on, leaving a slow hook running. Errors are
    logged. `before_compaction` gets the `CompactionPreparation`, `after_compaction` the
    `CompactionResult`.
    """

    before_compaction: Callable[[CompactionPreparation], Any] | None = None
    after_compaction: Callable[[CompactionResult], Any] | None = None
    timeout: float | None = None


def run_hook(name: str, hook: Callable[[Any], Any] | None, argument: Any, timeout: float
             ) -> bool:
    """Run `hook(argument)` in a daemon thread for at most `timeout` seconds.

    Returns True when it finished without error. Never raises.
    """
    if hook is None:
        return True
    outcome: list[bool] = []

    def target() -> None:
        try:
            hook(argument)
            outcome.append(True)
        except BaseException:
            log.exception("%s hook failed; compaction goes on", name)
            outcome.append(False)

    thread = threading.Thread(target=target, name=f"compaction-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        log.warning("%s hook still running after %.1f s; compaction goes on without it",
                    name, timeout)
        return False
    return bool(outcome and outcome[0])


def memory_file(workspace: str | os.PathLike[str], now: datetime | None = None) -> Path:
    """`<workspace>/memory/YYYY-MM-DD.md` for the local date of `now`."""
    now = now or datetime.now().astimezone()
    return Path(workspace) / "memory" / f"{now:%Y-%m-%d}.md"


def flush_memory(
    workspace: str | os.PathLike[str],
    messages: Sequence[Message],
    *,
    session_id: str | None = None,
    reason: str = "threshold",
    now: datetime | None = None,
) -> Path | None:
    """Append the key facts of `messages` to the day's memory file, append-only.

    One `write` on an `O_APPEND` descriptor per flush (retried for the rest after a short
    write); nothing already in the file is read or rewritten. Returns the file, or None when
    there was nothing to write or writing failed (logged: a flush never stops a compaction).
    """
    facts = extract_facts(messages)
    lines = []
    if facts.first_request:
        lines.append(f"- First request: {facts.first_request}")
    if facts.latest_request and facts.latest_request != facts.first_request:
        lines.append(f"- Latest request: {facts.latest_request}")
    lines += [f"- Decision: {d}" for d in facts.decisions[-8:]]
    if facts.modified_files:
        lines.append("- Modified: " + ", ".join(facts.modified_files))
    if facts.read_files:
        lines.append("- Read: " + ", ".join(facts.read_files))
    lines += [f"- Tool failure: {f}" for f in facts.failures[:8]]
    if facts.identifiers:
        lines.append("- Identifiers: " + ", ".join(f"`{i}`" for i in facts.identifiers[-40:]))
    if not lines:
        return None
    now = now or datetime.now().astimezone()
    path = memory_file(workspace, now)
    where = f" of session {session_id}" if session_id else ""
    block = f"\n## {now:%H:%M:%S} compaction ({reason}){where}\n\n" + "\n".join(lines) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size == 0:
                block = f"# Memory {now:%Y-%m-%d}\n" + block
            data = block.encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("memory flush to %s failed: %s", path, e)
        return None
    return path


class MemoryFlusher:
    """The runner's memory flush: once per compaction cycle, `memory_flush_soft_tokens` before
    the prompt budget (where compaction starts), so the facts are saved before a compaction
    needs them; `compact` is then told not to flush again in that cycle."""

    def __init__(self, settings: ContextSettings, workspace: str | os.PathLike[str] | None
                 ) -> None:
        self.settings = settings
        self.workspace = workspace
        self._cycles: set[str | None] = set()
        """Compaction ids (None: before the first) whose cycle has been flushed."""

    def due(self, tokens: int, window: int) -> bool:
        """Is the estimate `tokens` at or past the flush threshold of `window`?"""
        threshold = prompt_budget(window, self.settings) - self.settings.memory_flush_soft_tokens
        return self.settings.memory_flush and tokens >= threshold

    def flushed(self, cycle: str | None) -> bool:
        """Has the cycle after compaction `cycle` (None: the first) been flushed?"""
        return cycle in self._cycles

    def before_request(self, messages: Sequence[Message], cycle: str | None, tokens: int,
                       window: int, session_id: str | None = None) -> Path | None:
        """Flush `messages` when due and not yet done in this cycle."""
        if self.workspace is None or cycle in self._cycles or not self.due(tokens, window):
            return None
        self._cycles.add(cycle)
        return flush_memory(self.workspace, messages, session_id=session_id,
                            reason="soft threshold")


# ---------------------------------------------------------------------------------------
# compact


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction wrote."""

    entry_id: str
    summary: str
    first_kept_entry_id: str
    tokens_before: int
    tokens_after: int
    fallback_level: FallbackLevel
    reason: str
    summarized_messages: int
    turn_prefix_messages: int
    is_split_turn: bool
    duplicates_dropped: int
    model_calls: int
    details: dict[str, Any] = field(default_factory=dict)
    memory_file: str | None = None


def compact(
    session: Session,
    summarizer: Summarizer,
    settings: ContextSettings = DEFAULT_SETTINGS,
    *,
    estimator: Estimator | None = None,
    focus: str | None = None,
    reason: str = "threshold",
    hooks: CompactionHooks | None = None,
    workspace: str | os.PathLike[str] | None = None,
    sleep: Callable[[float], Any] | None = None,
    abort: threading.Event | None = None,
    rng: random.Random | None = None,
    flush: bool = True,
) -> CompactionResult | None:
    """Compact the active branch of `session`; None when there is nothing to summarize.

    Args:
        session: an open session (the writer).
        summarizer: an `agent.compaction.summarize.Summarizer`.
        settings: thresholds (`keep_recent_tokens`, chunking, retries, `memory_flush`, ...).
        estimator: token estimator; pass the same one each time to reuse its per-entry cache.
        focus: an extra instruction for the summary (as pi's `/compact <focus>`).
        reason: why ("threshold", "overflow", "manual"): recorded in details and logs.
        hooks: before/after callbacks (bounded in time, errors logged).
        workspace: where `memory/YYYY-MM-DD.md` is written when `settings.memory_flush`,
            and whose AGENTS.md rules the summary carries (`agents_rules`).
        sleep: replaces the backoff sleep (tests); abort: an event that stops the compaction.
        rng: source of backoff jitter.
        flush: False when the memory of this cycle was already flushed (`MemoryFlusher`).

    Raises:
        SummaryAborted: `abort` was set or the summarizer was aborted; nothing was written.
    """
    estimator = estimator or Estimator.from_settings(settings)
    preparation = prepare_compaction(session, settings, estimator)
    if preparation is None or not preparation.has_work:
        log.debug("nothing to compact in %s", session.path)
        return None
    hook_timeout = settings.hook_timeout_seconds
    if hooks is not None and hooks.timeout is not None:
        hook_timeout = hooks.timeout
    if hooks is not None:
        run_hook("before_compaction", hooks.before_compaction, preparation, hook_timeout)
    flushed = None
    if settings.memory_flush and workspace is not None and flush:
        flushed = flush_memory(workspace, preparation.all_messages,
                               session_id=session.session_id, reason=reason)

    window = preparation.window
    common: dict[str, Any] = dict(window=window, estimator=estimator, sleep=sleep, abort=abort,
                                  rng=rng)
    budget = prompt_budget(window, settings) * settings.max_history_share
    recent, older = drop_oldest_history(preparation.messages_to_summarize, int(budget),
                                        estimator)
    previous_summary = preparation.previous_summary
    earlier: SummaryOutcome | None = None
    if older:  # history over its share: the oldest part is summarized first, on its own
        earlier = summarize_messages(
            older, summarizer, settings, previous_summary=previous_summary, focus=focus,
            max_tokens=summary_max_tokens(window, settings), **common,
        )
        previous_summary = earlier.text
        log.info("history over %.0f%% of the prompt budget: %d oldest message(s) summarized "
                 "first", settings.max_history_share * 100, len(older))
    history = summarize_messages(
        recent, summarizer, settings,
        previous_summary=previous_summary, focus=focus,
        max_tokens=summary_max_tokens(window, settings), **common,
    )
    prefix: SummaryOutcome | None = None
    if preparation.is_split_turn and preparation.turn_prefix_messages:
        prefix_focus = TURN_PREFIX_INSTRUCTIONS + (f"\n\n{focus.strip()}" if focus else "")
        prefix = summarize_messages(
            preparation.turn_prefix_messages, summarizer, settings, focus=prefix_focus,
            max_tokens=summary_max_tokens(window, settings, settings.turn_prefix_reserve_share),
            **common,
        )
    if abort is not None and abort.is_set():
        raise SummaryAborted("compaction aborted")
    level = max(history.level, prefix.level if prefix else FallbackLevel.NONE,
                earlier.level if earlier else FallbackLevel.NONE)
    summary = compose_summary(preparation, history.text, prefix.text if prefix else None,
                              settings)
    rules = agents_rules(workspace, settings)
    if rules and rules not in summary:
        summary += f"\n\n{AGENTS_HEADING}\n\n{rules}"
    extra: dict[str, Any] = {"reason": reason, "fallbackLevel": int(level)}
    if older:
        extra["historyDropped"] = len(older)
    entry_id = record_compaction(session, preparation, summary, extra_details=extra)
    after = estimate_branch_context(session.get_branch(), estimator, settings).tokens
    result = CompactionResult(
        entry_id=entry_id,
        summary=summary,
        first_kept_entry_id=preparation.first_kept_entry_id,
        tokens_before=preparation.tokens_before,
        tokens_after=after,
        fallback_level=FallbackLevel(level),
        reason=reason,
        summarized_messages=len(preparation.messages_to_summarize),
        turn_prefix_messages=len(preparation.turn_prefix_messages),
        is_split_turn=preparation.is_split_turn,
        duplicates_dropped=preparation.duplicates_dropped,
        model_calls=history.calls + (prefix.calls if prefix else 0)
        + (earlier.calls if earlier else 0),
        details={"readFiles": list(preparation.read_files),
                 "modifiedFiles": list(preparation.modified_files), **extra},
        memory_file=str(flushed) if flushed else None,
    )
    log.info("compacted %s (%s): %d -> %d tokens, level %d, %d call(s)", session.path, reason,
             result.tokens_before, after, level, result.model_calls)
    if hooks is not None:
        run_hook("after_compaction", hooks.after_compaction, result, hook_timeout)
    return result
