"""Benchmark for "[catalog]" on Claude Code transcripts, next to claude-code-log.

On the same inputs, each command run as a user runs it (a fresh process; wall time and peak
RSS from ``wait4``; median of ``--repeat``):

* ``journal export FILE --format html -o OUT`` against ``claude-code-log FILE -o OUT.html
  --no-cache`` (both write one self-contained HTML page of the transcript and its subagent
  files);
* ``journal usage FILE --json`` against the token totals claude-code-log reports for the
  session (its ``--format json`` output, ``token_summary``): the time of ``journal usage``,
  and whether the two agree on input, output, cache-creation and cache-read tokens. Where
  they differ on generated transcripts it is by design of the generator: the lines of one
  API response all carry usage, the final counts on the last; journal counts each response
  once with its last line's counts, subagent files included, while claude-code-log 1.7
  keeps the first line's and leaves the subagent files out of the session's total.

Inputs: the Claude Code samples in the shared fixtures (``bench/shared_fixtures.py``; left out
when absent) and one transcript of ``--mb`` MB (default 100) written by
``bench/gen_claude.py`` in a ``~/.claude/projects``-shaped folder (with subagent files). Each
command runs with ``HOME`` set to a new empty folder, so claude-code-log finds no cache and
writes none where it matters.

claude-code-log is not a dependency of journal: install it beside it to run this
(``pip install claude-code-log``); without it only journal's side is measured.

Usage::

    python bench/catalog_claude.py [--mb 100] [--seed 4] [--repeat 3] [--dir DIR] [--keep]
                                   [--no-samples] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
sys.path.insert(0, str(BENCH))

import shared_fixtures  # noqa: E402
from gen_claude import generate  # noqa: E402

SAMPLES = ("representative_messages.jsonl", "edge_cases.jsonl", "todowrite_examples.jsonl",
           "session_b.jsonl")


def ccl_command() -> list[str] | None:
    found = shutil.which("claude-code-log") or (
        str(Path(sys.executable).parent / "claude-code-log")
        if (Path(sys.executable).parent / "claude-code-log").exists() else None)
    return [found] if found else None


def timed(argv: list[str], home: Path, repeat: int) -> tuple[float, int, str]:
    runs = []
    for _ in range(repeat):
        home.mkdir(parents=True, exist_ok=True)
        runs.append(run_measured(argv, home))
        shutil.rmtree(home, ignore_errors=True)
    return (statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2])


def run_measured(argv: list[str], home: Path) -> tuple[float, int, str]:
    """Like `run`, with the child's own peak RSS (wait4 on its pid)."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("XDG_CACHE_HOME", None)
    out_path = home / ".stdout"
    start = time.perf_counter()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed: {err.decode(errors='replace')[-2000:]}")
    return seconds, usage.ru_maxrss * 1024, out_path.read_text(errors="replace")


TOKENS = re.compile(r"(Input|Output|Cache Creation|Cache Read): (\d+)")
NAMES = {"Input": "input", "Output": "output", "Cache Creation": "cacheWrite",
         "Cache Read": "cacheRead"}


def ccl_tokens(ccl: list[str], path: Path, work: Path) -> dict[str, int] | None:
    """claude-code-log's token totals for the transcript (summed over its sessions)."""
    home = work / "home-tokens"
    home.mkdir(parents=True, exist_ok=True)
    out = work / "ccl.json"
    run_measured([*ccl, str(path), "-o", str(out), "--format", "json", "--no-cache"], home)
    shutil.rmtree(home, ignore_errors=True)
    data = json.loads(out.read_text())
    sums = {"input": 0, "output": 0, "cacheWrite": 0, "cacheRead": 0}
    found = False
    for session in data.get("sessions", []):
        for name, value in TOKENS.findall(session.get("token_summary") or ""):
            found = True
            sums[NAMES[name]] += int(value)
    return sums if found else None


def measure(path: Path, work: Path, repeat: int, ccl: list[str] | None) -> dict[str, Any]:
    journal = [sys.executable, "-m", "journal.cli"]
    row: dict[str, Any] = {"file": path.name, "bytes": path.stat().st_size}
    page = work / "journal.html"
    row["journal_export"] = timed([*journal, "export", str(path), "--format", "html", "-o",
                                   str(page)], work / "home", repeat)[:2]
    row["journal_html_bytes"] = page.stat().st_size
    seconds, peak, out = timed([*journal, "usage", str(path), "--json"], work / "home", repeat)
    row["journal_usage"] = (seconds, peak)
    total = json.loads(out)["total"]
    row["journal_tokens"] = {k: total[k] for k in ("input", "output", "cacheWrite", "cacheRead")}
    row["journal_cost"] = total["cost"]
    if ccl is not None:
        other = work / "ccl.html"
        row["ccl_export"] = timed([*ccl, str(path), "-o", str(other), "--no-cache"],
                                  work / "home", repeat)[:2]
        row["ccl_html_bytes"] = other.stat().st_size
        row["ccl_tokens"] = ccl_tokens(ccl, path, work)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="generated transcript size (100)")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-samples", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ccl = ccl_command()
    work = Path(tempfile.mkdtemp(prefix="bench-claude-", dir=args.dir))
    rows = []
    try:
        inputs: list[Path] = []
        if not args.no_samples and not shared_fixtures.missing(shared_fixtures.CLAUDE, SAMPLES):
            folder = shared_fixtures.fixture_dir(shared_fixtures.CLAUDE)
            inputs.extend(folder / name for name in SAMPLES)
        project = work / "projects" / "-home-user-project"
        stats = generate(project, mb=args.mb, seed=args.seed)
        inputs.append(stats.path)
        for path in inputs:
            rows.append(measure(path, work, args.repeat, ccl))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"claude_code_log": ccl is not None, "rows": rows}, indent=2))
        return 0
    print(f"median of {args.repeat}; peak RSS of the command; claude-code-log "
          + ("installed" if ccl else "NOT installed (journal only)"))
    for row in rows:
        print(f"{row['file']} ({row['bytes'] / 2**20:.2f} MiB)")
        s, p = row["journal_export"]
        print(f"  journal export --format html  {s:7.2f} s  {p / 2**20:6.0f} MiB  "
              f"-> {row['journal_html_bytes'] / 2**20:.1f} MiB")
        if "ccl_export" in row:
            s, p = row["ccl_export"]
            print(f"  claude-code-log (html)        {s:7.2f} s  {p / 2**20:6.0f} MiB  "
                  f"-> {row['ccl_html_bytes'] / 2**20:.1f} MiB")
        s, p = row["journal_usage"]
        print(f"  journal usage --json          {s:7.2f} s  {p / 2**20:6.0f} MiB  "
              f"tokens {row['journal_tokens']}  cost ${row['journal_cost']:.2f}")
        if row.get("ccl_tokens") is not None:
            same = row["ccl_tokens"] == row["journal_tokens"]
            print(f"  claude-code-log tokens        {row['ccl_tokens']}  "
                  f"{'same' if same else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
