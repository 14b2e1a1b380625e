"""Ends the shell tool's commands when the process that started them dies without ending them.

A command runs in a process group of its own (`start_new_session`), so that a timeout kills
everything it started; the same makes it outlive an agent killed outright (SIGKILL, the OOM
killer): nothing is left to kill the group. `watch(pgid)` hands the group to one watcher
process per agent process (this file run by its path: the standard library only), which
reads `+PGID` and `-PGID` lines from a pipe only the agent holds; when the pipe closes
without the agent having said `-PGID` (it died), the watcher sends SIGKILL to every group
still named.

    python groupwatch.py    (reads the lines on stdin)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["ended", "unwatch", "watch"]

_lock = threading.Lock()
_pipe: tuple[int, int] | None = None  # (pid of this process, write end) once started
_lingering: set[int] = set()  # groups whose command ended while others of theirs ran on


def watch(pgid: int) -> None:
    """Have the group `pgid` killed if this process dies before `unwatch(pgid)`. Best
    effort: where no watcher can be started, nothing is watched."""
    _forget_ended()
    _send(f"+{pgid}\n")


def unwatch(pgid: int) -> None:
    """The group `pgid` was ended (or may go on): no longer the watcher's to kill."""
    _send(f"-{pgid}\n")


def ended(pgid: int) -> None:
    """The command that leads the group `pgid` ended: the group stays watched while
    anything it started runs on (`server &`: it may be wanted between commands, never
    after the agent), and is let go once nothing of it is left (looked at on every call)."""
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


def _serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the agent's to handle
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        sign, number = line[:1], line[1:].strip()
        if number.isdigit():
            (groups.add if sign == b"+" else groups.discard)(int(number))
    for pgid in groups:  # the agent is gone: so are the commands it left running
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__" and sys.argv[1:] == ["--watch"]:
    _serve()
