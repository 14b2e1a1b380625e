"""Benchmark for issue 16 item 4: `journal export` of a large session, Markdown and HTML.

Generates a session of ``--size`` (default 100 MB) with ``bench/gen_session.py`` in a separate
process, then runs ``journal export PATH --format F -o OUT`` for each format as a user runs it
(``python -m journal.cli``), each in a fresh process, ``--repeat`` times. Reported per format:
the median wall time of the whole command (interpreter start-up, imports, reading, rendering,
writing), the command's peak RSS (``ru_maxrss`` of the child, from ``wait4``; it cannot be below
this parent's own peak, printed beside it, since Linux keeps it across exec), and the size of
what was written.

Where ``chromium`` is installed, the HTML page is also loaded headless (``--dump-dom``) and the
page's own clock (``performance.now()`` from navigation start, recorded by the page once it
has parsed the embedded session, built the tree and rendered the first 150 entries; the rest
renders on scroll) is reported. The dump itself (100 MB of DOM text) is not timed.

Usage::

    python bench/catalog_export.py [--size 100MB] [--repeat 3] [--dir DIR] [--keep]
                                   [--formats md,html,jsonl] [--no-browser] [--json]
                                   [--code CHECKOUT] [--session FILE]

Before and after a change, on the same session::

    git archive OLD_COMMIT | tar -x -C /tmp/before
    python bench/gen_session.py /tmp/s.jsonl --size 100MB --seed 16
    python bench/catalog_export.py --session /tmp/s.jsonl --code /tmp/before
    python bench/catalog_export.py --session /tmp/s.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def generate(path: Path, size: str, seed: int) -> None:
    subprocess.run([sys.executable, str(BENCH / "gen_session.py"), str(path), "--size", size,
                    "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)


def run_export(path: Path, fmt: str, out: Path, code: Path = ROOT) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of one `journal export` command, run from the checkout
    `code` (its `journal` package is the one imported)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "journal.cli", "export", str(path),
                             "--format", fmt, "-o", str(out)], cwd=code,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"journal export failed: {stderr}")
    return seconds, usage.ru_maxrss * 1024


def browser_time(page: Path, work: Path) -> float | None:
    browser = shutil.which("chromium")
    if browser is None:
        return None
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={work / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--dump-dom", page.as_uri()],
        capture_output=True, timeout=600, env={**os.environ, "HOME": str(work)})
    if b'data-ready="1"' not in proc.stdout:
        return None
    found = re.search(rb'data-render-ms="(\d+)"', proc.stdout)
    return int(found.group(1)) / 1000 if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", default="100MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--dir", default=".")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--formats", default="md,html")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--code", type=Path, default=ROOT,
                        help="the checkout whose journal runs (default this one): e.g. an "
                        "older commit's 'git archive' to compare before and after")
    parser.add_argument("--session", type=Path,
                        help="export this session instead of generating one")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-export-", dir=args.dir))
    results: list[dict[str, Any]] = []
    try:
        session = args.session or work / "session.jsonl"
        if args.session is None:
            generate(session, args.size, args.seed)
        size = session.stat().st_size
        own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        for fmt in args.formats.split(","):
            out = work / f"export.{fmt}"
            runs = [run_export(session, fmt, out, args.code.resolve())
                    for _ in range(args.repeat)]
            row: dict[str, Any] = {
                "format": fmt, "session_bytes": size,
                "seconds": statistics.median(r[0] for r in runs),
                "peak_rss_mb": max(r[1] for r in runs) / 2**20,
                "output_bytes": out.stat().st_size,
            }
            if fmt == "html" and not args.no_browser:
                row["chromium_dump_dom_seconds"] = browser_time(out, work)
            results.append(row)
        if args.json:
            print(json.dumps({"results": results, "parent_peak_rss_mb": own_peak / 2**20},
                             indent=2))
        else:
            what = str(args.session) if args.session else f"{args.size}, seed {args.seed}"
            print(f"session: {size / 2**20:.1f} MiB ({what}); code {args.code}; "
                  f"median of {args.repeat}; this parent's peak RSS {own_peak / 2**20:.0f} MiB")
            for row in results:
                line = (f"  export --format {row['format']:<5} {row['seconds']:6.2f} s  "
                        f"peak RSS {row['peak_rss_mb']:6.0f} MiB  "
                        f"output {row['output_bytes'] / 2**20:6.1f} MiB")
                if row.get("chromium_dump_dom_seconds") is not None:
                    line += (f"  page ready (first chunk rendered) after "
                             f"{row['chromium_dump_dom_seconds']:.2f} s")
                print(line)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
