"""`journal repair --check` / `--dry-run` over several files: the summary table says a
damaged file needs repair; it said "changed" although nothing was written."""

from __future__ import annotations

import pytest

from journal import Session
from journal.cli import main


def damaged(folder, name: str) -> str:
    folder.mkdir(exist_ok=True)
    with Session.create(str(folder), cwd="/w") as s:
        s.append_message({"role": "user", "content": name, "timestamp": 0})
        path = s.path
    with open(path, "ab") as f:
        f.write(b'{"type":"message","id":"torn')  # a torn last line
    return path


@pytest.mark.parametrize("mode", ["--check", "--dry-run"])
def test_the_summary_of_a_check_says_needs_repair(mode, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    one, two = damaged(tmp_path / "one", "a"), damaged(tmp_path / "two", "b")
    before = [open(p, "rb").read() for p in (one, two)]
    main(["repair", mode, one, two])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if ".jsonl" in line and "│" in line]
    assert len(rows) == 2
    assert all("needs repair" in row and "changed" not in row for row in rows)
    assert [open(p, "rb").read() for p in (one, two)] == before
