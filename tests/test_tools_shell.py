"""Tests of the bash tool: exit codes, output cap, and killing the whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tools import BashTool, SandboxUnavailable, Workspace, sandbox_available


def _running(pid: int) -> bool:
    """Whether `pid` is a live process; a zombie waiting to be reaped counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in {"Z", "X"}


def _wait_gone(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.05)
    return not _running(pid)


def test_success_output_and_exit_code(ws: Workspace) -> None:
    result = BashTool(ws).run({"command": "echo hello; echo world"})
    assert not result.is_error
    assert result.content == "hello\nworld"
    assert result.details["exit_code"] == 0
    assert result.details["timed_out"] is False
    assert result.details["truncated"] is False


def test_failure_exit_code_and_stderr(ws: Workspace) -> None:
    result = BashTool(ws).run({"command": "echo out; echo err >&2; exit 7"})
    assert result.is_error
    assert result.details["exit_code"] == 7
    assert result.content == "out\nerr\n[exit code 7]"


def test_no_output(ws: Workspace) -> None:
    result = BashTool(ws).run({"command": "true"})
    assert result.content == "(no output)"
    assert result.details["output_bytes"] == 0


def test_runs_in_workspace_with_stdin_closed(ws: Workspace) -> None:
    (ws.root / "here.txt").write_text("")
    result = BashTool(ws).run({"command": "pwd; ls; cat; echo after-cat", "timeout": 10})
    assert result.content.splitlines() == [str(ws.root), "here.txt", "after-cat"]


def test_timeout_kills_the_whole_process_group(ws: Workspace) -> None:
    started = time.monotonic()
    result = BashTool(ws).run({"command": "sleep 30 & echo $!; sleep 30; wait", "timeout": 1})
    elapsed = time.monotonic() - started
    assert elapsed < 5
    assert result.is_error
    assert result.details["timed_out"] is True
    assert "timed out after 1 s" in result.content
    child = int(result.content.splitlines()[0])
    assert _wait_gone(child), f"background child {child} survived the timeout"


def test_background_child_holding_output_is_killed_at_timeout(ws: Workspace) -> None:
    started = time.monotonic()
    result = BashTool(ws).run({"command": "sleep 30 & echo $!; echo main done", "timeout": 1})
    assert time.monotonic() - started < 5
    assert result.details["timed_out"] is True
    assert "main done" in result.content
    assert _wait_gone(int(result.content.splitlines()[0]))


def test_background_child_with_redirected_output_does_not_block(ws: Workspace) -> None:
    result = BashTool(ws).run({"command": "sleep 30 > /dev/null 2>&1 & echo $!", "timeout": 10})
    child = int(result.content.splitlines()[0])
    try:
        assert result.details["timed_out"] is False
        assert result.details["duration_s"] < 5
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_default_timeout_applies(ws: Workspace) -> None:
    started = time.monotonic()
    result = BashTool(ws, default_timeout=0.5).run({"command": "sleep 30"})
    assert time.monotonic() - started < 5
    assert result.details["timed_out"] is True
    assert BashTool(ws).default_timeout == 120


def test_output_cap_keeps_the_tail(ws: Workspace) -> None:
    command = "for i in $(seq 1 5000); do echo line$i; done; echo LAST >&2; exit 3"
    result = BashTool(ws, max_output_chars=1000).run({"command": command})
    lines = result.content.splitlines()
    assert lines[0].startswith("[cut: output was ")
    assert result.details["truncated"] is True
    assert result.details["output_bytes"] > 1000 * 4
    assert "line1\n" not in result.content
    assert lines[-2:] == ["LAST", "[exit code 3]"]
    assert len(result.content) < 1200


def test_default_output_cap(ws: Workspace) -> None:
    result = BashTool(ws).run({"command": "head -c 300000 /dev/zero | tr '\\0' 'a'; echo END"})
    assert result.details["truncated"] is True
    assert result.details["output_bytes"] == 300_004
    assert result.content.endswith("aEND")
    assert len(result.content) < 50_200


def test_output_under_cap_is_whole(ws: Workspace) -> None:
    result = BashTool(ws, max_output_chars=1000).run({"command": "seq 1 100"})
    assert result.details["truncated"] is False
    assert result.content.splitlines() == [str(i) for i in range(1, 101)]


def test_killed_by_signal_is_reported(ws: Workspace) -> None:
    result = BashTool(ws).run({"command": "kill -TERM $$"})
    assert result.is_error
    assert result.details["exit_code"] == -signal.SIGTERM
    assert "SIGTERM" in result.content


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "missing required argument(s): command"),
        ({"command": ""}, "command must not be empty"),
        ({"command": "true", "timeout": 0}, "timeout must be > 0"),
        ({"command": "true", "timeout": "5"}, "timeout must be a number"),
    ],
)
def test_bad_arguments(ws: Workspace, args: dict[str, object], message: str) -> None:
    result = BashTool(ws).run(args)
    assert result.is_error
    assert message in result.content


def test_missing_shell_is_an_error_result(ws: Workspace) -> None:
    result = BashTool(ws, shell="no-such-shell-here").run({"command": "true"})
    assert result.is_error
    assert "No such file" in result.content


# --- what the shell may reach ---------------------------------------------------------------


def test_description_says_the_shell_runs_with_the_users_rights(ws: Workspace) -> None:
    description = BashTool(ws).schema()["description"]
    assert "runs with the user's full rights" in description
    assert "not confined to the workspace" in description


needs_bwrap = pytest.mark.skipif(
    not sandbox_available(), reason="bubblewrap (bwrap) is not installed or cannot run here"
)


@needs_bwrap
def test_sandboxed_shell_writes_only_the_workspace(ws: Workspace, outside: Path) -> None:
    tool = BashTool(ws, sandbox=True)
    result = tool.run(
        {
            "command": f"echo inside > in.txt; echo owned > {outside / 'secret.txt'}; "
            f"touch {outside / 'new.txt'}; echo tmp > /tmp/t; "
            "cat /tmp/t; pwd",
            "timeout": 20,
        }
    )
    assert (ws.root / "in.txt").read_text() == "inside\n"
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    refused = ("Read-only file system", "No such file or directory")  # /tmp is private too
    assert any(reason in result.content for reason in refused), result.content
    lines = result.content.splitlines()
    assert "tmp" in lines and str(ws.root) in lines
    assert "runs in a sandbox" in tool.schema()["description"]
    assert "full rights" not in tool.schema()["description"]


@needs_bwrap
def test_sandboxed_shell_timeout_still_kills_the_process_group(ws: Workspace) -> None:
    started = time.monotonic()
    marker = "31.4159"  # a sleep nothing else runs: found by its command line on the host
    result = BashTool(ws, sandbox=True).run(
        {"command": f"setsid sleep {marker} & sleep {marker}; wait", "timeout": 1}
    )
    assert time.monotonic() - started < 5
    assert result.details["timed_out"] is True
    deadline = time.monotonic() + 3
    while _running_with(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running_with(f"sleep\0{marker}"), "a sandboxed process outlived the timeout"


def _running_with(cmdline: str) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if cmdline.encode() in f.read():
                        return True
            except OSError:
                continue
    return False


@needs_bwrap
def test_sandboxed_shell_sees_no_host_process_no_secret_and_no_host_socket(
        ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_API_KEY", "sk-do-not-leak")
    outside = subprocess.Popen(["sleep", "30"])
    try:
        result = BashTool(ws, sandbox=True).run({
            "command": f"echo key=${{SECRET_API_KEY:-none}}; kill {outside.pid} "
                       "&& echo killed; ls /run | wc -l",
            "timeout": 20})
        assert "key=none" in result.content, result.content
        assert "killed" not in result.content and outside.poll() is None, result.content
        assert result.content.splitlines()[-1].strip() == "0", result.content
    finally:
        outside.kill()
        outside.wait()


def test_asking_for_a_missing_sandbox_is_a_clear_error(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    sandbox_available.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            BashTool(ws, sandbox=True)
        assert not BashTool(ws).sandbox
    finally:
        monkeypatch.undo()
        sandbox_available.cache_clear()
