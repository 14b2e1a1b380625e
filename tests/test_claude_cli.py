"""The read commands and the live tail on Claude Code transcripts, read in place."""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from test_claude_projection import gc

import journal
from journal.cli import main
from journal.tail import follow_events


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listing(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_read_commands(tmp_path: Path, capsys: Any) -> None:
    stats = gc.generate(tmp_path, mb=0.5, seed=21, compactions=2, rewinds=2)
    before = listing(tmp_path)
    path = str(stats.path)

    code, out, _ = run(capsys, "context", path, "--json")
    assert code == 0
    data = orjson.loads(out)
    leaf_line = stats.leaf  # the leaf entry is the last record's, or its response's first line
    records = {r.get("uuid"): r for r in map(orjson.loads, stats.path.read_bytes().splitlines())}
    assert data["leafId"] == leaf_line or (
        records[leaf_line]["type"] == "assistant"
        and records[data["leafId"]]["message"]["id"] == records[leaf_line]["message"]["id"])
    assert len(data["messages"]) == len(stats.context)
    assert data["messages"][0]["role"] == "compactionSummary"

    code, out, _ = run(capsys, "context", path, "--json", "--for-model")
    assert code == 0 and orjson.loads(out)["pairingFixes"] == []

    code, out, _ = run(capsys, "info", path, "--json")
    info = orjson.loads(out)
    assert code == 0
    assert info["dialect"] == "claude" and info["id"] == stats.session_id
    assert info["leafId"] == data["leafId"] and info["problems"] == []
    assert len(info["subagentFiles"]) == len(stats.subagents)
    assert info["byType"]["compaction"] == stats.compactions

    code, out, _ = run(capsys, "show", path, "--json")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert code == 0 and not any("header" in r for r in rows)
    records = [orjson.loads(line) for line in stats.path.read_bytes().splitlines()]
    shown = {r["entry"]["id"] for r in rows if "entry" in r}
    # every record with a uuid is an entry of its own, but the later lines of an API response
    assert {r["uuid"] for r in records if "uuid" in r and r["type"] != "assistant"} <= shown
    firsts = {r["uuid"] for r in records if r["type"] == "assistant"
              and not (r["parentUuid"] and any(p.get("uuid") == r["parentUuid"]
                                               and p["type"] in ("assistant", "progress")
                                               for p in records))}
    assert firsts <= shown
    code, text, _ = run(capsys, "show", path)
    assert code == 0 and "Claude Code transcript" in text.splitlines()[0]

    code, out, _ = run(capsys, "tree", path, "--json")
    tree = orjson.loads(out)
    assert code == 0 and tree["leafId"] == data["leafId"]
    assert sum(1 for n in tree["nodes"] if n["leaf"]) == 1
    assert listing(tmp_path) == before  # reading never writes


def test_dialect_can_be_forced(tmp_path: Path, capsys: Any) -> None:
    stats = gc.generate(tmp_path, mb=0.1, seed=22)
    # read as a pi file it has no header and no entry: it is refused, saying what it is
    code, _, err = run(capsys, "info", str(stats.path), "--json", "--dialect", "pi")
    assert code == 2 and err.startswith("Error: ") and "a Claude Code transcript" in err
    code, out, _ = run(capsys, "info", str(stats.path), "--json", "--dialect", "claude")
    assert orjson.loads(out)["dialect"] == "claude"


def test_append_is_refused_and_nothing_is_left(tmp_path: Path, capsys: Any,
                                               monkeypatch: Any) -> None:
    stats = gc.generate(tmp_path, mb=0.1, seed=23)
    before = listing(tmp_path)
    monkeypatch.setattr("sys.stdin", type("S", (), {"buffer": __import__("io").BytesIO(
        b'{"role":"user","content":"hi"}\n')})())
    code, _, err = run(capsys, "append", str(stats.path))
    assert code == 2
    assert err.startswith("Error: ") and "never appended to" in err
    assert listing(tmp_path) == before


def test_tail_last_entries(tmp_path: Path, capsys: Any) -> None:
    stats = gc.generate(tmp_path, mb=0.2, seed=24, subagents=False)
    code, out, _ = run(capsys, "tail", "-n", "3", "--json", str(stats.path))
    assert code == 0
    got = [orjson.loads(line)["id"] for line in out.splitlines()]
    records = [orjson.loads(line) for line in stats.path.read_bytes().splitlines()]
    with_uuid = [r["uuid"] for r in records if "uuid" in r]
    assert [g.split(":")[0] for g in got][-1] == with_uuid[-1]
    assert {g.split(":")[0] for g in got} <= set(with_uuid[-3:])


def _line(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def test_tail_follows_a_transcript_being_written(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=0.2, seed=25, compactions=0, rewinds=0, subagents=False)
    base = {"isSidechain": False, "userType": "external", "cwd": "/w",
            "sessionId": stats.session_id, "version": gc.VERSION, "gitBranch": "main"}
    lines = [
        {"type": "queue-operation", "operation": "enqueue", "sessionId": stats.session_id},
        {"parentUuid": stats.leaf, **base, "type": "user",
         "message": {"role": "user", "content": "and now?"}, "uuid": "n-u1",
         "timestamp": "2026-03-01T00:00:00.000Z"},
        {"parentUuid": "n-u1", **base, "type": "assistant",
         "message": {"id": "msg_n1", "role": "assistant", "model": "m",
                     "content": [{"type": "tool_use", "id": "toolu_n1", "name": "Bash",
                                  "input": {"command": "ls"}}], "stop_reason": "tool_use"},
         "uuid": "n-a1", "timestamp": "2026-03-01T00:00:01.000Z"},
        {"parentUuid": "n-a1", **base, "type": "user",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_n1", "content": "x"},
             {"type": "text", "text": "[Request interrupted by user]"}]},
         "uuid": "n-r1", "timestamp": "2026-03-01T00:00:02.000Z"},
    ]
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20

    def writer() -> None:
        time.sleep(0.3)
        for record in lines:
            data = _line(record)
            with stats.path.open("ab") as f:  # a record written in two pieces
                f.write(data[:10])
                f.flush()
                time.sleep(0.05)
                f.write(data[10:])
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for event in follow_events(stats.path, poll=True, timeout=0.05,
                                   stop=lambda: len(got) >= 4 or time.monotonic() > deadline):
            if event.kind == "entry":
                assert event.entry is not None
                got.append(event.entry)
    finally:
        thread.join()
    assert [e["id"] for e in got] == ["n-u1", "n-a1", "n-r1", "n-r1:1"]
    assert got[2]["message"] == {"role": "toolResult", "toolCallId": "toolu_n1",
                                 "toolName": "Bash", "content": [{"type": "text", "text": "x"}],
                                 "isError": False, "timestamp": got[2]["message"]["timestamp"]}
    assert os.path.getsize(stats.path) > 0


def test_tail_dialect_can_be_forced(tmp_path: Path, capsys: Any) -> None:
    stats = gc.generate(tmp_path, mb=0.1, seed=26, subagents=False)
    code, out, _ = run(capsys, "tail", "-n", "2", "--json", "--dialect", "claude",
                       str(stats.path))
    assert code == 0 and len(out.splitlines()) >= 2
    # read as pi, it holds no entry: refused, saying what it is
    code, _, err = run(capsys, "tail", "-n", "2", "--dialect", "pi", str(stats.path))
    assert code == 2 and "a Claude Code transcript" in err


def test_writers_refuse_and_leave_nothing(tmp_path: Path, capsys: Any) -> None:
    """rotate never touches a Claude Code transcript (Claude Code writes it); repair works on
    it in its own format (docs/claude.md), and leaves a clean one as it was."""
    stats = gc.generate(tmp_path, mb=0.2, seed=27, compactions=2)
    before = listing(tmp_path)
    code, _, err = run(capsys, "rotate", str(stats.path))
    assert code == 2 and "Claude Code transcript" in err
    assert listing(tmp_path) == before
    for argv in (["repair", str(stats.path)], ["repair", "--check", str(stats.path)]):
        code, _, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        assert listing(tmp_path) == before
    code, _, err = run(capsys, "repair", "--dialect", "pi", str(stats.path))
    assert code == 2 and "Claude Code transcript" in err
    assert listing(tmp_path) == before


def test_repair_refuses_a_pi_session_forced_as_claude(tmp_path: Path, capsys: Any) -> None:
    """The counterpart of --dialect pi on a transcript: a pi session (a header, entries) is
    not repaired as a transcript, clean or damaged, and nothing is written beside it."""
    with journal.Session.create(tmp_path / "clean.jsonl", cwd="/w") as session:
        session.append_message({"role": "user", "content": "hi", "timestamp": 1})
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes((tmp_path / "clean.jsonl").read_bytes() + b'{"type":"message","id":"ab')
    before = listing(tmp_path)
    for path in (tmp_path / "clean.jsonl", torn):
        for mode in ([], ["--check"], ["--dry-run"], ["--json"]):
            code, out, err = run(capsys, "repair", "--dialect", "claude", *mode, str(path))
            assert code == 2, (path, mode, out)
            assert err.startswith("Error: ") and "a pi session, not a Claude Code" in err
            assert "journal repair --dialect pi" in err and out == ""
            assert listing(tmp_path) == before
    code, out, _ = run(capsys, "repair", "--dialect", "pi", str(torn))
    assert code == 0 and "torn_tail" in out


def test_read_commands_refuse_a_pi_session_forced_as_claude(tmp_path: Path,
                                                            capsys: Any) -> None:
    """show, info, context, tree and tail given --dialect claude on a pi session say what the
    file is and which --dialect reads it (the rule repair applies: refuse_misread), not
    that it holds no session; the library readers refuse it the same way."""
    path = tmp_path / "pi.jsonl"
    with journal.Session.create(path, cwd="/w") as session:
        session.append_message({"role": "user", "content": "hi", "timestamp": 1})
    before = listing(tmp_path)
    for command in ("show", "info", "context", "tree", "tail"):
        for mode in ([], ["--json"]):
            code, out, err = run(capsys, command, "--dialect", "claude", *mode, str(path))
            assert code == 2 and out == "", (command, mode, err)
            assert err.startswith("Error: ") and err.count("\n") == 1, err
            assert "a pi session, not a Claude Code transcript" in err
            assert "--dialect pi" in err and "not a session file" not in err
    for read in (journal.load, journal.resume):
        try:
            read(path, dialect="claude")
        except journal.NotASession as e:
            assert "a pi session" in str(e)
        else:
            raise AssertionError(f"{read.__name__} took a pi session for a transcript")
    assert listing(tmp_path) == before
    code, out, _ = run(capsys, "info", "--dialect", "pi", "--json", str(path))
    assert code == 0 and orjson.loads(out)["dialect"] == "pi"


def test_a_compressed_archive_and_a_subagent_named_pi_session_are_refused_as_claude(
        tmp_path: Path, capsys: Any) -> None:
    """A compressed archive is pi's (only this library writes one): forced as a Claude Code
    transcript it is refused as a plain pi file is, not read as damaged records. A pi
    session in a transcript's subagents/ folder, which repair takes for a transcript
    unless told otherwise, is told to repair with --dialect pi, not with no --dialect."""
    plain = tmp_path / "pi.jsonl"
    with journal.Session.create(plain, cwd="/w") as session:
        session.append_message({"role": "user", "content": "hi", "timestamp": 1})
    archive = tmp_path / "pi.jsonl.gz"
    archive.write_bytes(gzip.compress(plain.read_bytes()))
    before = listing(tmp_path)
    for command in ("show", "info", "tail"):
        code, out, err = run(capsys, command, "--dialect", "claude", str(archive))
        assert code == 2 and out == "", (command, err)
        assert "a pi session, not a Claude Code transcript" in err, (command, err)
    for mode in (["--check"], ["--dry-run"], []):
        code, out, err = run(capsys, "repair", "--dialect", "claude", *mode, str(archive))
        assert code == 2 and out == "", (mode, out, err)
        assert f"journal repair --dialect pi {archive}" in err, (mode, err)
    assert listing(tmp_path) == before
    transcript = gc.generate(tmp_path / "claude", mb=0.05, seed=29, subagents=False).path
    agent = transcript.parent / transcript.stem / "subagents" / "agent-1.jsonl"
    agent.parent.mkdir(parents=True)
    agent.write_bytes(plain.read_bytes())
    code, out, err = run(capsys, "repair", "--check", str(agent))
    assert code == 2 and f"'journal repair --dialect pi {agent}')" in err, err
    assert "no --dialect" not in err


def test_commands_refuse_a_transcript_forced_as_pi(tmp_path: Path, capsys: Any) -> None:
    """The mirror: show, info, context, tree, tail and repair given --dialect pi on a Claude
    Code transcript say what the file is and which --dialect reads it (repair: which
    repairs it), not that it holds no session, and write nothing."""
    stats = gc.generate(tmp_path, mb=0.1, seed=28, subagents=False)
    path = str(stats.path)
    before = listing(tmp_path)
    for command in ("show", "info", "context", "tree", "tail"):
        for mode in ([], ["--json"]):
            code, out, err = run(capsys, command, "--dialect", "pi", *mode, path)
            assert code == 2 and out == "", (command, mode, err)
            assert err.startswith("Error: ") and err.count("\n") == 1, err
            assert "a Claude Code transcript, not a pi session" in err
            assert "--dialect claude" in err and "not a session file" not in err
    for mode in ([], ["--check"], ["--dry-run"], ["--json"]):
        code, out, err = run(capsys, "repair", "--dialect", "pi", *mode, path)
        assert code == 2 and out == "", (mode, err)
        assert "a Claude Code transcript, not a pi session" in err
        assert f"journal repair --dialect claude {path}" in err
    assert listing(tmp_path) == before
    code, out, _ = run(capsys, "info", "--dialect", "claude", "--json", path)
    assert code == 0 and orjson.loads(out)["dialect"] == "claude"
