"""Benchmark for the run loop: the per-turn overhead of `agent.runner.Runner`, model and tools
excluded, early in a session (around turn 100) and late (around turn 2,000).

The model is an instant fake that answers every request with a short text and one tool call
(its usage reports a prompt size that grows with the history, as a real provider's would), and
the tool is an instant fake too. Both are timed and their time is taken out of each turn, so
what is left is the loop itself: journal writes, the context projection and its estimate,
routing, pruning and sanitizing (and, in the compaction variant, compaction).

A turn is measured from one `turn_start` event to the next, two ways:

* wall time, with the journal's `fdatasync` calls timed apart (the disk of a shared machine
  makes them vary tenfold from one second to the next);
* CPU time of the running thread (`time.thread_time`): what the loop computes, unaffected by
  waiting for the disk or for a CPU on a busy machine. The target is judged on this one.

The figure for a point is the median over a window of turns centred on it (default 50), so a
slow sync or a compaction turn does not decide it; with ``--repeat`` the medians of the runs
are taken.

Variants:

* ``no-compaction``: a window so large that nothing is ever compacted: the live context grows
  with every turn (the worst case for anything that walks the whole context);
* ``compaction``: the smallest window (16k) so the threshold compacts at a roughly fixed
  interval (every ~25 turns, the first at turn ~40; the extractive summarizer, no model): the
  live context stays bounded while the journal keeps growing. Compaction turns are reported
  apart.

Each runs with `Durability.always()` (one fdatasync per entry, what the CLI uses) and
`Durability.never()` unless ``--durability`` picks one.

Target: the cost per turn at turn 2,000 is at most 1.5x the cost at turn 100.

Usage::

    python bench/runner.py [--turns 2050] [--window 50] [--repeat 3]
                           [--variant both|no-compaction|compaction]
                           [--durability both|always|never|batch[:N[:MS]]] [--profile] [--json]

``--profile`` prints the cProfile of the turns around turn 2,000 (first run of each variant).
Exit status 0 when the CPU-time ratio meets the target everywhere, else 1.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.compaction.summarize import ExtractiveSummarizer  # noqa: E402
from agent.models import ModelRequest, assistant_message, make_usage  # noqa: E402
from agent.runner import Runner, RunnerEvent  # noqa: E402
from agent.settings import DEFAULT_SETTINGS, ContextSettings  # noqa: E402
from journal import Durability, Session  # noqa: E402
from tools import Tool, ToolResult, Workspace  # noqa: E402

EARLY = 100
LATE = 2_000
TARGET_RATIO = 1.5


class Stopwatch:
    """Wall and thread CPU seconds spent inside `with` blocks."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall, self._cpu = time.perf_counter(), time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.thread_time() - self._cpu


class InstantModel:
    """Answers at once: a short text and one tool call per turn, then a final text."""

    provider = "bench"
    model_id = "bench-1"
    api = "bench"

    def __init__(self, turns: int, context_window: int | None = None) -> None:
        self.turns = turns
        self.context_window = context_window
        self.calls = 0
        self.watch = Stopwatch()

    def complete(
        self,
        request: ModelRequest,
        *,
        on_event: Any = None,
        abort: threading.Event | None = None,
    ) -> dict[str, Any]:
        with self.watch:
            self.calls += 1
            n = self.calls
            content: list[dict[str, Any]] = [
                {"type": "text", "text": f"Step {n}: checking the next part of the work."}
            ]
            if n < self.turns:
                content.append({"type": "toolCall", "id": f"call_{n:05d}", "name": "probe",
                                "arguments": {"step": n, "path": f"src/module_{n % 37}.py"}})
            # a provider reports the prompt size; about 100 tokens a message here
            usage = make_usage(input_tokens=100 * len(request.messages), output_tokens=30)
            return assistant_message(content, api=self.api, provider=self.provider,
                                     model=self.model_id, usage=usage,
                                     stop_reason="toolUse" if n < self.turns else "stop")


class InstantTool(Tool):
    """Returns a short result at once; its own time is counted apart."""

    name = "probe"
    description = "Look at one step of the work."
    input_schema = {
        "type": "object",
        "properties": {"step": {"type": "integer"}, "path": {"type": "string"}},
        "required": ["step"],
    }

    def __init__(self, workspace: Workspace) -> None:
        super().__init__(workspace)
        self.watch = Stopwatch()

    def run(self, args: Any) -> ToolResult:
        with self.watch:
            return super().run(args)

    def execute(self, args: dict[str, Any]) -> ToolResult:
        step = args["step"]
        lines = [f"{args.get('path', '?')}:{k}: def handler_{step}_{k}(request): ok"
                 for k in range(8)]
        return ToolResult(f"step {step}: looks fine\n" + "\n".join(lines),
                          details={"step": step})


class SyncTimer:
    """Times `os.fdatasync` (how the journal syncs a commit) while installed; changes nothing."""

    def __init__(self) -> None:
        self.watch = Stopwatch()
        self.calls = 0
        self._real = os.fdatasync

    def _timed(self, fd: int) -> None:
        self.calls += 1
        with self.watch:
            self._real(fd)

    def __enter__(self) -> SyncTimer:
        os.fdatasync = self._timed
        return self

    def __exit__(self, *exc: object) -> None:
        os.fdatasync = self._real


class TurnClock:
    """Per-turn loop time between `turn_start` events, model and tool time taken out."""

    def __init__(self, model: InstantModel, tool: InstantTool, sync: SyncTimer) -> None:
        self.parts = (model.watch, tool.watch)
        self.sync = sync.watch
        self.marks: list[tuple[float, float, float, float]] = []
        self.compaction_turns: list[int] = []

    def _mark(self) -> None:
        wall = sum(w.wall for w in self.parts)
        cpu = sum(w.cpu for w in self.parts)
        self.marks.append((time.perf_counter() - wall, time.thread_time() - cpu,
                           self.sync.wall, self.sync.cpu))

    def __call__(self, event: RunnerEvent) -> None:
        if event.kind == "turn_start":
            self._mark()
        elif event.kind == "compaction_end" and event.data.get("compacted"):
            self.compaction_turns.append(len(self.marks))

    def finish(self) -> None:
        self._mark()

    def per_turn_ms(self) -> dict[str, list[float]]:
        """Per measure, index i: turn i + 1."""
        out: dict[str, list[float]] = {"wall": [], "wall_no_sync": [], "cpu": []}
        for a, b in zip(self.marks, self.marks[1:], strict=False):
            wall, cpu, sync_wall, sync_cpu = (y - x for x, y in zip(a, b, strict=True))
            out["wall"].append(wall * 1000.0)
            out["wall_no_sync"].append((wall - sync_wall) * 1000.0)
            out["cpu"].append(cpu * 1000.0)  # a sync's CPU share is the loop's work too
        return out


def _median_around(values: list[float], turn: int, width: int) -> float:
    lo = max(0, turn - 1 - width // 2)
    hi = min(len(values), lo + width)
    return statistics.median(values[lo:hi])


def run_once(settings: ContextSettings, turns: int, width: int, durability: Durability,
             profile: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        model = InstantModel(turns)
        tool = InstantTool(Workspace(tmp))
        sync = SyncTimer()
        clock = TurnClock(model, tool, sync)
        profiler = cProfile.Profile() if profile else None
        profile_from = LATE - width // 2

        def on_event(event: RunnerEvent) -> None:
            clock(event)
            if profiler is not None and event.kind == "turn_start":
                if event.data["turn"] == profile_from:
                    profiler.enable()
                elif event.data["turn"] == profile_from + width:
                    profiler.disable()

        with sync, Session.create(str(Path(tmp) / "sessions"), cwd=tmp,
                                  durability=durability) as session:
            runner = Runner(session, model, [tool], settings=settings,
                            summarizer=ExtractiveSummarizer(), workspace=tmp,
                            on_event=on_event, max_turns=turns + 1)
            started = time.perf_counter()
            result = runner.run("Work through every module, one step at a time.")
            clock.finish()
            total = time.perf_counter() - started
            entries = len(session.entries)
    per_turn = clock.per_turn_ms()
    out: dict[str, Any] = {
        "turns": result.turns,
        "stop": result.stop_reason,
        "compactions": result.compactions,
        "compaction_turns": clock.compaction_turns,
        "entries": entries,
        "total_s": total,
        "syncs": sync.calls,
    }
    for measure, values in per_turn.items():
        out[f"{measure}_early"] = _median_around(values, EARLY, width)
        out[f"{measure}_late"] = _median_around(values, LATE, width)
    if clock.compaction_turns:
        cpu = per_turn["cpu"]
        out["compaction_turn_cpu"] = statistics.median(
            cpu[t - 1] for t in clock.compaction_turns if t - 1 < len(cpu))
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(20)
        out["profile"] = text.getvalue()
    return out


def run_variant(name: str, settings: ContextSettings, turns: int, width: int,
                durability: Durability, repeat: int, profile: bool) -> dict[str, Any]:
    runs = [run_once(settings, turns, width, durability, profile and i == 0)
            for i in range(repeat)]
    first = runs[0]
    report: dict[str, Any] = {
        "variant": name,
        "durability": durability.describe(),
        "runs": repeat,
        "turns": first["turns"],
        "stop": first["stop"],
        "compactions": first["compactions"],
        "first_compaction_turns": first["compaction_turns"][:5],
        "entries": first["entries"],
        "total_s": round(statistics.median(r["total_s"] for r in runs), 2),
        "syncs": first["syncs"],
    }
    for measure in ("wall", "wall_no_sync", "cpu"):
        early = statistics.median(r[f"{measure}_early"] for r in runs)
        late = statistics.median(r[f"{measure}_late"] for r in runs)
        report[measure] = {"early_ms": round(early, 3), "late_ms": round(late, 3),
                           "ratio": round(late / early, 2) if early else None}
    if "compaction_turn_cpu" in first:
        report["compaction_turn_cpu_ms"] = round(
            statistics.median(r["compaction_turn_cpu"] for r in runs), 2)
    if "profile" in first:
        report["profile"] = first["profile"]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=LATE + 50)
    parser.add_argument("--window", type=int, default=50, help="turns per median window")
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant (medians)")
    parser.add_argument("--variant", choices=("both", "no-compaction", "compaction"),
                        default="both")
    parser.add_argument("--durability", default="both",
                        help="both (default: always, then never), always (what the CLI uses), "
                        "never, batch[:N[:MS]]")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.turns < LATE + args.window // 2:
        parser.error(f"--turns must be at least {LATE + args.window // 2}")
    if args.durability == "both":
        durabilities = [Durability.always(), Durability.never()]
    else:
        durabilities = [Durability.parse(args.durability)]

    variants: list[tuple[str, ContextSettings]] = []
    if args.variant in ("both", "no-compaction"):
        variants.append(("no-compaction", replace(DEFAULT_SETTINGS, context_window=2_000_000)))
    if args.variant in ("both", "compaction"):
        # ~200 tokens a turn; a 16k window leaves an 8k prompt budget, 2k of it kept
        variants.append(("compaction", replace(DEFAULT_SETTINGS, context_window=16_000,
                                               keep_recent_tokens=2_000)))
    logging.getLogger("agent.window").setLevel(logging.ERROR)  # the small window is on purpose
    reports = []
    for name, settings in variants:
        for durability in durabilities:
            report = run_variant(name, settings, args.turns, args.window, durability,
                                 max(1, args.repeat), args.profile)
            reports.append(report)
            if not args.json:
                _print(report)
    worst = max(r["cpu"]["ratio"] or 0 for r in reports)
    if args.json:
        print(json.dumps(reports, indent=2))
    else:
        verdict = "met" if worst <= TARGET_RATIO else "MISSED"
        print(f"worst CPU-time ratio turn {LATE:,} / turn {EARLY}: {worst} "
              f"(target <= {TARGET_RATIO}: {verdict})")
    return 0 if worst <= TARGET_RATIO else 1


def _print(r: dict[str, Any]) -> None:
    print(f"[{r['variant']}, durability {r['durability']}] {r['turns']} turns ({r['stop']}), "
          f"{r['compactions']} compactions, {r['entries']:,} entries, {r['syncs']:,} syncs; "
          f"{r['total_s']} s a run, median of {r['runs']} runs")
    print(f"  loop overhead per turn, median of the window   turn ~{EARLY:<5} "
          f"turn ~{LATE:<6,} ratio")
    labels = {"cpu": "CPU time (the target)", "wall": "wall time",
              "wall_no_sync": "wall time without the syncs"}
    for measure in ("cpu", "wall", "wall_no_sync"):
        m = r[measure]
        print(f"    {labels[measure]:<44} {m['early_ms']:7.3f} ms {m['late_ms']:7.3f} ms  "
              f"{m['ratio']}")
    if "compaction_turn_cpu_ms" in r:
        print(f"  compaction turns (first at {r['first_compaction_turns']}): "
              f"median {r['compaction_turn_cpu_ms']} ms CPU")
    if "profile" in r:
        print(r["profile"])


if __name__ == "__main__":
    sys.exit(main())
