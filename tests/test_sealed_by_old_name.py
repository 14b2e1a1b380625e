"""A rotated session used by its old name, a file and a database session alike: `append`
says it continues in the successor and finds `--parent` there, and `tail --since` of an id
appended by that name says where the entry is (a sealed session is read as it is named)."""

from __future__ import annotations

import io
import logging
import os
import sys

import pytest

import journal
from journal import Session, load
from journal.anywhere import is_sealed
from journal.cli import main
from journal.pg.url import is_database_url, shown


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str,
        stdin: bytes = b"") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def made(where: str) -> None:
    """A session at `where` with a compaction, so it can rotate."""
    with Session.create(where, cwd="/w") as session:
        for k in range(20):
            session.append_message({"role": "user", "content": f"q{k} " + "x" * 300,
                                    "timestamp": k})
        session.append_compaction("s", session.entries[-5]["id"], 9000)


def rotated(where: str) -> tuple[str, str]:
    """`where` made and rotated: (the sealed session's name now, its successor). A file's
    archive is left plain (`compress=False`), so it can be read on as a database session's."""
    made(where)
    result = journal.rotate(where, compress=is_database_url(where))
    assert result.rotated and result.successor is not None
    sealed = where if is_sealed(where) else str(result.archive)
    return sealed, result.successor


def line(role: str, text: str) -> bytes:
    return b'{"role":"%s","content":"%s","timestamp":1}\n' % (role.encode(), text.encode())


def test_append_to_a_rotated_name_says_where_it_continues(
        file_or_database: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The warning the command prints as `Warning: ...` (logged: pytest's handler has it)."""
    old = file_or_database
    _, successor = rotated(old)
    caplog.clear()
    caplog.set_level(logging.WARNING)  # whatever an earlier test in this process set
    code, out, _ = run(capsys, monkeypatch, "append", old, stdin=line("user", "x"))
    assert code == 0
    assert load(successor).entries[-1]["id"] == out.strip()
    named = shown(old) if is_database_url(old) else os.path.realpath(old)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"{named} was rotated; continuing in its successor {shown(successor)}")]


def test_append_parent_by_a_rotated_name_is_looked_for_where_it_appends(
        file_or_database: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    old = file_or_database
    _, successor = rotated(old)
    code, out, _ = run(capsys, monkeypatch, "append", old, stdin=line("user", "first"))
    parent = out.strip()
    run(capsys, monkeypatch, "append", old, stdin=line("user", "second"))
    code, out, err = run(capsys, monkeypatch, "append", old, "--parent", parent,
                         stdin=line("user", "beside second"))
    assert code == 0, err
    entry = load(successor).entries[-1]
    assert (entry["id"], entry["parentId"]) == (out.strip(), parent)


def test_tail_since_an_id_appended_by_a_sealed_name_names_the_successor(
        file_or_database: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sealed session (a database session, or a file still in place: a plain archive)
    is read as it is named, not along its lineage: the error says where the entry went."""
    sealed, successor = rotated(file_or_database)
    _, out, _ = run(capsys, monkeypatch, "append", sealed, stdin=line("user", "y"))
    written = out.strip()
    for follow in ([], ["-f"]):
        code, out, err = run(capsys, monkeypatch, "tail", *follow, "--since", written, sealed)
        assert (code, out) == (2, "")
        assert err == (f"Error: {shown(sealed)}: no entry with id {written!r}; it was rotated "
                       f"into {shown(successor)}, where entries appended by its name since "
                       "then go: name that one\n")
    code, out, _ = run(capsys, monkeypatch, "tail", "--since", written, successor)
    assert code == 0 and out == ""  # found there: nothing after it


def test_tail_since_of_a_session_rotated_twice_names_the_live_one_too(
        file_or_database: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sealed, first = rotated(file_or_database)
    with Session.open(first) as session:
        for k in range(20):
            session.append_message({"role": "user", "content": f"r{k} " + "x" * 300,
                                    "timestamp": k})
        session.append_compaction("s", session.entries[-5]["id"], 9000)
    again = journal.rotate(first, compress=is_database_url(first))
    assert again.successor is not None
    middle = first if is_sealed(first) else str(again.archive)
    code, _, err = run(capsys, monkeypatch, "tail", "--since", "nosuch", sealed)
    assert code == 2
    assert f"it was rotated into {shown(middle)} (live now: {shown(again.successor)})" in err
