"""docs/format.md is the file format's specification; these tests keep it honest where a
machine can check it: every name the code uses is specified, every record the code writes has
the fields the spec lists, and every example in the spec loads and projects to what it states.

The code's names are found by walking the packages (`public`), so a module that moves keeps
these tests working.
"""

from __future__ import annotations

import ast
import base64
import importlib
import json
import os
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

import journal
from journal import Tree, build_context, load, resume
from journal.model import ENTRY_TYPES, FIELD_TYPES, REQUIRED_FIELDS, bad_fields, legacy_id

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "format.md"
FENCE = re.compile(r"^```(jsonl|json)\n(.*?)^```\n(?:<!-- check: (.*?) -->\n)?", re.M | re.S)


@dataclass
class Block:
    kind: str
    lines: list[str]
    check: dict[str, Any] | None
    section: str

    @property
    def values(self) -> list[Any]:
        return [json.loads(line) for line in self.lines]


def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def blocks() -> list[Block]:
    text = doc()
    out = []
    for match in FENCE.finditer(text):
        heading = re.findall(r"^#+ (.*)$", text[: match.start()], re.M)
        check = json.loads(match.group(3)) if match.group(3) else None
        lines = [line for line in match.group(2).splitlines() if line.strip()]
        out.append(Block(match.group(1), lines, check, heading[-1] if heading else ""))
    return out


def section(title_start: str) -> str:
    """The text of the section whose heading starts with `title_start` (up to the next
    heading of the same or a higher level)."""
    text = doc()
    match = re.search(rf"^(#+) {re.escape(title_start)}.*$", text, re.M)
    assert match, f"docs/format.md has no section '{title_start}'"
    level = len(match.group(1))
    rest = text[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def table_fields(text: str) -> list[str]:
    """The first-column names of the table rows in `text`: | `name` | ..."""
    return re.findall(r"^\| `([^`]+)` \|", text, re.M)


def row(text: str, name: str) -> str:
    found = re.search(rf"^\| `{re.escape(name)}` \|.*$", text, re.M)
    assert found, f"no table row for `{name}`"
    return found.group(0)


@cache
def journal_modules() -> list[Any]:
    mods = [journal]
    for info in pkgutil.walk_packages(journal.__path__, "journal."):
        if info.name.endswith(".__main__"):
            continue
        mods.append(importlib.import_module(info.name))
    return mods


def public(name: str) -> Any:
    """The public object `name` defined somewhere in the journal package."""
    for module in journal_modules():
        value = vars(module).get(name)
        if value is not None and getattr(value, "__module__", module.__name__) == module.__name__:
            return value
    for module in journal_modules():
        if name in vars(module):
            return vars(module)[name]
    raise LookupError(f"{name} is not defined in the journal package")


def sources(*packages: str) -> Iterator[tuple[Path, ast.AST]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


# names the code uses are specified


def test_every_entry_type_has_its_section() -> None:
    sections = re.findall(r"^### 4\.\d+ `([a-z_]+)`$", doc(), re.M)
    assert sorted(sections) == sorted(ENTRY_TYPES)


def _is_type_read(node: ast.AST) -> bool:
    """`x.get("type")`, `x["type"]` or the name `kind` (how journal/ reads an entry's type)."""
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and bool(node.args) and (
            isinstance(node.args[0], ast.Constant) and node.args[0].value == "type")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "type"
    return False


def type_strings_in_code() -> set[str]:
    found: set[str] = set()
    for _, tree in sources("journal"):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare) or not _is_type_read(node.left):
                continue
            for right in node.comparators:
                items = right.elts if isinstance(right, ast.Tuple | ast.Set | ast.List) else [right]
                found.update(i.value for i in items
                             if isinstance(i, ast.Constant) and isinstance(i.value, str))
    return found


# Block types of Anthropic API requests, which `journal.validate` also checks; never in a file.
API_BLOCK_TYPES = {"tool_use", "tool_result"}


def test_every_entry_type_the_code_compares_with_is_specified() -> None:
    found = type_strings_in_code() - API_BLOCK_TYPES
    assert {"message", "compaction", "session"} <= found  # the scan sees the code's checks
    text = doc()
    missing = sorted(t for t in found | set(ENTRY_TYPES) if f"`{t}`" not in text)
    assert not missing, f"types used in journal/ but not in docs/format.md: {missing}"


# How the spec's type column spells each JSON type `model.FIELD_TYPES` describes.
SPELLED = {"an object": "object", "a string": "string", "a number": "number",
           "a string or null": "string or null", "a string or a list": "string or list",
           "true or false": "boolean"}


@pytest.mark.parametrize("kind", ENTRY_TYPES)
def test_required_and_typed_fields_are_specified(kind: str) -> None:
    text = section(f"4.{ENTRY_TYPES.index(kind) + 1} `{kind}`")
    for name in REQUIRED_FIELDS[kind]:
        assert "| required |" in row(text, name), f"{kind}.{name} is required in the code"
    for name, _, expected in FIELD_TYPES.get(kind, ()):
        type_column = row(text, name).split("|")[2].strip()
        assert type_column == SPELLED[expected], f"{kind}.{name} must be {expected}"


def journal_custom_types() -> set[str]:
    """The `journal.<word>` custom types in the code: module-level string constants and
    `"customType"` values in dict literals."""
    found = set()
    for _, tree in sources("journal", "agent", "tools"):
        candidates = [node.value for node in getattr(tree, "body", [])
                      if isinstance(node, ast.Assign | ast.AnnAssign)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                candidates += [v for k, v in zip(node.keys, node.values, strict=True)
                               if isinstance(k, ast.Constant) and k.value == "customType"]
        for value in candidates:
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and re.fullmatch(
                    r"journal\.[a-z_]+", value.value):
                found.add(value.value)
    return found


def test_every_journal_custom_type_is_specified() -> None:
    found = journal_custom_types()
    assert {"journal.successor", "journal.repair"} <= found
    table = table_fields(section("8. The store's extensions").split("### 8.1")[0])
    assert sorted(table) == sorted(found)
    for custom_type in found:
        assert re.search(rf'"customType":"{re.escape(custom_type)}"', doc()), \
            f"no example entry of {custom_type}"


def test_every_reader_reason_is_specified() -> None:
    codec = public("Diagnostic").__module__
    reasons = {value for name, value in vars(importlib.import_module(codec)).items()
               if name.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z0-9_]+", value)}
    assert {"torn_tail", "invalid_json", "missing_header", "bad_field"} <= reasons
    assert sorted(table_fields(section("2. Line framing"))) == sorted(reasons)


def test_every_tree_issue_is_specified() -> None:
    tree_module = importlib.import_module(Tree.__module__)
    kinds = {getattr(tree_module, n) for n in ("ORPHAN", "FORWARD", "SELF", "DUPLICATE")}
    assert sorted(table_fields(section("6.1 Rules"))) == sorted(kinds)


# records the code writes have the fields the spec lists


def test_quarantine_record_fields_and_example() -> None:
    record_type = public("Quarantined")
    record = b"".join(record_type("/s/a.jsonl", 7, b"{\"a\"", "torn_tail").encoded("0" * 32))
    written = list(orjson.loads(record))
    text = section("9.2 `<name>.quarantine`")
    assert table_fields(text) == written  # same fields, same order
    [example] = [b for b in blocks() if b.section.startswith("9.2")]
    value = example.values[0]
    assert list(value) == written
    data = base64.b64decode(value["bytes"])
    assert len(data) == value["length"]
    assert data.decode() == value["text"]
    assert re.fullmatch(r"[0-9a-f]{32}", value["key"])
    limit = public("TEXT_LIMIT")
    assert limit == 1 << 20 and "at most 1 MiB" in text


def test_intent_fields_and_example(tmp_path: Path) -> None:
    [example] = [b for b in blocks() if b.section.startswith("9.4")]
    value = example.values[0]
    folder = os.path.realpath(tmp_path)
    session = os.path.join(folder, os.path.basename(value["archive"]))
    made = public("intent_record")(session, os.path.join(folder, value["successor"]),
                                   os.path.join(folder, value["archive"]), value["sessionId"])
    assert made == value  # the example is exactly what a rotation of that session writes
    text = section("9.4 `<name>.rotating`")
    assert table_fields(text) == list(made)
    intent = public("parse_intent")(session, example.lines[0].encode())
    assert intent.successor == os.path.join(folder, value["successor"])
    assert public("MAX_INTENT_BYTES") == 64 << 10 and "at most 64 KiB" in text


def test_lock_holder_example(tmp_path: Path) -> None:
    lock = public("WriterLock")(str(tmp_path / "a.jsonl"), 1)
    lock.acquire()
    try:
        holder = json.loads((tmp_path / "a.jsonl.lock").read_text())
    finally:
        lock.release()
    [example] = [b for b in blocks() if b.section.startswith("9.1")]
    assert list(example.values[0]) == list(holder)


def test_seal_example_is_what_rotation_writes(tmp_path: Path) -> None:
    files = [b for b in blocks() if b.section.startswith("8.2") and b.kind == "jsonl"]
    sealed, successor = files
    old_header, new_header = sealed.values[0], successor.values[0]
    seal = sealed.values[-1]
    folder = str(tmp_path)
    old_name = os.path.basename(new_header["parentSession"]).removesuffix(".gz")
    new_name = public("session_file_name")(new_header["timestamp"], new_header["id"])
    assert old_name == public("session_file_name")(old_header["timestamp"], old_header["id"])
    pointers = public("seal_pointers")(os.path.join(folder, new_name), new_header["id"],
                                       os.path.join(folder, "archive", old_name),
                                       successor.values[-1]["id"])
    assert seal["data"] == pointers
    assert seal["customType"] == public("SUCCESSOR_TYPE")
    assert table_fields(section("8.1 The seal"))[: len(pointers)] == list(pointers)


def test_marker_data_fields_are_the_code_s() -> None:
    for title, path in (("8.3", "journal"), ("8.4", "agent")):
        [example] = [b for b in blocks() if b.section.startswith(title)]
        data = example.values[0]["data"]
        code = "\n".join(p.read_text() for p, _ in sources(path))
        for key in data:
            assert f'"{key}"' in code, f"§ {title}: {key} is not written by {path}/"
    listed = table_fields(section("8.4"))
    assert listed == list(blocks_in("8.4")[0].values[0]["data"])


def blocks_in(title: str) -> list[Block]:
    return [b for b in blocks() if b.section.startswith(title)]


def test_numbers_stated_match_the_code() -> None:
    text = doc()
    assert public("MIN_GAIN_BYTES") == 1024 and "at least 1 KiB shorter" in text
    assert "skips, with a warning, a line longer than 256 MiB" in text
    assert public("MAX_LINE") == 256 << 20
    temp = os.path.basename(public("temp_path_for")("/s/a.jsonl", "repair"))
    assert re.fullmatch(r"\.a\.jsonl\.[0-9a-f]{12}\.repair\.tmp", temp)
    assert "`.<final name>.<12 hex chars>.<kind>.tmp`" in text
    assert public("temp_name")("b.jsonl") == ".b.jsonl.rotate.tmp"


def test_v1_id_rule_as_written_gives_the_code_s_ids() -> None:
    import hashlib

    taken: set[str] = set()
    for index in range(50):
        attempt = 0
        while True:
            spelled = hashlib.blake2b(f"s1:{index}:{attempt}".encode(), digest_size=4).hexdigest()
            if spelled not in taken:
                break
            attempt += 1
        assert legacy_id("s1", index, taken) == spelled
        taken.add(spelled)
    assert 'blake2b("<header id>:<i>:<attempt>", 4 bytes)' in doc()


# the examples load and project to what the spec says


def example_blocks() -> list[Block]:
    return [b for b in blocks() if b.kind == "jsonl"]


def test_the_spec_has_examples() -> None:
    whole = [b for b in example_blocks() if b.values[0].get("type") == "session"]
    assert len(whole) >= 8
    assert all(b.check is not None for b in whole), "every whole-file example states its result"


@pytest.mark.parametrize("index", range(len(example_blocks())))
def test_example_block(index: int, tmp_path: Path) -> None:
    block = example_blocks()[index]
    values = block.values
    assert all(isinstance(v, dict) for v in values)
    for line in block.lines:
        assert line == orjson.dumps(json.loads(line)).decode(), "not written as the store writes"
    check_entry = public("check_entry")
    if values[0].get("type") != "session":
        for value in values:
            assert check_entry(value, 3) is None and bad_fields(value) == []
        return
    path = tmp_path / "example.jsonl"
    path.write_text("".join(line + "\n" for line in block.lines), encoding="utf-8")
    snap = load(path)
    assert snap.diagnostics == [] and snap.field_issues == []
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    assert tree.issues == []
    context = build_context(tree, tree.leaf_id)
    expected = block.check or {}
    actual: dict[str, Any] = {
        "version": snap.version,
        "entries": len(snap.entries),
        "ids": [e["id"] for e in snap.entries],
        "leaf": tree.leaf_id,
        "entryIds": context.entry_ids,
        "roles": [m.get("role") for m in context.messages],
        "model": context.model,
        "thinkingLevel": context.thinking_level,
        "labels": tree.labels,
        "name": tree.name,
        "sealed": public("seal_of")(str(path)) is not None,
    }
    assert {k: actual[k] for k in expected} == expected
    if snap.version == 3:  # reading only the tail gives the same projection (§ 7.3)
        tail = resume(path)
        tail_tree = Tree(tail.entries, complete=tail.complete)
        assert build_context(tail_tree, tail_tree.leaf_id).same_as(context)


def _write(path: Path, values: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in values))
    return path


@pytest.mark.parametrize("first_kept", ["absent", None, "ffffffff", "bb000006", "side0001"])
def test_a_first_kept_id_not_before_the_compaction_keeps_nothing(first_kept: str | None,
                                                                  tmp_path: Path) -> None:
    """§ 7.2, step 2: absent, null, not in the file, after the compaction, on another branch."""
    [example] = [b for b in blocks_in("7.2") if b.check and len(b.check["entryIds"]) == 4]
    values = example.values
    compaction = next(v for v in values if v.get("type") == "compaction")
    if first_kept == "absent":
        del compaction["firstKeptEntryId"]
    else:
        compaction["firstKeptEntryId"] = first_kept
    side = {"type": "message", "id": "side0001", "parentId": "bb000001",
            "timestamp": "2026-12-01T09:00:02.500Z",
            "message": {"role": "user", "content": "aside", "timestamp": 1764579602500}}
    values.insert(3, side)
    snap = load(_write(tmp_path / "s.jsonl", values))
    tree = Tree(snap.entries)
    context = build_context(tree, tree.leaf_id)
    assert snap.diagnostics == [] and tree.leaf_id == "bb000008"
    assert context.entry_ids == [None, "bb000008"]
    assert context.thinking_level == "off" and context.model == {
        "provider": "anthropic", "modelId": "claude-sonnet-4-5"}


@pytest.mark.parametrize(("index", "kept"), [
    (1, ["c144a631", "4f25f008", "27d96d2b"]),  # an entry before it
    (4, []),  # the compaction itself
    (5, []),  # a later entry
    (0, []),  # the header
    (9, []),  # nothing
    ("3", []),  # not a number: left as it is, so no firstKeptEntryId
])
def test_v1_first_kept_index_rules(index: object, kept: list[str], tmp_path: Path) -> None:
    """§ 10.1: which entry a version 1 `firstKeptEntryIndex` names."""
    [example] = [b for b in blocks_in("10.1") if b.kind == "jsonl"]
    values = example.values
    compaction = next(v for v in values if v.get("type") == "compaction")
    compaction["firstKeptEntryIndex"] = index
    snap = load(_write(tmp_path / "v1.jsonl", values))
    migrated = next(e for e in snap.entries if e["type"] == "compaction")
    assert ("firstKeptEntryIndex" in migrated) == (not isinstance(index, int))
    assert ("firstKeptEntryId" in migrated) == (index in (1, 4))
    tree = Tree(snap.entries)
    assert build_context(tree, tree.leaf_id).entry_ids == [None, *kept, "f8e571ce"]
