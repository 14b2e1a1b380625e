"""Benchmark for "[catalog]" item 1: `journal ls` over a folder of many small sessions.

Writes ``--count`` small pi v3 sessions (default 10,000) into a new temporary folder: a few
distinct sessions written by ``journal.Session`` (``--distinct``; ``--turns`` user, assistant
and tool-result turns each, a name, a model and a compaction: about 9 KB), copied under fresh
names until the count is reached (``bench/gen_session.py`` writes nothing under 500 KB). Then
measures, each ``--repeat`` times (median reported):

* ``sessions``: ``journal.catalog.sessions([folder])`` in this process (rows for every file);
* ``cli``:      ``journal ls FOLDER --json`` as a user runs it (a fresh interpreter, start to
  exit, output to /dev/null);
* ``load-all``: for scale, ``journal.load`` of every file (what a whole-file reader pays).

The page cache is warm for all of them (the files were just written). The folder is deleted
afterwards unless ``--keep``.

Usage::

    python bench/catalog_ls.py [--count 10000] [--distinct 20] [--turns 8] [--repeat 3]
                               [--dir DIR] [--keep] [--json]
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

from journal import Session, load  # noqa: E402
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--distinct", type=int, default=20)
    ap.add_argument("--turns", type=int, default=8, help="turns per session (default 8)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="catalog-ls-", dir=args.dir))
    try:
        total = populate(folder, args.count, args.distinct, args.turns)
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
