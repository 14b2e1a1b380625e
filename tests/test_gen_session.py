"""Tests for bench/gen_session.py (the synthetic pi v3 session generator)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import orjson
import pytest
from third_party import pi_path

ROOT = Path(__file__).resolve().parents[1]


def _load_module():
    name = "bench_gen_session"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "gen_session.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


gs = _load_module()

SIZE = 2 * gs.MB
TAIL = 256 * gs.KB
OPTS = dict(target_bytes=SIZE, compaction_every_bytes=300 * gs.KB, branch_every=5)


def _read(path: Path) -> tuple[dict, list[dict]]:
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    parsed = [orjson.loads(line) for line in lines[:-1]]
    return parsed[0], parsed[1:]


def _path_to(entries_by_id: dict[str, dict], leaf_id: str) -> list[dict]:
    path = []
    cur = leaf_id
    while cur is not None:
        e = entries_by_id[cur]
        path.append(e)
        cur = e["parentId"]
    path.reverse()
    return path


def _check_pairing(path: list[dict]) -> int:
    """Every assistant tool call is followed immediately by its results; returns #calls."""
    n_calls = 0
    i = 0
    while i < len(path):
        e = path[i]
        msg = e.get("message") if e["type"] == "message" else None
        if msg and msg["role"] == "toolResult":
            raise AssertionError(f"orphan toolResult {e['id']}")
        if msg and msg["role"] == "assistant":
            calls = [b for b in msg["content"] if b["type"] == "toolCall"]
            assert (msg["stopReason"] == "toolUse") == bool(calls)
            for j, call in enumerate(calls, start=1):
                r = path[i + j]
                assert r["type"] == "message", r
                res = r["message"]
                assert res["role"] == "toolResult"
                assert res["toolCallId"] == call["id"]
                assert res["toolName"] == call["name"]
            n_calls += len(calls)
            i += len(calls)
        i += 1
    return n_calls


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "s.jsonl"
    stats = gs.generate(path, seed=7, last_compaction_within_bytes=TAIL, **OPTS)
    header, entries = _read(path)
    return path, stats, header, entries


def test_deterministic(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    gs.generate(a, seed=3, **OPTS)
    gs.generate(b, seed=3, **OPTS)
    gs.generate(c, seed=4, **OPTS)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_header_and_size(small):
    path, stats, header, entries = small
    assert list(header) == ["type", "version", "id", "timestamp", "cwd"]
    assert header["type"] == "session" and header["version"] == 3
    assert header["timestamp"].endswith("Z") and len(header["timestamp"]) == 24
    assert stats.bytes == path.stat().st_size
    # the file stops at the first turn boundary past the target (or when the tail is full)
    assert SIZE - TAIL <= stats.bytes <= SIZE + 2 * gs.MB
    assert entries[0]["type"] == "model_change" and entries[0]["parentId"] is None
    assert entries[1]["type"] == "thinking_level_change"


def test_ids_unique_and_parents_earlier(small):
    _, _, _, entries = small
    seen: set[str] = set()
    for i, e in enumerate(entries):
        assert len(e["id"]) == 8 and int(e["id"], 16) >= 0 and e["id"] == e["id"].lower()
        assert e["id"] not in seen
        if i == 0:
            assert e["parentId"] is None
        else:
            assert e["parentId"] in seen
        seen.add(e["id"])
    ms = [e["message"]["timestamp"] for e in entries if e["type"] == "message"]
    assert all(isinstance(t, int) for t in ms)


def test_stats_match_file(small):
    _, stats, _, entries = small
    assert stats.entries == len(entries)
    by_type: dict[str, int] = {}
    by_role: dict[str, int] = {}
    for e in entries:
        by_type[e["type"]] = by_type.get(e["type"], 0) + 1
        if e["type"] == "message":
            r = e["message"]["role"]
            by_role[r] = by_role.get(r, 0) + 1
    assert by_type == stats.by_type
    assert by_role == stats.by_role
    assert stats.compactions == by_type["compaction"] >= 3
    assert stats.branches >= 2
    assert by_type["session_info"] == 1
    assert stats.leaf_id == entries[-1]["id"]


def test_active_branch_pairing(small):
    _, _, _, entries = small
    by_id = {e["id"]: e for e in entries}
    active = _path_to(by_id, entries[-1]["id"])
    assert active[0] is entries[0]
    assert _check_pairing(active) > 0
    assert len(active) < len(entries)  # some entries were abandoned by branching
    # every tool call in the file is paired in file order too (branches never split turns)
    _check_pairing(entries)
    # session_info is on the active branch
    assert any(e["type"] == "session_info" for e in active)


def test_branches_structure(small):
    _, _, _, entries = small
    by_id = {e["id"]: e for e in entries}
    children: dict[str, int] = {}
    for e in entries:
        if e["parentId"] is not None:
            children[e["parentId"]] = children.get(e["parentId"], 0) + 1
    forks = [i for i, n in children.items() if n > 1]
    assert forks
    for f in forks:  # branches go back to a turn end
        m = by_id[f]["message"]
        assert m["role"] == "assistant" and m["stopReason"] == "stop"
    for e in entries:
        if e["type"] == "branch_summary":
            assert e["fromId"] == e["parentId"]
            assert e["summary"].startswith("The user explored a different conversation branch")
        if e["type"] == "label":
            assert e["targetId"] in by_id


def test_compactions(small):
    _, stats, _, entries = small
    by_id = {e["id"]: e for e in entries}
    index = {e["id"]: i for i, e in enumerate(entries)}
    active_ids = {e["id"] for e in _path_to(by_id, entries[-1]["id"])}
    comps = [e for e in entries if e["type"] == "compaction"]
    assert comps[-1]["id"] == stats.last_compaction_id
    for c in comps:
        assert c["id"] in active_ids
        path = _path_to(by_id, c["id"])
        ids_before = [e["id"] for e in path[:-1]]
        fk = c["firstKeptEntryId"]
        assert fk in ids_before
        kept = by_id[fk]
        assert kept["type"] == "message" and kept["message"]["role"] == "user"
        assert c["tokensBefore"] > 0
        assert set(c["details"]) == {"readFiles", "modifiedFiles"}
        assert 1000 < len(c["summary"]) < 20_000 and c["summary"].startswith("## Goal")
        # settings recorded right after each compaction
        i = index[c["id"]]
        assert entries[i + 1]["type"] == "model_change"
        assert entries[i + 1]["parentId"] == c["id"]
        assert entries[i + 2]["type"] == "thinking_level_change"
        assert entries[i + 2]["parentId"] == entries[i + 1]["id"]


def test_last_compaction_within_tail(small):
    path, stats, _, _ = small
    data = path.read_bytes()
    offsets = []
    pos = 0
    for line in data.split(b"\n")[:-1]:
        if line.startswith(b'{"type":"compaction"'):
            offsets.append(pos)
        pos += len(line) + 1
    assert offsets[-1] == stats.last_compaction_offset
    assert len(data) - offsets[-1] <= TAIL
    assert orjson.loads(data[offsets[-1]:].split(b"\n", 1)[0])["id"] == stats.last_compaction_id


def test_tail_larger_than_file_and_no_settings(tmp_path):
    p = tmp_path / "t.jsonl"
    stats = gs.generate(p, target_bytes=300 * gs.KB, seed=1, compaction_every_bytes=None,
                        last_compaction_within_bytes=gs.MB, settings_after_compaction=False)
    _, entries = _read(p)
    assert stats.compactions == 1
    i = next(i for i, e in enumerate(entries) if e["type"] == "compaction")
    if i + 1 < len(entries):
        assert entries[i + 1]["type"] == "message"


def _key_orders(entry: dict) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, keys) pairs for an entry and the nested objects whose order pi fixes."""
    out = []
    t = entry["type"]
    if t == "label":
        kind = "label" if "label" in entry else "label-clear"
    else:
        kind = t
    out.append((kind, tuple(entry)))
    if t == "message":
        m = entry["message"]
        out.append(("msg:" + m["role"], tuple(m)))
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                out.append(("block:" + b["type"], tuple(b)))
        if "usage" in m:
            out.append(("usage", tuple(m["usage"])))
            out.append(("cost", tuple(m["usage"]["cost"])))
    if t in ("compaction", "branch_summary"):
        out.append(("details", tuple(entry["details"])))
    return out


def test_key_order_matches_pi(small):
    _, _, header, entries = small
    ref_header, ref_entries = _read(pi_path("all-types.jsonl"))
    assert tuple(header) == tuple(ref_header)
    ref: dict[str, tuple[str, ...]] = {}
    for e in ref_entries:
        for kind, keys in _key_orders(e):
            ref.setdefault(kind, keys)
    seen = set()
    for e in entries:
        for kind, keys in _key_orders(e):
            assert kind in ref, kind
            assert keys == ref[kind], (kind, keys, ref[kind])
            seen.add(kind)
    expected = set(ref) - {"label-clear"}
    assert expected <= seen, expected - seen


def test_content_realism(small):
    _, _, _, entries = small
    results = [e["message"] for e in entries
               if e["type"] == "message" and e["message"]["role"] == "toolResult"]
    sizes = [len(r["content"][0]["text"]) for r in results]
    assert any(s < 3000 for s in sizes)
    assert any(5000 <= s <= 50_000 for s in sizes)
    assert any(r["isError"] for r in results)
    names = {r["toolName"] for r in results}
    assert names == {"read", "edit", "bash", "write", "grep"}
    assistants = [e["message"] for e in entries
                  if e["type"] == "message" and e["message"]["role"] == "assistant"]
    assert any(b["type"] == "thinking" for a in assistants for b in a["content"])
    for a in assistants:
        u = a["usage"]
        assert u["totalTokens"] == u["input"] + u["output"] + u["cacheRead"] + u["cacheWrite"]
        assert a["api"] == "anthropic-messages" and a["provider"] == "anthropic"


def test_big_results_occur(tmp_path):
    p = tmp_path / "big.jsonl"
    gs.generate(p, target_bytes=6 * gs.MB, seed=0)
    _, entries = _read(p)
    sizes = [len(e["message"]["content"][0]["text"]) for e in entries
             if e["type"] == "message" and e["message"]["role"] == "toolResult"]
    assert max(sizes) >= 200 * gs.KB


def test_parse_size():
    assert gs.parse_size("100MB") == 100 * gs.MB
    assert gs.parse_size("1GB") == gs.GB
    assert gs.parse_size("1.5k") == 1536
    assert gs.parse_size("4096") == 4096
    with pytest.raises(ValueError):
        gs.parse_size("12 parsecs")


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli.jsonl"
    rc = gs.main([str(out), "--size", "512KB", "--seed", "5", "--compaction-every", "100KB",
                  "--tail-mb", "0.1"])
    assert rc == 0
    text = capsys.readouterr().out
    assert f"bytes: {out.stat().st_size}" in text
    assert "compactions:" in text and "MiB/s" in text
