"""Tab-separated output for a program (`ls`, `usage`, `search` when stdout is not a
terminal): a field holding a tab, newline, carriage return or backslash is escaped, so every
row is one line of the same cells (docs/cli.md, `journal ls`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import Session
from journal.cli.app import tsv_line
from journal.cli.commands import main

NAME = "first\tsecond\nthird\\fourth\rfifth"
ESCAPED = "first\\tsecond\\nthird\\\\fourth\\rfifth"


def unescape(cell: str) -> str:
    """What a reader of the output does: the reverse of the escapes, left to right."""
    out, i = [], 0
    while i < len(cell):
        if cell[i] == "\\" and i + 1 < len(cell):
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[cell[i + 1]])
            i += 2
        else:
            out.append(cell[i])
            i += 1
    return "".join(out)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder whose name holds a tab, with one session named with every escaped character
    in it, and the row cache kept out of the user's home."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    where = tmp_path / "odd\tfolder"
    where.mkdir()
    with Session.create(where, cwd="/w") as s:
        s.append_session_info(NAME)
        s.append_message({"role": "user", "content": "look at C:\\temp and the needle",
                          "timestamp": 1})
        s.append_message({"role": "assistant", "content": [{"type": "text", "text": "ok"}],
                          "provider": "anthropic", "model": "claude-sonnet-4-5",
                          "usage": {"input": 10, "output": 5, "cacheRead": 0,
                                    "cacheWrite": 0, "totalTokens": 15},
                          "stopReason": "stop", "timestamp": 2})
    return where


def test_tsv_line_escapes_and_reads_back() -> None:
    assert tsv_line([NAME, "plain", ""]) == f"{ESCAPED}\tplain\t"
    assert [unescape(c) for c in tsv_line([NAME, "a\\tb"]).split("\t")] == [NAME, "a\\tb"]


def test_ls_keeps_a_row_a_line_whatever_the_name_and_path_hold(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines  # the heading and the one session
    heading, row = (line.split("\t") for line in lines)
    assert len(row) == len(heading)
    cells = dict(zip(heading, row, strict=True))
    assert cells["name"] == ESCAPED
    assert unescape(cells["path"]).startswith(str(folder) + "/")


def test_usage_by_session_keeps_a_row_a_line(folder: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", str(folder), "--by", "session"]) == 0
    lines = capsys.readouterr().out.splitlines()
    widths = {len(line.split("\t")) for line in lines}
    assert len(widths) == 1, lines
    assert any(str(folder).replace("\t", "\\t") in line for line in lines), lines


def test_search_escapes_the_backslash_in_a_snippet_and_the_tab_in_a_path(
        folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "needle", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    session, entry_id, stamp, who, snippet = lines[0].split("\t")
    assert unescape(session).startswith(str(folder) + "/") and who == "user"
    assert "C:\\\\temp" in snippet and unescape(snippet).endswith("C:\\temp and the needle")
