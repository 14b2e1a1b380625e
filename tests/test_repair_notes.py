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

import copy
import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from corruption import (
    Session,
    active_path,
    call,
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
    text,
    to_api,
    torn_tail,
    user_before_result,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_legacy_generated import as_version_1
from test_pairing import numbered, perturbed_history, random_history
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
# the call whose result became an orphan is left without one: a note like the killed call
AFTER_ORPHAN = {**GENERATED_NOTES, "missing_result": 2}
DAMAGE = {  # damage, what is found, the notes found before and left in the file after
    "orphan-result": (_orphan, {"orphan_result": 1}, AFTER_ORPHAN),
    "duplicate-result": (_duplicate, {"duplicate_result": 1}, GENERATED_NOTES),
    "torn-line": (lambda d: torn_tail(d, 40), {"torn_tail": 1}, AFTER_TORN_LEAF),
    "nul-runs": (lambda d: nul_line(nul_line(d, 9, 5), 3, 5), {"nul_run": 2}, GENERATED_NOTES),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_real_damage_still_fails_check_and_is_repaired(
        kind: str, pi_like: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    damage, counts, notes = DAMAGE[kind]
    path = tmp_path / "session.jsonl"
    path.write_bytes(damage(pi_like))
    code, out = _cli(capsys, "repair", "--check", str(path))
    assert code == 1 and "needs repair" in out
    outcome = check_repair(path)
    assert outcome.counts == counts
    assert outcome.report.notes_left and outcome.report.note_counts == notes
    assert _cli(capsys, "repair", "--check", str(path))[0] == 0
    # damage is repaired, byte or pairing; the notes stay in the file as they were
    assert repair(path).note_counts == notes


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
    assert "problems:  4 (nothing was changed" in out
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


# -- mixed branches: damage is repaired, the notes beside it stay as they were

SIGNED = {"type": "thinking", "thinking": "let me look", "thinkingSignature": "sig-1"}


def _aborted_and_orphan() -> tuple[bytes, set[str]]:
    """An aborted turn whose call never ran (signed thinking, so pi drops the turn whole), and
    right after it a result that answers no call. Returns the bytes and the entries whose lines
    the repair may rewrite (the orphan's child, re-parented under the aborted turn)."""
    s = Session()
    s.turn("a", calls=1)
    s.user("b: question")
    s.assistant(SIGNED, text("b: looking"), call("call_b_0"), stop="aborted")
    s.result("toolu_gone")  # next to the unexecuted call, but not its result
    child = s.user("c: try again")
    s.turn("d", calls=1)
    return s.bytes(), {child}


def _missing_and_duplicate() -> tuple[bytes, set[str]]:
    """A call whose result was never written, a duplicate result of the other call of the same
    turn, and a duplicate result in another turn."""
    s = Session()
    s.user("a: question")
    s.assistant(text("a: looking"), call("call_a_0"), call("call_a_1"))
    s.result("call_a_0")
    s.result("call_a_0", "written twice")  # call_a_1 stays without a result
    child_a = s.assistant(text("a: answer"))
    s.user("b: question")
    s.assistant(text("b: looking"), call("call_b_0"))
    s.result("call_b_0")
    s.result("call_b_0", "written twice")
    child_b = s.assistant(text("b: answer"))
    return s.bytes(), {child_a, child_b}


def _empty_and_moved() -> tuple[bytes, set[str]]:
    """An aborted stream that left an empty message, and later a result written after a user
    message typed while its tool ran."""
    s = Session()
    s.turn("a", calls=1)
    s.user("b: question")
    s.message(_assistant([], "aborted", errorMessage="Request was aborted."))
    s.user("b: again")
    s.assistant(text("c: looking"), call("call_c_0"))
    typed = s.user("typed while the tool ran")
    result = s.result("call_c_0")
    after = s.assistant(text("c: answer"))
    return s.bytes(), {typed, result, after}


def _compacted_from_an_orphan() -> tuple[bytes, set[str]]:
    """A compaction that keeps from an orphan result followed by an empty aborted message: the
    orphan leaves the branch, so the kept entries start at the empty message (a note, kept)."""
    s = Session()
    s.turn("a", calls=1)
    orphan = s.result("toolu_gone")
    empty = s.message(_assistant([], "aborted", errorMessage="Request was aborted."))
    s.turn("b", calls=1)
    compaction = s.add("compaction", summary="a and b", firstKeptEntryId=orphan,
                       tokensBefore=1000)
    s.turn("c", calls=1)
    return s.bytes(), {empty, compaction}


MIXED = {  # bytes and the lines repair may rewrite, the damage found, the notes left
    "aborted-turn+orphan-result": (
        _aborted_and_orphan, {"orphan_result": 1}, {"unexecuted_call": 1, "thinking_dropped": 1}),
    "missing-result+duplicate-results": (
        _missing_and_duplicate, {"duplicate_result": 2}, {"missing_result": 1}),
    "empty-message+moved-result": (
        _empty_and_moved, {"moved_result": 1}, {"empty_message": 1}),
    "compaction-boundary+orphan+empty-message": (
        _compacted_from_an_orphan, {"orphan_result": 1, "compaction_boundary": 1},
        {"empty_message": 1}),
}


def _findings(path: Path) -> tuple[Counter[tuple[str, str | None]], list[Any]]:
    """The notes `classify` finds on the active branch, as (rule, entry id), and the damage."""
    tree = journal.Tree(journal.load(path).entries)
    context = journal.build_context(tree, tree.leaf_id)
    notes, damage = classify(context.messages, sanitize(context.messages)[1])
    return Counter((f.rule, context.entry_ids[f.index]) for f in notes), damage


def _messages_by_id(data: bytes) -> dict[str, Any]:
    entries = (orjson.loads(line) for line in split_lines(data)[1:])
    return {e["id"]: e.get("message") for e in entries}


def _changed_entries(original: bytes, output: bytes) -> set[str]:
    """The entries whose original line is no longer in the file byte for byte."""
    kept = set(split_lines(output))
    return {orjson.loads(line)["id"] for line in split_lines(original)[1:] if line not in kept}


def _assert_notes_stay(path: Path, counts: dict[str, int], notes: dict[str, int],
                       may_change: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    original = path.read_bytes()
    notes_before, damage_before = _findings(path)
    assert damage_before and Counter(rule for rule, _ in notes_before) == notes
    outcome = check_repair(path)  # idempotent, valid, every byte kept or quarantined
    report = outcome.report
    assert report.changed and report.counts == counts
    assert report.notes_left and report.note_counts == notes
    # the notes are still in the file: the same rules on the same entries, and no damage
    notes_after, damage_after = _findings(path)
    assert (notes_after, damage_after) == (notes_before, [])
    # only the lines the damage needed were rewritten, every other one kept its bytes
    assert _changed_entries(original, outcome.output) == may_change
    before, after = _messages_by_id(original), _messages_by_id(outcome.output)
    assert all(after[entry_id] == before[entry_id] for _, entry_id in notes_before
               if entry_id is not None)
    # a CI gate passes, a model is sent a valid history, and info agrees
    assert _cli(capsys, "repair", "--check", str(path))[0] == 0
    code, out = _cli(capsys, "context", "--for-model", "--json", str(path))
    messages = orjson.loads(out)["messages"]
    assert code == 0 and messages and pairing_problems(messages) == []
    assert api_pairing_problems(to_api(messages)) == []
    info = _info(capsys, path)
    assert (info["counts"], info["noteCounts"]) == ({}, notes)


@pytest.mark.parametrize("kind", sorted(MIXED))
def test_repair_leaves_the_notes_beside_the_damage_it_fixes(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build, counts, notes = MIXED[kind]
    data, may_change = build()
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    code, out = _cli(capsys, "repair", "--check", str(path))
    assert code == 1 and "needs repair" in out
    _assert_notes_stay(path, counts, notes, may_change, capsys)


@pytest.mark.parametrize("kind", sorted(MIXED))
def test_strict_repair_of_a_mixed_file_fixes_the_notes_too(kind: str, tmp_path: Path) -> None:
    build, counts, notes = MIXED[kind]
    path = tmp_path / "session.jsonl"
    path.write_bytes(build()[0])
    outcome = check_repair(path, strict=True)  # strict: no pairing fix left at all
    assert outcome.counts == dict(Counter(counts) + Counter(notes))
    assert not outcome.report.notes_left
    assert _findings(path) == (Counter(), [])


def _notes_by_message(path: Path) -> tuple[Counter[tuple[str, bytes]], list[Any]]:
    """The notes on the active branch, as (rule, the message they are on), and the damage: a
    version 1 file's ids are its line positions, which move when a line is dropped."""
    tree = journal.Tree(journal.load(path).entries)
    messages = journal.build_context(tree, tree.leaf_id).messages
    notes, damage = classify(messages, sanitize(messages)[1])
    return Counter((f.rule, orjson.dumps(messages[f.index], option=orjson.OPT_SORT_KEYS))
                   for f in notes), damage


@pytest.mark.parametrize("kind", sorted(MIXED))
def test_a_version_1_file_keeps_its_notes_beside_the_damage_too(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build, _, notes = MIXED[kind]
    path = tmp_path / "session.jsonl"
    path.write_bytes(as_version_1(build()[0]))
    notes_before, damage_before = _notes_by_message(path)
    assert damage_before and Counter(rule for rule, _ in notes_before) == notes
    outcome = check_repair(path)
    assert outcome.report.notes_left and outcome.report.note_counts == notes
    assert _notes_by_message(path) == (notes_before, [])
    assert _cli(capsys, "repair", "--check", str(path))[0] == 0


def test_the_kept_entries_of_a_compaction_start_at_the_note_left_in_place(
        tmp_path: Path) -> None:
    data, _ = _compacted_from_an_orphan()
    entries = [orjson.loads(line) for line in split_lines(data)[1:]]
    orphan = next(e for e in entries if e.get("message", {}).get("toolCallId") == "toolu_gone")
    empty = next(e for e in entries if e.get("message", {}).get("content") == [])
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    report = repair(path)
    compaction = next(orjson.loads(line) for line in split_lines(path.read_bytes())
                      if b'"compaction"' in line)
    assert compaction["firstKeptEntryId"] == empty["id"] != orphan["id"]
    assert [p.kind for p in report.problems] == ["orphan_result", "compaction_boundary"]
    tree = journal.Tree(journal.load(path).entries)
    context = journal.build_context(tree, tree.leaf_id)
    assert context.entry_ids[:2] == [None, empty["id"]]  # the summary, then the empty message


def test_generated_pi_states_stay_beside_mixed_damage(
        pi_like: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pi-like generated file (aborted turn, empty message, killed call) with an orphan
    result, a duplicate result and a result moved past a user message on the same branch."""
    def results(data: bytes) -> list[int]:
        lines = split_lines(data)
        return [i for i in active_path(data) if is_role("toolResult")(entry_of(lines[i]))]

    data = _duplicate(pi_like)  # the last result on the branch (all three after the compaction)
    data = user_before_result(data, results(data)[-3])
    data = edit_entry(data, results(data)[-4], lambda e: e["message"].update(
        toolCallId="toolu_gone"))
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    report = assess(str(path))
    assert set(report.counts) == {"orphan_result", "duplicate_result", "moved_result"}
    assert report.note_counts and not assess(str(path), strict=True).notes_left
    outcome = check_repair(path)
    notes_after, damage_after = _findings(path)
    assert damage_after == [] and outcome.report.notes_left
    assert Counter(rule for rule, _ in notes_after) == Counter(report.note_counts)
    assert _cli(capsys, "repair", "--check", str(path))[0] == 0


# -- the property: over random sessions with notes and damage, repair keeps exactly the notes


def _step(s: Session, kind: str, n: int) -> None:
    """Append one random piece of history: a plain turn, a note pi writes, or damage."""
    tag = f"s{n}"
    if kind == "turn":
        s.turn(tag, calls=n % 3)
    elif kind == "aborted":  # a call that never ran, maybe under signed thinking
        s.user(f"{tag}: question")
        blocks = [SIGNED] if n % 2 else []
        s.assistant(*blocks, text(f"{tag}: looking"), call(f"call_{tag}"), stop="aborted")
    elif kind == "aborted-empty":
        s.message(_assistant([], "aborted", errorMessage="Request was aborted."))
    elif kind == "missing":  # the process was killed while the tool ran
        s.user(f"{tag}: question")
        s.assistant(text(f"{tag}: looking"), call(f"call_{tag}_0"), call(f"call_{tag}_1"))
        s.result(f"call_{tag}_{n % 2}")
    elif kind == "blank":
        s.user(f"{tag}: question")
        s.assistant(text(" "), text(f"{tag}: answer"))
    elif kind == "nameless-aborted":
        s.assistant(text(f"{tag}: half"), {**call(f"call_{tag}"), "name": ""}, stop="error")
    elif kind == "orphan":
        s.result(f"toolu_gone_{tag}")
    elif kind == "duplicate":
        s.user(f"{tag}: question")
        s.assistant(call(f"call_{tag}"))
        s.result(f"call_{tag}")
        s.result(f"call_{tag}", "again")
    elif kind == "moved":
        s.user(f"{tag}: question")
        s.assistant(call(f"call_{tag}"))
        s.user(f"{tag}: typed meanwhile")
        s.result(f"call_{tag}")
    elif kind == "reused-id":
        s.user(f"{tag}: question")
        s.assistant(call("call_reused"))
        s.result("call_reused")
    elif kind == "nameless":
        s.assistant(text(f"{tag}: odd"), {**call(f"call_{tag}"), "name": ""})
    elif kind == "compaction":
        messages = [e["id"] for e in s.entries if e["type"] == "message"]
        if messages:
            s.add("compaction", summary=f"{tag}", tokensBefore=100,
                  firstKeptEntryId=messages[n * 7 % len(messages)])


NOTES = ["aborted", "aborted-empty", "missing", "blank", "nameless-aborted"]
DAMAGES = ["orphan", "duplicate", "moved", "reused-id", "nameless"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["turn", "compaction", *NOTES, *DAMAGES]), min_size=2,
                max_size=9))
def test_repair_keeps_exactly_the_notes_and_no_damage(tmp_path: Path, steps: list[str]) -> None:
    s = Session()
    s.user("start")
    for n, kind in enumerate(steps):
        _step(s, kind, n)
    path = tmp_path / f"{uuid.uuid4().hex}.jsonl"
    path.write_bytes(s.bytes())
    notes_before, _ = _findings(path)
    before = _messages_by_id(path.read_bytes())
    outcome = check_repair(path)
    assert outcome.report.notes_left
    notes_after, damage_after = _findings(path)
    assert damage_after == []
    assert notes_after == notes_before
    after = _messages_by_id(path.read_bytes())
    assert all(after[entry_id] == before[entry_id] for _, entry_id in notes_before
               if entry_id is not None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(random_history, perturbed_history().map(numbered)))
def test_damage_only_fixes_the_damage_and_the_model_sees_the_same(messages: list[Any]) -> None:
    """`sanitize(damage_only=True)` makes exactly the fixes `classify` calls damage; what it
    gives holds the same notes (on the same input messages: `seq`) and no damage; and the
    read-time sanitizer makes of it what it makes of the input."""
    before = copy.deepcopy(messages)
    out, report = sanitize(messages, damage_only=True)
    assert messages == before, "input was mutated"
    full, full_report = sanitize(messages)
    notes, damage = classify(messages, full_report)
    assert [(f.rule, f.index, f.call_id) for f in report.fixes] == [
        (f.rule, f.index, f.call_id) for f in damage]
    again, again_report = sanitize(out)
    notes_out, damage_out = classify(out, again_report)
    assert damage_out == []
    assert Counter((f.rule, out[f.index]["seq"]) for f in notes_out) == Counter(
        (f.rule, messages[f.index]["seq"]) for f in notes)
    assert again == full
    assert pairing_problems(again) == []
    still, still_report = sanitize(out, damage_only=True)
    assert still == out and not still_report.changed
