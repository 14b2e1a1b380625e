"""Notes and damage: repair's idea of damage is what the file's own client cannot send.

pi writes some states itself and handles them every time it sends a request (an aborted turn
with calls that never ran, an empty aborted message, a call whose result was never written
because the process was killed). Those are notes: `journal repair --check` passes, `journal
repair` leaves the file byte for byte unless `--strict`, and `journal info` counts no
problem. Damage (torn lines, NUL runs, orphan or duplicate results, ...) is still found and
repaired by default, and info, `--check` and the report count it the same way: one problem
per damaged range.

The real pi files come from ../shared (skipped when absent); generated files with the same
states cover the same ground in a plain clone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import (
    active_path,
    check_repair,
    edit_entry,
    entry_of,
    generated_bytes,
    insert_lines,
    is_role,
    join_lines,
    last_single_call,
    nul_line,
    split_lines,
    to_api,
    torn_tail,
)
from test_legacy_generated import as_version_1
from third_party import pi_path

import journal
from journal.cli import main as cli_main
from journal.pairing import classify, sanitize
from journal.repair import assess, repair
from journal.salvage import Dropped, merge_adjacent
from journal.validate import api_pairing_problems, pairing_problems

PI_NOTES = {
    "all-types.jsonl": {"missing_result": 1},
    "before-compaction.jsonl": {"missing_result": 1, "unexecuted_call": 1, "empty_message": 4},
    "large-session.jsonl": {"empty_message": 15, "unexecuted_call": 18},
}
SEED, SIZE = 0, 200_000
# the aborted turn's call never ran, and its signed thinking goes with the rest of it
GENERATED_NOTES = {"unexecuted_call": 1, "thinking_dropped": 1, "empty_message": 1,
                   "missing_result": 1}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli_main(list(argv))
    return code, capsys.readouterr().out


def _info(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code, out = _cli(capsys, "info", "--json", str(path))
    assert code == 0
    info: dict[str, Any] = orjson.loads(out)
    return info


def _side_files(path: Path) -> list[str]:
    """The backup and quarantine files beside `path` (lock files are another matter)."""
    return sorted(p.name for p in path.parent.iterdir()
                  if p != path and not p.name.endswith(".lock"))


# -- pi-like states in a generated file


def _message_entry(entry_id: str, parent: str, message: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": "message", "id": entry_id, "parentId": parent,
                         "timestamp": "2026-01-15T09:59:00.000Z", "message": message})


def _assistant(content: list[dict[str, Any]], stop: str, **more: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "api": "anthropic-messages",
            "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": stop,
            "timestamp": 1768470000000, **more}


def as_pi_writes_it(data: bytes) -> bytes:
    """A generated session with the three states pi writes and handles itself.

    - an aborted turn: the last single-call assistant ended "aborted" before its call ran (no
      result was ever written; what came after hangs under it);
    - an aborted stream that produced nothing: an empty assistant message under a user one;
    - a session killed while a tool ran: the leaf is an assistant's call without a result.
    """
    assistant, result = last_single_call(data)
    lines = split_lines(data)
    result_entry = entry_of(lines[result])
    child = next(i for i in active_path(data) if entry_of(lines[i]).get("parentId")
                 == result_entry["id"])
    data = edit_entry(data, child, lambda e: e.update(parentId=result_entry["parentId"]))
    data = join_lines([line for i, line in enumerate(split_lines(data)) if i != result])
    data = edit_entry(data, assistant, lambda e: e["message"].update(
        stopReason="aborted", errorMessage="Request was aborted."))

    lines = split_lines(data)
    path = active_path(data)
    user = [i for i in path[:-1] if is_role("user")(entry_of(lines[i]))][-1]
    after_user = path[path.index(user) + 1]
    user_id = entry_of(lines[user])["id"]
    empty = _message_entry("ab0e0001", user_id, _assistant(
        [], "aborted", errorMessage="Request was aborted."))
    data = edit_entry(data, after_user, lambda e: e.update(parentId="ab0e0001"))
    data = insert_lines(data, user + 1, empty)

    leaf = entry_of(split_lines(data)[active_path(data)[-1]])["id"]
    killed = _message_entry("ab0e0002", leaf, _assistant(
        [{"type": "text", "text": "Running it."},
         {"type": "toolCall", "id": "toolu_killed", "name": "bash",
          "arguments": {"command": "sleep 60"}}], "toolUse"))
    return data + killed + b"\n"


@pytest.fixture(scope="module")
def pi_like(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return as_pi_writes_it(generated_bytes(tmp_path_factory.mktemp("gen"), SEED, SIZE))


GENERATED = {
    "v3": lambda data: data,
    "v1": as_version_1,
}


@pytest.fixture(params=sorted(GENERATED))
def generated_file(request: pytest.FixtureRequest, pi_like: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes(GENERATED[request.param](pi_like))
    return path


@pytest.fixture(params=sorted(PI_NOTES))
def pi_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[str, int]]:
    name: str = request.param
    path = tmp_path / name
    shutil.copyfile(pi_path(name), path)  # a writable copy: the originals are never touched
    return path, PI_NOTES[name]


def _assert_notes_only(capsys: pytest.CaptureFixture[str], path: Path,
                       notes: dict[str, int]) -> None:
    original = path.read_bytes()
    assert _cli(capsys, "repair", "--check", str(path))[0] == 0
    code, out = _cli(capsys, "repair", str(path))
    assert code == 0 and f"{path}: clean" in out, out
    assert path.read_bytes() == original
    assert _side_files(path) == [], "a repair that changes nothing leaves nothing behind"
    report = repair(path)
    assert (report.changed, report.counts, report.note_counts) == (False, {}, notes)
    info = _info(capsys, path)
    assert (info["counts"], info["noteCounts"]) == ({}, notes)
    code, out = _cli(capsys, "info", str(path))
    assert "problems:  0" in out and "notes:" in out


def _assert_strict_rewrites(capsys: pytest.CaptureFixture[str], path: Path,
                            notes: dict[str, int]) -> None:
    original = path.read_bytes()
    code, out = _cli(capsys, "repair", "--check", "--strict", str(path))
    assert code == 1 and "needs repair" in out
    code, out = _cli(capsys, "repair", "--strict", "--json", str(path))
    report = json.loads(out)
    assert code == 0 and report["changed"] and report["noteCounts"] == notes
    assert path.read_bytes() != original
    assert (path.parent / (path.name + ".bak")).read_bytes() == original
    assert _cli(capsys, "repair", "--check", "--strict", str(path))[0] == 0
    tree = journal.Tree(journal.load(path).entries)
    assert pairing_problems(journal.build_context(tree, tree.leaf_id).messages) == []


def test_pi_files_pass_check_and_repair_leaves_them_as_they_are(
        pi_file: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str]) -> None:
    _assert_notes_only(capsys, *pi_file)


def test_strict_still_rewrites_the_pi_files(
        pi_file: tuple[Path, dict[str, int]], capsys: pytest.CaptureFixture[str]) -> None:
    _assert_strict_rewrites(capsys, *pi_file)


def test_generated_pi_states_are_notes(generated_file: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _assert_notes_only(capsys, generated_file, GENERATED_NOTES)


def test_strict_still_rewrites_generated_pi_states(generated_file: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _assert_strict_rewrites(capsys, generated_file, GENERATED_NOTES)


def test_the_model_is_sent_a_valid_history_from_a_file_with_notes(
        generated_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _cli(capsys, "context", "--for-model", "--json", str(generated_file))
    messages = orjson.loads(out)["messages"]
    assert code == 0 and messages
    assert pairing_problems(messages) == []
    assert api_pairing_problems(to_api(messages)) == []


# -- real damage is still damage


def _last_result(data: bytes) -> int:
    """The line of the last tool result on the active branch."""
    lines = split_lines(data)
    return [i for i in active_path(data) if is_role("toolResult")(entry_of(lines[i]))][-1]


def _orphan(data: bytes) -> bytes:
    return edit_entry(data, _last_result(data),
                      lambda e: e["message"].update(toolCallId="toolu_gone"))


def _duplicate(data: bytes) -> bytes:
    """A result written twice, the second copy on the branch (under the first)."""
    result = _last_result(data)
    path = active_path(data)
    child = path[path.index(result) + 1]
    copy = entry_of(split_lines(data)[result])
    copy["id"], copy["parentId"] = "d0000001", copy["id"]
    data = edit_entry(data, child, lambda e: e.update(parentId="d0000001"))
    return insert_lines(data, result + 1, orjson.dumps(copy))


# the torn line is the leaf, the call without a result: its note goes with it
AFTER_TORN_LEAF = {k: v for k, v in GENERATED_NOTES.items() if k != "missing_result"}
DAMAGE = {  # damage, what is found, the notes left in the file after the repair (None: fixed)
    "orphan-result": (_orphan, {"orphan_result": 1}, None),
    "duplicate-result": (_duplicate, {"duplicate_result": 1}, None),
    "torn-line": (lambda d: torn_tail(d, 40), {"torn_tail": 1}, AFTER_TORN_LEAF),
    "nul-runs": (lambda d: nul_line(nul_line(d, 9, 5), 3, 5), {"nul_run": 2}, GENERATED_NOTES),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_real_damage_still_fails_check_and_is_repaired(
        kind: str, pi_like: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    damage, counts, notes_left = DAMAGE[kind]
    path = tmp_path / "session.jsonl"
    path.write_bytes(damage(pi_like))
    code, out = _cli(capsys, "repair", "--check", str(path))
    assert code == 1 and "needs repair" in out
    outcome = check_repair(path)
    assert outcome.counts == counts
    assert outcome.report.notes_left == (notes_left is not None)
    assert _cli(capsys, "repair", "--check", str(path))[0] == 0
    # byte damage alone leaves the notes in the file; pairing damage on the active branch
    # makes repair rebuild it, and the notes on it are settled with it
    assert repair(path).note_counts == (notes_left or {})


def _mixed(data: bytes) -> bytes:
    data = _orphan(data)
    data = nul_line(data, 12, 5)
    data = nul_line(data, 5, 64)
    return torn_tail(data, 30)


def test_info_check_and_report_agree_on_a_file_with_mixed_damage(
        pi_like: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(_mixed(pi_like))
    expected = {"nul_run": 2, "orphan_result": 1, "torn_tail": 1}
    info = _info(capsys, path)
    code, out = _cli(capsys, "repair", "--check", "--json", str(path))
    check = json.loads(out)
    assert code == 1
    code, out = _cli(capsys, "info", str(path))
    assert "problems:  4\n" in out
    code, out = _cli(capsys, "repair", "--json", str(path))
    fixed = json.loads(out)
    assert info["counts"] == check["counts"] == fixed["counts"] == expected
    assert len(info["problems"]) == len(check["problems"]) == len(fixed["problems"]) == 4
    assert fixed["changed"] and _cli(capsys, "repair", "--check", str(path))[0] == 0
    assert _info(capsys, path)["counts"] == {}


# -- one problem per damaged range


def _nul_runs_inside_lines(data: bytes, count: int, size: int) -> bytes:
    """`count` runs of `size` NULs written into the middle of as many records (inside their
    timestamp, so no id is lost), each splitting a record into two unreadable halves."""
    lines = split_lines(data)
    hit = 0
    for i in range(1, len(lines)):
        if hit == count:
            break
        at = lines[i].find(b'"timestamp":"') + len(b'"timestamp":"') + 4
        lines[i] = lines[i][:at] + b"\x00" * size + lines[i][at + size:]
        hit += 1
    assert hit == count
    return join_lines(lines)


def test_twenty_nul_runs_are_twenty_problems(pi_like: bytes, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(_nul_runs_inside_lines(pi_like, 20, 5))
    assert _info(capsys, path)["counts"] == {"nul_run": 20}
    assert assess(str(path)).counts == {"nul_run": 20}
    outcome = check_repair(path)  # every byte accounted for, each range listed
    assert outcome.counts == {"nul_run": 20}
    runs = [r for r in outcome.records if r["reason"] == "nul_run"]
    lines = split_lines(outcome.original)
    assert len(runs) == 20, "one quarantine record per damaged line, not one per piece"
    assert [r["data"] for r in runs] == lines[1:21]
    assert all(r["data"].count(b"\x00") == 5 for r in runs)
    # the first entry after the lost ones lost its parent: a consequence, not a 21st problem
    assert [(c.kind, c.line) for c in outcome.report.consequences] == [("missing_parent", 22)]


def test_touching_dropped_ranges_join_and_others_stay_apart() -> None:
    pieces = [Dropped(10, b"ab", "invalid_json"), Dropped(12, b"\x00\x00", "nul_run", "2 NUL"),
              Dropped(14, b"cd", "invalid_json"), Dropped(20, b"xy", "invalid_json")]
    merged = merge_adjacent(pieces)
    assert [(d.offset, d.data, d.reason) for d in merged] == [
        (10, b"ab\x00\x00cd", "nul_run"), (20, b"xy", "invalid_json")]
    assert merged[0].detail == "2 NUL in 6 damaged bytes"


def test_classify_follows_what_pi_sends() -> None:
    call = {"type": "toolCall", "id": "t1", "name": "ls", "arguments": {}}
    half = {"type": "toolCall", "id": "t2", "name": "", "arguments": {}}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [call, half], "stopReason": "aborted"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [{**call, "id": "t3"}], "stopReason": "toolUse"},
        {"role": "user", "content": "still there?"},
        {"role": "toolResult", "toolCallId": "nope", "content": []},
    ]
    notes, damage = classify(history, sanitize(history)[1])
    assert sorted(f.rule for f in notes) == [
        "empty_message", "missing_result", "non_executable_call", "unexecuted_call"]
    assert [f.rule for f in damage] == ["orphan_result"]


def test_a_result_whose_call_was_lost_is_a_consequence_not_a_second_problem(
        pi_like: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _last_result(pi_like)
    path_ = active_path(pi_like)
    lines = split_lines(pi_like)
    call_line = next(i for i in reversed(path_[:path_.index(result)])
                     if is_role("assistant")(entry_of(lines[i])))
    at = lines[call_line].find(b'"timestamp":"') + len(b'"timestamp":"') + 4
    lines[call_line] = lines[call_line][:at] + b"\x00" * 5 + lines[call_line][at + 5:]
    path = tmp_path / "session.jsonl"
    path.write_bytes(join_lines(lines))
    assert _info(capsys, path)["counts"] == {"nul_run": 1}
    outcome = check_repair(path)
    assert outcome.counts == {"nul_run": 1}
    result_id = entry_of(lines[result])["id"]
    assert ("orphan_result", result_id) in [
        (c.kind, c.entry_id) for c in outcome.report.consequences]


def test_repair_names_a_quarantine_only_when_it_wrote_one(tmp_path: Path, capsys: Any) -> None:
    """A strict repair that only adds a synthetic result takes no byte out: no quarantine."""
    s = journal.Session.create(tmp_path, cwd="/")
    s.append_message({"role": "user", "content": "hi", "timestamp": 1})
    s.append_message({"role": "assistant", "stopReason": "toolUse", "timestamp": 2,
                      "content": [{"type": "toolCall", "id": "t1", "name": "read",
                                   "arguments": {"path": "a"}}]})
    path = s.path
    s.close()
    assert cli_main(["repair", "--strict", path]) == 0
    out = capsys.readouterr().out
    assert "backup:" in out
    assert "quarantine:" not in out
    assert not Path(path + ".quarantine").exists()
    report = repair(path, strict=True)  # nothing left to do
    assert not report.changed and report.quarantine is None
