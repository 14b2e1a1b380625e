"""The commands that work on session files only say so when named a database session
(docs/postgres.md, "Commands that work on files only"), before reading or writing anything;
they used to look for a file called `pg:<id>` in the current folder and report it missing (and
`journal usage` printed an empty table and exited 0). The commands that do work on a database
say in one line when it cannot be reached."""

from __future__ import annotations

import os

import pytest

from journal.cli import main, repair_main, tail_main

URL = "postgresql://nobody@127.0.0.1:1/nodb?session=abc"

COMMANDS = [
    ["prune", "pg:abc", "--older-than", "1d"],
    ["import", "pg:abc"],
]

DATABASE_COMMANDS = [
    ["tail", "pg:abc"],
    ["tail", URL, "-n", "3"],
    ["repair", "pg:abc"],
    ["repair", "--check", "pg:abc"],
    ["rotate", "pg:abc"],
    ["quarantine", "list", "pg:abc"],
    ["ls", "pg:abc"],
    ["info", URL],
    ["export", "pg:abc", "--format", "md"],
    ["usage", "pg:abc"],
    ["search", "hello", URL],
    ["lineage", URL],
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


@pytest.mark.parametrize("argv", DATABASE_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_a_database_command_says_the_database_cannot_be_reached(argv, tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("JOURNAL_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/nodb")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    errors = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        "Error: cannot connect to the database postgresql://nobody@127.0.0.1:1/nodb: ")
    assert err.splitlines()[-1] == errors[0]  # progress may come first, on stderr too
    assert os.listdir(tmp_path) == []  # nothing left behind


@pytest.mark.parametrize("entry", [tail_main, repair_main])
def test_the_standalone_commands_go_to_the_database_too(entry, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert entry([URL]) == 2
    assert capsys.readouterr().err.startswith("Error: cannot connect to the database")
