"""Benchmark: repair and import of a damaged Claude Code transcript, against a plain load.

Generates a transcript with ``bench/gen_claude.py`` (``--mb``, default 100), then damages it
evenly: ``--damages`` lines (default 200) of mixed kinds (a deleted line: lost results, lost
calls, broken parents; a NUL run before a line; a torn line glued to the next; invalid UTF-8;
a line written twice; a NUL character in a message) plus a torn tail. Then, each
``--repeat`` times (default 3; medians reported, as MB/s of the damaged file):

* ``load``: ``journal.load`` + the projection (``build_context``) of the damaged file;
* ``check``: ``journal.repair(path, dry_run=True)`` (read, salvage, plan; no write);
* ``repair``: ``journal.repair(path)`` on a fresh copy (plan, verify by planning the new
  bytes again, quarantine, ``.bak``, atomic swap);
* ``import``: ``journal.import_claude`` of the repaired transcript into a pi session.

The repaired file is checked: a second repair changes nothing, and its projection passes
``journal.validate``.

Usage::

    python bench/claude_repair.py [--mb 100] [--damages 200] [--repeat 3] [--seed N] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import journal  # noqa: E402
from journal.context import build_context  # noqa: E402
from journal.validate import pairing_problems  # noqa: E402


def _gen() -> Any:
    spec = importlib.util.spec_from_file_location("bench_gen_claude", ROOT / "bench" /
                                                  "gen_claude.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gen_claude"] = module
    spec.loader.exec_module(module)
    return module


def damage(data: bytes, count: int, seed: int) -> tuple[bytes, Counter[str]]:
    rng = random.Random(seed)
    lines = data.split(b"\n")[:-1]
    step = max(1, len(lines) // (count + 1))
    kinds: Counter[str] = Counter()
    out: list[bytes] = []
    for n, line in enumerate(lines):
        if n % step or n == 0 or n >= count * step:
            out.append(line)
            continue
        kind = rng.choice(["delete", "nul_run", "glue", "utf8", "twice", "nul_text"])
        kinds[kind] += 1
        if kind == "delete":
            continue
        if kind == "nul_run":
            out.extend([b"\x00" * rng.randint(100, 700), line])
        elif kind == "glue":
            out.append(line[:rng.randint(1, max(1, len(line) - 1))] + lines[n + 1]
                       if n + 1 < len(lines) else line)
        elif kind == "utf8":
            at = line.find(b'"text":"')
            out.append(line[:at + 8] + b"\xff\xfe" + line[at + 8:] if at >= 0 else line)
        elif kind == "twice":
            out.extend([line, line])
        else:
            out.append(line.replace(b'"text":"', b'"text":"\\u0000', 1))
    kinds["torn_tail"] += 1
    return b"\n".join(out) + b"\n" + lines[-1][: len(lines[-1]) // 2], kinds


def project(path: str) -> list[dict[str, Any]]:
    snap = journal.load(path)
    tree = snap.tree()
    return build_context(tree, tree.leaf_id).messages


def timed(fn: Any, repeat: int, before: Any = None) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--damages", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        _gen().generate(work / "gen", mb=args.mb, seed=args.seed, subagents=False)
        (source,) = (work / "gen").glob("*.jsonl")
        damaged, kinds = damage(source.read_bytes(), args.damages, args.seed)
        size_mb = len(damaged) / 1e6
        target = work / "run" / source.name
        target.parent.mkdir()

        def fresh() -> None:
            for side in target.parent.iterdir():
                side.unlink()
            target.write_bytes(damaged)

        fresh()
        load = timed(lambda: project(str(target)), args.repeat)
        check = timed(lambda: journal.repair(str(target), dry_run=True), args.repeat)
        repair = timed(lambda: journal.repair(str(target)), args.repeat, before=fresh)
        fresh()
        report = journal.repair(str(target))
        again = journal.repair(str(target))
        valid = pairing_problems(project(str(target))) == []
        out = work / "imported"
        imported = timed(lambda: journal.import_claude(str(target), shutil.rmtree(
            out, ignore_errors=True) or out), args.repeat)
        result = {
            "mb": round(size_mb, 1), "damages": dict(kinds),
            "found": report.counts, "second_repair_changed": again.changed,
            "projection_valid": valid,
            "seconds": {"load": round(load, 3), "check": round(check, 3),
                        "repair": round(repair, 3), "import": round(imported, 3)},
            "mb_per_s": {k: round(size_mb / v, 1) for k, v in
                         (("load", load), ("check", check), ("repair", repair),
                          ("import", imported))},
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"damaged transcript: {result['mb']} MB, damages {result['damages']}")
        print(f"repair found: {result['found']}")
        for k in ("load", "check", "repair", "import"):
            print(f"  {k:7} {result['seconds'][k]:7.3f} s  {result['mb_per_s'][k]:7.1f} MB/s")
        print(f"second repair changed anything: {again.changed}; "
              f"repaired projection passes validate: {valid}")
    return 0 if valid and not again.changed else 1


if __name__ == "__main__":
    sys.exit(main())
