"""Hostile entries (issue 11, items 7, 9 and 10): wrong field types, deep nesting, many
orphans, huge torn lines and lone surrogates never raise and never take quadratic time.

Each test reproduces one report of the issue on a real file in tmp_path and checks the
library, the CLI and repair. Linear time is shown by counting the work done (entries visited,
bytes handed to the JSON parser) rather than by timing, so the tests cannot be flaky.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import parity_module

from journal import Session, codec, load, read_quarantine
from journal.cli import main
from journal.codec import Line
from journal.context import build_context, for_model
from journal.info import inspect
from journal.render import describe_entry, describe_message
from journal.repair import plan, repair
from journal.rotation import rotate
from journal.salvage import salvage_line
from journal.tree import FORWARD, ORPHAN, Tree
from journal.validate import api_pairing_problems, pairing_problems

HEADER = {"type": "session", "version": 3, "id": "11111111-1111-4111-8111-111111111111",
          "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"}
TS = "2026-01-01T00:00:01.000Z"


def entry(entry_id: str, parent: str | None, kind: str = "message", **fields: Any) -> dict:
    return {"type": kind, "id": entry_id, "parentId": parent, "timestamp": TS, **fields}


def user(entry_id: str, parent: str | None, text: str = "hi") -> dict:
    return entry(entry_id, parent, message={"role": "user", "content": text, "timestamp": 1})


def write_session(path: Path, entries: list[dict], raw_lines: list[bytes] = ()) -> Path:
    with open(path, "wb") as f:
        for e in [HEADER, *entries]:
            f.write(orjson.dumps(e) + b"\n")
        for raw in raw_lines:
            f.write(raw + b"\n")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def project(path: Path) -> tuple[Tree, Any]:
    snap = load(path)
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    return tree, build_context(tree, tree.leaf_id)


def quarantined(path: Path) -> list[dict[str, Any]]:
    return list(read_quarantine(str(path) + ".quarantine"))


def assert_loads_clean(path: Path) -> None:
    snap = load(path)
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    assert snap.diagnostics == [] and snap.field_issues == [] and tree.issues == []


# item 7: wrongly typed fields


@pytest.mark.parametrize("target", [{"x": 1}, [1, 2]], ids=["object", "list"])
def test_label_with_unhashable_target_opens_and_repairs(tmp_path, capsys, target):
    path = write_session(tmp_path / "s.jsonl", [
        user("a0000001", None),
        entry("a0000002", "a0000001", "label", targetId=target, label="L"),
        user("a0000003", "a0000002", "after the label"),
    ])
    tree, context = project(path)
    assert tree.labels == {}
    assert [m["content"] for m in context.messages] == ["hi", "after the label"]
    info = inspect(path)
    assert [d.reason for d in info.diagnostics] == ["bad_field"]
    assert "targetId is not a string" in info.diagnostics[0].detail
    for command in ("info", "show", "tree", "context"):
        assert cli(capsys, command, str(path))[0] == 0, command
    session = Session.open(path)
    session.close()

    report = repair(path)
    assert report.counts == {"bad_field": 1}
    assert_loads_clean(path)
    tree, context = project(path)
    assert [e["id"] for e in tree.entries] == ["a0000001", "a0000003"]
    assert tree.entries[1]["parentId"] == "a0000001", "the child now hangs from the label's parent"
    assert [m["content"] for m in context.messages] == ["hi", "after the label"]
    records = quarantined(tmp_path / "s.jsonl")
    assert [orjson.loads(r["data"])["id"] for r in records] == ["a0000002", "a0000003"]
    assert orjson.loads(records[0]["data"])["targetId"] == target, "the label, byte for byte"
    assert records[1]["reason"] == "bad_field", "the re-parented child's original line"


def test_rotation_plans_past_a_label_with_an_object_target(tmp_path):
    s = Session.create(tmp_path, cwd="/p")
    first = s.append_message({"role": "user", "content": "x" * 4000, "timestamp": 1})
    s.append_entry({"type": "label", "targetId": {"x": 1}, "label": "L"})
    kept = s.append_message({"role": "user", "content": "kept", "timestamp": 2})
    s.append_compaction("summary", kept, 100)
    s.append_label_change(first, "first")
    path = s.path
    s.close()
    result = rotate(path, compress=False)
    assert result.rotated, result.reason


def test_session_with_wrongly_typed_fields_still_rotates(tmp_path):
    s = Session.create(tmp_path, cwd="/p")
    s.append_message({"role": "user", "content": "x" * 4000, "timestamp": 1})
    kept = s.append_message({"role": "user", "content": "kept", "timestamp": 2})
    s.append_entry({"type": "message", "message": {"content": "no role"}})
    s.append_compaction("summary", kept, "12")  # type: ignore[arg-type]
    path = s.path
    s.close()
    snap = load(path)
    assert snap.diagnostics == [], "every line was read"
    assert [d.reason for d in snap.field_issues] == ["bad_field", "bad_field"]
    before = project(Path(path))[1]
    result = rotate(path, compress=False)
    assert result.rotated and result.successor, result.reason
    assert project(Path(result.successor))[1].same_as(before)


def test_string_tokens_before_shows_and_is_repaired_to_a_number(tmp_path, capsys):
    compaction = entry("a0000002", "a0000001", "compaction", summary="s",
                       firstKeptEntryId="a0000001", tokensBefore="12000")
    path = write_session(tmp_path / "s.jsonl", [user("a0000001", None), compaction])
    assert "12000 tokens before" in describe_entry(compaction)
    for command in ("show", "tree", "info", "context"):
        code, out = cli(capsys, command, str(path))
        assert code == 0, out
    assert repair(path).counts == {"bad_field": 1}
    assert_loads_clean(path)
    assert load(path).entries[1]["tokensBefore"] == 12000


def test_unreadable_tokens_before_and_first_kept_are_removed_keeping_the_context(tmp_path):
    compaction = entry("a0000003", "a0000002", "compaction", summary="s",
                       firstKeptEntryId={"id": "a0000002"}, tokensBefore=[1])
    path = write_session(tmp_path / "s.jsonl", [
        user("a0000001", None), user("a0000002", "a0000001", "two"), compaction,
        user("a0000004", "a0000003", "after")])
    before = project(path)[1]
    assert repair(path).counts == {"bad_field": 2}
    assert_loads_clean(path)
    fixed = load(path).entries[2]
    assert "tokensBefore" not in fixed and "firstKeptEntryId" not in fixed
    after = project(path)[1]
    assert [m.get("content") for m in after.messages[1:]] == [
        m.get("content") for m in before.messages[1:]] == ["after"]


def test_message_without_role_gives_a_context_and_is_repaired(tmp_path, capsys):
    path = write_session(tmp_path / "s.jsonl", [
        user("a0000001", None),
        entry("a0000002", "a0000001", message={"content": "no role"}),
        user("a0000003", "a0000002", "last"),
    ])
    for argv in (["context", str(path)], ["context", "--for-model", str(path)],
                 ["context", "--json", str(path)]):
        code, out = cli(capsys, *argv)
        assert code == 0, out
    context = for_model(project(path)[1])
    assert pairing_problems(context.messages) == []
    assert describe_message({"content": [{"type": "text", "text": 5}]}) == ""
    report = repair(path)
    assert report.counts == {"bad_field": 1}
    assert_loads_clean(path)
    assert [e["id"] for e in load(path).entries] == ["a0000001", "a0000003"]


def test_validators_take_unhashable_ids():
    messages = [
        {"role": "assistant", "content": [
            {"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}]},
        {"role": "toolResult", "toolCallId": {"x": 1}, "content": []},
    ]
    assert any("matches no call" in p for p in pairing_problems(messages))
    api = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": ["t1"],
                                      "content": "x"}]},
    ]
    assert any("names no tool_use" in p for p in api_pairing_problems(api))


def deep_line(depth: int) -> bytes:
    return (b'{"type":"message","id":"a0000002","parentId":"a0000001","x":'
            + b"[" * depth + b"]" * depth + b"} trailing junk")


def test_deep_nesting_is_quarantined_without_recursion(tmp_path, capsys):
    path = write_session(tmp_path / "a.jsonl", [user("a0000001", None)], [deep_line(5000)])
    write_session(tmp_path / "b.jsonl", [user("b0000001", None)], [b"{torn"])
    assert [d.reason for d in load(path).diagnostics] == ["invalid_json"]
    code, out = cli(capsys, "repair", str(tmp_path))
    assert code == 0, out
    for name in ("a.jsonl", "b.jsonl"):
        assert_loads_clean(tmp_path / name)
    assert [r["data"] for r in quarantined(tmp_path / "a.jsonl")] == [deep_line(5000)]


def test_prefix_record_before_garbage_is_still_rescued(tmp_path):
    good = orjson.dumps(user("a0000002", "a0000001", "kept"))
    path = write_session(tmp_path / "s.jsonl", [user("a0000001", None)],
                         [good + b' {"oops": [1, "]"'])
    report = repair(path)
    assert report.counts == {"trailing_garbage": 1}
    assert load(path).entries[1]["message"]["content"] == "kept"


# item 9: linear time


class CountingList(list):
    """A list that counts the items read from it, by index or by iteration."""

    reads = 0

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        CountingList.reads += 1
        return super().__getitem__(index)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for item in super().__iter__():
            CountingList.reads += 1
            yield item


def test_forward_check_visits_each_entry_a_bounded_number_of_times():
    n = 4000
    entries = [entry(f"{i:08x}", f"{i + n:08x}") for i in range(n)]  # every parent missing
    entries.append(entry(f"{n:08x}", None))  # ... except the first one's, defined last
    tree = Tree(entries)
    tree.entries = CountingList(tree.entries)
    CountingList.reads = 0
    tree.finish_forward_check()
    assert CountingList.reads <= 4 * len(entries), CountingList.reads
    kinds = [issue.kind for issue in tree.issues]
    assert kinds.count(FORWARD) == 1 and kinds.count(ORPHAN) == n - 1
    forward = next(i for i in tree.issues if i.kind == FORWARD)
    assert forward.index == 0 and forward.detail.endswith(f"at {n}")


def test_forward_check_names_the_first_later_definition():
    entries = [entry("aaaaaaaa", None), entry("bbbbbbbb", "cccccccc"),
               entry("cccccccc", None), entry("cccccccc", None), entry("dddddddd", "cccccccc")]
    tree = Tree(entries)
    tree.finish_forward_check()
    assert [(i.kind, i.index, i.detail) for i in tree.issues] == [
        (FORWARD, 1, "parentId cccccccc is defined later, at 2"),
        ("duplicate_id", 3, "also at 2"),
    ]


def torn_line(candidates: int, block: int) -> bytes:
    """A torn record holding many `{"type":` blocks, as a long tool result would."""
    parts = [b'{"type":"message","id":"a0000002","parentId":"a0000001","message":'
             b'{"role":"toolResult","content":[']
    for _ in range(candidates):
        parts.append(b'{"type":"text","text":"' + b"x" * block + b'"},')
    parts.append(b'{"type":"text","text":"cut he')
    return b"".join(parts)


@pytest.fixture
def parsed_bytes(monkeypatch):
    """Count the bytes handed to orjson.loads while the test runs."""
    total = [0]
    real = orjson.loads

    def counting(data: Any) -> Any:
        total[0] += len(data)
        return real(data)

    monkeypatch.setattr(orjson, "loads", counting)
    return total


def test_salvage_of_a_long_torn_line_parses_it_a_bounded_number_of_times(parsed_bytes):
    raw = torn_line(400, 2000)
    out = salvage_line(Line(0, 1, raw))
    assert out.pieces == [] and [d.data for d in out.dropped] == [raw]
    assert parsed_bytes[0] <= 4 * len(raw), parsed_bytes[0] / len(raw)


def test_salvage_finds_the_record_glued_after_a_long_torn_one(parsed_bytes):
    complete = orjson.dumps(user("a0000003", "a0000001", 'brace } and bracket ] in "text"'))
    raw = torn_line(400, 2000) + complete
    out = salvage_line(Line(0, 1, raw))
    assert [p.value["id"] for p in out.pieces] == ["a0000003"]
    assert out.pieces[0].raw == complete
    assert [d.data for d in out.dropped] == [raw[: -len(complete)]]
    assert parsed_bytes[0] <= 4 * len(raw), parsed_bytes[0] / len(raw)


def test_salvage_finds_the_record_glued_after_a_tear_inside_an_escape():
    complete = orjson.dumps(user("a0000003", "a0000001", "after"))
    torn = b'{"type":"message","id":"a0000002","parentId":"a0000001","message":{"content":"a\\'
    out = salvage_line(Line(0, 1, torn + complete))
    assert [p.value["id"] for p in out.pieces] == ["a0000003"]
    assert [d.data for d in out.dropped] == [torn]


def test_salvage_splits_two_complete_records_on_one_line():
    first = orjson.dumps(user("a0000002", "a0000001", "one"))
    second = orjson.dumps(user("a0000003", "a0000002", "two"))
    out = salvage_line(Line(0, 1, first + second))
    assert [p.value["id"] for p in out.pieces] == ["a0000002", "a0000003"]
    assert out.notes and out.dropped == []


# item 10: lone surrogates


def test_codec_reads_lone_surrogates_as_json_parse_does():
    assert codec.loads(rb'"cut \ud83d"') == "cut \ud83d"
    assert codec.loads(rb'"\ude00 then \ud83d\ude00"') == "\ude00 then \U0001f600"
    assert codec.loads(rb'"\ud83d\ud83d\ude00"') == "\ud83d\U0001f600"
    assert codec.loads(rb'{"\ud83d": ["\\ud83d", "\\\ud83d"]}') == {
        "\ud83d": ["\\ud83d", "\\\ud83d"]}
    with pytest.raises(orjson.JSONDecodeError):
        codec.loads(rb'"\ud83d" trailing')
    with pytest.raises(orjson.JSONDecodeError):
        codec.loads(rb'"\ud83d')


def test_codec_writes_lone_surrogates_as_escapes():
    value = {"a\udc00": ["cut \ud83d", {"ok": "\U0001f600"}]}
    data = codec.dumps(value)
    data.decode("utf-8")  # valid UTF-8, no raw surrogate bytes
    assert b"\\ud83d" in data and b"\\udc00" in data
    assert codec.loads(data) == value
    assert codec.dumps({"a": 1}) == orjson.dumps({"a": 1})


def test_entry_with_lone_surrogate_loads_and_repair_keeps_it(tmp_path):
    line = (b'{"type":"message","id":"a0000002","parentId":"a0000001","timestamp":"'
            + TS.encode() + b'","message":{"role":"user","content":"cut \\ud83d","timestamp":2}}')
    path = write_session(tmp_path / "s.jsonl", [user("a0000001", None)], [line, b"{torn"])
    snap = load(path)
    assert snap.entries[1]["message"]["content"] == "cut \ud83d"
    assert [d.reason for d in snap.diagnostics] == ["invalid_json"]
    report = repair(path)
    assert report.counts == {"invalid_json": 1}, "only the torn line is a problem"
    assert line + b"\n" in path.read_bytes(), "written back unchanged"
    assert_loads_clean(path)


def test_rewritten_entry_keeps_its_lone_surrogate_escape(tmp_path):
    line = (b'{"type":"message","id":"a0000002","parentId":"ffffffff","timestamp":"'
            + TS.encode() + b'","message":{"role":"user","content":"cut \\ud83d","timestamp":2}}')
    path = write_session(tmp_path / "s.jsonl", [user("a0000001", None)], [line])
    assert plan(str(path)).problems[0].kind == "missing_parent"
    repair(path)
    data = path.read_bytes()
    data.decode("utf-8")
    assert b'"cut \\ud83d"' in data
    assert load(path).entries[1]["message"]["content"] == "cut \ud83d"
    assert_loads_clean(path)


def test_session_appends_and_rotates_lone_surrogates(tmp_path, capsys):
    s = Session.create(tmp_path, cwd="/p")
    s.append_message({"role": "user", "content": "x" * 4000, "timestamp": 1})
    kept = s.append_message({"role": "user", "content": "cut \ud83d", "timestamp": 2})
    s.append_compaction("summary \udc00", kept, 100)
    path = s.path
    s.close()
    assert load(path).diagnostics == []
    for argv in (["show", path], ["context", "--json", path], ["tree", path]):
        code, out = cli(capsys, *argv)
        assert code == 0, out
        assert "\\ud83d" in out or "\\udc00" in out
    result = rotate(path, compress=False)
    assert result.rotated and result.successor
    data = Path(result.successor).read_bytes()
    data.decode("utf-8")
    assert b"\\ud83d" in data and b"\\udc00" in data
    successor = Tree(load(result.successor).entries)
    messages = build_context(successor, successor.leaf_id).messages
    assert messages[0]["summary"] == "summary \udc00"
    assert messages[1]["content"] == "cut \ud83d"
    assert os.path.exists(result.archive or "")


def test_header_with_lone_surrogate_opens_for_writing(tmp_path):
    header = (b'{"type":"session","version":3,"id":"44444444-4444-4444-8444-444444444444",'
              b'"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/home/\\ud83d"}')
    path = tmp_path / "s.jsonl"
    path.write_bytes(header + b"\n" + orjson.dumps(user("a0000001", None)) + b"\n")
    with Session.open(path) as s:
        s.append_message({"role": "user", "content": "more", "timestamp": 2})
    snap = load(path)
    assert snap.header is not None and snap.header["cwd"] == "/home/\ud83d"
    assert snap.diagnostics == [] and len(snap.entries) == 2
    assert path.read_bytes().startswith(header + b"\n"), "the header is never rewritten"


def test_v1_compaction_keeping_from_a_dropped_entry_keeps_from_the_next(tmp_path):
    def v1(kind: str, **fields: Any) -> bytes:
        return orjson.dumps({"type": kind, "timestamp": TS, **fields})

    def said(text: str) -> bytes:
        return v1("message", message={"role": "user", "content": text, "timestamp": 1})

    path = tmp_path / "s.jsonl"  # version 1, header lost: indices count from the first line
    path.write_bytes(b"\n".join([
        said("q0"), v1("message", message={"content": "lost its role"}), said("q1"),
        v1("compaction", summary="sum", tokensBefore=5, firstKeptEntryIndex=1), said("q2"),
    ]) + b"\n")
    report = repair(path)
    assert {"bad_field", "missing_header", "renumbered"} <= set(report.counts)
    assert repair(path).changed is False, "a second repair finds nothing"
    tree, context = project(path)
    assert [m.get("content", m.get("summary")) for m in context.messages] == ["sum", "q1", "q2"]


# pi parity: the hostile values pi accepts still project as pi projects them


def test_hostile_files_project_as_pi_does(tmp_path):
    parity = parity_module()
    node, pi_dir = parity.find_node(), parity.find_pi_dir()
    missing = parity.pi_missing(node, pi_dir)
    if missing:
        pytest.skip(f"pi parity needs node and pi-coding-agent: {missing}")
    surrogate = (b'{"type":"message","id":"a0000002","parentId":"a0000001","timestamp":"'
                 + TS.encode() + b'","message":{"role":"user","content":"cut \\ud83d",'
                 b'"timestamp":2}}')
    files = [
        write_session(tmp_path / "label.jsonl", [
            user("a0000001", None),
            entry("a0000002", "a0000001", "label", targetId={"x": 1}, label="L"),
            user("a0000003", "a0000002", "after")]),
        write_session(tmp_path / "role.jsonl", [
            user("a0000001", None), entry("a0000002", "a0000001", message={"content": "x"})]),
        write_session(tmp_path / "tokens.jsonl", [
            user("a0000001", None),
            entry("a0000002", "a0000001", "compaction", summary="s",
                  firstKeptEntryId="a0000001", tokensBefore="12000"),
            user("a0000003", "a0000002", "after")]),
        write_session(tmp_path / "surrogate.jsonl", [user("a0000001", None)], [surrogate]),
    ]
    results = parity.check_files(files, node, pi_dir)
    assert all(r.equal for r in results), parity.format_problems(results)
