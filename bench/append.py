"""Append throughput and per-commit latency of `Session.append_message`, next to raw loops.

For each durability policy (never, batch:100:1000, always) it appends ~1 KB messages through
the public API and times every commit; in the same run it times a raw `os.write` loop and a raw
`os.write` + `os.fdatasync` loop on O_APPEND descriptors in the same directory, so the ratios
compare like with like on this machine and filesystem.

    python bench/append.py [--n 20000] [--n-sync 2000] [--dir DIR]

Targets: no-sync appends >= 100,000 entries/s; `always` within 1.3x of the raw fdatasync loop.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from journal import Durability, Session  # noqa: E402

LINE_BYTES = 1024
NO_SYNC_TARGET = 100_000.0
SYNC_RATIO_TARGET = 1.3


@dataclass
class Result:
    name: str
    n: int
    seconds: float
    latencies_ns: list[int]
    line_bytes: float = LINE_BYTES

    @property
    def rate(self) -> float:
        return self.n / self.seconds if self.seconds else float("inf")

    def percentile(self, q: float) -> float:
        """The q-th percentile latency in microseconds."""
        ordered = sorted(self.latencies_ns)
        index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
        return ordered[index] / 1000.0


def timed(name: str, n: int, step: Callable[[int], object]) -> Result:
    """Run `step(i)` n times, timing each call and the whole loop."""
    clock = time.perf_counter_ns
    lat = [0] * n
    start = clock()
    for i in range(n):
        t0 = clock()
        step(i)
        lat[i] = clock() - t0
    return Result(name, n, (clock() - start) / 1e9, lat)


def message(i: int) -> dict:
    """A user message whose JSONL entry line is about LINE_BYTES long."""
    text = f"message {i:08d} " + "lorem ipsum dolor sit amet " * 40
    return {"role": "user", "content": text[: LINE_BYTES - 140], "timestamp": 1_700_000_000_000}


def raw_loop(directory: str, n: int, sync: bool) -> Result:
    path = os.path.join(directory, f"raw-{'sync' if sync else 'nosync'}.jsonl")
    line = b'{"pad":"' + b"x" * (LINE_BYTES - 11) + b'"}\n'
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        write, fdatasync = os.write, os.fdatasync
        if sync:
            def step(i: int) -> None:
                write(fd, line)
                fdatasync(fd)
        else:
            def step(i: int) -> None:
                write(fd, line)
        name = "raw os.write+fdatasync" if sync else "raw os.write"
        result = timed(name, n, step)
    finally:
        os.close(fd)
        os.unlink(path)
    return result


def session_loop(directory: str, n: int, policy: str) -> Result:
    durability = Durability.parse(policy)
    messages = [message(i) for i in range(n)]
    with Session.create(directory, cwd=directory, durability=durability) as s:
        append = s.append_message
        result = timed(f"journal {policy}", n, lambda i: append(messages[i]))
    with open(s.path, "rb") as f:
        header = len(f.readline())
    result.line_bytes = (os.path.getsize(s.path) - header) / max(1, n)
    for leftover in (s.path, s.path + ".lock", s.path + ".quarantine"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    return result


def row(r: Result, base: Result | None) -> str:
    """One table line; the ratio is how many times longer than `base` a commit takes."""
    ratio = f"{base.rate / r.rate:6.2f}x vs {base.name}" if base is not None else "     -"
    return (
        f"{r.name:<24}{r.line_bytes:>7,.0f}{r.n:>8,}{r.rate:>12,.0f}{r.percentile(50):>9.1f}"
        f"{r.percentile(99):>9.1f}  {ratio}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="commits per no-sync run")
    parser.add_argument("--n-sync", type=int, default=2_000,
                        help="commits per run that syncs every commit (default 2000)")
    parser.add_argument("--dir", help="directory to write in (default: a temp dir here)")
    args = parser.parse_args(argv)
    n, n_sync = args.n, min(args.n_sync, args.n)

    own_dir = args.dir is None
    directory = tempfile.mkdtemp(prefix=".bench-append-", dir=os.getcwd()) if own_dir else args.dir
    os.makedirs(directory, exist_ok=True)
    try:
        session_loop(directory, min(n, 2000), "never")  # warm-up: imports, caches, allocator
        raw = raw_loop(directory, n, sync=False)
        raw_sync = raw_loop(directory, n_sync, sync=True)
        never = session_loop(directory, n, "never")
        batch = session_loop(directory, n, "batch:100:1000")
        always = session_loop(directory, n_sync, "always")
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)

    version = sys.version.split()[0]
    print(f"append benchmark: ~{LINE_BYTES} B lines, dir {directory}, python {version}")
    print(
        f"{'loop':<24}{'B/line':>7}{'commits':>8}{'commits/s':>12}{'p50 us':>9}{'p99 us':>9}"
        "  time ratio"
    )
    print(row(raw, None))
    print(row(raw_sync, None))
    print(row(never, raw))
    print(row(batch, raw))
    print(row(always, raw_sync))
    print()
    sync_ratio = raw_sync.rate / always.rate
    p50_ratio = always.percentile(50) / raw_sync.percentile(50)
    no_sync_ok = never.rate >= NO_SYNC_TARGET
    sync_ok = sync_ratio <= SYNC_RATIO_TARGET
    print(
        f"target no-sync >= {NO_SYNC_TARGET:,.0f}/s: {never.rate:,.0f}/s "
        f"-> {'MET' if no_sync_ok else 'MISSED'}"
    )
    print(
        f"target always <= {SYNC_RATIO_TARGET}x raw fdatasync: {sync_ratio:.2f}x by rate, "
        f"{p50_ratio:.2f}x by p50 -> {'MET' if sync_ok else 'MISSED'}"
    )
    spread = statistics.pstdev(always.latencies_ns) / 1000.0
    print(f"(always: mean {always.seconds / always.n * 1e6:.1f} us, stdev {spread:.1f} us)")
    return 0 if no_sync_ok and sync_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
