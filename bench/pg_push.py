"""`journal push` run again: the time to find a session unchanged, or grown by a few lines.

Generates one session of SIZE bytes, pushes it into a database (`journal.pg.transfer.push`),
then times a push of the same file (unchanged), and of the file grown by a few entries
(appended), REPEAT times each (the median and the best). A push compares the file with the
database's session; from schema version 7 it compares only the rows after what the last
push stored or found alike (its SHA-256 recorded), rather than reading every row back.

    python bench/pg_push.py [--size 100MB] [--repeat 5] [--url postgresql://...]
                            (default: a throwaway embedded server)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pg_common import database, generator  # noqa: E402

from journal import Session  # noqa: E402
from journal.pg.transfer import push  # noqa: E402


def timed(work: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = work()
    return time.perf_counter() - started, value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="100MB")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--url")
    args = parser.parse_args()
    gen = generator()
    size = gen.parse_size(args.size)
    with database(args.url) as url, tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "session.jsonl")
        gen.generate(path, target_bytes=size, seed=1, compaction_every_bytes=size // 4,
                     branch_every=40)
        took, _ = timed(lambda: push(path, url))
        print(f"one session of {os.path.getsize(path):,} bytes: first push {took:.2f} s")
        rows: list[tuple[str, list[float]]] = [("unchanged", []), ("appended", [])]
        for _ in range(args.repeat):
            took, result = timed(lambda: push(path, url))
            assert [r["action"] for r in result.sessions] == ["unchanged"]  # type: ignore
            rows[0][1].append(took)
            with Session.open(path) as session:
                for n in range(5):
                    session.append_message({"role": "user", "content": f"more {n}",
                                            "timestamp": 1})
            took, result = timed(lambda: push(path, url))
            assert [r["action"] for r in result.sessions] == ["appended"]  # type: ignore
            rows[1][1].append(took)
        print(f"push again ({args.repeat} times)   median     best")
        for name, times in rows:
            print(f"  {name:<22}{statistics.median(times):>7.3f} s{min(times):>7.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
