"""Benchmark for "[context]": preparing a compaction and estimating the context of a big session.

Generates a session with ``bench/gen_session.py`` (default 100 MiB, a compaction every 20 MiB,
branches) unless ``--file`` names one, opens it with ``journal.Session.open`` (which resumes
from the tail), and measures in this process:

* ``open``:              ``Session.open`` (tail resume);
* ``get_branch``:        the first ``get_branch()`` (reads the rest of the file: the cut-point
                         search needs the active branch, not only the live context);
* ``prepare (cold)``:    ``prepare_compaction`` with a fresh ``Estimator``;
* ``prepare (warm)``:    the same with the estimator of the previous run (per-entry cache warm);
* ``estimate (cold)``:   ``estimate_branch_context`` with a fresh estimator;
* ``estimate (warm)``:   the same, cache warm (it only estimates what follows the last usable
                         provider-reported usage);
* ``estimate, no usage``: every message of the context estimated, cold and warm (what the
                         cache saves when no usage anchors the estimate);
* ``context+estimate``:  ``session.context(raw=True)`` + plain ``estimate_context`` with its
                         entry ids, cold (the session builds and caches the context) and warm;
* ``session estimate``:  ``estimate_session_context`` (stale usage from before the latest
                         compaction ignored), with a fresh estimator and then warm;
* ``compact``:           with ``--compact``, a whole ``compact()`` with the extractive summarizer
                         (writes a compaction entry to the generated file).

Each measurement runs ``--repeat`` times (the session is reopened for ``open`` and
``get_branch``); medians are printed, with the spread.

Usage::

    python bench/compaction.py [--size 100MB] [--repeat 5] [--dir DIR] [--file PATH]
                               [--compaction-every 20MB] [--keep] [--compact] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

import journal  # noqa: E402
from agent.compaction import (  # noqa: E402
    compact,
    estimate_branch_context,
    estimate_session_context,
    prepare_compaction,
    projection,
)
from agent.compaction.summarize import ExtractiveSummarizer  # noqa: E402
from agent.settings import ContextSettings  # noqa: E402
from agent.tokens import Estimator, estimate_context  # noqa: E402


def _load_gen() -> Any:
    name = "bench_gen_session"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / "gen_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _time(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _summary(samples: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(samples) * 1000, "min_ms": min(samples) * 1000,
            "max_ms": max(samples) * 1000}


def _one_run(path: Path, settings: ContextSettings,
             add: Callable[[str, float], None]) -> dict[str, Any]:
    seconds, session = _time(partial(journal.Session.open, path))
    add("open", seconds)
    try:
        seconds, branch = _time(session.get_branch)
        add("get_branch", seconds)
        warm = Estimator.from_settings(settings)
        seconds, prep = _time(partial(prepare_compaction, session, settings, warm))
        add("prepare (cold)", seconds)
        seconds, _ = _time(partial(prepare_compaction, session, settings, warm))
        add("prepare (warm)", seconds)
        cold = Estimator.from_settings(settings)
        seconds, estimate = _time(partial(estimate_branch_context, branch, cold, settings))
        add("estimate (cold)", seconds)
        seconds, _ = _time(partial(estimate_branch_context, branch, cold, settings))
        add("estimate (warm)", seconds)
        messages, ids, _ = projection(branch)
        pure = Estimator.from_settings(settings)
        seconds, _ = _time(partial(pure.estimate_messages, messages, ids))
        add("estimate, no usage (cold)", seconds)
        seconds, _ = _time(partial(pure.estimate_messages, messages, ids))
        add("estimate, no usage (warm)", seconds)
        raw = Estimator.from_settings(settings)
        seconds, _ = _time(partial(_context_estimate, session, raw, settings))
        add("context+estimate (cold)", seconds)
        seconds, _ = _time(partial(_context_estimate, session, raw, settings))
        add("context+estimate (warm)", seconds)
        live = Estimator.from_settings(settings)
        seconds, _ = _time(partial(estimate_session_context, session, live, settings))
        add("session estimate (cold)", seconds)
        seconds, _ = _time(partial(estimate_session_context, session, live, settings))
        add("session estimate (warm)", seconds)
        return {
            "branch_entries": len(branch),
            "entries_read": len(session.entries),
            "summarize_from": prep.summarize_from if prep else None,
            "messages_to_summarize": len(prep.messages_to_summarize) if prep else 0,
            "turn_prefix_messages": len(prep.turn_prefix_messages) if prep else 0,
            "tokens_before": prep.tokens_before if prep else None,
            "context_tokens": estimate.tokens,
            "context_messages": len(messages),
            "estimate_from_usage": estimate.from_usage,
        }
    finally:
        session.close()


def _context_estimate(session: journal.Session, estimator: Estimator,
                      settings: ContextSettings) -> int:
    context = session.context(raw=True)
    return estimate_context(context.messages, estimator, context.entry_ids,
                            safety_margin=settings.estimate_safety_margin).tokens


def measure(path: Path, repeat: int, settings: ContextSettings, do_compact: bool
            ) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds)

    info: dict[str, Any] = {}
    for _ in range(repeat):
        info = _one_run(path, settings, add)
    results = {name: _summary(values) for name, values in samples.items()}
    if do_compact:
        with journal.Session.open(path) as session:
            session.get_branch()
            seconds, result = _time(partial(compact, session, ExtractiveSummarizer(), settings))
        results["compact (extractive, writes)"] = _summary([seconds])
        if result is not None:
            info["compact"] = {"tokens_before": result.tokens_before,
                               "tokens_after": result.tokens_after,
                               "summary_chars": len(result.summary)}
    return {"results": results, "info": info}


def main(argv: list[str] | None = None) -> int:
    gen = _load_gen()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=gen.parse_size, default=gen.parse_size("100MB"))
    ap.add_argument("--compaction-every", type=gen.parse_size, default=20 * gen.MB)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to generate (default: a temp dir)")
    ap.add_argument("--file", default=None, help="measure this session instead (not modified "
                    "unless --compact)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--compact", action="store_true", help="also time a whole compact()")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    workdir = None
    if args.file:
        path = Path(args.file)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="bench-compaction-", dir=args.dir))
        path = workdir / "session.jsonl"
        started = time.perf_counter()
        gen.generate(path, target_bytes=args.size, seed=args.seed,
                     compaction_every_bytes=args.compaction_every or None)
        if not args.json:
            print(f"generated {path.stat().st_size / gen.MB:.1f} MiB in "
                  f"{time.perf_counter() - started:.1f} s")
    try:
        settings = ContextSettings()
        report = measure(path, max(1, args.repeat), settings, args.compact)
        report["file_mib"] = round(path.stat().st_size / gen.MB, 1)
        if args.json:
            print(json.dumps(report, indent=2))
            return 0
        info = report["info"]
        print(f"session: {report['file_mib']} MiB, {info['entries_read']:,} entries, active "
              f"branch {info['branch_entries']:,} entries; summarizing from branch index "
              f"{info['summarize_from']:,}: {info['messages_to_summarize']:,} messages "
              f"(+{info['turn_prefix_messages']} turn prefix); context "
              f"{info['context_messages']:,} messages, {info['context_tokens']:,} tokens "
              f"(usage anchor: {info['estimate_from_usage']})")
        print(f"{'measurement':32} {'median':>10} {'min':>10} {'max':>10}   (n={args.repeat})")
        for name, r in report["results"].items():
            print(f"{name:32} {r['median_ms']:8.1f}ms {r['min_ms']:8.1f}ms {r['max_ms']:8.1f}ms")
        if "compact" in info:
            c = info["compact"]
            print(f"compact: {c['tokens_before']:,} -> {c['tokens_after']:,} tokens, summary "
                  f"{c['summary_chars']:,} chars")
        return 0
    finally:
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
