"""Tests for bench/gen_claude.py (the synthetic Claude Code transcript generator)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    name = "bench_gen_claude"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "gen_claude.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


gc = _load()

ISSUE_TYPES = {"user", "assistant", "system", "summary", "attachment", "file-history-snapshot",
               "queue-operation", "progress", "ai-title"}


def _records(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [orjson.loads(line) for line in data.split(b"\n")[:-1]]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("claude")
    stats = gc.generate(out, mb=3, seed=7, compactions=3, rewinds=5)
    return stats, _records(stats.path)


def test_deterministic_per_seed(tmp_path: Path) -> None:
    a = gc.generate(tmp_path / "a", mb=0.5, seed=3)
    b = gc.generate(tmp_path / "b", mb=0.5, seed=3)
    c = gc.generate(tmp_path / "c", mb=0.5, seed=4)
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.path.read_bytes() != c.path.read_bytes()
    assert [p.read_bytes() for p in a.subagents] == [p.read_bytes() for p in b.subagents]


def test_size_target(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=2, seed=1)
    size = stats.path.stat().st_size
    assert size == stats.bytes
    assert 2 * gc.MB <= size < 2.5 * gc.MB


def test_every_record_type_and_field(made: tuple[Any, list[dict[str, Any]]]) -> None:
    stats, recs = made
    assert {r["type"] for r in recs} >= ISSUE_TYPES
    for r in recs:
        if "uuid" in r:
            for key in ("parentUuid", "isSidechain", "sessionId", "cwd", "version",
                        "gitBranch", "timestamp"):
                assert key in r, (key, r["type"])
    subtypes = {r.get("subtype") for r in recs if r["type"] == "system"}
    assert {"compact_boundary", "turn_duration"} <= subtypes
    assert any(r.get("isMeta") is True for r in recs if r["type"] == "user")
    assert any("toolUseResult" in r for r in recs)
    assert all("requestId" in r for r in recs if r["type"] == "assistant")
    for r in recs:
        if r["type"] == "summary":
            assert isinstance(r["leafUuid"], str)


def test_ids_and_parents(made: tuple[Any, list[dict[str, Any]]]) -> None:
    _, recs = made
    seen: set[str] = set()
    for r in recs:
        if "uuid" not in r:
            continue
        assert r["uuid"] not in seen
        parent = r["parentUuid"]
        assert parent is None or parent in seen, "every parent is written before its child"
        if parent is None:
            assert (r.get("subtype") == "compact_boundary" or r["isSidechain"]
                    or not seen), r
        seen.add(r["uuid"])


def test_compactions(made: tuple[Any, list[dict[str, Any]]]) -> None:
    stats, recs = made
    by_uuid = {r["uuid"]: r for r in recs if "uuid" in r}
    boundaries = [i for i, r in enumerate(recs) if r.get("subtype") == "compact_boundary"]
    assert len(boundaries) == stats.compactions == 3
    for i in boundaries:
        b = recs[i]
        assert b["parentUuid"] is None and b["logicalParentUuid"] in by_uuid
        assert {"trigger", "preTokens"} <= set(b["compactMetadata"]) <= {
            "trigger", "preTokens", "preservedSegment"}
        s = recs[i + 1]
        assert s["type"] == "user" and s["isCompactSummary"] is True
        assert s["parentUuid"] == b["uuid"]


def test_one_block_per_line_sharing_message_id(made: tuple[Any, list[dict[str, Any]]]) -> None:
    _, recs = made
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        if r["type"] == "assistant":
            assert len(r["message"]["content"]) == 1
            groups.setdefault(r["message"]["id"], []).append(r)
    assert any(len(g) >= 3 for g in groups.values())
    progress = {p["uuid"]: p["parentUuid"] for p in recs if p["type"] == "progress"}
    shapes = set()
    for g in groups.values():
        assert len({r["requestId"] for r in g}) == 1
        calls = [r for r in g if r["message"]["content"][0]["type"] == "tool_use"]
        for prev, nxt in zip(g, g[1:], strict=False):
            # a line hangs on the previous line of its response, on a progress record that
            # hangs on it, or (parallel calls) where the response's first call hangs
            parent = nxt["parentUuid"]
            if parent == prev["uuid"]:
                shapes.add("chain")
            elif progress.get(parent) == prev["uuid"]:
                shapes.add("progress")
            else:
                assert nxt in calls and parent == calls[0]["parentUuid"]
                shapes.add("siblings")
    assert shapes == {"chain", "progress", "siblings"}
    blocks = [r["message"]["content"][0] for r in recs if r["type"] == "assistant"]
    thinking = [b for b in blocks if b["type"] == "thinking"]
    assert thinking and all(len(b["signature"]) > 100 for b in thinking)
    users = [r["message"]["content"] for r in recs if r["type"] == "user"]
    images = [b for c in users if isinstance(c, list) for b in c if b.get("type") == "image"]
    images += [x for c in users if isinstance(c, list) for b in c
               if b.get("type") == "tool_result" and isinstance(b["content"], list)
               for x in b["content"] if x.get("type") == "image"]
    assert images


def test_tool_results_hang_on_their_calls(made: tuple[Any, list[dict[str, Any]]]) -> None:
    _, recs = made
    owner = {}
    for r in recs:
        if r["type"] == "assistant":
            for b in r["message"]["content"]:
                if b["type"] == "tool_use":
                    owner[b["id"]] = r["uuid"]
    answered: dict[str, int] = {}
    for r in recs:
        if r["type"] == "user" and isinstance(r["message"]["content"], list):
            for b in r["message"]["content"]:
                if b.get("type") == "tool_result":
                    assert r["parentUuid"] == owner[b["tool_use_id"]]
                    answered[b["tool_use_id"]] = answered.get(b["tool_use_id"], 0) + 1
    assert answered == dict.fromkeys(owner, 1)
    # newer versions go on from a hook's progress record on a response's last call
    kinds = {r["uuid"]: r["type"] for r in recs if "uuid" in r}
    assert any(kinds.get(r.get("parentUuid")) == "progress" and r["type"] == "assistant"
               for r in recs)


def test_rewinds_leave_forks(made: tuple[Any, list[dict[str, Any]]]) -> None:
    stats, recs = made
    assert stats.rewinds >= 1
    prompts: dict[str, int] = {}
    for r in recs:
        if r["type"] == "user" and isinstance(r["message"]["content"], str) and r["parentUuid"]:
            prompts[r["parentUuid"]] = prompts.get(r["parentUuid"], 0) + 1
    assert any(n >= 2 for n in prompts.values())


def test_subagent_files(made: tuple[Any, list[dict[str, Any]]]) -> None:
    stats, recs = made
    assert stats.subagents
    spawned = {r["toolUseResult"]["agentId"] for r in recs
               if isinstance(r.get("toolUseResult"), dict) and "agentId" in r["toolUseResult"]}
    for path in stats.subagents:
        assert path.parent == stats.path.parent / stats.session_id / "subagents"
        agent = path.name.removeprefix("agent-").removesuffix(".jsonl")
        assert agent in spawned
        sub = _records(path)
        assert sub[0]["parentUuid"] is None
        assert all(r["isSidechain"] and r["agentId"] == agent for r in sub)
        assert all(r["sessionId"] == stats.session_id for r in sub)
    assert stats.sidechains >= 0
    assert any(r.get("isSidechain") for r in recs) == (stats.sidechains > 0)


def _naive_context(recs: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str]]]:
    """The projection computed the plain way, to check the generator's own account of it."""
    by_uuid = {r["uuid"]: r for r in recs if "uuid" in r}
    relink = {}  # a preserved segment's head hangs on its anchor once Claude Code loads it
    for r in recs:
        segment = r.get("compactMetadata", {}).get("preservedSegment")
        if segment:
            relink[segment["headUuid"]] = segment["anchorUuid"]
    leaf = [r for r in recs if r["type"] in ("user", "assistant") and not r["isSidechain"]][-1]
    chain = []
    cur: dict[str, Any] | None = leaf
    while cur is not None and cur.get("subtype") != "compact_boundary":
        chain.append(cur)
        parent = relink.get(cur["uuid"], cur["parentUuid"])
        cur = by_uuid.get(parent) if parent else None
    chain.reverse()
    results = {}
    for r in recs:
        if r["type"] == "user" and isinstance(r["message"]["content"], list):
            for b in r["message"]["content"]:
                if b.get("type") == "tool_result":
                    results[b["tool_use_id"]] = r
    lines_of: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        if r["type"] == "assistant":
            lines_of.setdefault(r["message"]["id"], []).append(r)
    out: list[tuple[str, str]] = []
    done: set[str] = set()
    for r in chain:
        if r["type"] == "assistant":
            mid = r["message"]["id"]
            if mid in done:
                continue
            done.add(mid)
            out.append(("assistant", mid))
            # every line of the response, on the chain or beside it, and their results
            for line in lines_of[mid]:
                for b in line["message"]["content"]:
                    if b["type"] == "tool_use" and b["id"] in results:
                        out.append(("toolResult", b["id"]))
        elif r["type"] == "user":
            content = r["message"]["content"]
            if r.get("isCompactSummary"):
                out.append(("summary", r["uuid"]))
            elif not (isinstance(content, list) and content
                      and content[0].get("type") == "tool_result"):
                out.append(("user", r["uuid"]))
    fixed = out
    return leaf["uuid"], fixed


def test_truth_matches_a_plain_walk(made: tuple[Any, list[dict[str, Any]]]) -> None:
    stats, recs = made
    leaf, context = _naive_context(recs)
    assert stats.leaf == leaf
    assert stats.context == context
    assert stats.context[0][0] == "summary"
    assert sum(1 for k, _ in stats.context if k == "assistant") >= 2


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gc.main([str(tmp_path), "--mb", "0.3", "--seed", "2", "--compactions", "1"]) == 0
    out = capsys.readouterr().out
    assert "MB" in out and "1 compactions" in out
    assert len(list(tmp_path.glob("*.jsonl"))) == 1


def test_api_ids_are_unique(made: tuple[Any, list[dict[str, Any]]]) -> None:
    _, recs = made
    calls = [b["id"] for r in recs if r["type"] == "assistant"
             for b in r["message"]["content"] if b["type"] == "tool_use"]
    assert len(calls) == len(set(calls)) > 100
    starts: dict[str, str] = {}
    for r in recs:
        if r["type"] == "assistant":
            # a message id belongs to one request
            assert starts.setdefault(r["message"]["id"], r["requestId"]) == r["requestId"]


def test_last_compaction_near_the_end(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=1, seed=9, compactions=2, last_compaction_mb=0.1)
    data = stats.path.read_bytes()
    at = data.rfind(b'"subtype":"compact_boundary"')
    assert stats.compactions == 2 and len(data) - at < 0.3 * gc.MB


def test_preserved_segments(made: tuple[Any, list[dict[str, Any]]]) -> None:
    stats, recs = made
    at = {r["uuid"]: i for i, r in enumerate(recs) if "uuid" in r}
    segments = [(i, r["compactMetadata"]["preservedSegment"]) for i, r in enumerate(recs)
                if "preservedSegment" in r.get("compactMetadata", {})]
    assert len(segments) == stats.preserved >= 1
    for i, seg in segments:
        assert at[seg["headUuid"]] <= at[seg["tailUuid"]] < i
        assert recs[i]["logicalParentUuid"] == seg["tailUuid"]
        assert recs[i + 1]["uuid"] == seg["anchorUuid"] and recs[i + 1]["isCompactSummary"]
