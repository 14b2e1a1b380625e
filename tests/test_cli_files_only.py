"""The commands that work on session files only say so when named a database session
(docs/postgres.md, "Not (yet) on a database"), before reading or writing anything; they
used to look for a file called `pg:<id>` in the current folder and report it missing (and
`journal usage` printed an empty table and exited 0)."""

from __future__ import annotations

import os

import pytest

from journal.cli import main, repair_main, tail_main

URL = "postgresql://nobody@127.0.0.1:1/nodb?session=abc"

COMMANDS = [
    ["tail", "pg:abc"],
    ["tail", URL, "-n", "3"],
    ["repair", "pg:abc"],
    ["repair", "--check", "pg:abc"],
    ["rotate", "pg:abc"],
    ["lineage", URL],
    ["quarantine", "list", "pg:abc"],
    ["export", "pg:abc", "--format", "md"],
    ["usage", "pg:abc"],
    ["search", "hello", URL],
    ["ls", "pg:abc"],
    ["prune", "pg:abc", "--older-than", "1d"],
    ["import", "pg:abc"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_a_file_command_refuses_a_database_session(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("JOURNAL_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/nodb")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("Error: ")
    assert err.count("\n") == 1
    assert f"journal {argv[0]} works on session files only" in err
    assert os.listdir(tmp_path) == []  # nothing left behind


@pytest.mark.parametrize("entry", [tail_main, repair_main])
def test_the_standalone_commands_refuse_it_too(entry, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert entry([URL]) == 2
    assert "works on session files only" in capsys.readouterr().err
