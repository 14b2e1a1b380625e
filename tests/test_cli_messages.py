"""What the commands say where a newcomer found them wrong or unclear: each error names what
the argument is and what to do, and output to a pipe or a script is what such a reader
takes (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import Session
from journal.cli import main


def session_file(folder: Path, text: str = "hello") -> str:
    """A session file in `folder` holding one user message."""
    folder.mkdir(parents=True, exist_ok=True)
    with Session.create(str(folder), cwd="/w") as session:
        session.append_message({"role": "user", "content": text, "timestamp": 1})
        return session.path


def last_error(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_a_pull_into_a_session_file_says_it_is_a_file_and_pull_writes_into_a_folder(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said `Error: FILE: File exists`, from the folder it tried to make."""
    live = session_file(tmp_path / "files")
    assert main(["push", live, pg_url]) == 0
    before = sorted(p.name for p in (tmp_path / "files").iterdir())
    capsys.readouterr()
    for target in (live, f"{live}/pulled"):
        assert main(["pull", pg_url, target]) == 2
        assert last_error(capsys.readouterr().err) == (
            f"Error: {live}: is a file, not a folder; a pull writes into a folder (made if "
            "missing): name one; nothing was written")
        assert sorted(p.name for p in (tmp_path / "files").iterdir()) == before
