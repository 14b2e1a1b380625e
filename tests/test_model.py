"""Entry shapes, ids, and in-memory migration of version 1 and 2 files."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from journal import Session, load, model
from journal.model import legacy_id, migrate, new_id, session_file_name, stamp


def test_new_id_is_8_hex_and_avoids_taken_ids(monkeypatch):
    values = iter([1, 1, 0xABCDEF01])
    monkeypatch.setattr("journal.model.random.getrandbits", lambda n: next(values))
    assert new_id({"00000001"}) == "abcdef01"
    monkeypatch.undo()
    assert re.fullmatch(r"[0-9a-f]{8}", new_id(set()))


def test_session_file_name_matches_pi():
    name = session_file_name("2026-11-29T12:07:13.325Z", "abc")
    assert name == "2026-11-29T12-07-13-325Z_abc.jsonl"


def test_stamp_uses_pi_key_order():
    e = stamp({"type": "custom", "data": 1, "customType": "x", "id": "old"}, "a1b2c3d4", None)
    assert list(e) == ["type", "data", "customType", "id", "parentId", "timestamp"]
    e = stamp({"type": "label", "targetId": "t", "label": "l"}, "a1b2c3d4", "p")
    assert list(e)[:4] == ["type", "id", "parentId", "timestamp"]
    assert e["parentId"] == "p"


def pi_key_orders(path):
    orders = {}
    for line in open(path, "rb"):
        obj = orjson.loads(line)
        if obj["type"] != "session":
            orders.setdefault((obj["type"], "label" in obj), list(obj))
    return orders


def test_every_entry_type_written_here_has_pi_key_order(tmp_path, pi_fixture):
    """Round trip: rebuild all-types.jsonl through the writer and compare shapes with pi's."""
    source = pi_fixture("all-types.jsonl")
    snap = load(source)
    with Session.create(tmp_path / "copy.jsonl", cwd="/home/u/proj") as s:
        ids = {}
        for entry in snap.entries:
            kind = entry["type"]
            if kind == "message":
                new = s.append_message(entry["message"])
            elif kind == "model_change":
                new = s.append_model_change(entry["provider"], entry["modelId"])
            elif kind == "thinking_level_change":
                new = s.append_thinking_level_change(entry["thinkingLevel"])
            elif kind == "custom":
                new = s.append_custom_entry(entry["customType"], entry["data"])
            elif kind == "custom_message":
                new = s.append_custom_message_entry(
                    entry["customType"], entry["content"], entry["display"]
                )
            elif kind == "label":
                new = s.append_label_change(ids[entry["targetId"]], entry.get("label"))
            elif kind == "session_info":
                new = s.append_session_info(entry["name"])
            elif kind == "compaction":
                new = s.append_compaction(
                    entry["summary"], ids[entry["firstKeptEntryId"]], entry["tokensBefore"],
                    entry["details"], entry["fromHook"],
                )
            elif kind == "branch_summary":
                new = s.branch_with_summary(
                    ids[entry["fromId"]], entry["summary"], entry["details"], entry["fromHook"]
                )
            ids[entry["id"]] = new
        path = s.path
    ours, theirs = pi_key_orders(path), pi_key_orders(source)
    assert set(theirs) <= set(ours)
    for key, order in theirs.items():
        assert ours[key] == order, key
    header = orjson.loads(open(path, "rb").readline())
    assert list(header) == ["type", "version", "id", "timestamp", "cwd"]
    copied = load(path)
    assert not copied.diagnostics
    by_type = {}
    for e in copied.entries:
        by_type.setdefault(e["type"], e)
    assert by_type["message"]["message"] == snap.entries[0]["message"]
    assert by_type["compaction"]["details"] == {"readFiles": ["a.ts"], "modifiedFiles": []}


def test_unknown_types_and_fields_survive_round_trip(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_entry({"type": "future_thing", "payload": {"x": [1, 2]}, "zeta": None})
        s.append_message({"role": "user", "content": "hi", "extra": {"k": "v"}, "timestamp": 5})
        path = s.path
    entries = load(path).entries
    assert entries[0]["type"] == "future_thing"
    assert entries[0]["payload"] == {"x": [1, 2]} and entries[0]["zeta"] is None
    assert entries[1]["message"]["extra"] == {"k": "v"}


def test_v1_migration_is_deterministic_and_chained(pi_fixture):
    path = pi_fixture("large-session.jsonl")
    first, second = load(path), load(path)
    assert first.version == 1
    assert [e["id"] for e in first.entries] == [e["id"] for e in second.entries]
    assert len({e["id"] for e in first.entries}) == len(first.entries)
    assert first.entries[0]["parentId"] is None
    for prev, entry in zip(first.entries, first.entries[1:], strict=False):
        assert entry["parentId"] == prev["id"]
    assert open(path, "rb").readline().find(b'"version"') == -1, "file must not be rewritten"


def test_v1_first_kept_index_becomes_id(pi_fixture):
    path = pi_fixture("before-compaction.jsonl")
    raw = [orjson.loads(line) for line in open(path, "rb") if line.strip()]
    snap = load(path)
    compactions = [e for e in snap.entries if e["type"] == "compaction"]
    assert len(compactions) == 2
    raw_compactions = [o for o in raw if o.get("type") == "compaction"]
    for migrated, original in zip(compactions, raw_compactions, strict=True):
        assert "firstKeptEntryIndex" not in migrated
        index = original["firstKeptEntryIndex"]
        target = snap.entries[index - 1]  # the header is object 0
        assert migrated["firstKeptEntryId"] == target["id"]
        assert target["timestamp"] == raw[index]["timestamp"]


def test_v1_index_edge_cases_follow_pi():
    header = {"type": "session", "id": "h"}
    entries = [
        {"type": "message", "message": {"role": "user", "content": "a"}},
        {"type": "compaction", "summary": "s", "firstKeptEntryIndex": 0},
        {"type": "compaction", "summary": "s", "firstKeptEntryIndex": 9},
        {"type": "compaction", "summary": "s", "firstKeptEntryIndex": 4},
        {"type": "compaction", "summary": "s", "firstKeptEntryIndex": "1"},
        {"type": "compaction", "summary": "s", "firstKeptEntryIndex": 1},
    ]
    out = migrate(header, entries)
    assert "firstKeptEntryId" not in out[1]  # the header
    assert "firstKeptEntryId" not in out[2]  # out of range
    assert out[3]["firstKeptEntryId"] == out[3]["id"]  # itself: pi assigns before resolving
    assert out[4]["firstKeptEntryIndex"] == "1"  # not a number: left alone
    assert out[5]["firstKeptEntryId"] == out[0]["id"]
    assert entries[1]["firstKeptEntryIndex"] == 0, "inputs are not modified"


def test_legacy_ids_skip_collisions():
    first = legacy_id("seed", 0, set())
    assert legacy_id("seed", 0, {first}) != first


def test_v2_renames_hook_message_role():
    header = {"type": "session", "version": 2, "id": "h"}
    entries = [{"type": "message", "id": "a", "parentId": None,
                "message": {"role": "hookMessage", "content": "x"}}]
    assert migrate(header, entries)[0]["message"]["role"] == "custom"
    assert entries[0]["message"]["role"] == "hookMessage"


@pytest.mark.parametrize(("declared", "expected"), [
    (3, 3), (3.0, 3), ("3", 3), (2, 2), (2.0, 2), (3.5, 1), (True, 1), (None, 1), ("x", 1),
])
def test_header_version_reads_what_pi_reads(declared: object, expected: int) -> None:
    """pi compares the version as a JS number: 3.0 and "3" are 3, a fraction is no version."""
    header = {"type": "session", "id": "s", "timestamp": "t", "cwd": "/"}
    if declared is not None:
        header["version"] = declared
    assert model.header_version(header) == expected


def test_a_file_declaring_version_3_0_loads_as_version_3(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"type":"session","version":3.0,"id":"s1","timestamp":"2026-01-01T00:00:00Z",'
                    '"cwd":"/"}\n{"type":"message","id":"aaaa0001","parentId":null,'
                    '"timestamp":"2026-01-01T00:00:01Z","message":{"role":"user","content":"hi",'
                    '"timestamp":1}}\n')
    snap = load(path)
    assert snap.version == 3
    assert [e["id"] for e in snap.entries] == ["aaaa0001"]
