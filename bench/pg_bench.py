"""The PostgreSQL backend against raw psycopg, on the same embedded server, in the same run.

What it measures (each journal figure next to its raw psycopg baseline):

- appends/s and p50/p99 per commit for one session: `Session.append_message` (one entry per
  commit) versus a raw loop of one INSERT committed per row (autocommit: one round trip,
  the least a durable row can cost) into a table of the same shape, the two taking turns
  (`--turns`): on a 2-core machine a single run of either swings by 10-20%. The journal
  sends its one-entry statement through psycopg's libpq layer (`journal.pg.prepared`), which
  costs the client less than psycopg's cursor: a third loop sends the raw INSERT that way
  too, and the journal's time against it is printed and judged as well (the journal's own
  cost, with the client path set aside);
- the same with 8 sessions written concurrently, each by its own process, and the ratio of
  their total throughput to one session's;
- live tail latency: a writer process appends at a steady rate, `journal.follow(url)` in this
  process takes each entry in; latency = delivery time - commit time (p50/p99);
- resume of a 1,000,000-entry session (`Session.open` + `live_context`): the stream row keeps
  the latest compaction's position, so only the tail is read.

    python bench/pg_bench.py [--n 3000] [--turns 10] [--procs 8] [--tail 2000]
                             [--resume 1000000] [--unix-socket]
                             [--url postgresql://...]   (default: a throwaway embedded server)

`--unix-socket` connects every client to the embedded server through its Unix socket rather
than TCP on 127.0.0.1: how a client on the database's own machine connects by default. On 2
cores shared by the server and 8 writing processes, the loopback TCP stack's CPU time is a
part of what bounds the concurrent runs.

Targets: one session within 1.3x of the raw loop; 8 sessions >= 3x one session's throughput
(2 cores); tail p50 < 20 ms; resume of 1,000,000 entries < 100 ms.

The concurrent rows say how busy the machine's CPUs were. When the writers, the server and
its WAL flushes share 2 cores, 8 sessions keep them all busy: throughput is then bound by the
CPU time a commit costs, and the raw loop's own scaling (printed beside the verdict) shows
what the machine allows.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

LINE_BYTES = 1024
RATIO_TARGET = 1.3
SCALE_TARGET = 3.0
TAIL_P50_TARGET_MS = 20.0
RESUME_TARGET_MS = 100.0


@dataclass
class Result:
    name: str
    n: int
    seconds: float
    latencies_ns: list[int] = field(default_factory=list)
    busy: float | None = None  # share of the machine's CPU time in use meanwhile (0..1)
    client_cpu: tuple[float, float] | None = None  # the writers' user and system seconds
    probed: tuple[Any, Any] | None = None  # `concurrent`'s probe, before and after

    @property
    def rate(self) -> float:
        return self.n / self.seconds if self.seconds else float("inf")

    def percentile(self, q: float) -> float:
        """The q-th percentile latency in milliseconds."""
        if not self.latencies_ns:
            return float("nan")
        ordered = sorted(self.latencies_ns)
        index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
        return ordered[index] / 1e6


def timed(name: str, n: int, step: Callable[[int], object]) -> Result:
    clock = time.perf_counter_ns
    lat = [0] * n
    start = clock()
    for i in range(n):
        t0 = clock()
        step(i)
        lat[i] = clock() - t0
    return Result(name, n, (clock() - start) / 1e9, lat)


def message(i: int) -> dict[str, Any]:
    """A user message whose entry line is about LINE_BYTES long."""
    text = f"message {i:08d} " + "lorem ipsum dolor sit amet " * 40
    return {"role": "user", "content": text[: LINE_BYTES - 140], "timestamp": 1_700_000_000_000}


# raw psycopg


RAW_TABLE = """CREATE TABLE IF NOT EXISTS bench_raw (
    stream text NOT NULL, position bigint NOT NULL, line text NOT NULL,
    PRIMARY KEY (stream, position))"""


def raw_loop(url: str, n: int, name: str = "raw INSERT+COMMIT") -> Result:
    """One INSERT per commit into a table of the backend's shape, one round trip each."""
    stream = uuid.uuid4().hex
    line = '{"pad":"' + "x" * (LINE_BYTES - 11) + '"}'
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RAW_TABLE)
        execute = conn.execute
        sql = "INSERT INTO bench_raw (stream, position, line) VALUES (%s, %s, %s)"
        execute(sql, (stream, -1, line), prepare=True)
        return timed(name, n, lambda i: execute(sql, (stream, i, line), prepare=True))


def raw_pq_loop(url: str, n: int, name: str = "raw INSERT via psycopg.pq") -> Result:
    """The raw loop, the INSERT sent through psycopg's libpq layer as the journal sends its
    one-entry statement (`journal.pg.prepared`): what the client path alone is worth."""
    from journal.pg.prepared import Prepared

    stream = uuid.uuid4().hex
    line = '{"pad":"' + "x" * (LINE_BYTES - 11) + '"}'
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RAW_TABLE)
        insert = Prepared(b"bench_raw", "INSERT INTO bench_raw (stream, position, line) "
                          "VALUES ($1, $2, $3) RETURNING position", (25, 20, 25))
        def step(i: int) -> None:
            if insert.first_row(conn, (stream, str(i), line)) is None:
                raise RuntimeError("the INSERT returned no row")

        step(-1)
        return timed(name, n, step)


def journal_loop(url: str, n: int, name: str = "journal append") -> Result:
    """`Session.append_message` on a new database session, one entry per commit."""
    from journal import Session
    from journal.storage import as_storage

    messages = [message(i) for i in range(n)]
    target = f"{url}{'&' if '?' in url else '?'}session={uuid.uuid4()}"
    with Session.create(as_storage(target), cwd="/bench") as session:
        append = session.append_message
        return timed(name, n, lambda i: append(messages[i]))


def in_turns(url: str, n: int, turns: int) -> tuple[Result, Result, Result, list[float]]:
    """The raw loop, the raw loop through psycopg.pq and the journal loop `turns` times each,
    n / turns commits a time (each time a fresh connection and a fresh session; the order
    reversed each turn), so a slow moment of the machine falls on all alike; each result sums
    its turns. Also the ratio of the journal's time to the raw loop's in each turn (how far
    the machine's moments moved the result)."""
    raw = Result("raw INSERT+COMMIT", 0, 0.0)
    raw_pq = Result("raw INSERT via psycopg.pq", 0, 0.0)
    ours = Result("journal append", 0, 0.0)
    ratios: list[float] = []
    per = max(1, n // turns)
    for turn in range(turns):
        order = [(raw, raw_loop), (raw_pq, raw_pq_loop), (ours, journal_loop)]
        seconds: dict[str, float] = {}
        for result, loop in order if turn % 2 == 0 else reversed(order):
            part = loop(url, per)
            result.n += part.n
            result.seconds += part.seconds
            result.latencies_ns += part.latencies_ns
            seconds[result.name] = part.seconds
        ratios.append(seconds[ours.name] / seconds[raw.name])
    return raw, raw_pq, ours, ratios


def _worker(kind: str, url: str, n: int, start: Any, out: Any) -> None:
    loop = raw_loop if kind == "raw" else journal_loop
    loop(url, 20)  # warm: imports, connections, prepared statements
    start.wait()
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = loop(url, n)
    after = resource.getrusage(resource.RUSAGE_SELF)
    out.put((result.n, result.seconds, result.latencies_ns, after.ru_utime - before.ru_utime,
             after.ru_stime - before.ru_stime))


def cpu_times() -> list[int] | None:
    """The machine's CPU time so far by kind (user, nice, system, idle, iowait, ...), in
    clock ticks, or None where /proc/stat is not there."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None


def busy_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of CPU time not idle (nor waiting on I/O) between two `cpu_times`."""
    if before is None or after is None:
        return None
    spent = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(spent)
    return (total - spent[3] - spent[4]) / total if total else None


def concurrent(kind: str, url: str, n: int, procs: int,
               probe: Callable[[], Any] | None = None) -> Result:
    """`procs` processes, each writing its own session, started together; how busy the
    machine's CPUs were meanwhile (a run that keeps them all busy is bound by CPU, not by
    waiting on the disk or the network, and more sessions cannot make it faster), and the
    writers' own CPU time. `probe()`, if given, is taken as they start and once they have
    ended (and their connections with them), in `probed`."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(kind, url, n, start, out))
               for _ in range(procs)]
    for w in workers:
        w.start()
    time.sleep(3.0)  # every worker imported and warmed (each run opens its own connection)
    first = probe() if probe is not None else None
    ticks = cpu_times()
    began = time.perf_counter()
    start.set()
    results = [out.get() for _ in workers]
    wall = time.perf_counter() - began
    busy = busy_share(ticks, cpu_times())
    for w in workers:
        w.join()
    probed = None
    if probe is not None:
        time.sleep(0.5)  # a closed connection's backend exits and is reaped
        probed = (first, probe())
    lat = [x for r in results for x in r[2]]
    label = "raw" if kind == "raw" else "journal"
    return Result(f"{label} x{procs} sessions", sum(r[0] for r in results), wall, lat, busy,
                  (sum(r[3] for r in results), sum(r[4] for r in results)), probed)


# tail


def _tail_writer(url: str, count: int, rate: float, ready: Any, go: Any) -> None:
    from journal import Session
    from journal.storage import as_storage

    with Session.open(as_storage(url)) as session:
        ready.set()
        go.wait()
        time.sleep(1.0)  # the follower opens meanwhile (it starts at the end)
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for i in range(count):
            session.append_custom_entry("bench.tick", {"i": i, "t": time.time()})
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


def tail_latency(url: str, count: int, rate: float) -> Result:
    from journal import Session, follow
    from journal.storage import as_storage

    target = f"{url}{'&' if '?' in url else '?'}session={uuid.uuid4()}"
    Session.create(as_storage(target), cwd="/bench").close()
    ctx = mp.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_tail_writer, args=(target, count, rate, ready, go))
    writer.start()
    ready.wait(30)
    lat: list[int] = []
    seen = 0
    began = time.perf_counter()
    deadline = time.monotonic() + 60 + count / rate
    go.set()
    for entry in follow(target, stop=lambda: time.monotonic() > deadline, timeout=1.0):
        if entry.get("customType") != "bench.tick":
            continue
        lat.append(int((time.time() - entry["data"]["t"]) * 1e9))
        seen += 1
        if seen == count:
            break
    wall = time.perf_counter() - began
    writer.join()
    return Result("tail follow(url)", seen, wall, lat)


# resume


def resume_big(url: str, entries: int) -> tuple[Result, Result]:
    """Push a generated session of `entries` entries (a compaction near its end), then time
    `Session.open` + `live_context` (the best of 5) and a full `load` for comparison."""
    from journal import Session, load
    from journal.pg.transfer import push_bytes
    from journal.storage import as_storage

    data, session_id = _big_session(entries)
    target = f"{url}{'&' if '?' in url else '?'}session={session_id}"
    t0 = time.perf_counter()
    push_bytes(data, target)
    print(f"  (pushed {entries:,} entries, {len(data) / 1e6:,.0f} MB, in "
          f"{time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    times = []
    for _ in range(5):
        t = time.perf_counter_ns()
        with Session.open(as_storage(target)) as session:
            session.live_context()
        times.append(time.perf_counter_ns() - t)
    t = time.perf_counter_ns()
    loaded = len(load(as_storage(target)).entries)
    full = time.perf_counter_ns() - t
    assert loaded == entries, loaded
    return (Result(f"resume {entries:,} entries", 1, min(times) / 1e9, times),
            Result(f"load  {entries:,} entries", 1, full / 1e9, [full]))


def _big_session(entries: int) -> tuple[bytes, str]:
    """A valid pi v3 session of `entries` entries: short messages in one chain, a compaction
    keeping the last 20 of them, the settings after it, and 19 more messages."""
    import orjson

    from journal import model

    header = model.make_header("/bench")
    lines = [orjson.dumps(header)]
    parent = None
    ids: list[str] = []
    for i in range(entries - 1 - 21):
        entry_id = f"{i:08x}"
        role = "user" if i % 2 == 0 else "assistant"
        content: Any = f"m{i}" if role == "user" else [{"type": "text", "text": f"a{i}"}]
        msg: dict[str, Any] = {"role": role, "content": content, "timestamp": 1_700_000_000_000}
        if role == "assistant":
            msg.update(provider="anthropic", model="claude", api="anthropic-messages",
                       usage={"input": 1, "output": 1}, stopReason="stop")
        lines.append(orjson.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                   "timestamp": "2026-01-01T00:00:00.000Z", "message": msg}))
        ids.append(entry_id)
        parent = entry_id
    first_kept = ids[-20]
    lines.append(orjson.dumps({"type": "compaction", "id": "c0000000", "parentId": parent,
                               "timestamp": "2026-01-01T00:00:00.000Z", "summary": "earlier",
                               "firstKeptEntryId": first_kept, "tokensBefore": 1000}))
    # the settings right after the compaction, as Session.append_compaction writes them
    lines.append(orjson.dumps({"type": "model_change", "id": "c0000001", "parentId": "c0000000",
                               "timestamp": "2026-01-01T00:00:00.000Z",
                               "provider": "anthropic", "modelId": "claude"}))
    lines.append(orjson.dumps({"type": "thinking_level_change", "id": "c0000002",
                               "parentId": "c0000001", "timestamp": "2026-01-01T00:00:00.000Z",
                               "thinkingLevel": "high"}))
    parent = "c0000002"
    for j in range(19):
        entry_id = f"d{j:07x}"
        lines.append(orjson.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                   "timestamp": "2026-01-01T00:00:00.000Z",
                                   "message": {"role": "user", "content": f"after {j}",
                                               "timestamp": 1_700_000_000_000}}))
        parent = entry_id
    return b"\n".join(lines) + b"\n", header["id"]


# report


def row(r: Result, base: Result | None = None, scale: Result | None = None) -> str:
    extra = ""
    if base is not None:
        extra = f"  {base.rate / r.rate:5.2f}x the time of {base.name}"
    if scale is not None:
        extra += f"  {r.rate / scale.rate:5.2f}x the throughput of {scale.name}"
    if r.busy is not None:
        extra += f"  (CPU {r.busy:.0%} busy)"
    return (f"{r.name:<28}{r.n:>9,}{r.rate:>11,.0f}{r.percentile(50):>9.2f}"
            f"{r.percentile(99):>9.2f}{extra}")


def start_server(unix_socket: bool = False) -> tuple[str, Callable[[], None]]:
    """A throwaway embedded server (journal.pg.server), its URL (through its Unix socket
    with `unix_socket`, else TCP), and how to stop it."""
    from journal.pg.server import EmbeddedServer

    # its one database is new: that the journal schema is made there is no news
    logging.getLogger("journal.pg.schema").setLevel(logging.ERROR)
    server = EmbeddedServer(fsync=True, unix_socket=unix_socket).start()
    return (server.socket_url() if unix_socket else server.url()), server.close


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="commits per session per run")
    parser.add_argument("--turns", type=int, default=10,
                        help="turns the one-session raw and journal loops take")
    parser.add_argument("--procs", type=int, default=8, help="concurrent sessions")
    parser.add_argument("--tail", type=int, default=2000, help="entries followed")
    parser.add_argument("--tail-rate", type=float, default=200.0, help="appends/s while tailing")
    parser.add_argument("--resume", type=int, default=1_000_000,
                        help="entries of the resumed session (0: skip)")
    parser.add_argument("--url", help="a database to use (default: a throwaway embedded server)")
    parser.add_argument("--unix-socket", action="store_true",
                        help="connect to the embedded server through its Unix socket, not TCP")
    args = parser.parse_args(argv)
    if args.url and args.unix_socket:
        parser.error("--unix-socket is for the embedded server; give the socket in --url "
                     "(postgresql://user@/db?host=/socket/folder)")
    url, stop = (args.url, lambda: None) if args.url else start_server(args.unix_socket)
    try:
        journal_loop(url, 200)  # warm-up: imports, schema, prepared statements
        raw_loop(url, 200)
        raw_pq_loop(url, 200)
        raw1, raw1_pq, one, turn_ratios = in_turns(url, args.n, args.turns)
        raw_n = concurrent("raw", url, args.n, args.procs)
        many = concurrent("journal", url, args.n, args.procs)
        tail = tail_latency(url, args.tail, args.tail_rate)
        resumed = resume_big(url, args.resume) if args.resume else None
        with psycopg.connect(url) as conn:
            server = conn.execute("SHOW server_version").fetchone()
            sync = conn.execute("SHOW synchronous_commit").fetchone()
            host = conn.pgconn.host.decode()
    finally:
        stop()
    version, mode = server[0] if server else "?", sync[0] if sync else "?"
    via = f"a Unix socket ({host})" if host.startswith("/") else f"TCP ({host})"
    print(f"PostgreSQL {version} (synchronous_commit={mode}, fsync on), Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs; ~{LINE_BYTES} B entries; "
          f"over {via}")
    print(f"{'run':<28}{'commits':>9}{'per s':>11}{'p50 ms':>9}{'p99 ms':>9}")
    print(row(raw1))
    print(row(raw1_pq, raw1))
    print(row(one, raw1))
    print(f"{'':<28}{raw1_pq.rate / one.rate:.2f}x the time of {raw1_pq.name} (the same "
          "client path: the journal's own cost)")
    print(f"{'':<28}one turn of {args.n // args.turns:,} commits each: "
          f"{min(turn_ratios):.2f}x to {max(turn_ratios):.2f}x "
          f"(median {statistics.median(turn_ratios):.2f}x, {len(turn_ratios)} turns)")
    print(row(raw_n, None, raw1))
    print(row(many, raw_n, one))
    print(row(tail))
    verdicts = [
        ("one session within 1.3x of raw", raw1.rate / one.rate <= RATIO_TARGET),
        ("one session within 1.3x of raw sent the journal's way (psycopg.pq)",
         raw1_pq.rate / one.rate <= RATIO_TARGET),
        (f"{args.procs} sessions >= 3x one (raw psycopg: {raw_n.rate / raw1.rate:.2f}x)",
         many.rate / one.rate >= SCALE_TARGET),
        ("tail p50 < 20 ms", tail.percentile(50) < TAIL_P50_TARGET_MS),
    ]
    if resumed is not None:
        fast, full = resumed
        print(f"{fast.name:<28} best of 5: {fast.seconds * 1000:8.1f} ms "
              f"(median {statistics.median(fast.latencies_ns) / 1e6:.1f} ms); "
              f"{full.name}: {full.seconds * 1000:,.0f} ms")
        verdicts.append(("resume < 100 ms", fast.seconds * 1000 < RESUME_TARGET_MS))
    for name, ok in verdicts:
        print(f"  {'met    ' if ok else 'MISSED '} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
