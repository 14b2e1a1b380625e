"""Ends the shell tool's commands when the process that started them dies without ending them.

A command runs in a process group of its own (`start_new_session`), so that a timeout kills
everything it started; the same makes it outlive an agent killed outright (SIGKILL, the OOM
killer): nothing is left to kill the group. `watch(pgid)` hands the group to one watcher
process per agent process (this file run by its path: the standard library only), which
reads `+PGID STARTED` and `-PGID` lines from a pipe only the agent holds; when the pipe
closes (the agent ended, however) the watcher sends SIGKILL to every group still named
whose leader's number was not given since to another process. (A command is handed to the
watcher just after it starts: an agent killed in between leaves it running.)

    python groupwatch.py    (reads the lines on stdin)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["ended", "start", "start_time", "unwatch", "watch"]

_lock = threading.Lock()
_pipe: tuple[int, int] | None = None  # (pid of this process, write end) once started
_lingering: set[int] = set()  # groups whose command ended while others of theirs ran on


def start() -> None:
    """Start this process's watcher now (a shell tool does when it is made), so that handing
    it a command's group later is one write, not a process to start first."""
    with _lock:
        _writer()


def watch(pgid: int) -> None:
    """Have the group `pgid` (led by the process `pgid`, just started) killed if this
    process dies before `unwatch(pgid)`. Best effort: where no watcher can be started,
    nothing is watched."""
    _forget_ended()
    _send(f"+{pgid} {start_time(pgid)}\n")


def unwatch(pgid: int) -> None:
    """The group `pgid` was ended (or may go on): no longer the watcher's to kill."""
    _send(f"-{pgid}\n")


def ended(pgid: int) -> None:
    """The command that leads the group `pgid` ended: the group stays watched while
    anything it started runs on (`server &`: it may be wanted between commands, never
    after the agent), and is let go once nothing of it is left (looked at on every call;
    the watcher also checks, before it kills, that the number still names that group)."""
    with _lock:
        _lingering.add(pgid)
    _forget_ended()


def _forget_ended() -> None:
    with _lock:
        gone = {pgid for pgid in _lingering if not _alive(pgid)}
        _lingering.difference_update(gone)
    for pgid in gone:  # (before its number can go to another group)
        unwatch(pgid)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _send(line: str) -> None:
    with _lock:
        fd = _writer()
        if fd is None:
            return
        try:
            os.write(fd, line.encode())
        except OSError:
            pass


def _writer() -> int | None:
    """The pipe to this process's watcher, started on first use (again in a forked child)."""
    global _pipe
    if _pipe is not None and _pipe[0] == os.getpid():
        return _pipe[1]
    read_end, write_end = os.pipe()  # neither end is inherited by programs run later
    try:
        subprocess.Popen([sys.executable, str(Path(__file__)), "--watch"], stdin=read_end,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    _pipe = (os.getpid(), write_end)
    return write_end


def start_time(pid: int) -> str:
    """When the process `pid` started (clock ticks since boot, from /proc; "" if it is not
    there): with its pid, what tells it from a later process given the same number."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the agent's to handle
    groups: dict[int, str] = {}  # pgid: when its leader started
    for line in sys.stdin.buffer:
        fields = line[1:].split()
        if not fields or not fields[0].isdigit():
            continue
        pgid = int(fields[0])
        if line[:1] == b"+":
            groups[pgid] = fields[1].decode() if len(fields) > 1 else ""
        else:
            groups.pop(pgid, None)
    for pgid, started in groups.items():  # the agent is gone: so are the commands it left
        now = start_time(pgid)
        if now and started and now != started:
            continue  # the number went to another process since: not the group watched
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__" and sys.argv[1:] == ["--watch"]:
    _serve()
