"""SIGTERM as an interruption (journal.interrupt): the cleanup it starts runs to its end."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from journal.interrupt import terminated_as_interrupted


def test_sigterm_unwinds_once_and_a_second_one_does_not_cut_the_cleanup_short() -> None:
    cleaned: list[str] = []
    with pytest.raises(SystemExit) as ended:
        with terminated_as_interrupted():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
                cleaned.append("not interrupted")
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # another stop, during the cleanup
                time.sleep(0.05)
                cleaned.append("cleaned up")
    assert ended.value.code == 128 + signal.SIGTERM
    assert cleaned == ["cleaned up"]
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # restored on leaving


def test_a_program_the_cleanup_starts_can_be_stopped_by_sigterm() -> None:
    """After the first SIGTERM, later ones do nothing in this process, but the programs its
    cleanup starts (a server's `pg_ctl stop`, say) get SIGTERM as usual: SIGTERM was set to
    ignored, which programs started then inherit."""
    import subprocess

    def ignored_by_child() -> bool:
        status = subprocess.run(["cat", "/proc/self/status"], capture_output=True,
                                text=True, check=True).stdout
        [mask] = [line.split()[1] for line in status.splitlines()
                  if line.startswith("SigIgn:")]
        return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))

    seen: list[bool] = []
    with pytest.raises(SystemExit):
        with terminated_as_interrupted():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                seen.append(ignored_by_child())
    assert seen == [False]


def test_a_sigterm_ignored_on_entry_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with terminated_as_interrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_entered_again_inside_itself_it_leaves_the_handler_to_the_outer_one() -> None:
    """The inner one's leaving must not re-arm the handler: the cleanup that the first
    SIGTERM started runs to its end, whatever further SIGTERMs come."""
    cleaned: list[str] = []
    with pytest.raises(SystemExit) as ended:
        with terminated_as_interrupted():
            try:
                with terminated_as_interrupted():
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # the inner one is left: still ignored
                time.sleep(0.05)
                cleaned.append("cleaned up")
    assert ended.value.code == 128 + signal.SIGTERM
    assert cleaned == ["cleaned up"]


class NotHandled(Exception):
    """Raised by the test's own SIGTERM handler: run() set none of its own."""


def test_run_ends_any_command_on_sigterm_as_on_ctrl_c_with_143() -> None:
    """Every entry point hands its command to run(): a SIGTERM unwinds the command (its
    `finally` runs) and run() returns 143, for commands that never asked for it."""
    from journal.cli import entry_parser, run

    cleaned: list[str] = []

    def command(args: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            return 0
        finally:
            cleaned.append("undone")

    parser = entry_parser("journal-test", "a command")
    parser.set_defaults(func=command)

    def not_handled(signum: int, frame: object) -> None:
        raise NotHandled

    previous = signal.signal(signal.SIGTERM, not_handled)
    try:
        assert run(parser, []) == 143
        assert signal.getsignal(signal.SIGTERM) is not_handled  # given back on leaving
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert cleaned == ["undone"]


@pytest.mark.parametrize("ending", ["error in the cleanup", "caught as Ctrl-C",
                                    "stdout gone"])
def test_run_says_143_however_the_command_ends_on_a_sigterm(
        ending: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A SIGTERM decides the exit status whether the command ends on its exception, on an
    error its cleanup meets (an undo that fails), on a KeyboardInterrupt a library made of
    it, or on a closed stdout: the error's 2 and the pipe's 0 were returned."""
    from journal.cli import entry_parser, run
    from journal.errors import JournalError

    def command(args: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            return 0
        except SystemExit:
            if ending == "caught as Ctrl-C":
                return 0  # a follow's normal end
            raise
        finally:
            if ending == "error in the cleanup":
                raise JournalError("the undo could not remove a file")  # noqa: B012
            if ending == "stdout gone":
                raise BrokenPipeError  # noqa: B012

    parser = entry_parser("journal-test", "a command")
    parser.set_defaults(func=command)
    assert run(parser, []) == 143
    capsys.readouterr()


def test_export_ended_by_sigterm_leaves_nothing_and_exits_143(tmp_path: Path) -> None:
    """A real `journal export -o FILE` process, stopped by SIGTERM with its temp written:
    the temp is removed, FILE never made, exit 143, no traceback."""
    from paused_cli import start

    from journal import Session

    with Session.create(str(tmp_path), cwd="/w") as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
        path = session.path
    out = tmp_path / "out"
    out.mkdir()
    child, temp = start(["export", path, "--format", "jsonl", "-o", str(out / "x.jsonl")])
    try:
        assert os.path.exists(temp)
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == 128 + signal.SIGTERM
        err = child.stderr.read() if child.stderr else ""
    finally:
        child.kill()
        child.wait()
    assert "Traceback" not in err
    assert os.listdir(out) == []


SLOW_READER = r"""
import os, sys, time

real = sys.stdout


class SlowToFlush:
    '''stdout whose first flush waits: a reader slow to take a command's last output.'''

    def __init__(self):
        self.waited = False

    def write(self, text):
        return real.write(text)

    def flush(self):
        if not self.waited:
            self.waited = True
            os.write(2, b"flushing\n")
            # in steps: a SIGTERM that comes after the write but before one long sleep's
            # system call starts would not cut that sleep short (Python runs its handler
            # between steps), and the test would wait out the whole sleep
            for _ in range(600):
                time.sleep(0.1)
        real.flush()

    def __getattr__(self, name):
        return getattr(real, name)


sys.stdout = SlowToFlush()
from journal.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("args", [["new", "{dir}"], ["new", "{dir}", "--json"]])
def test_a_sigterm_after_the_work_while_the_command_ends_exits_143(
        tmp_path: Path, args: list[str]) -> None:
    """The command has done its work (a session made) and flushes its output when SIGTERM
    comes: 143, as during the work, not killed by the signal."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_READER, *(a.format(dir=tmp_path) for a in args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(root)})
    try:
        assert child.stderr is not None
        assert child.stderr.readline() == b"flushing\n"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 143
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
