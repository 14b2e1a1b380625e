"""Benchmark for repair: a damaged 100 MB session repaired, against a plain full load of it.

Generates a session with ``bench/gen_session.py``, then injects a few hundred damages of
mixed kinds spread evenly through the file (NUL runs alone and in front of records, torn
records with the next one glued on, invalid UTF-8 in strings, lines that are not objects or
lack fields, blank lines, lines written twice, broken parent links, and on the active branch
tool results never written, results written after a user message, orphan and duplicate
results) plus a torn tail. Then, in this process, alternately:

* ``load``: ``journal.load`` + ``Tree`` + ``build_context`` of the damaged file;
* ``plan``: ``journal.repair(path, dry_run=True)`` (read, salvage, fix, render; no write);
* ``repair``: ``journal.repair(path)`` on a fresh copy of the damaged file (plan, write,
  verify by loading the result, quarantine, backup, swap).

Each runs ``--repeat`` times (default 3); medians are reported, as MB/s of the damaged file,
with the ratio repair / load. Target (from the issue): repair throughput at least half of a
plain full load's (ratio >= 0.5). ``--profile`` (or a missed target) adds a cProfile of one
repair, by function, for the journal modules.

Usage::

    python bench/repair.py [--size 100MB] [--damages 300] [--repeat 3] [--seed N]
                           [--dir DIR] [--keep] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib.util
import json
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import journal
from journal.context import build_context
from journal.snapshot import load
from journal.tree import Tree

BENCH = Path(__file__).resolve().parent
MB = 1024 * 1024
TARGET_RATIO = 0.5


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


def parse_size(text: str) -> int:
    return int(_gen_session_module().parse_size(text))


# ---------------------------------------------------------------------------------------
# damage


class Damager:
    """Damages a session's lines in place, each kind at positions spread over the file.

    Works on the list of lines (without newlines); every damage is recorded with the kind of
    problem repair should report for it.
    """

    def __init__(self, lines: list[bytes], rng: random.Random) -> None:
        self.lines = lines
        self.rng = rng
        self.entries: list[dict[str, Any] | None] = [None] + [orjson.loads(x) for x in lines[1:]]
        self.touched: set[int] = set()  # original line numbers already damaged or relied on
        self.done: Counter[str] = Counter()
        self.inserts: dict[int, list[bytes]] = {}  # new lines to put before original line k
        self.replace: dict[int, bytes | None] = {}  # original line k -> new bytes (None: gone)
        self.serial = 0  # for the ids of entries the damage adds
        by_id = {e["id"]: i for i, e in enumerate(self.entries) if e is not None}
        self.path: list[int] = []
        at: int | None = len(lines) - 1
        while at is not None:
            self.path.append(at)
            parent = self.entries[at]["parentId"]  # type: ignore[index]
            at = by_id.get(parent) if parent is not None else None
        self.path.reverse()
        self.on_path = set(self.path)
        self.children: dict[str, list[int]] = {}
        for i, e in enumerate(self.entries):
            if e is not None and e["parentId"] is not None:
                self.children.setdefault(e["parentId"], []).append(i)

    def _free(self, *ks: int) -> bool:
        return all(k not in self.touched and 0 < k < len(self.lines) - 1 for k in ks)

    def _take(self, *ks: int) -> None:
        for k in ks:
            self.touched.update((k - 1, k, k + 1))

    def _role(self, k: int) -> str | None:
        e = self.entries[k]
        if e is None or e.get("type") != "message":
            return None
        return e["message"].get("role")

    def near(self, k: int, ok: Callable[[int], bool], span: int = 200) -> int | None:
        for j in range(k, min(k + span, len(self.lines) - 2)):
            if self._free(j) and ok(j):
                return j
        return None

    # kinds: each takes a target line and returns whether it damaged something near it

    def nul_line(self, k: int) -> bool:
        j = self.near(k, lambda j: True)
        if j is None:
            return False
        self.inserts.setdefault(j, []).append(b"\x00" * self.rng.randint(512, 8192))
        self._take(j)
        self.done["nul_run"] += 1
        return True

    def nul_prefix(self, k: int) -> bool:
        j = self.near(k, lambda j: True)
        if j is None:
            return False
        self.replace[j] = b"\x00" * self.rng.randint(16, 4096) + self.lines[j]
        self._take(j)
        self.done["nul_run"] += 1
        return True

    def glued(self, k: int) -> bool:
        """A line torn, the next one glued on: pick a leaf entry (no children) so that the
        only other effect is none."""

        def ok(j: int) -> bool:
            e = self.entries[j]
            return (e is not None and j not in self.on_path and not self.children.get(e["id"])
                    and self._free(j + 1))

        j = self.near(k, ok, 2000)
        if j is None:
            return False
        cut = self.rng.randint(10, max(11, len(self.lines[j]) // 2))
        self.replace[j] = self.lines[j][:cut] + self.lines[j + 1]
        self.replace[j + 1] = None
        self._take(j, j + 1)
        self.done["glued_record"] += 1
        return True

    def invalid_utf8(self, k: int) -> bool:
        needle = b'"text":"'
        j = self.near(k, lambda j: needle in self.lines[j])
        if j is None:
            return False
        at = self.lines[j].index(needle) + len(needle)
        self.replace[j] = self.lines[j][:at] + b"\xff\xfe" + self.lines[j][at:]
        self._take(j)
        self.done["invalid_utf8"] += 2  # the bytes quarantined, the entry kept with U+FFFD
        return True

    def junk(self, k: int) -> bool:
        j = self.near(k, lambda j: True)
        if j is None:
            return False
        kind = self.rng.choice(["not_object", "missing_field", "blank_line", "invalid_json"])
        line = {"not_object": b"[1,2,3]", "blank_line": b"   ", "invalid_json": b"oops{",
                "missing_field": b'{"type":"message","id":"ffff0001","parentId":null}'}[kind]
        self.inserts.setdefault(j, []).append(line)
        self._take(j)
        self.done[kind] += 1
        return True

    def twice(self, k: int) -> bool:
        """A leaf entry's line written twice (the copy's id is renamed)."""

        def ok(j: int) -> bool:
            e = self.entries[j]
            return e is not None and j not in self.on_path and not self.children.get(e["id"])

        j = self.near(k, ok, 2000)
        if j is None:
            return False
        self.inserts.setdefault(j + 1, []).append(self.lines[j])
        self._take(j, j + 1)
        self.done["duplicate_id"] += 1
        return True

    def lost_parent(self, k: int) -> bool:
        """A side-branch entry whose parentId names nothing (re-attached to the line before)."""

        def ok(j: int) -> bool:
            e = self.entries[j]
            return (e is not None and j not in self.on_path and not self.children.get(e["id"])
                    and self._role(j) not in ("toolResult", None))

        j = self.near(k, ok, 2000)
        if j is None:
            return False
        entry = dict(self.entries[j])  # type: ignore[arg-type]
        entry["parentId"] = "0badc0de"
        self.replace[j] = orjson.dumps(entry)
        self._take(j)
        self.done["missing_parent"] += 1
        return True

    def _single_call(self, k: int) -> tuple[int, int, int] | None:
        """(assistant, result, next) on the active branch at or after path position k."""
        for p in range(k, len(self.path) - 2):
            a, r, n = self.path[p], self.path[p + 1], self.path[p + 2]
            if not self._free(a, r, n) or self._role(a) != "assistant":
                continue
            content = self.entries[a]["message"].get("content")  # type: ignore[index]
            calls = [b for b in content or () if b.get("type") == "toolCall"]
            if len(calls) == 1 and self._role(r) == "toolResult" and (
                    len(self.children.get(self.entries[r]["id"], ())) == 1):  # type: ignore
                return a, r, n
        return None

    def pairing(self, path_k: int, kind: str) -> bool:
        found = self._single_call(path_k)
        if found is None:
            return False
        a, r, n = found
        result = dict(self.entries[r])  # type: ignore[arg-type]
        after = dict(self.entries[n])  # type: ignore[arg-type]
        if kind == "missing_result":  # never written: the next entry hangs on the assistant
            self.replace[r] = None
            after["parentId"] = result["parentId"]
            self.replace[n] = orjson.dumps(after)
        elif kind == "moved_result":  # a user message typed while the tool ran came first
            self.serial += 1
            user = {"type": "message", "id": f"b{self.serial:07x}",
                    "parentId": result["parentId"], "timestamp": result["timestamp"],
                    "message": {"role": "user", "content": [{"type": "text", "text": "wait"}],
                                "timestamp": 0}}
            result["parentId"] = user["id"]
            self.inserts.setdefault(r, []).append(orjson.dumps(user))
            self.replace[r] = orjson.dumps(result)
        elif kind == "duplicate_result":  # written twice, under itself
            self.serial += 1
            copy = {**result, "id": f"d{self.serial:07x}", "parentId": result["id"]}
            self.inserts.setdefault(n, []).append(orjson.dumps(copy))
            after["parentId"] = copy["id"]
            self.replace[n] = orjson.dumps(after)
        else:  # orphan_result: its call id lost; the call then gets a synthetic result too
            message = dict(result["message"])
            message["toolCallId"] = "toolu_gone"
            result["message"] = message
            self.replace[r] = orjson.dumps(result)
            self.done["missing_result"] += 1
        self._take(a, r, n)
        self.done[kind] += 1
        return True

    def output(self, torn_tail: bool = True) -> bytes:
        parts = []
        for k, line in enumerate(self.lines):
            parts.extend(x + b"\n" for x in self.inserts.get(k, ()))
            new = self.replace.get(k, line)
            if new is not None:
                parts.append(new + b"\n")
        if torn_tail:
            parts.append(b'{"type":"message","id":"torn0001","parentId":')
            self.done["torn_tail"] += 1
        return b"".join(parts)


def damage(data: bytes, count: int, seed: int) -> tuple[bytes, Counter[str]]:
    """`data` with about `count` damages spread evenly; also what repair should find."""
    lines = data.split(b"\n")
    assert lines[-1] == b""
    lines.pop()
    d = Damager(lines, random.Random(seed))
    plain = [d.nul_line, d.nul_prefix, d.glued, d.invalid_utf8, d.junk, d.twice, d.lost_parent]
    pairing = ["missing_result", "moved_result", "duplicate_result", "orphan_result"]
    n_pairing = max(4, count // 10)  # pairing fixes re-link the branch: keep them fewer
    n_plain = count - n_pairing
    for i in range(n_plain):
        plain[i % len(plain)]((i * (len(lines) - 2)) // n_plain + 1)
    # the pairing damages go to the part of the active branch in the context (after the
    # latest compaction's kept entry), spread over it
    start = _context_start(d)
    for i in range(n_pairing):
        d.pairing(start + (i * (len(d.path) - start - 3)) // n_pairing, pairing[i % 4])
    return d.output(), d.done


def _context_start(d: Damager) -> int:
    at = 0
    for p, k in enumerate(d.path):
        e = d.entries[k]
        if e is not None and e.get("type") == "compaction":
            kept = e.get("firstKeptEntryId")
            at = next((q for q in range(p) if d.entries[d.path[q]]["id"] == kept),  # type: ignore
                      p)
    return at


# ---------------------------------------------------------------------------------------
# measuring


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def full_load(path: Path) -> None:
    snap = load(path)
    tree = Tree(snap.entries)
    build_context(tree, tree.leaf_id)


def _fresh_copy(source: Path, target: Path) -> None:
    for side in (".bak", ".quarantine"):
        Path(str(target) + side).unlink(missing_ok=True)
    shutil.copyfile(source, target)


def measure(damaged: Path, work: Path, repeat: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"load": [], "plan": [], "repair": []}
    for _ in range(repeat):
        times["load"].append(_timed(lambda: full_load(damaged)))
        times["plan"].append(_timed(lambda: journal.repair(damaged, dry_run=True)))
        _fresh_copy(damaged, work)
        times["repair"].append(_timed(lambda: journal.repair(work)))
    return times


# the steps of journal.repair, timed by wrapping the functions of journal/repair.py
PHASES = (
    ("plan", "_salvage", "read the file, salvage each line (salvage.py), set the header aside"),
    ("plan", "_fix_structure", "unique ids, parents before children"),
    ("plan", "_fix_pairing", "active branch: Tree, context, sanitize, re-link, layout"),
    ("plan", "_render", "the new file's bytes"),
    ("publish", "_verify", "load the written temp file + Tree + context + sanitize"),
    ("publish", "quarantine", "append dropped/rewritten bytes to .quarantine, fsync"),
)


def phase_breakdown(damaged: Path, work: Path) -> list[tuple[str, float, str]]:
    """Seconds spent in each step of one repair (the rest: lock, write + fsync, swap)."""
    module = sys.modules["journal.repair"]
    spent: dict[str, float] = {}
    saved = {name: getattr(module, name) for _, name, _ in PHASES}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

        return wrapper

    _fresh_copy(damaged, work)
    try:
        for name, fn in saved.items():
            setattr(module, name, timed(name, fn))
        gc.collect()
        t0 = time.perf_counter()
        journal.repair(work)
        total = time.perf_counter() - t0
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)
    rows = [(f"{stage}: {name}", spent.get(name, 0.0), what) for stage, name, what in PHASES]
    rows.append(("publish: the rest", total - sum(spent.values()),
                 "lock, write the temp file + fsync, backup link, rename, dir fsync"))
    rows.append(("total", total, ""))
    return rows


def profile_repair(damaged: Path, work: Path, top: int = 30) -> str:
    _fresh_copy(damaged, work)
    profiler = cProfile.Profile()
    profiler.enable()
    journal.repair(work)
    profiler.disable()
    out = []
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, name), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore
        short = file if "journal" not in file else file[file.index("journal"):]
        rows.append((tt, ct, f"{short}:{line}({name})"))
    out.append(f"cProfile of one repair: {total:.2f} s in all (profiling slows it down)")
    out.append(f"  {'own s':>7} {'cum s':>7}  function (by own time)")
    for tt, ct, where in sorted(rows, reverse=True)[:top]:
        out.append(f"  {tt:7.2f} {ct:7.2f}  {where}")
    out.append(f"  {'cum s':>7}  journal function (by cumulative time)")
    journal_rows = sorted((r for r in rows if r[2].startswith("journal")),
                          key=lambda r: r[1], reverse=True)
    for _tt, ct, where in journal_rows[:top]:
        out.append(f"  {ct:7.2f}  {where}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Repair throughput against a plain full load.")
    ap.add_argument("--size", default="100MB", help="size of the generated session")
    ap.add_argument("--damages", type=int, default=300, help="damages to inject (about)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=None, help="where to write the files (default: temp)")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument("--profile", action="store_true", help="always print a profile")
    ap.add_argument("--json", action="store_true", help="print a JSON report")
    a = ap.parse_args(argv)

    directory = Path(tempfile.mkdtemp(prefix="journal-repair-bench-", dir=a.dir))
    try:
        clean, damaged, work = (directory / n for n in ("clean.jsonl", "damaged.jsonl",
                                                        "work.jsonl"))
        t0 = time.perf_counter()
        stats = _gen_session_module().generate(clean, target_bytes=parse_size(a.size),
                                               seed=a.seed, branch_every=5)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        data, injected = damage(clean.read_bytes(), a.damages, a.seed)
        damaged.write_bytes(data)
        damage_s = time.perf_counter() - t0
        size_mb = len(data) / MB

        report = journal.repair(damaged, dry_run=True)
        times = measure(damaged, work, a.repeat)
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = med["load"] / med["repair"]
        found = report.counts
        result: dict[str, Any] = {
            "size_mb": round(size_mb, 1), "entries": stats.entries,
            "generate_s": round(gen_s, 2), "damage_s": round(damage_s, 2),
            "injected": dict(injected), "found": found, "problems": len(report.problems),
            "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "mb_per_s": {k: round(size_mb / v, 1) for k, v in med.items()},
            "ratio_repair_to_load": round(ratio, 3), "target": TARGET_RATIO,
            "ok": ratio >= TARGET_RATIO,
        }
        missed = ratio < TARGET_RATIO
        phases = phase_breakdown(damaged, work)
        result["phases_s"] = {name: round(sec, 3) for name, sec, _ in phases}
        profile = profile_repair(damaged, work) if (a.profile or missed) else None
        if a.json:
            print(json.dumps({**result, "profile": profile}, indent=2))
        else:
            print(f"session: {size_mb:.1f} MB, {stats.entries:,} entries "
                  f"(generated in {gen_s:.1f} s, damaged in {damage_s:.1f} s)")
            print(f"injected: {sum(injected.values())} damages: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(injected.items())))
            print(f"repair finds {len(report.problems)} problems: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(found.items())))
            print(f"\n  {'operation':<42} {'median s':>8} {'MB/s':>7}   runs")
            labels = {"load": "load + Tree + build_context", "plan": "repair --dry-run (plan)",
                      "repair": "repair (plan, write, verify, swap)"}
            for key, label in labels.items():
                runs = " ".join(f"{x:.2f}" for x in times[key])
                print(f"  {label:<42} {med[key]:8.2f} {size_mb / med[key]:7.1f}   {runs}")
            print(f"\nrepair throughput / load throughput: {ratio:.2f} "
                  f"(target >= {TARGET_RATIO}): {'met' if not missed else 'MISSED'}")
            print("\none repair, step by step:")
            for name, sec, what in phases:
                print(f"  {name:<26} {sec:6.2f} s  {what}")
            if profile:
                print()
                print(profile)
        return 0 if not missed else 1
    finally:
        if a.keep:
            print(f"files kept in {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
