"""search, usage and export of PostgreSQL sessions next to the same sessions as files.

Generates SESSIONS sessions of SIZE bytes each in a temporary folder, pushes them into a
database (`journal.pg.transfer.push`) and times, on both, `journal.search` (a word and a
regular expression), `journal.usage` and `journal.export` (JSONL and HTML) of the largest
session. Best of REPEAT runs each.

    python bench/pg_catalog.py [--sessions 10] [--size 2MB] [--repeat 3]
                               [--url postgresql://...]  (default: a throwaway embedded server)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pg_common import database, generator  # noqa: E402

from journal import export, search, usage  # noqa: E402
from journal.pg.transfer import push  # noqa: E402
from journal.pg.url import session_url  # noqa: E402


def best(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--size", default="2MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--url")
    args = parser.parse_args()
    gen = generator()
    size = gen.parse_size(args.size)
    with database(args.url) as url, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sessions"
        folder.mkdir()
        for seed in range(args.sessions):
            gen.generate(folder / f"s{seed}.jsonl", target_bytes=size, seed=seed,
                         compaction_every_bytes=size // 4, branch_every=40)
        started = time.perf_counter()
        push(str(folder), url)
        took = time.perf_counter() - started
        print(f"{args.sessions} sessions of {args.size}: push {took:.2f} s")
        big = max(folder.glob("*.jsonl"), key=lambda p: p.stat().st_size)
        first = big.read_bytes().split(b"\n", 1)[0]
        big_url = session_url(url, json.loads(first)["id"])
        cases: list[tuple[str, Callable[[str], object], str, str]] = [
            ("search word", lambda p: search("lock", [p]), str(folder), url),
            ("search regex", lambda p: search(r"handler\s+\w+", [p], regex=True),
             str(folder), url),
            ("usage", lambda p: usage([p]), str(folder), url),
            ("export jsonl", lambda p: export(p, "jsonl"), str(big), big_url),
            ("export html", lambda p: export(p, "html"), str(big), big_url),
        ]
        print(f"{'':14}{'files':>10}{'database':>10}{'ratio':>8}")
        for name, work, on_files, on_db in cases:
            f = best(args.repeat, lambda: work(on_files))  # noqa: B023
            d = best(args.repeat, lambda: work(on_db))  # noqa: B023
            print(f"{name:14}{f:>9.3f}s{d:>9.3f}s{d / f:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
