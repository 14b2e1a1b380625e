"""Benchmark for `journal usage`: tokens and cost of a 100 MB session, and of its lineage.

Generates one session with ``bench/gen_session.py`` (``--size``, default 100 MiB), then
measures, each run in a fresh Python process (the file in the page cache, as for a session
just written to):

* ``library``: ``journal.usage([path])`` (the whole file read with ``journal.load``, every
  assistant message on every branch counted), time around the call, and the child's peak RSS
  (``VmHWM``);
* ``cli``:     ``python -m journal.cli usage PATH --json`` as a user runs it, start to exit;
* ``lineage``: the same session rotated once (successor + gzip archive), ``journal.usage`` on
  the folder: the archive is decompressed and the kept entries are counted once.

Each measurement runs ``--repeat`` times; medians are reported. The totals of the runs are
checked against each other (the lineage must count exactly what the single file counted).

Usage::

    python bench/catalog_usage.py [--size 100MB] [--repeat 3] [--dir DIR] [--keep] [--json]

Files go to a new temporary directory under ``--dir`` (default: the current directory),
deleted afterwards unless ``--keep``.
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

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import journal
paths = sys.argv[1:]
t0 = time.perf_counter()
report = journal.usage(paths)
wall = time.perf_counter() - t0
hwm = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) * 1024
total = report.total
print(json.dumps({"seconds": wall, "peak": hwm, "messages": total.messages,
                  "tokens": total.total_tokens, "cost": total.cost,
                  "sessions": len(report.sessions),
                  "files": sum(len(s.files) for s in report.sessions)}))
"""


def child(*paths: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    result: dict[str, float] = json.loads(out.stdout)
    return result


def cli(path: str) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "journal.cli", "usage", path, "--json"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - t0, json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark journal usage on a large session.")
    ap.add_argument("--size", default="100MB", help="size of the generated session (100MB)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (median)")
    ap.add_argument("--dir", default=".", help="where to create the temp dir (default .)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print a JSON report at the end")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    from gen_session import generate, parse_size

    import journal

    work = Path(tempfile.mkdtemp(prefix="usage-bench-", dir=args.dir))
    try:
        single = work / "single"
        single.mkdir()
        path = single / "big.jsonl"
        t0 = time.perf_counter()
        generate(path, target_bytes=parse_size(args.size), seed=args.seed,
                 last_compaction_within_bytes=5 << 20)
        size = path.stat().st_size
        print(f"generated {size / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s: {path}")

        rotated = work / "rotated"
        rotated.mkdir()
        shutil.copyfile(path, rotated / "big.jsonl")
        result = journal.rotate(str(rotated / "big.jsonl"))
        assert result.rotated, result.reason

        runs = [child(str(path)) for _ in range(args.repeat)]
        cli_runs = [cli(str(path)) for _ in range(args.repeat)]
        lineage_runs = [child(str(rotated)) for _ in range(args.repeat)]

        first = runs[0]
        for other in [*runs, *lineage_runs]:
            assert other["messages"] == first["messages"], (other, first)
            assert other["tokens"] == first["tokens"], (other, first)
        assert lineage_runs[0]["files"] == 2 and lineage_runs[0]["sessions"] == 1
        for _, data in cli_runs:
            assert data["total"]["messages"] == first["messages"]  # type: ignore[index]

        report = {
            "size_bytes": size,
            "messages": first["messages"],
            "tokens": first["tokens"],
            "cost": first["cost"],
            "library_s": statistics.median(r["seconds"] for r in runs),
            "library_peak_rss": statistics.median(r["peak"] for r in runs),
            "cli_s": statistics.median(s for s, _ in cli_runs),
            "lineage_s": statistics.median(r["seconds"] for r in lineage_runs),
            "lineage_files_bytes": sum(f.stat().st_size for f in rotated.rglob("*.jsonl*")),
        }
        print(f"session: {size / 2**20:.1f} MiB, {first['messages']:,} assistant messages, "
              f"{first['tokens']:,} tokens, ${first['cost']:,.2f}")
        print(f"library usage([file]):        {report['library_s']:.2f} s "
              f"(peak RSS {report['library_peak_rss'] / 2**20:.0f} MiB)")
        print(f"cli journal usage FILE --json: {report['cli_s']:.2f} s (start to exit)")
        print(f"library usage([folder]) on the rotated lineage (successor + .gz archive): "
              f"{report['lineage_s']:.2f} s, same totals")
        print(f"median of {args.repeat} runs each")
        if args.json:
            print(json.dumps(report, indent=2))
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
