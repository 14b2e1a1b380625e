"""A database lineage broken out of band: a sealed session whose successor's row was deleted.
What follows the seal says which session is missing instead of handing back a session that
is not there: writers (open, append, rotate, repair) refuse with that, `info` says it, a
`View` stays on the last session there is."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402
from test_info_sealed import ROOT, rotate_once  # noqa: E402

from journal import BrokenLineage, Session  # noqa: E402
from journal.anywhere import live  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.view import View  # noqa: E402


def broken(pg_url: str) -> tuple[str, str, str]:
    """first -> second -> third, then third's row deleted: (first, second, third's id)."""
    first = session_url(pg_url, "first")
    with Session.create(first, cwd="/w") as session:
        rotate_once(session, "a")
        second = session.path
        rotate_once(session, "b")
        missing = session.session_id
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = %s", (missing,))
    return first, second, missing


def journal(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=60)


def test_writers_say_the_lineage_is_broken_and_which_session_is_missing(pg_url: str) -> None:
    first, second, missing = broken(pg_url)
    for target in (first, second):
        with pytest.raises(BrokenLineage) as raised:
            Session.open(target, lock_timeout=1)
        assert raised.value.missing_id == missing and raised.value.sealed == second
        with pytest.raises(BrokenLineage):
            live(target)
    for argv in (["rotate", first], ["rotate", "--dry-run", first], ["repair", first],
                 ["repair", "--check", first]):
        done = journal(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "the lineage is broken" in done.stderr and missing in done.stderr, argv
        assert "no such session" not in done.stderr
    appended = subprocess.run([sys.executable, "-m", "journal.cli", "append", first],
                              input='{"role": "user", "content": "hi", "timestamp": 1}\n',
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert appended.returncode == 2 and "the lineage is broken" in appended.stderr


def test_info_names_the_missing_successor_instead_of_a_live_session(pg_url: str) -> None:
    first, second, missing = broken(pg_url)
    found = json.loads(journal("info", "--json", first).stdout)
    assert found["sealed"] and found["successor"] == second
    assert found["live"] is None and found["missingSuccessor"] == missing
    text = journal("info", first)
    assert text.returncode == 0, text.stderr
    assert not any(line.startswith("live:") for line in text.stdout.splitlines())
    assert any(line.startswith("broken:") and missing in line
               for line in text.stdout.splitlines())
    found = json.loads(journal("info", "--json", second).stdout)
    assert found["successor"] is None and found["live"] is None
    assert found["missingSuccessor"] == missing


def test_a_view_stays_on_the_last_session_there_is(pg_url: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    first, second, missing = broken(pg_url)
    view = View.open(first)
    with caplog.at_level(logging.WARNING, logger="journal.view"):
        entries = view.refresh()
    assert view.path == second and entries  # the sealed second, reloaded
    assert any(missing in r.getMessage() for r in caplog.records)
    assert view.refresh() == []


def test_a_view_at_a_broken_lineage_does_not_walk_it_at_every_refresh(
        pg_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Stopped at the last session there is, a view checks only whether the missing one is
    there now (one look), not the whole lineage, and warns once."""
    from journal.pg import rotation

    first, second, missing = broken(pg_url)
    view = View.open(first)
    walked, walk = [], rotation.live_storage
    monkeypatch.setattr(rotation, "live_storage",
                        lambda storage: walked.append(storage) or walk(storage))
    with caplog.at_level(logging.WARNING, logger="journal.view"):
        view.refresh()
        for _ in range(4):
            assert view.refresh() == []
    assert view.path == second and len(walked) == 1
    assert sum(missing in r.getMessage() for r in caplog.records) == 1
    done = journal("tail", first)  # one-shot: each session there is, then it ends
    assert done.returncode == 0, done.stderr


def test_a_tail_past_a_moved_out_archive_into_a_deleted_successor_says_so(
        pg_url: str, tmp_path) -> None:
    """A tail of an archive moved out to a file not here reads on from its successor; that
    successor's row deleted, it named a session that is not there and waited for it."""
    from test_pg_rotation import new_session

    from journal.pg.rotation import rotate_database

    first = new_session(pg_url)  # a compaction and an entry after it: it rotates
    result = rotate_database(first, archive_dir=str(tmp_path / "a"), keep=0)
    assert result.archive is not None and result.successor is not None
    os.rename(result.archive, tmp_path / "elsewhere.gz")  # the file is not here
    successor = result.successor.rsplit("session=", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM journal.streams WHERE session = %s", (successor,))
    done = journal("tail", "-n", "5", first)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "the lineage is broken" in done.stderr and successor in done.stderr
