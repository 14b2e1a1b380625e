"""Hypothesis damage of generated Claude Code transcripts (bench/gen_claude.py): whatever is
done to the bytes, repair gives a file that needs no repair itself, keeps every byte it took
out, and projects (journal.claude's projection) to a context that passes journal.validate."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import _bench_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.claude.mend import assess_claude, repair_claude
from journal.context import build_context
from journal.validate import pairing_problems

EXAMPLES = int(os.environ.get("CLAUDE_REPAIR_EXAMPLES", "60"))
# the suite runs a fixed set of examples (reproducible); CLAUDE_REPAIR_SEARCH=1 searches anew
SEARCH = bool(os.environ.get("CLAUDE_REPAIR_SEARCH"))
_UUID_RE = re.compile(rb'"uuid":"([0-9a-f-]{36})"')
_CACHE: dict[int, bytes] = {}
_CACHE_SUB: dict[str, list[bytes]] = {}


def generated(seed: int) -> bytes:
    """A generated transcript of about 60 KB (compactions, rewinds, parallel calls)."""
    if seed not in _CACHE:
        gen = _bench_module("bench_gen_claude", "gen_claude.py")
        with tempfile.TemporaryDirectory() as folder:
            gen.generate(Path(folder), mb=0.06, seed=seed, compactions=2, rewinds=2,
                         subagents=False)
            (main,) = Path(folder).glob("*.jsonl")
            _CACHE[seed] = main.read_bytes()
    return _CACHE[seed]


def _line_spans(data: bytes) -> list[tuple[int, int]]:
    spans, at = [], 0
    for line in data.split(b"\n")[:-1]:
        spans.append((at, at + len(line)))
        at += len(line) + 1
    return spans


def _damage(data: bytes, draw: Any) -> bytes:
    spans = _line_spans(data)
    kind = draw(st.sampled_from(["delete", "duplicate", "tear", "glue", "nul_run", "utf8",
                                 "reparent", "cycle", "nul_text", "truncate_end",
                                 "message_key"]))
    n = draw(st.integers(0, len(spans) - 1))
    lo, hi = spans[n]
    line = data[lo:hi]
    if kind == "delete":
        return data[:lo] + data[hi + 1:]
    if kind == "duplicate":
        return data[:hi + 1] + line + b"\n" + data[hi + 1:]
    if kind == "tear":
        cut = draw(st.integers(1, max(1, len(line) - 1)))
        return data[:lo + cut] + b"\n" + data[hi + 1:]
    if kind == "glue":
        cut = draw(st.integers(1, max(1, len(line) - 1)))
        return data[:lo + cut] + data[hi + 1:]
    if kind == "nul_run":
        return data[:lo] + b"\x00" * draw(st.integers(1, 700)) + b"\n" + data[lo:]
    if kind == "utf8":
        at = lo + draw(st.integers(0, max(0, len(line) - 1)))
        return data[:at] + b"\xff" + data[at + 1:] if data[at:at + 1] not in (b'"', b"\\") \
            else data
    if kind == "message_key":  # a byte of the key not UTF-8: the record has no `message`
        return data[:lo] + line.replace(b'"message":', b'"mes\xffage":', 1) + data[hi:]
    if kind == "truncate_end":
        return data[:len(data) - draw(st.integers(1, 400))]
    uuids = _UUID_RE.findall(data)
    if not uuids:
        return data
    if kind in ("reparent", "cycle"):
        target = uuids[-1] if kind == "cycle" else b"00000000-dead-4000-8000-000000000000"
        return data[:lo] + re.sub(rb'"parentUuid":"[0-9a-f-]{36}"',
                                  b'"parentUuid":"' + target + b'"', line, count=1) + data[hi:]
    # nul_text: a NUL character in a text of the line
    return data[:lo] + line.replace(b'"text":"', b'"text":"\\u0000', 1) + data[hi:]


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not SEARCH,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 3), data=st.data(), rounds=st.integers(1, 3))
def test_damaged_transcripts_repair_to_valid_resumable_files(tmp_path: Path, seed: int,
                                                              data: Any, rounds: int) -> None:
    damaged = generated(seed)
    for _ in range(rounds):
        damaged = _damage(damaged, data.draw)
    check_repair(tmp_path, damaged)


# damage the search found, replayed in every run: (seed, [(kind, line index[, byte in the
# line])], applied in order)
FOUND: list[tuple[int, list[tuple[Any, ...]]]] = [
    # the first line of a response (two parallel calls hanging on it) loses its `message` key,
    # and the result of the first call is deleted (repair read the chain through the unusable
    # line, the projection did not: the call went unanswered)
    (2, [("message_key", 8), ("delete", 11)]),
    (2, [("message_key", 14), ("delete", 17)]),
    # a byte of the `"text"` key of a response's line is not UTF-8: its only text block has
    # no text (repair left it, the projection's text block was empty)
    (0, [("utf8", 11, 358)]),
]


@pytest.mark.parametrize(("seed", "steps"), FOUND)
def test_damage_found_by_the_search(tmp_path: Path, seed: int,
                                    steps: list[tuple[Any, ...]]) -> None:
    damaged = generated(seed)
    for kind, index, *at in steps:
        lo, hi = _line_spans(damaged)[index]
        line = damaged[lo:hi]
        if kind == "utf8":
            (byte,) = at
            assert damaged[lo + byte:lo + byte + 1] not in (b'"', b"\\")
            damaged = damaged[:lo + byte] + b"\xff" + damaged[lo + byte + 1:]
        elif kind == "delete":
            damaged = damaged[:lo] + damaged[hi + 1:]
        else:
            assert b'"message":' in line
            damaged = damaged[:lo] + line.replace(b'"message":', b'"mes\xffage":', 1) + \
                damaged[hi:]
    check_repair(tmp_path, damaged)


def check_repair(tmp_path: Path, damaged: bytes) -> None:
    """Repair `damaged`: the new file needs nothing, the old one is the backup, every line is
    a record, and the projection passes journal.validate."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "3b1f6a52-9d4e-4a7c-8f21-6c0d9e7b5a13.jsonl"
    path.write_bytes(damaged)
    report = repair_claude(path)
    after = path.read_bytes()
    if report.changed:
        assert Path(str(path) + ".bak").read_bytes() == damaged
    else:
        assert after == damaged
    assert not after.startswith(b'{"type":"session"')
    for line in after.split(b"\n")[:-1]:
        assert isinstance(orjson.loads(line), dict)
    again = assess_claude(path)
    assert again.problems == [], again.counts
    check_projection(path)


def check_projection(path: Path) -> None:
    """The repaired file projects to a context that passes journal.validate."""
    snap = journal.load(str(path))
    assert snap.dialect == "claude"
    tree = snap.tree()
    messages = build_context(tree, tree.leaf_id).messages
    assert pairing_problems(messages) == [], pairing_problems(messages)[:3]


@settings(max_examples=max(10, EXAMPLES // 3), deadline=None, derandomize=not SEARCH,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_subagent_files_repair_as_sidechains(tmp_path: Path, data: Any) -> None:
    """A subagent's file (all records `isSidechain`) is repaired on its own chain: what repair
    adds is a sidechain record of the same agent, and the file then needs nothing."""
    if "sub" not in _CACHE_SUB:
        gen = _bench_module("bench_gen_claude", "gen_claude.py")
        with tempfile.TemporaryDirectory() as folder:
            gen.generate(Path(folder), mb=0.6, seed=3, compactions=1, rewinds=1)
            _CACHE_SUB["sub"] = [f.read_bytes() for f in
                                 sorted(Path(folder).glob("*/subagents/agent-*.jsonl"))]
    files = _CACHE_SUB["sub"]
    assert files
    original = files[data.draw(st.integers(0, len(files) - 1))]
    damaged = _damage(original, data.draw)
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "agent-0a1b2c3d.jsonl"
    path.write_bytes(damaged)
    repair_claude(path)
    assert assess_claude(path).problems == []
    agents = {r.get("agentId") for r in map(orjson.loads, original.splitlines())}
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        if "uuid" in record and record["uuid"].encode() not in original:
            assert record["isSidechain"] is True and record.get("agentId") in agents
