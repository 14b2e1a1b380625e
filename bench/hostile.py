"""Benchmark for hostile inputs (issue 11, item 9): both paths must grow linearly.

* ``info``: ``journal.info.inspect`` (what ``journal info`` runs) on a session of N entries
  whose parents are all missing, for N = 10k, 20k, 40k. Before the fix every orphan started
  a forward scan of the rest of the file (2.9 s, 20 s, 64 s).
* ``repair``: ``journal.repair`` of a session holding one huge torn line: a torn tool result
  whose content blocks give ~1,000 ``{"type":`` candidates, with a complete record glued on
  its end, at 50, 100 and 200 MB. Before the fix each candidate was parsed to the end of the
  line (263 s and 1.46 GB at 200 MB).

Each measurement runs in a fresh child process, so the peak resident memory reported (the
child's ``ru_maxrss``) is that of the measured call alone. Times are wall-clock seconds;
the last column divides time by size, and stays flat when growth is linear.

Usage::

    python bench/hostile.py [--quick] [--dir DIR] [--json]

``--quick`` uses sizes ten times smaller (1k/2k/4k orphans, 5/10/20 MB lines).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HEADER = (b'{"type":"session","version":3,"id":"33333333-3333-4333-8333-333333333333",'
          b'"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/bench"}\n')
TS = b'"timestamp":"2026-01-01T00:00:01.000Z"'


def write_orphans(path: Path, count: int) -> None:
    """A session whose every entry names a parent that is not in the file."""
    with open(path, "wb") as f:
        f.write(HEADER)
        for i in range(count):
            f.write(b'{"type":"message","id":"%08x","parentId":"%08x",%s,"message":'
                    b'{"role":"user","content":"orphan %d","timestamp":1}}\n'
                    % (i, 0x80000000 + i, TS, i))


def write_torn_line(path: Path, size: int, candidates: int = 1000) -> None:
    """A first entry, then one line of about `size` bytes: a torn tool result holding
    `candidates` text blocks, with a complete record glued on after the cut."""
    block = max(1, size // candidates - 30)
    text = b"x" * block
    with open(path, "wb") as f:
        f.write(HEADER)
        f.write(b'{"type":"message","id":"00000001","parentId":null,%s,"message":'
                b'{"role":"user","content":"start","timestamp":1}}\n' % TS)
        f.write(b'{"type":"message","id":"00000002","parentId":"00000001",%s,"message":'
                b'{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[' % TS)
        for _ in range(candidates):
            f.write(b'{"type":"text","text":"' + text + b'"},')
        f.write(b'{"type":"text","text":"cut in the mid')
        f.write(b'{"type":"message","id":"00000003","parentId":"00000001",%s,"message":'
                b'{"role":"user","content":"glued after the cut","timestamp":2}}\n' % TS)


def child(kind: str, path: str) -> dict[str, Any]:
    """Run one measured call in this (fresh) process."""
    from journal.info import inspect
    from journal.repair import repair

    start = time.perf_counter()
    if kind == "info":
        info = inspect(path)
        detail = f"{len(info.tree_issues):,} tree issues"
    else:
        report = repair(path)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items()))
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_mb": peak_kb / 1024, "detail": detail}


def measure(kind: str, path: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes ten times smaller")
    parser.add_argument("--dir", help="where to write the files (default: a temp folder)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0

    scale = 10 if args.quick else 1
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="bench-hostile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for count in (10_000 // scale, 20_000 // scale, 40_000 // scale):
            path = workdir / f"orphans-{count}.jsonl"
            write_orphans(path, count)
            row = {"case": "info", "size": count, "unit": "orphans", **measure("info", path)}
            row["per_unit_us"] = row["seconds"] / count * 1e6
            rows.append(row)
            path.unlink()
        for megabytes in (50 // scale or 5, 100 // scale, 200 // scale):
            path = workdir / f"torn-{megabytes}MB.jsonl"
            write_torn_line(path, megabytes << 20)
            row = {"case": "repair", "size": megabytes, "unit": "MB", **measure("repair", path)}
            row["per_unit_us"] = row["seconds"] / megabytes * 1e6
            rows.append(row)
            for leftover in workdir.glob(f"torn-{megabytes}MB.jsonl*"):
                leftover.unlink()
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)

    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'case':<7} {'size':>14} {'seconds':>9} {'peak RSS':>10} {'us/unit':>10}  result")
    for r in rows:
        size = f"{r['size']:,} {r['unit']}"
        print(f"{r['case']:<7} {size:>14} {r['seconds']:>9.3f} {r['peak_mb']:>8.0f}MB "
              f"{r['per_unit_us']:>10.1f}  {r['detail']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
