"""Benchmark for "[catalog]" item 1: `journal ls` over a folder of many small sessions.

Writes ``--count`` small pi v3 sessions (default 10,000) into a new temporary folder: a few
distinct sessions from ``bench/gen_session.py`` (``--distinct``, each about ``--size`` bytes,
with compactions and branches), copied under fresh names until the count is reached. Then
measures, each ``--repeat`` times (median reported):

* ``sessions``: ``journal.catalog.sessions([folder])`` in this process (rows for every file);
* ``cli``:      ``journal ls FOLDER --json`` as a user runs it (a fresh interpreter, start to
  exit, output to /dev/null);
* ``load-all``: for scale, ``journal.load`` of every file (what a whole-file reader pays).

The page cache is warm for all of them (the files were just written). The folder is deleted
afterwards unless ``--keep``.

Usage::

    python bench/catalog_ls.py [--count 10000] [--distinct 20] [--size 4KB] [--repeat 3]
                               [--dir DIR] [--keep] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from journal import load  # noqa: E402
from journal.catalog import sessions  # noqa: E402


def _gen_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_gen_session", BENCH / "gen_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def populate(folder: Path, count: int, distinct: int, size: int) -> int:
    gen = _gen_module()
    templates = []
    for seed in range(distinct):
        path = folder / f"template-{seed}.jsonl"
        gen.generate(path, target_bytes=size, seed=seed, branch_every=4,
                     compaction_every_bytes=max(size // 2, 1))
        templates.append(path.read_bytes())
        path.unlink()
    total = 0
    for i in range(count):
        data = templates[i % distinct]
        (folder / f"s{i:05d}.jsonl").write_bytes(data)
        total += len(data)
    return total


def timed(fn: Any, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--distinct", type=int, default=20)
    ap.add_argument("--size", default="4KB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    size = _gen_module().parse_size(args.size)
    folder = Path(tempfile.mkdtemp(prefix="catalog-ls-", dir=args.dir))
    try:
        total = populate(folder, args.count, args.distinct, size)
        rows: list[Any] = []

        def run_sessions() -> None:
            rows[:] = sessions([str(folder)])

        def run_cli() -> None:
            with open(os.devnull, "w") as out:
                subprocess.run([sys.executable, "-m", "journal.cli", "ls", str(folder), "--json"],
                               stdout=out, check=True, cwd=BENCH.parent)

        def run_load() -> None:
            for path in folder.iterdir():
                load(path)

        result = {
            "count": args.count, "bytes": total,
            "sessions_s": timed(run_sessions, args.repeat),
            "cli_s": timed(run_cli, args.repeat),
            "load_all_s": timed(run_load, args.repeat),
        }
        assert len(rows) == args.count, len(rows)
        assert all(r.state == "live" for r in rows)
    finally:
        if not args.keep:
            shutil.rmtree(folder)
    if args.json:
        print(json.dumps(result))
    else:
        n = result["count"]
        print(f"{n:,} sessions, {result['bytes'] / 2**20:.1f} MiB")
        for key, label in (("sessions_s", "catalog.sessions()"), ("cli_s", "journal ls --json"),
                           ("load_all_s", "load() of every file")):
            secs = result[key]
            print(f"  {label:<22} {secs:7.2f} s  ({secs / n * 1e6:6.0f} us/session)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
