"""What the agent commands print while a runner works: one readable line per event."""

from __future__ import annotations

import sys
from typing import IO, Any

from agent.runner import Runner, RunnerEvent, RunResult
from journal.pg.url import short_name


def plural(count: int, noun: str) -> str:
    """`1 turn`, `2 turns`, `1,000 compactions`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def print_event(event: RunnerEvent, *, stream: IO[str] | None = None) -> None:
    """One readable line per runner event; a compaction is one line, once it is over."""
    out = stream or sys.stdout
    d = event.data
    if event.kind == "turn_end":
        print(f"  turn {d['turn']}: assistant ({d['stop_reason']})", file=out)
    elif event.kind == "tool_start":
        print(f"    → {d['name']} {_short(d.get('arguments'))}", file=out)
    elif event.kind == "tool_end":
        status = "error" if d["is_error"] else "ok"
        print(f"    ← {d['name']} {status}, {d['chars']:,} chars", file=out)
    elif event.kind == "compaction_end":
        retry = ", retrying" if d["will_retry"] else ""
        if d.get("compacted", True):
            print(f"  ⟳ compacted ({d['reason']}): {d['tokens_before']:,} → "
                  f"{d['tokens_after']:,} tokens{retry}; session "
                  f"{short_name(d['session'])}", file=out)
        else:
            print(f"  ⟳ nothing to compact ({d['reason']}): {d['tokens_before']:,} "
                  f"tokens{retry}", file=out)
    elif event.kind == "model_change":
        print(f"  ⇄ model {d['previous']} → {d['model']} ({d['reason']})", file=out)
    elif event.kind == "queued_delivered":
        what = "steering message" if d["queue"] == "steer" else "follow-up"
        print(f"  ✉ {what} delivered: {_short_text(d['text'])}", file=out)
    elif event.kind == "session_truncated":
        print("  ✂ truncated oversized tool results on a new branch", file=out)


def print_result(result: RunResult, path: str, *, stream: IO[str] | None = None) -> None:
    """The end of a run: the final text, a summary line, and why it stopped if not normally."""
    out = stream or sys.stdout
    if result.final_text:
        print(result.final_text, file=out)
    print(f"{result.stop_reason}: {plural(result.turns, 'turn')}, "
          f"{plural(result.compactions, 'compaction')}; session {path}", file=out)
    if result.message and result.stop_reason != "stop":
        print(result.message, file=out)


def status_line(runner: Runner) -> str:
    """Tokens used of the window, compactions so far, the session file and its size."""
    used, window = runner.current_tokens(), runner.budget.window
    return (f"{used:,} of {window:,} tokens ({100 * used / window:.0f}%), "
            f"{plural(runner.compactions, 'compaction')}; {runner.session.path} "
            f"({runner.session.size:,} bytes)")


def _short(arguments: Any, width: int = 70) -> str:
    if isinstance(arguments, dict):
        for key in ("path", "command", "pattern"):
            if isinstance(arguments.get(key), str):
                text = arguments[key].splitlines()[0] if arguments[key] else ""
                return text if len(text) <= width else text[: width - 1] + "…"
    return ""


def _short_text(text: str, width: int = 70) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"
