"""What a new compaction may keep, one rule for every append (`journal.boundary`): its
`firstKeptEntryId` is on the branch it is appended to, and keeping from it leaves no tool
result without its call. `Session.append_compaction`, entries appended as they are
(`append_entry`, `append_many`, `journal append`), file and database sessions alike; a
refusal writes nothing, and what is accepted is what `journal repair` leaves alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from either_backend import stored

from journal import BadKeptEntry, Session, UnknownEntry, load
from journal import repair as repair_session

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys\nfrom journal.cli.commands import main\nsys.exit(main())\n"


def journal(*args: str, stdin: bytes = b"",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", CLI, *args], input=stdin, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          timeout=60)




def call_turn(session: Session) -> dict[str, str]:
    """user, assistant calling a tool, its result, assistant, user: the ids by name."""
    ids = {"user": session.append_message({"role": "user", "content": "go", "timestamp": 1})}
    ids["call"] = session.append_message({
        "role": "assistant", "provider": "p", "model": "m", "stopReason": "toolUse",
        "timestamp": 2,
        "content": [{"type": "toolCall", "id": "toolu_1", "name": "ls", "arguments": {}}]})
    ids["result"] = session.append_message({
        "role": "toolResult", "toolCallId": "toolu_1", "toolName": "ls", "isError": False,
        "content": [{"type": "text", "text": "a.py"}], "timestamp": 3})
    ids["answer"] = session.append_message({
        "role": "assistant", "provider": "p", "model": "m", "stopReason": "stop",
        "timestamp": 4, "content": [{"type": "text", "text": "a.py"}]})
    ids["next"] = session.append_message({"role": "user", "content": "more", "timestamp": 5})
    return ids


def compaction(kept: str | None) -> dict[str, Any]:
    return {"type": "compaction", "summary": "listed", "firstKeptEntryId": kept,
            "tokensBefore": 10}




def made(where: str) -> tuple[str, dict[str, str]]:
    with Session.create(where, cwd="/") as session:
        return session.path, call_turn(session)


APPENDS: dict[str, Callable[[Session, str], object]] = {
    "append_compaction": lambda s, kept: s.append_compaction("listed", kept, 10),
    "append_entry": lambda s, kept: s.append_entry(compaction(kept)),
}


@pytest.mark.parametrize("how", APPENDS)
def test_keeping_a_tool_result_whose_call_is_summarised_is_refused(file_or_database: str, how: str):
    path, ids = made(file_or_database)
    before = stored(path)
    with Session.open(path) as session, pytest.raises(BadKeptEntry) as raised:
        APPENDS[how](session, ids["result"])
    assert "toolu_1" in str(raised.value) and "not appended" in str(raised.value)
    assert raised.value.entry_id == ids["result"]
    assert stored(path) == before
    with Session.open(path) as session:  # the open session was not changed either
        assert session.leaf_id == ids["next"]


@pytest.mark.parametrize("how", APPENDS)
def test_keeping_an_entry_off_the_branch_or_unknown_is_refused(file_or_database: str, how: str):
    path, ids = made(file_or_database)
    with Session.open(path) as session:
        session.branch(ids["user"])
        session.append_message({"role": "user", "content": "other way", "timestamp": 6})
        before = stored(path)
        for kept in (ids["answer"], "deadbeef"):
            with pytest.raises(UnknownEntry, match="not on the branch"):
                APPENDS[how](session, kept)
        assert stored(path) == before


@pytest.mark.parametrize("kept", ["call", "answer", "next", None])
def test_a_valid_kept_entry_is_appended_and_repair_leaves_it(file_or_database: str,
        kept: str | None):
    path, ids = made(file_or_database)
    with Session.open(path) as session:
        session.append_entry(compaction(None if kept is None else ids[kept]))
        roles = [m["role"] for m in session.context().messages]
    assert roles[0] == "compactionSummary" and "toolResult" not in roles[:2]
    assert repair_session(path, dry_run=True).problems == []


def test_an_orphan_older_than_the_compaction_does_not_block_it(file_or_database: str):
    with Session.create(file_or_database, cwd="/") as session:
        session.append_message({"role": "user", "content": "go", "timestamp": 1})
        stray = session.append_message({
            "role": "toolResult", "toolCallId": "toolu_gone", "toolName": "ls",
            "isError": False, "content": [], "timestamp": 2})
        session.append_message({"role": "user", "content": "again", "timestamp": 3})
        session.append_compaction("went", stray, 10)  # its damage was there before


def test_a_compaction_in_a_batch_keeps_from_an_entry_of_the_same_batch(file_or_database: str):
    with Session.create(file_or_database, cwd="/") as session:
        ids = call_turn(session)
        made_ids = session.append_many([
            {"type": "message", "message": {"role": "user", "content": "x", "timestamp": 7}},
            compaction(ids["call"])])
        assert session.get_entry(made_ids[1])["firstKeptEntryId"] == ids["call"]
        with pytest.raises(BadKeptEntry):
            session.append_many([
                {"type": "message", "message": {
                    "role": "toolResult", "toolCallId": "toolu_1", "toolName": "ls",
                    "isError": False, "content": [], "timestamp": 8}},
                compaction(ids["result"])])


def test_a_resumed_session_finds_a_kept_entry_before_its_tail(tmp_path: Path):
    """The tail read on open stops at the latest compaction's kept entry: keeping from
    before it reads the rest of the file rather than refusing."""
    with Session.create(str(tmp_path / "s.jsonl"), cwd="/") as session:
        ids = call_turn(session)
        session.append_compaction("first", ids["next"], 10)
        session.append_message({"role": "user", "content": "later", "timestamp": 9})
        path = session.path
    with Session.open(path) as session:
        assert not session.tree.complete
        session.append_compaction("again, longer", ids["call"], 10)
        assert session.context().messages[1]["content"][0]["id"] == "toolu_1"


@pytest.mark.parametrize("kind", ["result", "elsewhere"])
def test_journal_append_refuses_it_with_one_error_line(file_or_database: str,
        kind: str, tmp_path: Path):
    path, ids = made(file_or_database)
    env = {"HOME": str(tmp_path)}
    if kind == "elsewhere":
        with Session.open(path) as session:
            session.branch(ids["user"])
            session.append_message({"role": "user", "content": "other way", "timestamp": 6})
    before = stored(path)
    kept = ids["result"] if kind == "result" else ids["answer"]
    done = journal("append", path, stdin=json.dumps(compaction(kept)).encode() + b"\n",
                   env=env)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert f"firstKeptEntryId {kept!r}" in err
    assert stored(path) == before
    assert load(path).entries[-1]["type"] == "message"


def test_the_rule_s_example_runs():
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module("journal.boundary")).failed == 0
