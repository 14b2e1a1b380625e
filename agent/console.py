"""What the agent commands print while a runner works: one readable line per event."""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from agent.runner import RunnerEvent


def print_event(event: RunnerEvent, *, stream: IO[str] | None = None) -> None:
    """One readable line per runner event."""
    out = stream or sys.stdout
    d = event.data
    if event.kind == "turn_end":
        print(f"  turn {d['turn']}: assistant ({d['stop_reason']})", file=out)
    elif event.kind == "tool_start":
        print(f"    → {d['name']} {_short(d.get('arguments'))}", file=out)
    elif event.kind == "tool_end":
        status = "error" if d["is_error"] else "ok"
        print(f"    ← {d['name']} {status}, {d['chars']:,} chars", file=out)
    elif event.kind == "compaction_start":
        print(f"  ⟳ compaction ({d['reason']}): {d['tokens_before']:,} tokens", file=out)
    elif event.kind == "compaction_end":
        retry = ", retrying" if d["will_retry"] else ""
        print(f"  ⟳ compacted: {d['tokens_before']:,} → {d['tokens_after']:,} tokens{retry}; "
              f"session {os.path.basename(d['session'])}", file=out)
    elif event.kind == "session_truncated":
        print("  ✂ truncated oversized tool results on a new branch", file=out)


def _short(arguments: Any, width: int = 70) -> str:
    if isinstance(arguments, dict):
        for key in ("path", "command", "pattern"):
            if isinstance(arguments.get(key), str):
                text = arguments[key].splitlines()[0] if arguments[key] else ""
                return text if len(text) <= width else text[: width - 1] + "…"
    return ""
