"""`-q` and `-v` of `journal` and `journal-agent`, run in process: they set the levels of the
project's own loggers for the command only, and print through a handler of their own where
nothing else would; the root logger and other libraries' loggers keep their levels, which
matters to a caller in the same process (tests, a program embedding `main`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import journal
from agent.cli import main as agent_main
from journal import Session
from journal.cli import main as journal_main

ROOT = Path(__file__).resolve().parents[1]
SHORT = ROOT / "agent" / "scenarios" / "short.json"
OURS = ("journal", "agent", "tools")


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("JOURNAL_AGENT_SESSIONS", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    (tmp_path / "ws").mkdir()


def compacted(path: str) -> str:
    """A session at `path` with a compaction, so it can be rotated."""
    with Session.create(path, cwd="/w") as session:
        for k in range(20):
            session.append_message({"role": "user", "content": [{"type": "text", "text":
                                    f"turn {k} " + "x" * 200}], "timestamp": k})
        session.append_compaction("what happened", session.entries[-4]["id"], 9000)
    return path


def logging_state() -> tuple[object, ...]:
    root = logging.getLogger()
    return (root.level, list(root.handlers),
            logging.getLogger("another.library").getEffectiveLevel(),
            [logging.getLogger(name).level for name in OURS])


@contextmanager
def nothing_configured() -> Iterator[None]:
    """A process whose logging nobody configured (no handler on the root logger), as a
    command run from a shell starts; pytest's own handlers are put back after."""
    root = logging.getLogger()
    saved = list(root.handlers)
    for handler in saved:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in saved:
            root.addHandler(handler)


def run_agent(session: str, tmp_path: Path, *quiet: str) -> int:
    return agent_main(["run", "go", "--model", f"scripted:{SHORT}", "--session", session,
                       "--workspace", str(tmp_path / "ws"), *quiet])


def test_agent_quiet_leaves_the_logging_of_the_rest_of_the_process_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = logging_state()
    assert run_agent(compacted(str(tmp_path / "s.jsonl")), tmp_path, "-q") == 0
    assert logging_state() == before
    assert logging.getLogger("another.library").isEnabledFor(logging.WARNING)
    assert capsys.readouterr().out == ""


def test_agent_quiet_prints_no_warning_where_nothing_else_handles_logging(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run from a shell: without `-q` the store's warning (the session named was rotated) is
    a `Warning: ...` line; with it, nothing; either way nothing of it stays behind."""
    old = compacted(str(tmp_path / "s.jsonl"))
    assert journal.rotate(old).rotated
    with nothing_configured():
        before = logging_state()
        assert run_agent(old, tmp_path, "-q") == 0
        assert logging_state() == before
        assert capsys.readouterr() == ("", "")
        assert run_agent(old, tmp_path) == 0
        assert logging_state() == before
    warned = capsys.readouterr().err.splitlines()
    assert [line for line in warned if "was rotated" in line] == [
        f"Warning: {old} was rotated; continuing in its successor "
        f"{journal.live_session(old)}"]


def test_journal_verbose_leaves_the_root_logger_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`journal -v` prints the store's INFO lines, and sets neither the root logger's level
    nor another library's, and leaves no handler behind."""
    path = compacted(str(tmp_path / "s.jsonl"))
    with nothing_configured():
        before = logging_state()
        assert journal_main(["-v", "rotate", path]) == 0
        assert logging_state() == before
    err = capsys.readouterr().err
    assert f"Info: {path}: rotated into " in err
