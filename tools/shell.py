"""The bash tool: run a shell command in the workspace with a timeout and an output cap.

The workspace is only the command's working directory: the command runs with the user's
rights and can reach anything the user can, unless the optional bubblewrap sandbox is on
(`tools.sandbox`), which leaves only the workspace writable. The description sent to the
model says which of the two holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import IO, Any

from tools.base import Tool, ToolResult
from tools.groupwatch import ended, watch
from tools.groupwatch import start as start_watcher
from tools.sandbox import require_sandbox, sandboxed
from tools.workspace import Workspace

DRAIN_GRACE_SECONDS = 2.0
"""How long to wait for the output pipe to close once the process group has been killed."""


_WHAT = (
    "Run a bash command with the workspace as the working directory. Returns stdout and "
    "stderr combined, and the exit code. Output is capped; when cut, the end is kept. "
    "The command and all its child processes are killed when the timeout (seconds, "
    "default 120) runs out. The call waits for anything still writing to its output, so "
    "start background processes with their output redirected "
    "(e.g. 'cmd > log.txt 2>&1 &'). "
)
_UNCONFINED = (
    "The command runs with the user's full rights: it is not confined to the workspace "
    "and can read, change or delete any file the user can, so do not touch files "
    "outside the workspace unless asked to."
)
_SANDBOXED = (
    "The command runs in a sandbox: only the workspace is writable, the rest of the "
    "file system is read-only, /tmp is private and empty at the start of each call, other "
    "processes are invisible, and the environment holds only PATH, HOME, LANG and TERM. "
    "The network is reachable."
)


class BashTool(Tool):
    name = "bash"
    description = _WHAT + _UNCONFINED
    input_schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The command to run."},
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": 86_400,
                "description": "Timeout in seconds. Default 120.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        workspace: Workspace,
        *,
        default_timeout: float = 120.0,
        max_output_chars: int = 50_000,
        shell: str = "bash",
        sandbox: bool = False,
    ) -> None:
        """With `sandbox`, commands run under bubblewrap (raises `SandboxUnavailable` if
        it cannot run here); without it, they run with the user's rights."""
        super().__init__(workspace)
        self.default_timeout = default_timeout
        self.max_output_chars = max_output_chars
        self.shell = shell
        if sandbox:
            require_sandbox()
        else:
            start_watcher()  # (bubblewrap ends its commands itself: --die-with-parent)
        self.sandbox = sandbox

    def schema(self) -> dict[str, Any]:
        schema = super().schema()
        if self.sandbox:
            schema["description"] = _WHAT + _SANDBOXED
        return schema

    def execute(self, args: dict[str, Any]) -> ToolResult:
        timeout = float(args.get("timeout", self.default_timeout))
        started = time.monotonic()
        # stdin is closed so a command waiting for input ends instead of hanging.
        argv = [self.shell, "-c", args["command"]]
        if self.sandbox:
            argv = sandboxed(argv, self.workspace.root)
        proc = subprocess.Popen(
            argv,
            cwd=self.workspace.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if not self.sandbox:  # (bubblewrap ends its commands itself: --die-with-parent)
            watch(proc.pid)  # ended too if this process is killed outright meanwhile
        assert proc.stdout is not None
        tail = _TailBuffer(self.max_output_chars * 4)
        reader = threading.Thread(target=tail.pump, args=(proc.stdout,), daemon=True)
        reader.start()
        timed_out = False
        try:
            timed_out = not _wait(proc, reader, started + timeout)
        finally:
            if timed_out or proc.poll() is None:
                _kill_group(proc.pid)
                proc.wait()
                reader.join(DRAIN_GRACE_SECONDS)
            if not self.sandbox:
                ended(proc.pid)
        duration = time.monotonic() - started

        text, total_bytes, cut = tail.text(self.max_output_chars)
        exit_code = proc.returncode
        details: dict[str, Any] = {
            "exit_code": exit_code,
            "timed_out": timed_out,
            "truncated": cut,
            "output_bytes": total_bytes,
            "duration_s": round(duration, 3),
        }
        parts = []
        if cut:
            parts.append(
                f"[cut: output was {total_bytes} bytes; showing the last {len(text)} characters]"
            )
        parts.append(text.rstrip("\n") if text else "(no output)")
        if timed_out:
            parts.append(f"[timed out after {timeout:g} s; the command's process group was killed]")
        elif exit_code != 0:
            parts.append(f"[exit code {_describe_exit(exit_code)}]")
        return ToolResult("\n".join(parts), is_error=timed_out or exit_code != 0, details=details)


def _wait(proc: subprocess.Popen[bytes], reader: threading.Thread, deadline: float) -> bool:
    """Wait for the command to exit and its output to close; False if the deadline passed.

    A background child that keeps the output pipe open counts as still running.
    """
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    reader.join(max(0.0, deadline - time.monotonic()))
    return not reader.is_alive()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _describe_exit(code: int) -> str:
    if code >= 0:
        return str(code)
    try:
        return f"{code} (killed by {signal.Signals(-code).name})"
    except ValueError:
        return str(code)


class _TailBuffer:
    """Keeps the last `limit` bytes of a stream and counts all of them."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self._total = 0
        self._lock = threading.Lock()

    def pump(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, 65536):
                with self._lock:
                    self._total += len(chunk)
                    self._data += chunk
                    if len(self._data) > self._limit:
                        del self._data[: len(self._data) - self._limit]
        finally:
            stream.close()

    def text(self, max_chars: int) -> tuple[str, int, bool]:
        """The kept output as text (at most `max_chars`), the total byte count, whether cut."""
        with self._lock:
            data = bytes(self._data)
            total = self._total
        dropped = total > len(data)
        if dropped:
            data = data.lstrip(bytes(range(0x80, 0xC0)))
        text = data.decode("utf-8", errors="replace")
        cut = dropped or len(text) > max_chars
        if len(text) > max_chars:
            text = text[-max_chars:]
        return text, total, cut
