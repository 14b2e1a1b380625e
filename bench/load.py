"""Benchmark for "[projector]": load and resume of large sessions, against pi.

Generates a session of each size with ``bench/gen_session.py`` (the latest compaction within
the last 5 MiB), then measures, each run in a fresh Python process:

* ``full``:    ``load(path)`` + ``Tree(snap.entries)`` + ``build_context``;
* ``resume``:  ``resume(path)`` + ``Tree(snap.entries, complete=False)`` + ``build_context``;
* ``session``: ``Session.open(path)`` + ``.context()`` + ``.close()``;
* ``cli``, ``cli-for-model``: the command ``journal context PATH [--for-model] --json`` as a
  user runs it (``python -m journal.cli``), start to exit.

Wall time is measured inside the child around the operation only (interpreter start-up and
imports excluded; the import time of journal is reported separately). Memory is the child's
peak RSS after the operation (``VmHWM`` from /proc/self/status; ``ru_maxrss`` is shown too),
and the growth of the peak over the RSS just before the operation. On Linux ``ru_maxrss`` of
a freshly exec'd child starts at its parent's peak RSS (the kernel keeps it across exec), so
the sessions are generated in a separate process to keep this parent small, and VmHWM, which
belongs to the child's own address space, is the figure checked against the target.
Each measurement runs ``--repeat`` times; medians are reported.

The ``cli`` modes time the whole command in the parent (interpreter start-up, imports, the
read, printing the JSON, exit) and take the command's peak RSS from ``wait4``'s
``ru_maxrss`` for that child: the child's own figure, except that it cannot be below this
parent's peak RSS (kept across exec), which is printed beside it. Their targets: under
300 ms and under 150 MB for the 1 GB session.

Where node and pi are installed, pi's ``SessionManager.open`` + ``buildSessionContext`` runs
on the same files (``bench/pi_context.mjs --time --direct``, one fresh node process per run;
pi reads a file into one string, so only files under 512 MiB), and the ratio pi / journal for
the full load is printed.

Targets (from the issue): full load + context at least 1.5x faster than pi; resume + context
of the 1 GB session under 100 ms and under 100 MB peak RSS.

Usage::

    python bench/load.py [--sizes 100MB,1GB] [--repeat 3] [--dir DIR] [--keep] [--seed N]
                         [--pi-dir DIR] [--node PATH] [--no-pi] [--json]

Files are written to a new temporary directory under ``--dir`` (default: the current
directory) and deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
PI_CONTEXT = BENCH / "pi_context.mjs"
DEFAULT_PI_DIR = "/tmp/pi/node_modules/@mariozechner/pi-coding-agent"
DEFAULT_NODE = "/usr/bin/node"
MiB = 1024 * 1024
TAIL = 5 * MiB
PI_MAX_BYTES = 512 * MiB - 64  # V8's longest string: pi reads the file into one string

MODES = ("full", "resume", "session")
CLI_MODES = ("cli", "cli-for-model")
MODE_LABELS = {
    "full": "load + Tree + context",
    "resume": "resume + Tree + context",
    "session": "Session.open + context + close",
    "cli": "journal context (whole command)",
    "cli-for-model": "journal context --for-model",
}

TARGET_SPEEDUP = 1.5
TARGET_RESUME_MS = 100.0
TARGET_RESUME_RSS_MIB = 100.0
TARGET_CLI_MS = 300.0
TARGET_CLI_RSS_MIB = 150.0


# ---------------------------------------------------------------------------------------
# child: one measurement in a fresh interpreter


def _proc_status_kib(field: bytes) -> int | None:
    """A /proc/self/status memory field in KiB (VmRSS: current, VmHWM: peak), or None."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(field + b":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def child(mode: str, path: str) -> dict[str, Any]:
    import resource

    def maxrss_kib() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    t0 = time.perf_counter()
    from journal.context import build_context
    from journal.session import Session
    from journal.snapshot import load, resume
    from journal.tree import Tree

    import_s = time.perf_counter() - t0

    rss_before = _proc_status_kib(b"VmRSS") or maxrss_kib()
    maxrss_before = maxrss_kib()
    entries = complete = None
    t0 = time.perf_counter()
    if mode == "full":
        snap = load(path)
        tree = Tree(snap.entries)
        ctx = build_context(tree, tree.leaf_id)
    elif mode == "resume":
        snap = resume(path)
        tree = Tree(snap.entries, complete=snap.complete)
        ctx = build_context(tree, tree.leaf_id)
    elif mode == "session":
        session = Session.open(path)
        ctx = session.context()
        tree = session.tree
        session.close()
    else:
        raise SystemExit(f"unknown mode {mode}")
    op_s = time.perf_counter() - t0
    maxrss_after = maxrss_kib()
    peak = _proc_status_kib(b"VmHWM") or maxrss_after
    entries, complete = len(tree.entries), tree.complete
    return {
        "mode": mode,
        "import_s": import_s,
        "op_s": op_s,
        "peak_kib": peak,
        "maxrss_kib": maxrss_after,
        "maxrss_before_kib": maxrss_before,
        "rss_before_kib": rss_before,
        "delta_kib": peak - rss_before,
        "entries": entries,
        "complete": complete,
        "messages": len(ctx.messages),
        "leaf_id": ctx.leaf_id,
    }


# ---------------------------------------------------------------------------------------
# parent


def _gen_session_module() -> Any:
    name = "bench_gen_session"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / "gen_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _wait_with_rusage(cmd: list[str]) -> tuple[int, bytes, bytes, Any, float]:
    """Run `cmd`; return its exit status, stdout, stderr, rusage and wall seconds."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), usage, wall


def run_child(mode: str, path: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path)]
    code, out, err, _usage, wall = _wait_with_rusage(cmd)
    if code != 0:
        raise RuntimeError(f"child {mode} failed ({code}): {err.decode(errors='replace')}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def run_cli(mode: str, path: Path) -> dict[str, Any]:
    """`journal context PATH --json` (with `--for-model` in that mode) as a user runs it: wall
    time of the whole process, its peak RSS from wait4."""
    cmd = [sys.executable, "-m", "journal.cli", "context", str(path), "--json"]
    if mode == "cli-for-model":
        cmd.append("--for-model")
    code, out, err, usage, wall = _wait_with_rusage(cmd)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}): {err.decode(errors='replace')}")
    context = json.loads(out)
    return {"op_s": wall, "process_s": wall, "maxrss_kib": usage.ru_maxrss,
            "peak_kib": usage.ru_maxrss, "messages": len(context["messages"]),
            "leaf_id": context["leafId"]}


def generate_in_child(path: Path, nbytes: int, seed: int) -> dict[str, Any]:
    """Write a session with gen_session in another process (keeps this one's RSS small)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--generate", str(path), str(nbytes),
           str(seed)]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"generating {path} failed: {proc.stderr.decode(errors='replace')}")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def find_node(explicit: str | None) -> str | None:
    for candidate in (explicit, DEFAULT_NODE, shutil.which("node")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def pi_missing(node: str | None, pi_dir: str) -> str | None:
    if node is None:
        return "node not found"
    if not (Path(pi_dir) / "dist" / "core" / "session-manager.js").is_file():
        return f"pi not found at {pi_dir}"
    return None


def run_pi(node: str, pi_dir: str, path: Path) -> dict[str, Any]:
    """One fresh node process: pi's open + buildSessionContext time, and its peak RSS."""
    cmd = [node, str(PI_CONTEXT), "--direct", "--time", "--counts", "--pi-dir", pi_dir,
           str(path)]
    code, out, err, usage, wall = _wait_with_rusage(cmd)
    lines = out.decode().strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    if code != 0 or "error" in result:
        detail = result.get("error") or err.decode(errors="replace")
        raise RuntimeError(f"pi failed ({code}): {detail.strip()[:500]}")
    return {"op_s": result["ms"] / 1000, "maxrss_kib": usage.ru_maxrss,
            "messages": result.get("messageCount"), "leaf_id": result.get("leafId"),
            "pi_version": result.get("pi_version"), "process_s": wall}


def _own_maxrss_kib() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["op_s"] for r in runs]
    out = {
        "runs": len(runs),
        "op_ms_median": statistics.median(times) * 1000,
        "op_ms_min": min(times) * 1000,
        "op_ms_max": max(times) * 1000,
        "maxrss_mib_median": _median(runs, "maxrss_kib") / 1024,
        "peak_mib_median": _median(runs, "peak_kib" if "peak_kib" in runs[0] else "maxrss_kib")
        / 1024,
        "process_ms_median": _median(runs, "process_s") * 1000,
        "messages": runs[0].get("messages"),
        "leaf_id": runs[0].get("leaf_id"),
    }
    if "import_s" in runs[0]:
        out["import_ms_median"] = _median(runs, "import_s") * 1000
        out["delta_mib_median"] = _median(runs, "delta_kib") / 1024
        out["rss_before_mib_median"] = _median(runs, "rss_before_kib") / 1024
        out["entries"] = runs[0]["entries"]
        out["complete"] = runs[0]["complete"]
    if "pi_version" in runs[0]:
        out["pi_version"] = runs[0]["pi_version"]
    return out


def _fmt_row(label: str, s: dict[str, Any]) -> str:
    imp = f"{s['import_ms_median']:7.0f}" if "import_ms_median" in s else f"{'-':>7}"
    delta = f"{s['delta_mib_median']:8.1f}" if "delta_mib_median" in s else f"{'-':>8}"
    entries = str(s.get("entries", "-"))
    return (f"  {label:<32} {s['op_ms_median']:9.1f} {s['op_ms_min']:9.1f} "
            f"{s['op_ms_max']:9.1f} {imp} {s['peak_mib_median']:8.1f} "
            f"{s['maxrss_mib_median']:8.1f} {delta} {s['process_ms_median']:8.0f} "
            f"{entries:>8} {s['messages']!s:>6}")


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def bench_size(label: str, path: Path, args: argparse.Namespace, node: str | None,
               pi_dir: str, pi_skip: str | None) -> dict[str, Any]:
    size = path.stat().st_size
    report: dict[str, Any] = {"size": label, "bytes": size, "modes": {}}
    for mode in MODES:
        runs = [run_child(mode, path) for _ in range(args.repeat)]
        report["modes"][mode] = _summarise(runs)
    for mode in CLI_MODES:
        runs = [run_cli(mode, path) for _ in range(args.repeat)]
        report["modes"][mode] = _summarise(runs)
    report["parent_maxrss_mib"] = _own_maxrss_kib() / 1024
    if pi_skip is None and size > PI_MAX_BYTES:
        report["pi_skipped"] = ("pi cannot open files over 512 MiB (readFileSync: 'Cannot "
                                "create a string longer than 0x1fffffe8 characters')")
    elif pi_skip is None:
        assert node is not None
        try:
            runs = [run_pi(node, pi_dir, path) for _ in range(args.repeat)]
            report["pi"] = _summarise(runs)
        except RuntimeError as e:
            report["pi_skipped"] = str(e)
    else:
        report["pi_skipped"] = pi_skip
    return report


def print_report(report: dict[str, Any]) -> None:
    mib = report["bytes"] / MiB
    gen = report.get("generated", {})
    print(f"\n=== {report['size']} session: {mib:.1f} MiB, {gen.get('entries', '?')} entries, "
          f"{gen.get('compactions', '?')} compactions, last compaction "
          f"{gen.get('tail_mib', float('nan')):.2f} MiB from the end "
          f"(generated in {gen.get('seconds', float('nan')):.1f} s)")
    print(f"  {'operation':<32} {'median ms':>9} {'min ms':>9} {'max ms':>9} {'imp ms':>7} "
          f"{'peak MiB':>8} {'maxrss':>8} {'dRSS MiB':>8} {'proc ms':>8} {'entries':>8} "
          f"{'msgs':>6}")
    modes = report["modes"]
    for mode in (*MODES, *CLI_MODES):
        print(_fmt_row(MODE_LABELS[mode], modes[mode]))
    pi = report.get("pi")
    if pi:
        print(_fmt_row(f"pi {pi.get('pi_version', '')} open + buildContext", pi))
    else:
        print(f"  pi: skipped ({report.get('pi_skipped')})")

    # consistency: every way of reading gives the same context
    counts = {m: (modes[m]["messages"], modes[m]["leaf_id"]) for m in (*MODES, "cli")}
    if pi:
        counts["pi"] = (pi["messages"], pi["leaf_id"])
    if len(set(counts.values())) != 1:
        print(f"  WARNING: contexts differ between modes: {counts}")

    print("  targets:")
    full = modes["full"]["op_ms_median"]
    if pi:
        ratio = pi["op_ms_median"] / full
        report["speedup_vs_pi"] = ratio
        print(f"    full load + context vs pi: pi {pi['op_ms_median']:.0f} ms / ours {full:.0f} ms"
              f" = {ratio:.2f}x (target >= {TARGET_SPEEDUP}x) "
              f"{_verdict(ratio >= TARGET_SPEEDUP)}")
    else:
        print(f"    full load + context vs pi: not measured (target >= {TARGET_SPEEDUP}x; "
              f"pi was ~800 ms for 100 MB)")
    for mode in ("resume", "session"):
        s = modes[mode]
        ok_t = s["op_ms_median"] < TARGET_RESUME_MS
        ok_m = s["peak_mib_median"] < TARGET_RESUME_RSS_MIB
        print(f"    {MODE_LABELS[mode]}: {s['op_ms_median']:.1f} ms (target < "
              f"{TARGET_RESUME_MS:.0f} ms) {_verdict(ok_t)}, peak RSS "
              f"{s['peak_mib_median']:.1f} MiB (target < {TARGET_RESUME_RSS_MIB:.0f} MB) "
              f"{_verdict(ok_m)}; read {s['entries']} entries"
              f"{'' if s['complete'] else ' (tail only)'}")
    for mode in CLI_MODES:
        s = modes[mode]
        ok_t = s["op_ms_median"] < TARGET_CLI_MS
        ok_m = s["peak_mib_median"] < TARGET_CLI_RSS_MIB
        print(f"    {MODE_LABELS[mode]}: {s['op_ms_median']:.1f} ms wall (target < "
              f"{TARGET_CLI_MS:.0f} ms) {_verdict(ok_t)}, peak RSS {s['peak_mib_median']:.1f} "
              f"MiB (target < {TARGET_CLI_RSS_MIB:.0f} MB; this parent's peak: "
              f"{report['parent_maxrss_mib']:.1f} MiB) {_verdict(ok_m)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark loading/resuming large sessions.")
    ap.add_argument("--sizes", default="100MB,1GB", help="comma-separated sizes (100MB,1GB)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--dir", default=".", help="where to create the temp dir (default .)")
    ap.add_argument("--keep", action="store_true", help="keep the generated sessions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pi-dir", default=None, help="pi-coding-agent package dir")
    ap.add_argument("--node", default=None, help="node binary")
    ap.add_argument("--no-pi", action="store_true", help="do not run pi")
    ap.add_argument("--json", action="store_true", help="also print a JSON report at the end")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--generate", nargs=3, metavar=("PATH", "BYTES", "SEED"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    if args.generate:
        out, nbytes, seed = args.generate
        stats = _gen_session_module().generate(out, target_bytes=int(nbytes), seed=int(seed),
                                               last_compaction_within_bytes=TAIL)
        tail = stats.bytes - (stats.last_compaction_offset or 0)
        print(json.dumps({"entries": stats.entries, "compactions": stats.compactions,
                          "tail_mib": tail / MiB, "seconds": stats.seconds}))
        return 0
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    gs = _gen_session_module()
    sizes = [(s.strip(), gs.parse_size(s)) for s in args.sizes.split(",") if s.strip()]
    node = find_node(args.node)
    pi_dir = args.pi_dir or os.environ.get("PI_DIR") or DEFAULT_PI_DIR
    pi_skip = "--no-pi" if args.no_pi else pi_missing(node, pi_dir)

    os.makedirs(args.dir, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, files in {workdir}, "
          f"repeat {args.repeat} (median)")
    reports = []
    try:
        for label, nbytes in sizes:
            path = workdir / f"session-{label}.jsonl"
            generated = generate_in_child(path, nbytes, args.seed)
            report = bench_size(label, path, args, node, pi_dir, pi_skip)
            report["generated"] = generated
            print_report(report)
            reports.append(report)
            if not args.keep:
                path.unlink()
                for extra in workdir.glob(path.name + ".*"):  # lock / quarantine side files
                    extra.unlink()
    finally:
        if args.keep:
            print(f"\nkept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
