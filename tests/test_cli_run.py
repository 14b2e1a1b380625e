"""One `run()` behind the four entry points: the same error gives the same line and exit code.

The entry points are run as pyproject.toml declares them, in real processes, for what a
process sees (its stdout pipe closed by the reader, a Ctrl-C); in process, with the same
exception raised inside each command, for the mapping of every kind of error.
"""

from __future__ import annotations

import argparse
import array
import fcntl
import io
import os
import signal
import subprocess
import sys
import termios
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

import agent.cli
import journal.cli.commands
import journal.cli.repair
import journal.cli.tail
from journal import JournalError, Session
from journal.cli import main, repair_main, run, tail_main

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "scripts"]
SHORT = str(ROOT / "agent" / "scenarios" / "short.json")


def entry_point(name: str, *args: str) -> list[str]:
    """The command line that runs console script `name` as pyproject.toml declares it."""
    module, _, function = SCRIPTS[name].partition(":")
    code = (f"import sys; from {module} import {function}; "
            f"sys.exit({function}(sys.argv[1:]))")
    return [sys.executable, "-c", code, *args]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No key, agent sessions and HOME in the temporary folder, no colour."""
    home = tmp_path / "home"
    home.mkdir()
    clean = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return {**clean, "HOME": str(home), "JOURNAL_SESSIONS_DIR": str(tmp_path / "agent"),
            "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}


def session_with(path: Path, count: int) -> Path:
    with Session.create(path, cwd="/w") as session:
        session.append_many([{"type": "message", "message": {
            "role": "user", "content": f"message number {n} " + "x" * 40, "timestamp": n}}
            for n in range(count)])
    return path


def invocations(path: str, workspace: Path) -> dict[str, list[str]]:
    """Each entry point, asked to read the session at `path`."""
    workspace.mkdir(exist_ok=True)  # journal-agent refuses a workspace that does not exist
    return {
        "journal": ["show", path],
        "journal-repair": [path],
        "journal-tail": [path],
        "journal-agent": ["run", "hello", "--session", path, "--model", f"scripted:{SHORT}",
                          "--workspace", str(workspace)],
    }


def test_every_entry_point_is_declared() -> None:
    assert sorted(SCRIPTS) == ["journal", "journal-agent", "journal-repair", "journal-tail"]


@pytest.mark.parametrize("name", ["journal", "journal-repair", "journal-tail", "journal-agent"])
def test_an_os_error_is_one_line_and_exit_2_in_every_entry_point(
        tmp_path: Path, env: dict[str, str], name: str) -> None:
    (tmp_path / "plain.txt").write_text("not a folder\n")
    path = str(tmp_path / "plain.txt" / "s.jsonl")  # ENOTDIR, an OSError
    args = invocations(path, tmp_path / "ws")[name]
    done = subprocess.run(entry_point(name, *args), env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"Error: {path}: Not a directory\n")


# The same exception raised inside the command each entry point runs, in process.

Patch = Callable[[pytest.MonkeyPatch, BaseException], Callable[[list[str]], int]]


def _raiser(error: BaseException) -> Callable[..., object]:
    def fail(*_args: object, **_kwargs: object) -> object:
        raise error

    return fail


def _journal(mp: pytest.MonkeyPatch, error: BaseException) -> Callable[[list[str]], int]:
    mp.setattr(journal.cli.commands, "load", _raiser(error))
    return main


def _repair(mp: pytest.MonkeyPatch, error: BaseException) -> Callable[[list[str]], int]:
    mp.setattr(journal.cli.repair, "repair", _raiser(error))
    return repair_main


def _tail(mp: pytest.MonkeyPatch, error: BaseException) -> Callable[[list[str]], int]:
    mp.setattr(journal.cli.tail, "follow_events", _raiser(error))
    return tail_main


def _agent(mp: pytest.MonkeyPatch, error: BaseException) -> Callable[[list[str]], int]:
    mp.setattr(agent.cli, "make_model", _raiser(error))
    return agent.cli.main


ENTRY_POINTS: dict[str, Patch] = {
    "journal": _journal, "journal-repair": _repair, "journal-tail": _tail,
    "journal-agent": _agent,
}

ERRORS: list[tuple[BaseException, str, int]] = [
    (JournalError("/s/a.jsonl: held by pid 7; retry later"),
     "Error: /s/a.jsonl: held by pid 7; retry later\n", 2),
    (PermissionError(13, "Permission denied", "/s/a.jsonl"),
     "Error: /s/a.jsonl: Permission denied\n", 2),
    (FileNotFoundError(2, "No such file or directory", "/s/gone.jsonl"),
     "Error: /s/gone.jsonl: No such file or directory\n", 2),
    (BrokenPipeError(32, "Broken pipe"), "Error: Broken pipe\n", 2),  # not stdout's pipe
    (KeyboardInterrupt(), "", 130),
]


@pytest.mark.parametrize(("error", "message", "code"), ERRORS,
                         ids=["journal_error", "permission", "missing", "other_pipe", "ctrl_c"])
@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_the_same_error_is_the_same_line_and_code_in_every_entry_point(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        name: str, error: BaseException, message: str, code: int) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "agent"))
    path = str(session_with(tmp_path / "s.jsonl", 2))
    entry = ENTRY_POINTS[name](monkeypatch, error)
    assert entry(invocations(path, tmp_path / "ws")[name]) == code
    out, err = capsys.readouterr()
    assert (out, err) == ("", message)


def test_expected_errors_of_the_caller_are_errors_too(capsys: pytest.CaptureFixture[str]) -> None:
    class ModelDown(Exception):
        pass

    def command(_args: argparse.Namespace) -> int:
        raise ModelDown("the model is down; retry later")

    parser = argparse.ArgumentParser(prog="x")
    parser.set_defaults(func=command)
    assert run(parser, [], expected=(ModelDown,)) == 2
    assert capsys.readouterr().err == "Error: the model is down; retry later\n"
    with pytest.raises(ModelDown):
        run(parser, [])


# stdout's reader going away: a quiet exit, no traceback at interpreter exit either


@pytest.mark.parametrize(("name", "args"), [
    ("journal", ["show"]), ("journal-tail", ["-n", "5000"])])
def test_output_cut_short_by_its_reader_exits_quietly(
        tmp_path: Path, env: dict[str, str], name: str, args: list[str]) -> None:
    """`journal show big | head -1`."""
    big = session_with(tmp_path / "big.jsonl", 5000)
    proc = subprocess.Popen(entry_point(name, *args, str(big)), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert "message number" in proc.stdout.readline() + proc.stdout.readline()
        proc.stdout.close()  # head -1 has what it wants
        assert proc.wait(60) == 0
        assert proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("name", ["journal", "journal-repair", "journal-tail", "journal-agent"])
def test_a_closed_stdout_is_not_a_traceback_at_exit(
        tmp_path: Path, env: dict[str, str], name: str) -> None:
    """Output small enough to sit in stdout's buffer fails only in the final flush: the
    command's own exit code, and nothing on stderr."""
    path = str(session_with(tmp_path / "s.jsonl", 3))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        done = subprocess.run(entry_point(name, *invocations(path, tmp_path / "ws")[name]),
                              env=env, stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=60, cwd=tmp_path)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def wait_until_read(fd: int, timeout: float = 30.0) -> None:
    """Wait until the reader of the pipe written through `fd` has taken all it holds."""
    deadline = time.monotonic() + timeout
    unread = array.array("i", [1])
    while time.monotonic() < deadline:
        fcntl.ioctl(fd, termios.FIONREAD, unread)
        if unread[0] == 0:
            return
        time.sleep(0.01)
    raise AssertionError("the command never read its stdin")


def test_ctrl_c_in_a_command_is_exit_130_without_a_traceback(
        tmp_path: Path, env: dict[str, str]) -> None:
    """`journal append` waiting on its stdin is interrupted: nothing appended, exit 130."""
    path = session_with(tmp_path / "s.jsonl", 1)
    before = path.read_bytes()
    proc = subprocess.Popen(entry_point("journal", "append", str(path)), env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write('{"role": "user", "content": "half of the input"}\n')
        proc.stdin.flush()
        wait_until_read(proc.stdin.fileno())  # so it is in the command, reading stdin
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
        assert proc.stderr.read() == ""
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()
    assert path.read_bytes() == before


def test_progress_goes_to_stderr_and_only_on_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    paths = [str(session_with(tmp_path / f"{n}.jsonl", 2)) for n in range(3)]
    for stderr in (Terminal(), io.StringIO()):
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", stderr)
        monkeypatch.setenv("NO_COLOR", "1")
        assert repair_main([*paths, "--check"]) == 0
        assert "repairing" not in out.getvalue() and "all 3 files clean" in out.getvalue()
        assert ("repairing" in stderr.getvalue()) == isinstance(stderr, Terminal)
