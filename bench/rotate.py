"""Benchmark for rotation: how long the writer lock is held, and the whole rotation.

Generates one session with ``bench/gen_session.py`` (``--size``, default 100 MiB, its latest
compaction within the last 5 MiB), then rotates a fresh copy of it ``--repeat`` times
(``journal.rotate.rotate(path)``: plan, write + fsync the successor, verify it projects to the
same context, publish, seal, archive, all under the lock; then gzip the archive outside it).
Copying the file is not timed; it leaves the file in the page cache, as for a session that was
just written to.

Reported, median over the runs:

* lock held: ``RotationResult.lock_held_ms`` (target < 200 ms);
* total:     ``RotationResult.total_ms``, including the gzip of the archive after the lock;
* wall:      time around the ``rotate()`` call, as a cross-check of ``total``;
* sizes:     old file, successor, gzipped archive.

Each run is checked: the old path resolves to the successor, the archive exists and no
rotation intent is left.

Usage::

    python bench/rotate.py [--size 100MB] [--repeat 3] [--dir DIR] [--keep] [--seed N]
                           [--json]

Files go to a new temporary directory under ``--dir`` (default: the current directory),
deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from journal.lineage import INTENT_SUFFIX, resolve_live  # noqa: E402

# the package re-exports the function `rotate`, which shadows the module as an attribute
rotate_module = importlib.import_module("journal.rotation")

MiB = 1024 * 1024
TAIL = 5 * MiB
TARGET_LOCK_MS = 200.0


def _gen_session_module() -> Any:
    name = "bench_gen_session"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / "gen_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def one_run(master: Path, run_dir: Path) -> dict[str, Any]:
    """Rotate a fresh copy of `master` in `run_dir`; return the figures of this run."""
    run_dir.mkdir()
    path = run_dir / master.name
    shutil.copyfile(master, path)
    os.chmod(path, 0o600)
    t0 = time.perf_counter()
    result = rotate_module.rotate(str(path))
    wall_ms = (time.perf_counter() - t0) * 1000
    if not result.rotated or not result.successor or not result.archive:
        raise SystemExit(f"nothing rotated: {result.reason}")
    live, _ = resolve_live(str(path))
    problems = []
    if live != result.successor:
        problems.append(f"old path resolves to {live}, not the successor")
    if not os.path.exists(result.archive):
        problems.append(f"no archive at {result.archive}")
    if os.path.exists(str(path) + INTENT_SUFFIX):
        problems.append("a rotation intent was left behind")
    if problems:
        raise SystemExit("; ".join(problems))
    return {
        "lock_ms": result.lock_held_ms,
        "total_ms": result.total_ms,
        "wall_ms": wall_ms,
        "old_bytes": result.old_size,
        "successor_bytes": os.path.getsize(result.successor),
        "archive_bytes": os.path.getsize(result.archive),
        "entries_copied": result.entries_copied,
    }


def _mib(n: float) -> str:
    return f"{n / MiB:,.2f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark rotating a large session.")
    ap.add_argument("--size", default="100MB", help="size of the generated session (100MB)")
    ap.add_argument("--repeat", type=int, default=3, help="rotations to run (median)")
    ap.add_argument("--dir", default=".", help="where to create the temp dir (default .)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print a JSON report at the end")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    gs = _gen_session_module()
    nbytes = gs.parse_size(args.size)

    os.makedirs(args.dir, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="journal-bench-rotate-", dir=args.dir))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, files in {workdir}, "
          f"repeat {args.repeat} (median)")
    try:
        master = workdir / "session.jsonl"
        stats = gs.generate(master, target_bytes=nbytes, seed=args.seed,
                            last_compaction_within_bytes=TAIL)
        tail = stats.bytes - (stats.last_compaction_offset or 0)
        print(f"generated {_mib(stats.bytes)} in {stats.seconds:.1f} s: {stats.entries:,} "
              f"entries, {stats.compactions} compactions, latest {_mib(tail)} from the end")
        runs = []
        for i in range(args.repeat):
            run = one_run(master, workdir / f"run-{i + 1}")
            runs.append(run)
            print(f"  run {i + 1}: lock held {run['lock_ms']:8.1f} ms   total "
                  f"{run['total_ms']:8.1f} ms   wall {run['wall_ms']:8.1f} ms")
            if not args.keep:
                shutil.rmtree(workdir / f"run-{i + 1}")
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        verdict = "OK" if med["lock_ms"] < TARGET_LOCK_MS else "MISSED"
        print(f"lock held (median): {med['lock_ms']:.1f} ms  "
              f"(target < {TARGET_LOCK_MS:.0f} ms: {verdict})")
        print(f"total incl. gzip (median): {med['total_ms']:.1f} ms  "
              f"(after the lock: {med['total_ms'] - med['lock_ms']:.1f} ms)")
        print(f"old file {_mib(med['old_bytes'])} -> successor {_mib(med['successor_bytes'])} "
              f"({int(med['entries_copied']):,} entries) + gzipped archive "
              f"{_mib(med['archive_bytes'])} "
              f"({med['archive_bytes'] / med['old_bytes']:.1%} of the old file)")
        report = {"size": args.size, "bytes": stats.bytes, "entries": stats.entries,
                  "tail_bytes": tail, "repeat": args.repeat, "runs": runs, "median": med,
                  "target_lock_ms": TARGET_LOCK_MS, "lock_target_met": verdict == "OK"}
    finally:
        if args.keep:
            print(f"kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
