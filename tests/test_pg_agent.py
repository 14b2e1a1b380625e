"""`journal-agent` on a database: new sessions in a database named by `--sessions-dir` (or
`$JOURNAL_SESSIONS_DIR`), `chat`'s /status and /new on a database session, and the errors a
newcomer's first guesses meet (a session that is not there yet, a misspelt URL, whose password
is never echoed back)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from agent.cli import main  # noqa: E402
from journal import Session, load  # noqa: E402
from journal.cli import main as journal_main  # noqa: E402
from journal.pg.url import is_database_url, session_url  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "agent" / "scenarios"
TASK = "Write hello.py that prints a greeting, and run it."


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("JOURNAL_AGENT_SESSIONS", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    (tmp_path / "run").mkdir()


def started(out: str) -> str:
    [line] = [x for x in out.splitlines() if x.startswith("session ")]
    return line.removeprefix("session ")


@pytest.mark.parametrize("how", ["flag", "environment", "default database"])
def test_a_run_starts_a_new_session_in_the_database_named_for_new_sessions(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], how: str) -> None:
    where = ["--sessions-dir", pg_url] if how == "flag" else []
    if how == "environment":
        monkeypatch.setenv("JOURNAL_SESSIONS_DIR", pg_url)
    if how == "default database":  # `pg:` alone: the database JOURNAL_DATABASE_URL names
        monkeypatch.setenv("JOURNAL_DATABASE_URL", pg_url)
        where = ["--sessions-dir", "pg:"]
    before = sorted(os.listdir(tmp_path))
    code = main(["run", TASK, "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--workspace", str(tmp_path / "ws"), *where])
    out = capsys.readouterr().out
    assert code == 0
    url = started(out)
    assert is_database_url(url)
    entries = load(url).entries
    assert [e["message"]["role"] for e in entries if e["type"] == "message"][:2] == [
        "user", "assistant"]
    assert load(url).header["id"] == url.rsplit("session=", 1)[1]
    assert sorted(os.listdir(tmp_path)) == before  # no folder named like the URL


def test_a_url_that_names_no_database_is_refused_before_anything_is_made(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("JOURNAL_DATABASE_URL", raising=False)  # so `pg:` names nothing
    before = sorted(os.listdir(tmp_path))
    misspelt = "postgress://alice:s3cret@127.0.0.1:5432/agents"
    for where in (misspelt, session_url(pg_url, "one"), "pg:one", "pg:"):
        code = main(["run", TASK, "--model", f"scripted:{SCENARIOS / 'short.json'}",
                     "--workspace", str(tmp_path / "ws"), "--sessions-dir", where])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("Error: ") and len(err.splitlines()) == 1, err
        assert "s3cret" not in err
    assert sorted(os.listdir(tmp_path)) == before


def test_a_session_not_in_the_database_says_how_to_start_one(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", TASK, "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--workspace", str(tmp_path / "ws"), "--session",
                 session_url(pg_url, "not-yet")])
    err = capsys.readouterr().err
    assert code == 2 and "no such session" in err and "--sessions-dir" in err


def test_chat_status_and_new_on_a_database_session(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = session_url(pg_url, "chatted")
    Session.create(url, cwd=str(tmp_path / "ws")).close()
    lines = ["hello", "/status", "/new", "/status", "/quit"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    code = main(["chat", "--model", f"scripted:{SCENARIOS / 'test_chat.json'}",
                 "--workspace", str(tmp_path / "ws"), "--session", url, "--window", "16000"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    statuses = [x for x in captured.out.splitlines() if "tokens (" in x]
    assert len(statuses) == 2
    first, second = statuses
    with Session.open(url) as session:
        size = session.size
    assert "session=chatted" in first and f"({size:,} bytes)" in first
    # /new started the next session in the same database, not in a local folder
    assert "session=chatted" not in second
    [fresh] = [x.split("; ", 1)[1].rsplit(" (", 1)[0] for x in [second]]
    assert is_database_url(fresh) and load(fresh).header is not None
    assert not (tmp_path / "default-sessions").exists()


def test_an_error_naming_a_misspelt_url_hides_its_password(
        capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("postgress://alice:s3cret@127.0.0.1:1/agents?session=x",
                   "postgresql://alice@127.0.0.1:1/agents?password=s3cret&sesion=x"):
        assert journal_main(["info", target]) == 2
        err = capsys.readouterr().err
        assert err.startswith("Error: ") and "s3cret" not in err and "***" in err, err


@pytest.mark.parametrize("text", [
    "postgress://alice:s3cret@127.0.0.1/agents: no such file",
    "postgress://alice:s3@cr@et@127.0.0.1/agents: no such file",
    "/work/postgress:/alice:s3cret@127.0.0.1/agents?session=x: no such file",
    "postgresql://alice@h/db?sslmode=require&password=s3cret&session=x",
    "host=h password='s3 cr\\'et' dbname=agents",
])
def test_hide_passwords_leaves_no_part_of_one(text: str) -> None:
    from journal.pg.url import hide_passwords

    hidden = hide_passwords(text)
    assert "***" in hidden
    for part in ("s3cret", "s3", "cr", "et@"):
        assert part not in hidden.replace("***", ""), hidden
