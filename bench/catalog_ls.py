"""Benchmark for "[catalog]" item 1: `journal ls` over a folder of many small sessions, and
over a few large ones, with and without its cache.

Writes ``--count`` small pi v3 sessions (default 10,000) into a new temporary folder: a few
distinct sessions written by ``journal.Session`` (``--distinct``; ``--turns`` user, assistant
(with its recorded usage) and tool-result turns each, a name, a model and a compaction: about
9 KB), copied under fresh names until the count is reached. Then ``--large`` sessions of
``--large-mb`` MB each by ``bench/gen_session.py`` in a second folder. Every file is dated an
hour back (the cache keeps nothing modified in the last 2 s: a session at rest). Measured,
each ``--repeat`` times (median reported):

* ``rows``: ``journal.catalog.sessions([folder])``: header, tail and id scan, no tokens;
* ``cold``: ``sessions([folder], prices=..., cache=RowCache(new file))`` and its save: every
  file read whole for tokens and cost, the cache written;
* ``warm``: the same again with the cache just written: only stats;
* ``cli cold`` / ``cli warm``: ``journal ls FOLDER --json`` as a user runs it (a fresh
  interpreter, output to /dev/null), with the cache file removed first / left;
* ``load-all``: for scale, ``journal.load`` of every file (what a whole-file reader pays).

The page cache is warm for all of them (the files were just written). The folders are deleted
afterwards unless ``--keep``.

Usage::

    python bench/catalog_ls.py [--count 10000] [--distinct 20] [--turns 8] [--large 3]
                               [--large-mb 30] [--repeat 3] [--dir DIR] [--keep] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

from gen_session import generate  # noqa: E402

from journal import RowCache, Session, load, load_prices  # noqa: E402
from journal.catalog import sessions  # noqa: E402


def small_session(folder: Path, seed: int, turns: int) -> bytes:
    """A small session written by `journal.Session`: a name, a model, `turns` user and
    assistant turns (one with a tool call and its result each), a compaction half way."""
    rng = random.Random(seed)
    words = ["read", "file", "test", "fix", "the", "bug", "in", "parser", "and", "run"]

    def say(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    with Session.create(str(folder), cwd=f"/work/project-{seed % 7}") as s:
        s.append_session_info(f"task {seed}")
        s.append_model_change("anthropic", "claude-sonnet-4-5")
        s.append_thinking_level_change("medium")
        kept = None
        for turn in range(turns):
            asked = s.append_message({"role": "user", "content": [
                {"type": "text", "text": say(12)}], "timestamp": 1})
            kept = kept or (asked if turn == turns // 2 else None)
            call = f"toolu_{seed:04d}{turn:04d}"
            s.append_message({"role": "assistant", "content": [
                {"type": "text", "text": say(20)},
                {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": "a.py"}}],
                "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "toolUse",
                "usage": {"input": 1200 + turn, "output": 80, "cacheRead": 5000,
                          "cacheWrite": 300, "totalTokens": 6580 + turn,
                          "cost": {"input": 0.0036, "output": 0.0012, "cacheRead": 0.0015,
                                   "cacheWrite": 0.0011, "total": 0.0074}},
                "timestamp": 2})
            s.append_message({"role": "toolResult", "toolCallId": call, "toolName": "read",
                              "content": [{"type": "text", "text": say(40)}],
                              "isError": False, "timestamp": 3})
            if turn == turns // 2 + 1 and kept is not None:
                s.append_compaction(say(30), kept, 5000)
        path = s.path
    data = Path(path).read_bytes()
    os.unlink(path)
    return data


def populate(folder: Path, count: int, distinct: int, turns: int) -> int:
    templates = [small_session(folder, seed, turns) for seed in range(distinct)]
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


def age(folder: Path) -> None:
    past = time.time() - 3600
    for p in folder.rglob("*"):
        if p.is_file():
            os.utime(p, (past, past))


def measure(folder: Path, count: int, repeat: int, cache_dir: Path) -> dict[str, float]:
    prices = load_prices()
    cache_file = cache_dir / "journal" / "catalog.json"
    rows: list[Any] = []

    def run_rows() -> None:
        rows[:] = sessions([str(folder)])

    def run_cold() -> None:
        cache_file.unlink(missing_ok=True)
        cache = RowCache(str(cache_file))
        rows[:] = sessions([str(folder)], prices=prices, cache=cache)
        cache.save()

    def run_warm() -> None:
        cache = RowCache(str(cache_file))
        rows[:] = sessions([str(folder)], prices=prices, cache=cache)
        cache.save()
        assert cache.misses == 0 and cache.hits == count, (cache.hits, cache.misses)

    env = {**os.environ, "XDG_CACHE_HOME": str(cache_dir)}

    def run_cli(cold: bool) -> None:
        if cold:
            cache_file.unlink(missing_ok=True)
        with open(os.devnull, "w") as out:
            subprocess.run([sys.executable, "-m", "journal.cli", "ls", str(folder), "--json"],
                           stdout=out, check=True, cwd=BENCH.parent, env=env)

    def run_load() -> None:
        for path in folder.rglob("*.jsonl"):
            load(path)

    result = {"rows_s": timed(run_rows, repeat), "cold_s": timed(run_cold, repeat)}
    result["warm_s"] = timed(run_warm, repeat)
    assert len(rows) == count and all(r.usage is not None and r.usage.messages for r in rows)
    result["cli_cold_s"] = timed(lambda: run_cli(True), repeat)
    result["cli_warm_s"] = timed(lambda: run_cli(False), repeat)
    result["load_all_s"] = timed(run_load, repeat)
    result["cache_bytes"] = cache_file.stat().st_size
    return result


LABELS = (("rows_s", "rows only (no tokens)"), ("cold_s", "tokens, cache cold"),
          ("warm_s", "tokens, cache warm"), ("cli_cold_s", "journal ls, cache cold"),
          ("cli_warm_s", "journal ls, cache warm"), ("load_all_s", "load() of every file"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--distinct", type=int, default=20)
    ap.add_argument("--turns", type=int, default=8, help="turns per session (default 8)")
    ap.add_argument("--large", type=int, default=3, help="large sessions (default 3)")
    ap.add_argument("--large-mb", type=int, default=30, help="MB each (default 30)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="catalog-ls-", dir=args.dir))
    small, large, cache_dir = work / "small", work / "large", work / "cache"
    for folder in (small, large, cache_dir):
        folder.mkdir()
    try:
        total = populate(small, args.count, args.distinct, args.turns)
        large_total = 0
        for i in range(args.large):
            path = large / f"big-{i}.jsonl"
            generate(path, target_bytes=args.large_mb * 2**20, seed=i)
            large_total += path.stat().st_size
        age(work)
        results = {"small": {"count": args.count, "bytes": total,
                             **measure(small, args.count, args.repeat, cache_dir)}}
        if args.large:
            results["large"] = {"count": args.large, "bytes": large_total,
                                **measure(large, args.large, args.repeat, cache_dir)}
    finally:
        if not args.keep:
            shutil.rmtree(work)
    if args.json:
        print(json.dumps(results))
        return 0
    for result in results.values():
        n = result["count"]
        print(f"{n:,} sessions, {result['bytes'] / 2**20:.1f} MiB "
              f"(cache file {result['cache_bytes'] / 2**10:.0f} KiB)")
        for key, label in LABELS:
            secs = result[key]
            print(f"  {label:<24} {secs:7.3f} s  ({secs / n * 1e6:9.0f} us/session)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
