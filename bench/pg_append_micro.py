"""Per-commit latency of the PostgreSQL backend's append, against a raw INSERT, as a session
grows (the append must not slow down with the session's length).

    python bench/pg_append_micro.py [--commits 1000] [--sizes 1000,20000,100000]

Starts a throwaway embedded server (journal.pg.server), appends one-entry commits through
`PostgresStorage.open_appender()` (durability `always`: synchronous_commit on) interleaved with
raw `INSERT` + autocommit of the same line into a one-index table on the same server, and
prints p50/p99 of each at each session length (the session is filled up to each length with
1,000-line commits first). The embedded server runs with fsync off: the figures are the
database work and round trips, not the disk. On a machine shared with other work the
latencies swing; the CPU columns (the server backend's CPU time from /proc and this process's,
per commit) do not wait on anyone and compare runs more steadily.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

from journal import Durability
from journal.pg.server import EmbeddedServer
from journal.pg.storage import PostgresStorage

HEADER = b'{"type":"session","version":3,"id":"bench","timestamp":"t","cwd":"/"}\n'
LINE = (b'{"type":"message","id":"%08x","parentId":"00000000","timestamp":'
        b'"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"' + b"x" * 150
        + b'","timestamp":1}}\n')


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def backend_cpu(pid: int) -> float:
    """CPU seconds used so far by the server process `pid` (nan if not on this machine)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--sizes", default="1000,20000,100000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with EmbeddedServer() as server:
        storage = PostgresStorage(server.url(), "bench")
        storage.create(HEADER)
        lease = storage.lock(5)
        appender = storage.open_appender(Durability.always())
        raw = psycopg.connect(server.url(), autocommit=True)
        raw.execute("CREATE TABLE raw (id bigserial PRIMARY KEY, line text NOT NULL)")
        next_id = 0
        print(f"{'entries':>9}  {'append p50':>10} {'p99':>7}  {'raw p50':>8} {'p99':>7}  ratio"
              f"   CPU us/commit: append server+client, raw server+client")
        for size in sizes:
            while next_id < size:  # fill in 1,000-line commits
                appender.commit(b"".join(LINE % (next_id + k) for k in range(1000)))
                next_id += 1000
            ours: list[float] = []
            theirs: list[float] = []
            # the appender's server process: the one whose last query was journal.append
            found = raw.execute("SELECT pid FROM pg_stat_activity WHERE pid <> "
                                "pg_backend_pid() AND query LIKE '%%journal.append%%'").fetchone()
            ours_pid, raw_pid = (found[0] if found else -1), raw.info.backend_pid
            ours_server, raw_server = backend_cpu(ours_pid), backend_cpu(raw_pid)
            ours_client = raw_client = 0.0
            for _ in range(args.commits):
                line = LINE % (1 << 31 | next_id)
                next_id += 1
                cpu = time.process_time()
                started = time.perf_counter()
                appender.commit(line)
                ours.append(time.perf_counter() - started)
                ours_client += time.process_time() - cpu
                cpu = time.process_time()
                started = time.perf_counter()
                raw.execute("INSERT INTO raw (line) VALUES (%s)", (line.decode(),))
                theirs.append(time.perf_counter() - started)
                raw_client += time.process_time() - cpu
            n = args.commits / 1e6
            ours_server = (backend_cpu(ours_pid) - ours_server) / n
            raw_server = (backend_cpu(raw_pid) - raw_server) / n
            a50, a99 = statistics.median(ours) * 1e6, percentile(ours, 0.99) * 1e6
            r50, r99 = statistics.median(theirs) * 1e6, percentile(theirs, 0.99) * 1e6
            print(f"{size:>9,}  {a50:>8.0f}us {a99:>5.0f}us  {r50:>6.0f}us {r99:>5.0f}us  "
                  f"{a50 / r50:.2f}x   {ours_server:4.0f} + {ours_client / n:3.0f}   "
                  f"{raw_server:4.0f} + {raw_client / n:3.0f}")
        appender.close()
        lease.release()
        raw.close()


if __name__ == "__main__":
    main()
