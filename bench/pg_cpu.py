"""Where the CPUs go when 8 sessions append at once, and how far 8 sessions can scale here.

    python bench/pg_cpu.py [--n 3000] [--procs 8] [--rounds 3] [--unix-socket]

Starts a throwaway embedded server (fsync on, synchronous_commit on) and runs, `--rounds`
times in alternating order, `bench/pg_bench.py`'s raw psycopg loop and its journal loop
(`Session.append_message`), first one session alone, then `--procs` sessions written at
once by as many processes. For the concurrent runs it accounts the CPU time of one commit,
all processes together: the writing processes (user and system time, from their own
`getrusage`), the server's (every `postgres` process: backends, WAL writer, checkpointer;
a backend that has exited is counted through its parent's reaped-children times), and the
rest of the machine's busy time (softirq work of the loopback network, the scheduler, any
other process).

Why: with N CPUs, concurrent writers can commit at most N / C commits a second, C being the
CPU time one commit costs them all; one session commits 1 / L a second, L the time one of
its commits takes. So N sessions reach at most N x L / C times one session's throughput, for
any client. The last lines print that bound for the raw loop and the journal next to the
ratio measured: where the bound is under 3 for the raw loop, a target of 3x is beyond
what these CPUs allow a client of this server, however little it adds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pg_bench  # noqa: E402

from journal.pg.server import EmbeddedServer  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    """One run's commits, seconds, and CPU seconds by part (clients, server, the rest)."""

    commits: int
    seconds: float
    client_user: float = 0.0
    client_sys: float = 0.0
    server_user: float = 0.0
    server_sys: float = 0.0
    busy: float = 0.0  # the machine's CPU seconds not idle
    share: float = 0.0  # the share of the CPUs in use while the writers wrote

    def per_commit(self, seconds: float) -> float:
        return seconds * 1e6 / self.commits

    @property
    def rest(self) -> float:
        return self.busy - self.client_user - self.client_sys - self.server_user - self.server_sys

    @property
    def rate(self) -> float:
        return self.commits / self.seconds


def server_ticks(data: Path) -> tuple[int, int]:
    """User and system clock ticks so far of the server whose data folder is `data`: its
    postmaster, the children it has reaped (in its own `cutime`/`cstime`) and those alive."""
    stats: dict[str, list[str]] = {}
    postmaster = ""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                stats[pid] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"-D" in argv and str(data).encode() in argv:
            postmaster = pid
    if not postmaster:
        raise SystemExit(f"no server of {data} found in /proc")
    main = stats[postmaster]
    user, system = int(main[11]) + int(main[13]), int(main[12]) + int(main[14])
    for fields in stats.values():
        if fields[1] == postmaster:  # the parent's pid
            user += int(fields[11])
            system += int(fields[12])
    return user, system


def concurrent(kind: str, url: str, data: Path, n: int, procs: int) -> Run:
    """The concurrent run, the server's CPU time and the machine's busy time taken over one
    window (from the writers' start to once they and their backends have ended)."""
    result = pg_bench.concurrent(kind, url, n, procs,
                                 probe=lambda: (server_ticks(data), pg_bench.cpu_times()))
    assert result.client_cpu is not None and result.probed is not None
    ((user0, sys0), machine0), ((user1, sys1), machine1) = result.probed
    if machine0 is None or machine1 is None:
        raise SystemExit("pg_cpu needs /proc (Linux)")
    spent = [b - a for a, b in zip(machine0, machine1, strict=True)]
    return Run(result.n, result.seconds, client_user=result.client_cpu[0],
               client_sys=result.client_cpu[1], server_user=(user1 - user0) / TICK,
               server_sys=(sys1 - sys0) / TICK, busy=(sum(spent) - spent[3] - spent[4]) / TICK,
               share=result.busy or 0.0)


def alone(kind: str, url: str, n: int) -> Run:
    loop = pg_bench.raw_loop if kind == "raw" else pg_bench.journal_loop
    result = loop(url, n)
    return Run(result.n, result.seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="commits per session per run")
    parser.add_argument("--procs", type=int, default=8, help="concurrent sessions")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each kind")
    parser.add_argument("--unix-socket", action="store_true",
                        help="connect through the server's Unix socket, not TCP")
    args = parser.parse_args(argv)
    cpus = os.cpu_count() or 1
    server = EmbeddedServer(fsync=True, unix_socket=args.unix_socket).start()
    url = server.socket_url() if args.unix_socket else server.url()
    one: dict[str, list[Run]] = {"raw": [], "journal": []}
    many: dict[str, list[Run]] = {"raw": [], "journal": []}
    try:
        pg_bench.journal_loop(url, 200)  # warm-up: imports, schema, prepared statements
        pg_bench.raw_loop(url, 200)
        for r in range(args.rounds):
            kinds = ("raw", "journal") if r % 2 == 0 else ("journal", "raw")
            for kind in kinds:
                one[kind].append(alone(kind, url, args.n))
                print(f"round {r + 1}: {kind} alone {one[kind][-1].rate:,.0f}/s",
                      file=sys.stderr)
            for kind in kinds:
                many[kind].append(concurrent(kind, url, server.data, args.n, args.procs))
                print(f"round {r + 1}: {kind} x{args.procs} {many[kind][-1].rate:,.0f}/s",
                      file=sys.stderr)
    finally:
        server.close()

    def med(runs: list[Run], part: str) -> float:
        return statistics.median(r.per_commit(getattr(r, part)) for r in runs)

    print(f"{cpus} CPUs, Python {sys.version.split()[0]}; {args.n:,} commits a session, "
          f"medians of {args.rounds} rounds; over "
          f"{'a Unix socket' if args.unix_socket else 'TCP (127.0.0.1)'}")
    print(f"CPU time per commit, {args.procs} sessions at once (us):")
    print(f"  {'':9}{'clients user':>13}{'sys':>6}{'server user':>13}{'sys':>6}"
          f"{'rest':>7}{'all':>7}")
    for kind in ("raw", "journal"):
        runs = many[kind]
        print(f"  {kind:9}{med(runs, 'client_user'):13.1f}{med(runs, 'client_sys'):6.1f}"
              f"{med(runs, 'server_user'):13.1f}{med(runs, 'server_sys'):6.1f}"
              f"{med(runs, 'rest'):7.1f}{med(runs, 'busy'):7.1f}")
    for kind in ("raw", "journal"):
        rate1 = statistics.median(r.rate for r in one[kind])
        rate_n = statistics.median(r.rate for r in many[kind])
        cost = med(many[kind], "busy")
        latency = 1e6 / rate1
        bound = cpus * latency / cost
        busy = statistics.median(r.share for r in many[kind])
        print(f"  {kind:9}one session {rate1:,.0f}/s ({latency:.0f} us a commit); "
              f"{args.procs} sessions {rate_n:,.0f}/s = {rate_n / rate1:.2f}x one "
              f"(CPUs {busy:.0%} busy); at most {bound:.2f}x with every CPU busy "
              f"({cpus} x {latency:.0f} / {cost:.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
