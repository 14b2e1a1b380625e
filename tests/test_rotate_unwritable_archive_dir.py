"""An archive folder no file can be made in, though its permission bits let one (root passes
`os.access` for /proc): `journal rotate --archive-dir` refuses it before anything changes, a
database session's rotation as a file's (the database one rotated, then warned that its
archive could not be written)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from journal import Session
from journal.cli import main

# /proc itself, and a folder to be made in it: nothing can be made there, by root either
UNWRITABLE = ["/proc", "/proc/journal-archives"]


def rotatable(target: str) -> str:
    """A session at `target` (a folder, or a session URL) with a compaction to rotate on."""
    with Session.create(target, cwd="/w") as session:
        for i in range(30):
            session.append_message({"role": "user", "content": f"turn {i} " + "x" * 200,
                                    "timestamp": 1})
        kept = session.append_message({"role": "user", "content": "kept", "timestamp": 1})
        session.append_compaction("summary", kept, 500)
        return session.path


def one_refusal(capsys: pytest.CaptureFixture[str], archive_dir: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: "), err
    assert "cannot be written" in err[0] and archive_dir in err[0], err
    assert "nothing was changed" in err[0], err


@pytest.mark.parametrize("archive_dir", UNWRITABLE)
def test_a_file_rotation_refuses_it_before_any_change(
        tmp_path: Path, archive_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = rotatable(str(tmp_path))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for extra in (["--dry-run"], []):
        assert main(["rotate", path, "--archive-dir", archive_dir, *extra]) == 2
        one_refusal(capsys, archive_dir)
        assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("archive_dir", UNWRITABLE)
def test_a_database_rotation_refuses_it_before_any_change(
        pg_url: str, archive_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
    from journal.pg.rotation import stream_row
    from journal.pg.storage import PostgresStorage
    from journal.pg.url import session_url

    url = rotatable(session_url(pg_url, str(uuid.uuid4())))
    before = stream_row(PostgresStorage.from_url(url))
    assert before is not None
    for extra in (["--dry-run"], []):
        assert main(["rotate", url, "--archive-dir", archive_dir, *extra]) == 2
        one_refusal(capsys, archive_dir)
        assert stream_row(PostgresStorage.from_url(url)) == before
