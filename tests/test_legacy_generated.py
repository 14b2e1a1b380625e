"""Version 1 and 2 session files made from generated sessions, so that migration is tested
on whole files (long chains, several compactions, branch summaries, every entry kind) in a
clone without the real pi files: the same ground as the tests on ``large-session.jsonl`` and
``before-compaction.jsonl``, which skip there.

A version 1 file is the active branch of a generated version 3 session written as pi wrote it
before ids existed: no ``version`` in the header, no ``id``/``parentId``, and compactions
pointing at the first kept entry by its line (``firstKeptEntryIndex``, header = 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import context_of, generated_bytes, nul_line, split_lines, torn_tail

import journal
from journal import UnsupportedVersion
from journal.cli import main as cli_main
from journal.context import Context, build_context
from journal.session import Session
from journal.snapshot import load
from journal.tree import Tree

SEED, SIZE = 0, 200_000  # two compactions, two branch summaries and a label on the leaf's branch


def _objects(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    objects = [orjson.loads(line) for line in data.splitlines() if line.strip()]
    return objects[0], objects[1:]


def _active_branch(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {e["id"]: e for e in entries}
    branch, at = [], entries[-1]["id"]
    while at is not None:
        branch.append(by_id[at])
        at = by_id[at]["parentId"]
    return branch[::-1]


def as_version_1(data: bytes) -> bytes:
    """The active branch of a version 3 file, written as a version 1 file.

    Labels are left out: they point at ids, which version 1 entries did not have.
    """
    header, entries = _objects(data)
    branch = [e for e in _active_branch(entries) if e["type"] != "label"]
    line_of = {e["id"]: n for n, e in enumerate(branch, start=1)}
    lines = [{k: v for k, v in header.items() if k != "version"}]
    for entry in branch:
        out = {k: v for k, v in entry.items() if k not in ("id", "parentId")}
        if out["type"] == "compaction":
            out["firstKeptEntryIndex"] = line_of[out.pop("firstKeptEntryId")]
        lines.append(out)
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def _context(path: Path) -> Context:
    tree = Tree(load(path).entries)
    return build_context(tree, tree.leaf_id)


@pytest.fixture(scope="module")
def v3(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return generated_bytes(tmp_path_factory.mktemp("gen"), SEED, SIZE)


@pytest.fixture
def v1_file(v3: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(as_version_1(v3))
    return path


def test_the_generated_file_has_what_the_real_ones_cover(v3: bytes) -> None:
    _, entries = _objects(v3)
    kinds = {e["type"] for e in _active_branch(entries)}
    assert {"compaction", "branch_summary", "model_change", "thinking_level_change"} <= kinds
    roles = {e["message"]["role"] for e in entries if e["type"] == "message"}
    assert {"user", "assistant", "toolResult"} <= roles
    assert sum(e["type"] == "compaction" for e in _active_branch(entries)) >= 2
    assert any(e["type"] == "label" for e in _active_branch(entries))


def test_v1_migration_is_deterministic_and_chained(v1_file: Path) -> None:
    before = v1_file.read_bytes()
    first, second = load(v1_file), load(v1_file)
    assert first.version == 1 and not first.diagnostics
    assert [e["id"] for e in first.entries] == [e["id"] for e in second.entries]
    assert len({e["id"] for e in first.entries}) == len(first.entries)
    assert first.entries[0]["parentId"] is None
    for prev, entry in zip(first.entries, first.entries[1:], strict=False):
        assert entry["parentId"] == prev["id"]
    assert v1_file.read_bytes() == before, "loading must not rewrite the file"


def test_v1_first_kept_index_becomes_id(v1_file: Path) -> None:
    _, raw = _objects(v1_file.read_bytes())
    snap = load(v1_file)
    migrated = [e for e in snap.entries if e["type"] == "compaction"]
    originals = [o for o in raw if o["type"] == "compaction"]
    assert len(migrated) == len(originals) >= 2
    for entry, original in zip(migrated, originals, strict=True):
        assert "firstKeptEntryIndex" not in entry
        target = snap.entries[original["firstKeptEntryIndex"] - 1]  # the header is line 0
        assert entry["firstKeptEntryId"] == target["id"]
        assert target["timestamp"] == raw[original["firstKeptEntryIndex"] - 1]["timestamp"]


def test_v1_file_projects_to_the_context_of_the_branch_it_came_from(
        v3: bytes, v1_file: Path, tmp_path: Path) -> None:
    source = tmp_path / "source.jsonl"
    source.write_bytes(v3)
    ours, legacy = _context(source), _context(v1_file)
    assert legacy.messages[0]["role"] == "compactionSummary"
    assert legacy.messages == ours.messages
    assert legacy.model == ours.model and legacy.thinking_level == ours.thinking_level


def test_v2_file_renames_hook_messages_and_projects_like_v3(v3: bytes, tmp_path: Path) -> None:
    header, entries = _objects(v3)
    hook = next(e for e in _active_branch(entries)[::-1] if e["type"] == "message"
                and e["message"]["role"] == "user")
    v2_entries = [{**e, "message": {**e["message"], "role": "hookMessage"}} if e is hook else e
                  for e in entries]
    path = tmp_path / "v2.jsonl"
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n"
                              for o in [{**header, "version": 2}, *v2_entries]))
    source = tmp_path / "source.jsonl"
    source.write_bytes(v3)
    assert load(path).version == 2
    ours, legacy = _context(source), _context(path)
    renamed = [n for n, m in enumerate(legacy.messages) if m["role"] == "custom"]
    assert len(renamed) == 1
    n = renamed[0]
    assert legacy.messages[:n] == ours.messages[:n]
    assert legacy.messages[n + 1:] == ours.messages[n + 1:]


def test_legacy_files_are_not_appended_to_without_migrate(v1_file: Path) -> None:
    before = v1_file.read_bytes()
    with pytest.raises(UnsupportedVersion, match="--migrate"):
        Session.open(v1_file, migrate=False)
    assert v1_file.read_bytes() == before


def test_repair_keeps_version_1_without_migrate(v1_file: Path) -> None:
    v1_file.write_bytes(nul_line(torn_tail(v1_file.read_bytes(), 10), 3))
    report = journal.repair(v1_file)
    assert report.changed and report.version == 1
    header, *entries = (orjson.loads(line) for line in split_lines(v1_file.read_bytes()))
    assert "version" not in header
    assert all("id" not in e and "parentId" not in e for e in entries)
    assert load(v1_file).version == 1


def test_repair_migrate_keeps_the_context(v1_file: Path, tmp_path: Path, capsys: Any) -> None:
    original = v1_file.read_bytes()
    kept, migrated = tmp_path / "kept.jsonl", tmp_path / "migrated.jsonl"
    kept.write_bytes(original)
    migrated.write_bytes(original)
    assert cli_main(["repair", "--json", str(kept)]) == 0
    assert cli_main(["repair", "--json", "--migrate", str(migrated)]) == 0
    first, second = (orjson.loads(line) for line in capsys.readouterr().out.splitlines())
    assert not first["changed"] and second["counts"].get("migrated") == 1
    assert kept.read_bytes() == original
    assert load(migrated).version == 3
    assert all("id" in orjson.loads(line) for line in split_lines(migrated.read_bytes()))
    assert context_of(kept)[2] == context_of(migrated)[2]
    assert (tmp_path / "migrated.jsonl.bak").read_bytes() == original
