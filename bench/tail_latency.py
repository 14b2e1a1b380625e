"""Commit-to-delivery latency and throughput of the live tail (`journal.tail.follow`).

A writer process appends entries at a steady rate (default 1,000 per second) through
`journal.Session` with `Durability.never()`. Each message carries `time.time()` read just
before its append; the follower (a thread of this process) records delivery time minus that
commit time for every entry. Run once with inotify and once with polling, then a burst (the
writer appends as fast as it can; the writer is then the bottleneck), then a backlog: the
follower alone reads a file already holding `--backlog` entries (`follow(from_start=True)`,
one shot), which measures the follower's own reading speed (entries per CPU second) without
a writer in the way.

    python bench/tail_latency.py [--rate 1000] [--seconds 6] [--modes inotify,polling,asyncio]
                                 [--burst 100000] [--backlog 200000] [--size 300]

Targets with inotify: p50 under 20 ms, p99 under 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from journal import Durability, Session
from journal.tail import afollow, follow


def writer(path: str, rate: float, count: int, size: int) -> None:
    """Append `count` messages at `rate` per second (0: as fast as possible)."""
    padding = "x" * size
    with Session.open(path, durability=Durability.never()) as session:
        start = time.monotonic()
        for i in range(count):
            if rate:
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            session.append_message(
                {"role": "user", "content": padding, "timestamp": i, "sentAt": time.time()}
            )


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(mode: str, rate: float, count: int, size: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tail-bench-") as directory:
        with Session.create(os.path.join(directory, "bench.jsonl"), cwd=directory) as s:
            path = s.path
        latencies: list[float] = []
        done = threading.Event()
        first_last: list[float] = []
        sent_span: list[float] = []

        def deliver(entry: dict[str, Any]) -> None:
            now = time.time()
            sent = entry["message"]["sentAt"]
            latencies.append(now - sent)
            if len(latencies) == 1 or len(latencies) == count:
                first_last.append(time.monotonic())
                sent_span.append(sent)
            if len(latencies) == count:
                done.set()

        async def aconsume() -> None:
            async for entry in afollow(path, from_start=True, poll=False, stop=done):
                deliver(entry)

        def consume() -> None:
            if mode == "asyncio":
                asyncio.run(aconsume())
                return
            for entry in follow(path, from_start=True, poll=mode == "polling", stop=done):
                deliver(entry)

        follower = threading.Thread(target=consume, daemon=True)
        follower.start()
        time.sleep(0.5)  # the watcher is up; the file holds only its header
        cpu_before = cpu_seconds()
        started = time.monotonic()
        subprocess.run(
            [sys.executable, __file__, "--writer", path, str(rate), str(count), str(size)],
            check=True,
        )
        written = time.monotonic() - started
        done.wait(30)
        done.set()
        follower.join(10)
        cpu = cpu_seconds() - cpu_before
    delivered = len(latencies)
    span = first_last[-1] - first_last[0] if len(first_last) == 2 else float("nan")
    ms = sorted(x * 1000 for x in latencies) or [float("nan")]
    return {
        "mode": mode,
        "entries": delivered,
        "lost": count - delivered,
        "write_rate": (count - 1) / (sent_span[-1] - sent_span[0])
        if len(sent_span) == 2 else count / written,
        "delivery_rate": (delivered - 1) / span if span == span and span > 0 else float("nan"),
        "p50": statistics.median(ms),
        "p90": ms[int(0.90 * (len(ms) - 1))],
        "p99": ms[int(0.99 * (len(ms) - 1))],
        "max": ms[-1],
        "cpu": 100 * cpu / written,
    }


def backlog(count: int, size: int, repeat: int = 5) -> dict[str, Any]:
    """The follower reading `count` entries already in the file: entries per CPU second of
    this process (best of `repeat`; CPU time, not wall time, so a busy machine does not blur
    a comparison between two versions)."""
    with tempfile.TemporaryDirectory(prefix="tail-bench-") as directory:
        with Session.create(os.path.join(directory, "bench.jsonl"), cwd=directory) as s:
            path = s.path
        writer(path, 0, count, size)
        best = float("inf")
        delivered = 0
        for _ in range(repeat):
            started = time.process_time()
            delivered = sum(1 for _ in follow(path, from_start=True, stop=lambda: True))
            best = min(best, time.process_time() - started)
    nan = float("nan")
    return {"mode": "backlog read", "entries": delivered, "lost": count - delivered,
            "write_rate": nan, "delivery_rate": delivered / best, "p50": nan, "p90": nan,
            "p99": nan, "max": nan, "cpu": nan}


def report(rows: list[dict[str, Any]]) -> None:
    print(f"{'mode':<16}{'entries':>9}{'lost':>6}{'written/s':>11}{'delivered/s':>13}"
          f"{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'CPU %':>8}")
    for r in rows:
        print(f"{r['mode']:<16}{r['entries']:>9,}{r['lost']:>6}{r['write_rate']:>11,.0f}"
              f"{r['delivery_rate']:>13,.0f}{r['p50']:>9.1f}{r['p90']:>9.1f}{r['p99']:>9.1f}"
              f"{r['max']:>9.1f}{r['cpu']:>8.1f}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        path, rate, count, size = sys.argv[2:6]
        writer(path, float(rate), int(count), int(size))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="appends per second")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each run")
    parser.add_argument("--modes", default="inotify,polling,asyncio",
                        help="follow (inotify), follow(poll=True), afollow (inotify)")
    parser.add_argument("--burst", type=int, default=100_000,
                        help="entries for the as-fast-as-possible run (0 to skip)")
    parser.add_argument("--backlog", type=int, default=200_000,
                        help="entries the follower reads from a full file (0 to skip)")
    parser.add_argument("--size", type=int, default=300, help="bytes of text per message")
    args = parser.parse_args()
    print(f"writer: {args.rate:,.0f} appends/s for {args.seconds:g}s, {args.size} B of text "
          f"each; follower: follow() or afollow() in a thread; CPU % is this process "
          f"(follower) over the run")
    rows = [run(mode, args.rate, int(args.rate * args.seconds), args.size)
            for mode in args.modes.split(",") if mode]
    if args.burst:
        rows.append({**run("inotify", 0, args.burst, args.size), "mode": "inotify burst"})
    if args.backlog:
        rows.append(backlog(args.backlog, args.size))
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
