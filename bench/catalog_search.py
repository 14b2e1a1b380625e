"""Benchmark for "[catalog]" search: `journal.search` over a corpus of about 1 GB.

Generates the corpus with ``bench/gen_session.py``: ``--files`` sessions of ``--size`` /
``--files`` bytes each (different seeds) in one folder; ``--gz`` of them are gzip-compressed
into ``archive/`` as rotation leaves its archives. Then times, each ``--repeat`` times
(median), in this process after a first untimed warm-up run (so the page cache is warm and
the figure is the search, not the disk):

* ``absent``: a literal found nowhere: every byte is scanned, no line is parsed;
* ``rare``: a phrase of a few tool results (smart case, case-insensitive);
* ``rare-case``: the same phrase with an upper-case letter (case-sensitive, no lowering);
* ``regex``: a regular expression with a required literal;
* ``common``: a word in most entries, every hit reported (the worst case: most lines parsed);
* ``limit``: the same word with ``limit=100`` (stops early);
* ``role``: the phrase of ``rare`` limited to tool results of one tool.

and the command ``journal search --json`` once for the ``rare`` query, start to exit.

Usage::

    python bench/catalog_search.py [--size 1GB] [--files 10] [--gz 2] [--repeat 3]
                                   [--dir DIR] [--keep]

Files go to a new temporary folder under ``--dir`` (default: the current directory),
deleted afterwards unless ``--keep``; an existing corpus is reused with ``--corpus DIR``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
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
sys.path.insert(0, str(BENCH.parent))

from journal import search  # noqa: E402


def _gen_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_gen_session", BENCH / "gen_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def make_corpus(folder: Path, size: int, files: int, gz: int) -> None:
    gen = _gen_module()
    archive = folder / "archive"
    archive.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        path = folder / f"session-{n:02d}.jsonl"
        gen.generate(path, target_bytes=size // files, seed=n)
        if n < gz:
            with open(path, "rb") as src, gzip.open(archive / f"{path.name}.gz", "wb",
                                                    compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
            path.unlink()
        print(f"  generated {n + 1}/{files}", file=sys.stderr)


QUERIES: list[tuple[str, str, dict[str, Any]]] = [
    ("absent", "zebra unicorn quasar", {}),
    ("rare", "old text must match exactly", {}),
    ("rare-case", "The old text must match exactly", {}),
    ("regex", r"must match \w+ including", {"regex": True}),
    ("common", "projection", {}),
    ("limit", "projection", {"limit": 100}),
    ("role", "old text must match exactly", {"role": ["toolResult"], "tool": ["edit"]}),
]


def corpus_bytes(folder: Path) -> tuple[int, int]:
    """(bytes on disk, bytes of session data once uncompressed)."""
    disk = data = 0
    for path in sorted(folder.rglob("*.jsonl*")):
        disk += path.stat().st_size
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    data += len(chunk)
        else:
            data += path.stat().st_size
    return disk, data


def main(argv: list[str] | None = None) -> int:
    gen = _gen_module()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=gen.parse_size, default=gen.parse_size("1GB"))
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--gz", type=int, default=2, help="sessions kept only as .gz archives")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--corpus", help="an existing corpus folder (not generated, not deleted)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    made = a.corpus is None
    folder = Path(a.corpus) if a.corpus else Path(tempfile.mkdtemp(prefix="search-", dir=a.dir))
    try:
        if made:
            t0 = time.perf_counter()
            make_corpus(folder, a.size, a.files, a.gz)
            print(f"corpus generated in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        disk, data = corpus_bytes(folder)
        print(f"corpus: {folder}: {disk / 2**20:,.0f} MiB on disk, {data / 2**20:,.0f} MiB "
              f"of session data; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        print(f"{'query':<10} {'hits':>8} {'median s':>9} {'GiB/s':>6}  (of session data)")
        for name, query, options in QUERIES:
            search(query, [folder], **options)  # warm the page cache
            times = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                result = search(query, [folder], **options)
                times.append(time.perf_counter() - t0)
            median = statistics.median(times)
            rate = data / 2**30 / median if not result.truncated else float("nan")
            print(f"{name:<10} {len(result.hits):>8,} {median:>9.2f} {rate:>6.2f}  "
                  f"{query!r} {options or ''}")
        env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "journal.cli", "search", QUERIES[1][1],
                               str(folder), "--json"], capture_output=True, env=env)
        wall = time.perf_counter() - t0
        print(f"cli        journal search {QUERIES[1][1]!r} DIR --json: {wall:.2f} s, "
              f"exit {proc.returncode}, {len(proc.stdout):,} bytes of JSON")
    finally:
        if made and not a.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
