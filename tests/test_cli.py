"""The journal command: exit codes, messages, JSON output."""

from __future__ import annotations

import io
import os
import sys

import orjson
import pytest

from journal import Session, load
from journal.cli import main


def run(capsys, *argv, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_new_append_show_info(tmp_path, capsys, monkeypatch):
    code, out, _ = run(capsys, "new", str(tmp_path / "sessions"), "--cwd", "/w", "--json")
    assert code == 0
    path = orjson.loads(out)["path"]
    lines = b'{"role":"user","content":"hello","timestamp":1}\n\n' \
            b'{"type":"model_change","provider":"anthropic","modelId":"m"}\n'
    code, out, _ = run(capsys, "append", path, stdin=lines, monkeypatch=monkeypatch)
    assert code == 0 and len(out.split()) == 2
    entries = load(path).entries
    assert [e["type"] for e in entries] == ["message", "model_change"]
    code, out, _ = run(capsys, "show", path)
    assert code == 0 and "user: hello" in out and "model anthropic/m" in out
    with open(path, "ab") as f:
        f.write(b"not json\n{\"type\":")
    code, out, _ = run(capsys, "show", path, "--json")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [r["diagnostic"]["reason"] for r in rows if "diagnostic" in r] == [
        "invalid_json", "torn_tail"]
    code, out, _ = run(capsys, "info", path, "--json")
    info = orjson.loads(out)
    assert code == 0
    assert info["entries"] == 2 and info["byType"] == {"message": 1, "model_change": 1}
    assert len(info["diagnostics"]) == 2 and info["lockHolder"] is None
    code, out, _ = run(capsys, "info", path)
    assert "journal repair" in out


def test_append_rejects_bad_input_and_writes_nothing(tmp_path, capsys, monkeypatch):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        path = s.path
    before = open(path, "rb").read()
    code, _, err = run(capsys, "append", path, stdin=b'{"role":"user"}\n[1]\n',
                       monkeypatch=monkeypatch)
    assert code == 2 and err.startswith("Error: stdin line 2")
    code, _, err = run(capsys, "append", path, stdin=b"", monkeypatch=monkeypatch)
    assert code == 2 and "nothing to append" in err
    assert open(path, "rb").read() == before


def test_append_keeps_a_lone_surrogate_as_pi_writes_it(tmp_path, capsys, monkeypatch):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        path = s.path
    line = b'{"role":"user","content":"cut \\ud83d","timestamp":3}\n'
    code, _, err = run(capsys, "append", path, stdin=line, monkeypatch=monkeypatch)
    assert code == 0, err
    assert open(path, "rb").read().splitlines()[-1].count(b"\\ud83d") == 1
    assert load(path).entries[-1]["message"]["content"] == "cut \ud83d"


def test_append_refuses_an_endless_line_without_holding_it(tmp_path, capsys, monkeypatch):
    import journal.cli.commands

    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        path = s.path
    before = open(path, "rb").read()
    monkeypatch.setattr(journal.cli.commands, "MAX_INPUT_LINE", 1000)
    code, _, err = run(capsys, "append", path, stdin=b"\0" * 5000, monkeypatch=monkeypatch)
    assert code == 2 and "stdin line 1: longer than 1,000 bytes" in err
    assert open(path, "rb").read() == before


@pytest.mark.parametrize("command", ["show", "info", "context", "tree", "append"])
def test_missing_file_directory_and_non_session(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"role":"user"}\n')))
    code, _, err = run(capsys, command, str(tmp_path / "nope.jsonl"))
    assert code == 2 and err == f"Error: {tmp_path / 'nope.jsonl'}: no such file\n"
    code, _, err = run(capsys, command, str(tmp_path))
    assert code == 2 and "is a directory" in err
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    code, _, err = run(capsys, command, str(other))
    assert code == 2 and "not a session" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_permission_denied(tmp_path, capsys):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        path = s.path
    os.chmod(path, 0)
    code, _, err = run(capsys, "info", path)
    assert code == 2 and "permission denied" in err


def test_held_lock_is_reported(tmp_path, capsys, monkeypatch):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        code, out, _ = run(capsys, "info", s.path, "--json")
        assert orjson.loads(out)["lockHolder"]["pid"] == os.getpid()
        code, _, err = run(capsys, "append", s.path, "--lock-timeout", "0.2",
                           stdin=b'{"role":"user","content":"x"}\n', monkeypatch=monkeypatch)
        assert code == 2 and f"locked by pid {os.getpid()}" in err


def test_context_and_tree(tmp_path, capsys, pi_fixture):
    path = str(pi_fixture("all-types.jsonl"))
    code, out, _ = run(capsys, "context", path, "--json")
    data = orjson.loads(out)
    assert code == 0 and data["thinkingLevel"] == "high" and data["leafId"] == "f37f8f8a"
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "branchSummary"]
    code, out, _ = run(capsys, "context", path, "--leaf", "1031ffea", "--json")
    assert orjson.loads(out)["messages"][0]["role"] == "compactionSummary"
    code, _, err = run(capsys, "context", path, "--leaf", "nope")
    assert code == 2 and "nope" in err
    code, out, _ = run(capsys, "tree", path)
    assert code == 0 and "← leaf" in out.splitlines()[-1]


def test_context_and_tree_of_a_generated_session(tmp_path, capsys):
    """`context` and `tree` on a session with branches, labels and compactions, made here."""
    from corruption import generated_bytes

    path = tmp_path / "gen.jsonl"
    path.write_bytes(generated_bytes(tmp_path, 0, 200_000))
    snap = load(path)
    leaf = snap.entries[-1]["id"]
    code, out, _ = run(capsys, "context", str(path), "--json")
    data = orjson.loads(out)
    assert code == 0 and data["leafId"] == leaf
    assert data["messages"][0]["role"] == "compactionSummary"
    assert "branchSummary" in {m["role"] for m in data["messages"]}

    before_compaction = next(e["parentId"] for e in snap.entries if e["type"] == "compaction")
    code, out, _ = run(capsys, "context", str(path), "--leaf", before_compaction, "--json")
    earlier = orjson.loads(out)
    assert code == 0 and earlier["leafId"] == before_compaction
    assert "compactionSummary" not in {m["role"] for m in earlier["messages"]}

    labelled = next(e for e in snap.entries if e["type"] == "label" and e.get("label"))
    code, out, _ = run(capsys, "tree", str(path))
    lines = out.splitlines()
    assert code == 0 and lines[-1].lstrip().startswith(leaf) and "← leaf" in lines[-1]
    assert any(line.lstrip().startswith(f"{labelled['targetId']} [") for line in lines)
    assert len(lines) == len(snap.entries)


def test_every_command_has_help(capsys):
    from journal.cli.commands import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert p.description, name
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
    capsys.readouterr()


def test_context_for_model_pairs_tool_calls(capsys, pi_fixture):
    path = str(pi_fixture("all-types.jsonl"))
    assert main(["context", path, "--json"]) == 0
    raw = orjson.loads(capsys.readouterr().out)
    assert main(["context", path, "--for-model", "--json"]) == 0
    sent = orjson.loads(capsys.readouterr().out)
    assert [m["role"] for m in raw["messages"]] == ["user", "assistant", "branchSummary"]
    assert [m["role"] for m in sent["messages"]] == [
        "user", "assistant", "toolResult", "branchSummary"]
    assert sent["messages"][2]["isError"] is True
    assert [f["rule"] for f in sent["pairingFixes"]] == ["missing_result"]


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_refused(capsys, value):
    """`--lock-timeout -1` was taken (and said 'waited -1s'); every command refuses it."""
    for argv in (["append", "x.jsonl"], ["rotate", "x.jsonl"], ["repair", "x.jsonl"]):
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--lock-timeout", value])
        assert exited.value.code == 2
        assert "expected a number of seconds, 0 or more" in capsys.readouterr().err
