"""`journal info` of a session a rotation sealed says so, and where it continues: the
successor (checked against its identity) and, after several rotations, the live session its
seals lead to; the same for a file (archived, compressed or not) and a database session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from journal import Session

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys\nfrom journal.cli.commands import main\nsys.exit(main())\n"


def info(target: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", CLI, "info", target, *extra],
                          capture_output=True, text=True, env=env, timeout=60)


def info_json(target: str) -> dict[str, Any]:
    done = info(target, "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def rotate_once(session: Session, tag: str, **options: Any) -> str:
    """Compact and rotate `session`; the name it had before (now sealed)."""
    before = session.path
    session.append_message({"role": "assistant", "content": [{"type": "text",
                            "text": tag * 3000}], "provider": "p", "model": "m",
                            "timestamp": 1})
    kept = session.append_message({"role": "user", "content": f"kept {tag}", "timestamp": 2})
    session.append_compaction(f"summary {tag}", kept, 1)
    assert session.rotate(**options).rotated
    return before


def check(sealed: str, successor: str, live: str) -> None:
    found = info_json(sealed)
    assert found["sealed"] is True
    assert found["successor"] == successor and found["live"] == live
    text = info(sealed)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert any(line.startswith("sealed:    yes") for line in lines)
    assert f"continues: {successor}" in lines
    assert (f"live:      {live}" in lines) == (live != successor)
    now = info_json(live)
    assert now["sealed"] is False and now["successor"] is None and now["live"] is None
    assert not any(line.startswith("sealed:") for line in info(live).stdout.splitlines())


@pytest.mark.parametrize("compress", [False, True])
def test_info_of_a_sealed_file_names_where_it_continues(tmp_path: Path, compress: bool) -> None:
    with Session.create(str(tmp_path), cwd="/w") as session:
        rotate_once(session, "a", compress=compress)
        second = session.path
        rotate_once(session, "b", compress=compress)
        live = session.path
    first_archive, second_archive = sorted(str(p) for p in (tmp_path / "archive").iterdir())
    assert not os.path.exists(second)  # moved into the archive: named where it is now
    check(first_archive, second_archive, live)
    check(second_archive, live, live)


def test_info_of_a_sealed_file_whose_successor_is_not_here(tmp_path: Path) -> None:
    with Session.create(str(tmp_path / "a"), cwd="/w") as session:
        rotate_once(session, "a", compress=False)
    [archive] = (tmp_path / "a" / "archive").iterdir()
    alone = tmp_path / "alone.jsonl"
    alone.write_bytes(archive.read_bytes())  # copied away from its successor
    found = info_json(str(alone))
    assert found["sealed"] is True and found["successor"] is None and found["live"] is None
    assert "continues: in a successor that is not here" in info(str(alone)).stdout


def test_info_of_a_sealed_database_session_names_where_it_continues(pg_url: str) -> None:
    from journal.pg.url import session_url

    first = session_url(pg_url, "first")
    with Session.create(first, cwd="/w") as session:
        rotate_once(session, "a")
        second = session.path
        rotate_once(session, "b")
        live = session.path
    assert len({first, second, live}) == 3
    check(first, second, live)
    check(second, live, live)


def test_a_database_sessions_exported_archives_are_one_lineage_without_a_live_file(
        pg_url: str, tmp_path: Path) -> None:
    """A database session rotated three times with an archive folder: the exports there
    (`<file>.gz`, their headers naming `archive/<file>`) read as one lineage whose live
    session is not here. They were three lineages, and `lineage` and `info` named the
    newest export, sealed, as live."""
    from journal.pg.url import session_url

    exports = tmp_path / "exports"
    with Session.create(session_url(pg_url, "exported"), cwd="/") as session:
        for tag in "abc":
            rotate_once(session, tag, archive_dir=str(exports))
    archives = sorted(str(p) for p in exports.iterdir())
    assert len(archives) == 3
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def cli(*argv: str) -> Any:
        done = subprocess.run([sys.executable, "-c", CLI, *argv, "--json"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    [row] = cli("ls", str(exports))
    assert row["state"] == "sealed" and row["files"] == archives
    assert cli("lineage", archives[0]) == {"lineage": archives, "live": None}
    first = info_json(archives[0])
    assert first["successor"] == archives[1] and first["live"] is None
