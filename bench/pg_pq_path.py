"""What psycopg's cursor costs per statement, against the same statement sent through its
libpq layer (`psycopg.pq`), as `journal.pg.prepared` sends the one-entry commit.

    python bench/pg_pq_path.py [--commits 2000] [--rounds 5] [--fsync]

A throwaway embedded server (fsync off unless `--fsync`); one autocommit INSERT of a
~1 KiB row per commit into a one-index table, `--rounds` times each way, the two ways taking
turns on fresh connections. Per commit: this process's CPU time and the wall time, each
round's and their medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import psycopg

from journal.pg.prepared import Prepared
from journal.pg.server import EmbeddedServer

LINE = '{"pad":"' + "x" * 1013 + '"}'
TABLE = ("CREATE TABLE IF NOT EXISTS pq_path (stream text NOT NULL, position bigint NOT NULL, "
         "line text NOT NULL, PRIMARY KEY (stream, position))")
TEXT, INT8 = 25, 20


Step = Callable[[str, int], None]


def through_cursor(conn: psycopg.Connection[object]) -> Step:
    sql = "INSERT INTO pq_path VALUES (%s, %s, %s) RETURNING position"
    cursor = conn.cursor()  # kept, as the appender kept its own

    def step(stream: str, i: int) -> None:
        if cursor.execute(sql, (stream, i, LINE), prepare=True).fetchone() is None:
            raise RuntimeError("the INSERT returned no row")

    return step


def through_pq(conn: psycopg.Connection[object]) -> Step:
    statement = Prepared(b"pq_path", "INSERT INTO pq_path VALUES ($1, $2, $3) RETURNING position",
                         (TEXT, INT8, TEXT))

    def step(stream: str, i: int) -> None:
        if statement.first_row(conn, (stream, str(i), LINE)) is None:
            raise RuntimeError("the INSERT returned no row")

    return step


def measure(url: str, way: Callable[[psycopg.Connection[object]], Step],
            n: int) -> tuple[float, float]:
    """(CPU us, wall us) per commit of `n` commits, after 100 to warm up."""
    with psycopg.connect(url, autocommit=True) as conn:
        step, stream = way(conn), uuid.uuid4().hex
        for i in range(100):
            step(stream + "-warm", i)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            step(stream, i)
        return ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fsync", action="store_true", help="durable commits (WAL flushed)")
    args = parser.parse_args()
    with EmbeddedServer(fsync=args.fsync) as server:
        url = server.url()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(TABLE)
        ways = {"psycopg cursor": through_cursor, "psycopg.pq": through_pq}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for turn in range(args.rounds):
            order = list(ways.items())
            for name, way in order if turn % 2 == 0 else reversed(order):
                results[name].append(measure(url, way, args.commits))
    print(f"fsync {'on' if args.fsync else 'off'}; {args.commits:,} commits a round, "
          f"{args.rounds} rounds each way (us per commit)")
    for name, rows in results.items():
        cpu = [round(c) for c, _ in rows]
        wall = [round(w) for _, w in rows]
        print(f"{name:<16} CPU {statistics.median(cpu):5.0f} {cpu}   "
              f"wall {statistics.median(wall):5.0f} {wall}")


if __name__ == "__main__":
    main()
