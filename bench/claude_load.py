"""Benchmark for "[claude]": load, project and resume generated Claude Code transcripts.

Generates with ``bench/gen_claude.py`` (in a separate process) a transcript of ``--mb`` MB
whose latest compaction lies within the last ``--tail-mb`` MB, and one of the same size with
no compaction at all, then measures, each run in a fresh Python process:

* ``full``:   ``load(path)`` (the transcript and its subagent files, detected as Claude Code)
  + its tree + ``build_context`` at the leaf;
* ``resume``: ``resume(path)`` (backwards from the end to the latest ``compact_boundary`` on
  the leaf's chain) + tree + ``build_context``;
* ``cli``:    ``journal context PATH --json`` as a user runs it, start to exit (timed by
  this process).

Wall time (and the child's CPU time, which other processes on a shared machine do not
inflate) is taken inside the child around the operation only (imports excluded) except for
``cli``. Memory is the child's peak RSS (``VmHWM``). Medians of ``--repeat`` runs.

Targets (from the issue): a 100 MB transcript loads and projects in under 1 s; it resumes
from its tail when its latest compaction is near the end.

Usage::

    python bench/claude_load.py [--mb 100] [--tail-mb 2] [--repeat 3] [--seed N] [--dir DIR]
                                [--keep] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_CHILD = r"""
import json, sys, time
mode, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
import journal
from journal.context import build_context
from journal.snapshot import load, resume
imported = time.perf_counter() - t0
t0, c0 = time.perf_counter(), time.process_time()
snap = load(path) if mode == "full" else resume(path)
tree = snap.tree()
context = build_context(tree, tree.leaf_id)
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
hwm = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) * 1024
print(json.dumps({"seconds": seconds, "cpu": cpu, "import": imported, "hwm": hwm,
                  "entries": len(snap.entries), "messages": len(context.messages),
                  "complete": snap.complete, "dialect": snap.dialect}))
"""


def _child(mode: str, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(path)], check=True,
                         capture_output=True, text=True, cwd=ROOT)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def _cli(path: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "journal.cli", "context", str(path), "--json"],
                         check=True, capture_output=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "messages": len(json.loads(out.stdout)["messages"])}


def _generate(folder: Path, mb: float, seed: int, compactions: int,
              tail_mb: float | None) -> Path:
    args = [sys.executable, str(HERE / "gen_claude.py"), str(folder), "--mb", str(mb),
            "--seed", str(seed), "--compactions", str(compactions)]
    if tail_mb is not None:
        args += ["--last-compaction-mb", str(tail_mb)]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    print(out.stdout.strip(), file=sys.stderr)
    [path] = folder.glob("*.jsonl")
    return path


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--tail-mb", type=float, default=2.0,
                    help="the latest compaction lies within this many MB of the end (2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="claude-bench-", dir=args.dir))
    rows = []
    try:
        cases = [("compacted", 4, args.tail_mb), ("no compaction", 0, None)]
        for name, compactions, tail in cases:
            folder = work / name.replace(" ", "-")
            path = _generate(folder, args.mb, args.seed, compactions, tail)
            size = path.stat().st_size
            for mode in ("full", "resume", "cli"):
                runs = [_cli(path) if mode == "cli" else _child(mode, path)
                        for _ in range(args.repeat)]
                row = {"case": name, "mode": mode, "mb": size / 2**20,
                       "seconds": _median(runs, "seconds"),
                       "messages": runs[0]["messages"]}
                if mode != "cli":
                    row.update(hwm_mb=_median(runs, "hwm") / 2**20, cpu=_median(runs, "cpu"),
                               entries=runs[0]["entries"], complete=runs[0]["complete"],
                               import_s=_median(runs, "import"))
                rows.append(row)
    finally:
        if args.keep:
            print(f"files kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'case':<14} {'mode':<7} {'MB':>6} {'seconds':>8} {'cpu s':>6} {'peak MB':>8} "
          f"{'entries':>8} {'messages':>8}  read")
    for r in rows:
        read = "" if r["mode"] == "cli" else (
            "whole file" if r["complete"] else "from the end back")
        peak = f"{r['hwm_mb']:8.0f}" if "hwm_mb" in r else f"{'':>8}"
        cpu = f"{r['cpu']:6.3f}" if "cpu" in r else f"{'':>6}"
        entries = f"{r['entries']:8d}" if "entries" in r else f"{'':>8}"
        print(f"{r['case']:<14} {r['mode']:<7} {r['mb']:6.1f} {r['seconds']:8.3f} {cpu} {peak} "
              f"{entries} {r['messages']:8d}  {read}")
    full = [r for r in rows if r["mode"] == "full"]
    ok = all(r["seconds"] < 1.0 for r in full)
    print(f"target: full load + projection under 1 s: {'met' if ok else 'NOT met'} "
          f"(cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
