"""Parity check: journal's context projection against the real pi, file by file.

For each session file, pi's SessionManager (through ``bench/pi_context.mjs``) and journal
(``load`` -> ``Tree`` -> ``build_context``) each build the context of the file's leaf. The two
are compared on ``messages`` (message by message), ``model``, ``thinkingLevel`` and, for
version 3 files, ``leafId`` (pi gives version 1 entries random ids on every load).

The files checked:

* the real pi fixtures, which this repository does not hold: ``../shared/fixtures/pi`` beside
  the clone, or ``$JOURNAL_SHARED_FIXTURES/pi`` (see ``bench/shared_fixtures.py``); without
  them the other files are still checked, and a note says what was left out;
* synthetic sessions from ``bench/gen_session.py`` (several seeds and sizes, with branches,
  branch summaries, labels and several compactions);
* hand-built edge files (see ``EDGE_CASES``).

Generated and edge files go to a temporary directory (``--dir`` keeps them somewhere
instead). Exit status: 0 when every file matches, 1 on any mismatch or pi failure,
2 when node or pi is missing.

Usage::

    python bench/parity.py [--pi-dir DIR] [--node PATH] [--json] [--quick] [--dir DIR]
                           [FILE.jsonl ...]

Extra FILE arguments are checked as well (``--only``: nothing else). ``--quick`` uses only
two small generated sessions. ``--malformed`` adds damaged or foreign files
(``MALFORMED_CASES``) on which journal, which validates entries, may legitimately differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from journal.context import build_context
from journal.snapshot import load
from journal.tree import Tree

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PI_CONTEXT = BENCH / "pi_context.mjs"
DEFAULT_PI_DIR = "/tmp/pi/node_modules/@mariozechner/pi-coding-agent"
DEFAULT_NODE = "/usr/bin/node"

KB = 1024
MB = 1024 * KB


# ---------------------------------------------------------------------------------------
# environment


def find_node(explicit: str | None = None) -> str | None:
    """The node binary: `explicit`, else /usr/bin/node, else the first `node` on PATH."""
    for candidate in (explicit, DEFAULT_NODE, shutil.which("node")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_pi_dir(explicit: str | None = None) -> str:
    """The pi-coding-agent package directory: --pi-dir, else $PI_DIR, else the default."""
    return explicit or os.environ.get("PI_DIR") or DEFAULT_PI_DIR


def pi_missing(node: str | None, pi_dir: str) -> str | None:
    """Why pi cannot be run here, or None when it can."""
    if node is None:
        return "node not found (looked at /usr/bin/node and PATH)"
    if not (Path(pi_dir) / "package.json").is_file():
        return f"pi package not found at {pi_dir} (set PI_DIR or --pi-dir)"
    if not (Path(pi_dir) / "dist" / "core" / "session-manager.js").is_file():
        return f"{pi_dir} has no dist/core/session-manager.js"
    if not PI_CONTEXT.is_file():
        return f"{PI_CONTEXT} is missing"
    return None


def _bench_module(name: str, file: str) -> Any:
    """A sibling script of this one, loaded once by path (bench/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _gen_session_module() -> Any:
    return _bench_module("bench_gen_session", "gen_session.py")


def _shared_fixtures_module() -> Any:
    return _bench_module("bench_shared_fixtures", "shared_fixtures.py")


def fixtures_missing() -> str | None:
    """Why the real pi fixtures cannot be checked, or None when all of them are there."""
    sf = _shared_fixtures_module()
    reason: str | None = sf.missing(sf.PI, sf.PI_FILES)
    return reason


def fixture_files() -> list[Path]:
    """The real pi fixtures, or none when they are not all available (see `fixtures_missing`)."""
    if fixtures_missing() is not None:
        return []
    sf = _shared_fixtures_module()
    return [sf.fixture_dir(sf.PI) / name for name in sf.PI_FILES]


# ---------------------------------------------------------------------------------------
# generated sessions

# name -> keyword arguments for gen_session.generate
GENERATED: dict[str, dict[str, Any]] = {
    "gen-s2-600k.jsonl": dict(target_bytes=600 * KB, seed=2, compaction_every_bytes=150 * KB,
                              branch_every=2),
    "gen-s11-600k.jsonl": dict(target_bytes=600 * KB, seed=11, compaction_every_bytes=150 * KB,
                               branch_every=2),
    "gen-s4-1m.jsonl": dict(target_bytes=1 * MB, seed=4, compaction_every_bytes=250 * KB,
                            branch_every=3),
    "gen-s9-1m-nosettings.jsonl": dict(target_bytes=1 * MB, seed=9,
                                       compaction_every_bytes=250 * KB, branch_every=3,
                                       settings_after_compaction=False),
    "gen-s3-3m.jsonl": dict(target_bytes=3 * MB, seed=3, compaction_every_bytes=400 * KB,
                            branch_every=4),
    "gen-s5-6m-tail.jsonl": dict(target_bytes=6 * MB, seed=5, compaction_every_bytes=1 * MB,
                                 branch_every=6, last_compaction_within_bytes=512 * KB),
    "gen-s6-1m-nocompaction.jsonl": dict(target_bytes=1 * MB, seed=6,
                                         compaction_every_bytes=None, branch_every=2),
    "gen-s7-2m-noextras.jsonl": dict(target_bytes=2 * MB, seed=7, compaction_every_bytes=300 * KB,
                                     branch_every=3, extras=False,
                                     last_compaction_within_bytes=100 * KB),
}
QUICK_GENERATED = ("gen-s2-600k.jsonl", "gen-s11-600k.jsonl")


def write_generated(directory: Path, names: Iterable[str] | None = None) -> list[Path]:
    gs = _gen_session_module()
    out = []
    for name in names if names is not None else GENERATED:
        path = directory / name
        gs.generate(path, **GENERATED[name])
        out.append(path)
    return out


# ---------------------------------------------------------------------------------------
# hand-built edge files

_T0 = 1768467600000  # 2026-01-15T09:00:00.000Z


def _ts(i: int) -> str:
    ms = _T0 + i * 1000
    t = time.gmtime(ms // 1000)
    return f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]:02d}:{t[4]:02d}:{t[5]:02d}.{ms % 1000:03d}Z"


class _Builder:
    """Hand-writes a v3 session: entries in pi's key order, ids e0001, e0002, ..."""

    def __init__(self, name: str) -> None:
        self.lines: list[dict[str, Any]] = [
            {"type": "session", "version": 3, "id": f"0000000-edge-{name}",
             "timestamp": _ts(0), "cwd": "/home/user/edge"}
        ]
        self.count = 0
        self.leaf: str | None = None

    def _next(self) -> tuple[str, str]:
        self.count += 1
        return f"e{self.count:07d}", _ts(self.count)

    def add(self, kind: str, parent: Any = ..., **fields: Any) -> str:
        """Append an entry; `parent` defaults (``...``) to the current leaf."""
        entry_id, ts = self._next()
        parent_id = self.leaf if parent is ... else parent
        if kind in ("custom", "custom_message"):
            entry = {"type": kind, **fields, "id": entry_id, "parentId": parent_id,
                     "timestamp": ts}
        else:
            entry = {"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": ts,
                     **fields}
        self.lines.append(entry)
        self.leaf = entry_id
        return entry_id

    def user(self, text: str, parent: Any = ...) -> str:
        return self.add("message", parent, message={
            "role": "user", "content": [{"type": "text", "text": text}],
            "timestamp": _T0 + (self.count + 1) * 1000})

    def assistant(self, text: str, model: str | None = "claude-sonnet-4-5",
                  provider: str | None = "anthropic", parent: Any = ...,
                  stop: str = "stop") -> str:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": [{"type": "text", "text": text}],
                                   "api": "anthropic-messages"}
        if provider is not None:
            message["provider"] = provider
        if model is not None:
            message["model"] = model
        message.update(usage={"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                              "totalTokens": 15, "cost": {"input": 0, "output": 0,
                                                          "cacheRead": 0, "cacheWrite": 0,
                                                          "total": 0}},
                       stopReason=stop, timestamp=_T0 + (self.count + 1) * 1000)
        if stop == "error":
            message["errorMessage"] = "overloaded"
        return self.add("message", parent, message=message)

    def turn(self, n: int, tag: str) -> tuple[str, str]:
        first = last = ""
        for i in range(n):
            u = self.user(f"{tag} question {i}")
            first = first or u
            last = self.assistant(f"{tag} answer {i}")
        return first, last

    def compaction(self, first_kept: str | None, summary: str, parent: Any = ...) -> str:
        fields: dict[str, Any] = {"summary": summary}
        if first_kept is not None:
            fields["firstKeptEntryId"] = first_kept
        fields.update(tokensBefore=12345, details={"readFiles": [], "modifiedFiles": []},
                      fromHook=False)
        return self.add("compaction", parent, **fields)

    def text(self) -> str:
        return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in self.lines)


def _edge_firstkept_off_path() -> str:
    b = _Builder("firstkept-off-path")
    b.add("model_change", provider="anthropic", modelId="claude-sonnet-4-5")
    _, fork = b.turn(2, "main")
    side_user, _ = b.turn(2, "side")  # a side branch from `fork`
    b.leaf = fork
    b.turn(2, "back")
    b.compaction(side_user, "Summary whose firstKeptEntryId is on the side branch.")
    b.turn(1, "after")
    return b.text()


def _edge_firstkept_missing() -> str:
    b = _Builder("firstkept-missing")
    b.turn(2, "before")
    b.compaction("deadbeef", "Summary whose firstKeptEntryId names no entry.")
    b.turn(1, "after")
    b.compaction(None, "Summary with no firstKeptEntryId at all.")
    b.turn(1, "last")
    return b.text()


def _edge_firstkept_after() -> str:
    b = _Builder("firstkept-after")
    b.turn(2, "before")
    compaction_id, later_id = f"e{b.count + 1:07d}", f"e{b.count + 2:07d}"
    b.compaction(later_id, "Summary whose firstKeptEntryId comes after the compaction.")
    assert b.leaf == compaction_id
    b.turn(2, "after")
    return b.text()


def _edge_two_compactions() -> str:
    b = _Builder("two-compactions")
    b.add("thinking_level_change", thinkingLevel="medium")
    b.turn(3, "one")
    kept1, _ = b.turn(2, "two")
    b.compaction(kept1, "First summary.")
    kept2, _ = b.turn(2, "three")
    b.turn(1, "four")
    b.compaction(kept2, "Second summary: keeps from turn three.")
    b.turn(2, "five")
    return b.text()


def _edge_two_compactions_reach_back() -> str:
    b = _Builder("two-compactions-reach-back")
    early, _ = b.turn(3, "one")
    kept1, _ = b.turn(1, "two")
    b.compaction(kept1, "First summary.")
    b.turn(2, "three")
    b.compaction(early, "Second summary: its kept range starts before the first compaction.")
    b.turn(1, "four")
    return b.text()


def _edge_two_compactions_kept_is_compaction() -> str:
    b = _Builder("two-compactions-kept-is-compaction")
    kept1, _ = b.turn(2, "one")
    first = b.compaction(kept1, "First summary.")
    b.turn(2, "two")
    b.compaction(first, "Second summary: firstKeptEntryId is the first compaction.")
    b.turn(1, "three")
    return b.text()


def _edge_leaf_side_branch() -> str:
    b = _Builder("leaf-side-branch")
    b.add("model_change", provider="anthropic", modelId="claude-opus-4-1")
    _, fork = b.turn(2, "trunk")
    b.turn(3, "main")  # the longer branch, written first
    b.add("thinking_level_change", thinkingLevel="high")
    main_leaf = b.leaf
    b.leaf = fork
    b.add("branch_summary", fromId=main_leaf, summary="Explored the main branch first.",
          details={"readFiles": ["a.ts"], "modifiedFiles": []}, fromHook=False)
    b.user("side question")
    b.assistant("side answer", model="claude-haiku-4-5")
    b.add("label", targetId=fork, label="fork point")  # the last line, on the side branch
    return b.text()


def _edge_leaf_label_on_other_branch() -> str:
    b = _Builder("leaf-label-other-branch")
    _, fork = b.turn(2, "trunk")
    b.turn(2, "main")
    b.add("session_info", name="  Edge session  ")
    # the last line is a label whose parent is the fork point: the leaf is on a side branch
    b.add("label", parent=fork, targetId=fork, label="here")
    return b.text()


def _edge_custom_messages() -> str:
    b = _Builder("custom-messages")
    b.turn(1, "start")
    b.add("custom_message", customType="reminder", content="plain, no details", display=True)
    b.add("custom_message", customType="reminder", content="with details", display=False,
          details={"source": "hook", "n": 3, "nested": {"a": [1, 2, None]}})
    b.add("custom_message", customType="block", display=True,
          content=[{"type": "text", "text": "array content"}], details=None)
    b.add("custom", customType="todo", data={"items": ["x"], "done": 0})
    b.user("after the custom messages")
    b.add("message", message={"role": "custom", "customType": "stored", "content": "as message",
                              "display": True, "timestamp": _T0})
    b.assistant("done")
    return b.text()


def _edge_branch_summaries() -> str:
    b = _Builder("branch-summaries")
    _, fork = b.turn(2, "trunk")
    b.turn(1, "abandoned")
    b.leaf = fork
    b.add("branch_summary", fromId="e0000005", summary="", details=None, fromHook=False)
    b.user("after an empty branch summary")
    fork2 = b.assistant("ok")
    b.turn(1, "abandoned again")
    b.leaf = fork2
    b.add("branch_summary", fromId="root", summary="A non-empty branch summary.",
          fromHook=True)
    b.turn(1, "end")
    return b.text()


def _edge_model_changes() -> str:
    b = _Builder("model-changes")
    b.add("model_change", provider="openai", modelId="gpt-5")
    b.turn(1, "a")  # the assistant message (anthropic) overrides the model_change
    b.add("model_change", provider="google", modelId="gemini-2.5-pro")
    b.user("no assistant after this model change yet")
    b.assistant("aborted", model="claude-opus-4-1", stop="aborted")
    b.assistant("error", stop="error", model="claude-haiku-4-5")
    b.add("model_change", provider="openai", modelId="gpt-5-mini")
    b.user("last: a model_change then a user message")
    return b.text()


def _edge_model_missing_fields() -> str:
    b = _Builder("model-missing-fields")
    b.add("model_change", provider="openai", modelId="gpt-5")
    b.user("hello")
    b.assistant("an assistant message without provider and model", model=None, provider=None)
    return b.text()


def _edge_thinking_levels() -> str:
    b = _Builder("thinking-levels")
    b.add("thinking_level_change", thinkingLevel="low")
    _, fork = b.turn(1, "a")
    b.add("thinking_level_change", thinkingLevel="xhigh")
    b.turn(1, "b")
    b.add("thinking_level_change", thinkingLevel="high")  # on the abandoned branch
    b.leaf = fork
    b.add("thinking_level_change", thinkingLevel="minimal")
    b.turn(1, "c")
    b.add("thinking_level_change", thinkingLevel="medium")
    return b.text()


def _edge_header_only() -> str:
    return _Builder("header-only").text()


EDGE_CASES: dict[str, Any] = {
    "edge-firstkept-off-path.jsonl": _edge_firstkept_off_path,
    "edge-firstkept-missing.jsonl": _edge_firstkept_missing,
    "edge-firstkept-after.jsonl": _edge_firstkept_after,
    "edge-two-compactions.jsonl": _edge_two_compactions,
    "edge-two-compactions-reach-back.jsonl": _edge_two_compactions_reach_back,
    "edge-two-compactions-kept-is-compaction.jsonl": _edge_two_compactions_kept_is_compaction,
    "edge-leaf-side-branch.jsonl": _edge_leaf_side_branch,
    "edge-leaf-label-other-branch.jsonl": _edge_leaf_label_on_other_branch,
    "edge-custom-messages.jsonl": _edge_custom_messages,
    "edge-branch-summaries.jsonl": _edge_branch_summaries,
    "edge-model-changes.jsonl": _edge_model_changes,
    "edge-model-missing-fields.jsonl": _edge_model_missing_fields,
    "edge-thinking-levels.jsonl": _edge_thinking_levels,
    "edge-header-only.jsonl": _edge_header_only,
}


def write_edge_files(directory: Path, cases: dict[str, Any] | None = None) -> list[Path]:
    out = []
    for name, build in (EDGE_CASES if cases is None else cases).items():
        path = directory / name
        path.write_bytes(build().encode("utf-8", "surrogatepass"))
        out.append(path)
    return out


# Damaged or foreign input that pi-written files never contain (``--malformed``). journal is
# free to differ here (it validates entries); the cases document where it does.

_HEADER = {"type": "session", "version": 3, "id": "0000000-malformed",
           "timestamp": _ts(0), "cwd": "/home/user/edge"}


def _lines(*entries: Any, header: dict[str, Any] | None = None) -> str:
    out = [json.dumps(header or _HEADER)]
    out += [e if isinstance(e, str) else json.dumps(e) for e in entries]
    return "\n".join(out) + "\n"


def _m_user(entry_id: str, parent: str | None, text: str = "hi") -> dict[str, Any]:
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": _ts(1),
            "message": {"role": "user", "content": text, "timestamp": _T0}}


def _m_custom(entry_id: str, parent: str, timestamp: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "custom_message", "customType": "x", "content": "c", "display": True,
            **extra, "id": entry_id, "parentId": parent, "timestamp": timestamp}


MALFORMED_CASES: dict[str, Any] = {
    "bad-branch-summary-no-fromid.jsonl": lambda: _lines(
        _m_user("a", None),
        {"type": "branch_summary", "id": "b", "parentId": "a", "timestamp": _ts(2),
         "summary": "s"}),
    "bad-custom-message-no-display.jsonl": lambda: _lines(
        _m_user("a", None),
        {"type": "custom_message", "customType": "x", "content": "c", "id": "b",
         "parentId": "a", "timestamp": _ts(2)}),
    "bad-compaction-no-tokens.jsonl": lambda: _lines(
        _m_user("a", None),
        {"type": "compaction", "id": "b", "parentId": "a", "timestamp": _ts(2),
         "summary": "s", "firstKeptEntryId": "a"}),
    "bad-thinking-level-missing.jsonl": lambda: _lines(
        _m_user("a", None),
        {"type": "thinking_level_change", "id": "b", "parentId": "a", "timestamp": _ts(2)}),
    "bad-model-change-no-fields.jsonl": lambda: _lines(
        _m_user("a", None),
        {"type": "model_change", "id": "b", "parentId": "a", "timestamp": _ts(2)}),
    "bad-no-parentid-key.jsonl": lambda: _lines(
        _m_user("a", None),
        {"type": "message", "id": "b", "timestamp": _ts(2),
         "message": {"role": "user", "content": "x", "timestamp": _T0}}),
    "bad-timestamp-submillisecond.jsonl": lambda: _lines(
        _m_user("a", None), _m_custom("b", "a", "2026-01-15T09:00:02.0006Z")),
    "bad-timestamp-7-digits.jsonl": lambda: _lines(
        _m_user("a", None), _m_custom("b", "a", "2026-01-15T09:00:02.9999999Z")),
    "bad-timestamp-null.jsonl": lambda: _lines(
        _m_user("a", None), _m_custom("b", "a", None)),
    "bad-timestamp-number.jsonl": lambda: _lines(
        _m_user("a", None), _m_custom("b", "a", 1234)),
    "bad-lone-surrogate.jsonl": lambda: _lines(_m_user("a", None, "h\ud800i")),
    "bad-version-string.jsonl": lambda: _lines(
        _m_user("a", None), _m_user("b", "a"), header={**_HEADER, "version": "3"}),
}


# ---------------------------------------------------------------------------------------
# running both sides


def run_pi(files: list[Path], node: str, pi_dir: str, timeout: float = 600) -> list[dict]:
    """pi's context for each file (one node process for all), in order.

    A file pi fails on yields {"path", "error"}.
    """
    if not files:
        return []
    cmd = [node, str(PI_CONTEXT), "--direct", "--pi-dir", pi_dir, "--", *map(str, files)]
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode not in (0, 1) or len(results) != len(files):
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"pi_context.mjs failed (exit {proc.returncode}): {err[-2000:]}")
    return results


def pi_keeps_ids(header: dict[str, Any] | None) -> bool:
    """Whether pi loads the file without a v1/v2 migration (JS: `(version ?? 1) >= 3`).

    Only then are its entry ids (and so the leafId) stable and comparable.
    """
    version = 1 if header is None or header.get("version") is None else header["version"]
    if isinstance(version, bool):
        version = int(version)
    if isinstance(version, str):
        try:
            version = float(version.strip() or "0")
        except ValueError:
            return False
    return isinstance(version, int | float) and version >= 3


def run_ours(path: Path) -> tuple[dict[str, Any], int, int, bool]:
    """journal's context for the file's leaf, as JSON values.

    Also returns the version journal read the file as, its number of diagnostics, and
    whether pi keeps this file's ids (`pi_keeps_ids`).
    """
    snap = load(path)
    tree = Tree(snap.entries)
    ctx = build_context(tree, tree.leaf_id).to_json()
    try:
        ctx = orjson.loads(orjson.dumps(ctx))
    except TypeError:
        pass
    return ctx, snap.version, len(snap.diagnostics), pi_keeps_ids(snap.header)


# ---------------------------------------------------------------------------------------
# comparison

_MISSING = object()


@dataclass
class FileResult:
    name: str
    path: str
    version: int = 3
    pi_messages: int | None = None
    our_messages: int | None = None
    equal: bool = False
    first_diff: int | None = None
    problems: list[str] = field(default_factory=list)
    diagnostics: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _short(value: Any, limit: int = 120) -> str:
    if value is _MISSING:
        return "<absent>"
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def value_diffs(a: Any, b: Any, where: str = "", limit: int = 6) -> list[str]:
    """Where two JSON values differ, as 'path: pi=... ours=...' lines (at most `limit`)."""
    out: list[str] = []

    def walk(x: Any, y: Any, at: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for key in list(x) + [k for k in y if k not in x]:
                walk(x.get(key, _MISSING), y.get(key, _MISSING), f"{at}.{key}")
            return
        if isinstance(x, list) and isinstance(y, list):
            for i in range(max(len(x), len(y))):
                walk(x[i] if i < len(x) else _MISSING, y[i] if i < len(y) else _MISSING,
                     f"{at}[{i}]")
            return
        if x is _MISSING or y is _MISSING or type(x) is not type(y) or x != y:
            # 1 and 1.0 are the same JSON number
            if (isinstance(x, int | float) and isinstance(y, int | float)
                    and not isinstance(x, bool) and not isinstance(y, bool) and x == y):
                return
            out.append(f"{at or '.'}: pi={_short(x)} ours={_short(y)}")

    walk(a, b, where)
    return out


def compare(name: str, path: Path, pi: dict[str, Any], ours: dict[str, Any], version: int,
            diagnostics: int = 0, stable_ids: bool | None = None) -> FileResult:
    """Compare pi's output for one file with ours.

    `stable_ids`: whether pi keeps the file's ids (no v1 migration), so leafIds can be
    compared; by default, when `version` is 3 or more.
    """
    if stable_ids is None:
        stable_ids = version >= 3
    result = FileResult(name, str(path), version=version, diagnostics=diagnostics)
    if "error" in pi:
        result.error = "pi failed: " + pi["error"].splitlines()[0]
        result.our_messages = len(ours["messages"])
        return result
    pm, om = pi.get("messages", []), ours["messages"]
    result.pi_messages, result.our_messages = len(pm), len(om)
    for i in range(max(len(pm), len(om))):
        if i >= len(pm) or i >= len(om):
            result.first_diff = i
            side = "pi" if i >= len(om) else "ours"
            extra = pm[i] if i >= len(om) else om[i]
            result.problems.append(
                f"messages[{i}]: only in {side}: role={extra.get('role')!r} {_short(extra, 100)}"
            )
            break
        diffs = value_diffs(pm[i], om[i], f"messages[{i}]")
        if diffs:
            result.first_diff = i
            result.problems.append(
                f"messages[{i}]: pi role={pm[i].get('role')!r}, ours role={om[i].get('role')!r}"
            )
            result.problems.extend("  " + d for d in diffs)
            break
    keys = ["model", "thinkingLevel"] + (["leafId"] if stable_ids else [])
    for key in keys:
        result.problems.extend(value_diffs(pi.get(key, _MISSING), ours.get(key, _MISSING), key))
    result.equal = not result.problems
    return result


def check_files(files: list[Path], node: str, pi_dir: str,
                names: dict[Path, str] | None = None) -> list[FileResult]:
    """Run pi and journal on every file and compare them."""
    pi_results = run_pi(files, node, pi_dir)
    results = []
    for path, pi in zip(files, pi_results, strict=True):
        name = (names or {}).get(path, path.name)
        try:
            ours, version, ndiag, stable = run_ours(path)
        except Exception as e:  # noqa: BLE001 - reported, not raised
            results.append(FileResult(name, str(path), error=f"journal failed: {e!r}",
                                      pi_messages=len(pi.get("messages", []))))
            continue
        results.append(compare(name, path, pi, ours, version, ndiag, stable))
    return results


def build_file_set(directory: Path, quick: bool = False, malformed: bool = False,
                   fixtures: bool = True) -> list[Path]:
    """Fixtures (when `fixtures` and available) plus generated and edge files (and malformed
    ones) written into `directory`."""
    gen_names = QUICK_GENERATED if quick else None
    files = fixture_files() if fixtures else []
    files += write_generated(directory, gen_names) + write_edge_files(directory)
    if malformed:
        files += write_edge_files(directory, MALFORMED_CASES)
    return files


# ---------------------------------------------------------------------------------------
# reporting


def format_table(results: list[FileResult]) -> str:
    width = max([len("file")] + [len(r.name) for r in results])
    lines = [f"{'file':<{width}}  {'ver':>3}  {'pi msgs':>7}  {'our msgs':>8}  equal"]
    for r in results:
        pm = "-" if r.pi_messages is None else str(r.pi_messages)
        om = "-" if r.our_messages is None else str(r.our_messages)
        equal = "yes" if r.equal else ("ERROR" if r.error else "NO")
        lines.append(f"{r.name:<{width}}  {r.version:>3}  {pm:>7}  {om:>8}  {equal}")
    passed = sum(r.equal for r in results)
    lines.append(f"{passed}/{len(results)} files equal")
    return "\n".join(lines)


def format_problems(results: list[FileResult]) -> str:
    out = []
    for r in results:
        if r.equal:
            continue
        out.append(f"--- {r.name} ({r.path})")
        if r.error:
            out.append(f"  {r.error}")
        if r.first_diff is not None:
            out.append(f"  first differing message: index {r.first_diff}")
        out.extend(f"  {p}" for p in r.problems)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compare journal's context with pi's.")
    ap.add_argument("files", nargs="*", help="extra session files to check")
    ap.add_argument("--pi-dir", default=None, help="pi-coding-agent package dir")
    ap.add_argument("--node", default=None, help="node binary (default /usr/bin/node)")
    ap.add_argument("--json", action="store_true", help="print a JSON report")
    ap.add_argument("--quick", action="store_true", help="only two small generated sessions")
    ap.add_argument("--only", action="store_true", help="check only the FILE arguments")
    ap.add_argument("--malformed", action="store_true",
                    help="also check damaged/foreign files (MALFORMED_CASES); journal may "
                         "legitimately differ on them")
    ap.add_argument("--dir", default=None,
                    help="write generated/edge files here and keep them (default: temp dir)")
    a = ap.parse_args(argv)

    node = find_node(a.node)
    pi_dir = find_pi_dir(a.pi_dir)
    missing = pi_missing(node, pi_dir)
    if missing:
        print(f"parity: cannot run pi: {missing}", file=sys.stderr)
        return 2
    assert node is not None

    if not a.only and (reason := fixtures_missing()) is not None:
        print(f"parity: not checking the real pi files: {reason}", file=sys.stderr)

    tmp = None
    if a.dir:
        directory = Path(a.dir)
        directory.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="journal-parity-")
        directory = Path(tmp)
    try:
        t0 = time.perf_counter()
        files = [] if a.only else build_file_set(directory, a.quick, a.malformed)
        files += [Path(f) for f in a.files]
        results = check_files(files, node, pi_dir)
        seconds = time.perf_counter() - t0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    ok = all(r.equal for r in results)
    if a.json:
        report = {"ok": ok, "pi_dir": pi_dir, "node": node, "seconds": round(seconds, 3),
                  "files": [r.to_json() for r in results]}
        print(json.dumps(report, indent=2))
    else:
        print(format_table(results))
        problems = format_problems(results)
        if problems:
            print()
            print(problems)
        print(f"({seconds:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
