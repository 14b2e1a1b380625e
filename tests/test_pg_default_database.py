"""`pg:` alone names the default database (the one JOURNAL_DATABASE_URL names) wherever a
database is taken: `ls`, `search`, `usage`, `export`, `new`, `push`, `pull`, `repair`,
`rotate` and the agent's `--sessions-dir`; without the variable it is one `Error:` line
naming it. With no path, `ls`, `search` and `usage` read `$JOURNAL_SESSIONS_DIR` (which may
be `pg:`), else `./sessions`; a missing `./sessions` while JOURNAL_DATABASE_URL is set says
that `pg:` reads the database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import Session, load  # noqa: E402
from journal.pg.url import session_url  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys\nfrom journal.cli.commands import main\nsys.exit(main())\n"


def journal(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


@pytest.fixture
def env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    made = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "JOURNAL_DATABASE_URL": pg_url}
    made.pop("JOURNAL_SESSIONS_DIR", None)
    return made


def one_session(pg_url: str, session: str, text: str) -> str:
    url = session_url(pg_url, session)
    with Session.create(url, cwd="/w") as s:
        s.append_message({"role": "user", "content": text, "timestamp": 1})
    return url


def test_pg_alone_names_the_default_database_in_every_command_taking_one(
        env: dict[str, str], pg_url: str, tmp_path: Path) -> None:
    one_session(pg_url, "first", "needle in the default database")
    listed = journal("ls", "pg:", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [row["session"] for row in json.loads(listed.stdout)] == ["first"]
    found = journal("search", "needle", "pg:", "--json", env=env, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert [h["entryId"] is not None for h in json.loads(found.stdout)["hits"]] == [True]
    counted = journal("usage", "pg:", "--json", env=env, cwd=tmp_path)
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout)["sessions"] == 1
    exported = journal("export", "pg:", "--format", "jsonl", env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "needle in the default database" in exported.stdout

    made = journal("new", "pg:", "--json", env=env, cwd=tmp_path)  # a new session in it
    assert made.returncode == 0, made.stderr
    new = json.loads(made.stdout)
    assert new["path"] == session_url(pg_url, new["id"])
    assert load(new["path"]).header["id"] == new["id"]  # type: ignore[index]

    pulled = journal("pull", "pg:", str(tmp_path / "out"), "--json", env=env, cwd=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert len(json.loads(pulled.stdout)["files"]) == 2
    (tmp_path / "src").mkdir()
    with Session.create(str(tmp_path / "src"), cwd="/w") as s:
        s.append_message({"role": "user", "content": "from a file", "timestamp": 1})
        pushed_id = s.session_id
    pushed = journal("push", str(tmp_path / "src"), "pg:", "--json", env=env, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stderr
    assert [row["session"] for row in json.loads(pushed.stdout)["pushed"]] == [
        session_url(pg_url, pushed_id)]
    assert load(session_url(pg_url, pushed_id)).entries


@pytest.mark.parametrize("argv", [("ls", "pg:"), ("search", "x", "pg:"), ("usage", "pg:"),
                                  ("export", "pg:"), ("new", "pg:"),
                                  ("push", "{tmp}", "pg:"), ("pull", "pg:", "{tmp}/out"),
                                  ("repair", "--check", "pg:"), ("repair", "pg:"),
                                  ("rotate", "pg:")])
def test_pg_alone_without_a_default_database_is_one_error_naming_the_variable(
        env: dict[str, str], tmp_path: Path, argv: tuple[str, ...]) -> None:
    del env["JOURNAL_DATABASE_URL"]
    before = sorted(os.listdir(tmp_path))
    result = journal(*(a.format(tmp=tmp_path) for a in argv), env=env, cwd=tmp_path)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if not line.startswith("journal: ")]
    assert len(errors) == 1 and errors[0].startswith("Error: pg:: names the default database")
    assert "JOURNAL_DATABASE_URL is not set" in errors[0]
    assert sorted(os.listdir(tmp_path)) == before


def test_without_a_path_the_sessions_dir_may_be_the_default_database(
        env: dict[str, str], pg_url: str, tmp_path: Path) -> None:
    one_session(pg_url, "kept", "needle")
    for argv in (("ls",), ("search", "needle"), ("usage",)):
        missing = journal(*argv, env=env, cwd=tmp_path)  # no ./sessions here
        assert missing.returncode == 2
        [error] = missing.stderr.splitlines()
        assert error.startswith(f"Error: {tmp_path / 'sessions'}: no such file or folder")
        assert error.endswith("JOURNAL_DATABASE_URL names are read by naming it: pg:")
    env["JOURNAL_SESSIONS_DIR"] = "pg:"  # where the agent's new sessions go, read by default
    listed = journal("ls", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [row["session"] for row in json.loads(listed.stdout)] == ["kept"]
    found = journal("search", "needle", "--json", env=env, cwd=tmp_path)
    assert found.returncode == 0 and len(json.loads(found.stdout)["hits"]) == 1
    counted = journal("usage", "--json", env=env, cwd=tmp_path)
    assert counted.returncode == 0 and json.loads(counted.stdout)["sessions"] == 1
    made = journal("new", "--json", env=env, cwd=tmp_path)
    assert made.returncode == 0 and json.loads(made.stdout)["path"].startswith(pg_url)
    assert not (tmp_path / "sessions").exists() and not (tmp_path / "pg:").exists()
