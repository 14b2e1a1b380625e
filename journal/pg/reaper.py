"""Stops an embedded server whose owner ended without stopping it (`journal.pg.server`).

`EmbeddedServer.start` runs this file as a separate process (by its path, so it needs nothing
but the standard library), holding the read end of a pipe whose write end only the owner
has. The read returns when the owner closes its end: by `close()`, or by ending in any way,
SIGKILL included, since the kernel closes a dead process's files. Then, if the server still
runs, its postmaster is sent SIGQUIT (PostgreSQL's immediate shutdown: it ends its own
processes), and a folder the owner made for the server is removed, so a killed test or demo
leaves no `postgres -D` behind, and no data folder.

    python reaper.py DATA_FOLDER [FOLDER_TO_REMOVE]
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

WAIT = 30.0  # seconds the postmaster is given to end after SIGQUIT


def postmaster(data: str) -> int | None:
    """The pid of the postmaster running on `data`, from its postmaster.pid, if that process
    is alive and is that postmaster: `postgres -D <data>` (the file outlives a postmaster
    that was SIGKILLed, and its pid may have gone to any other process since)."""
    try:
        with open(os.path.join(data, "postmaster.pid"), "rb") as f:
            pid = int(f.readline())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    pairs = zip(argv, argv[1:], strict=False)
    ours = os.path.basename(argv[0]) == b"postgres" and any(
        flag == b"-D" and value == os.fsencode(data) for flag, value in pairs)
    return pid if ours else None


def reap(data: str, folder: str | None) -> None:
    pid = postmaster(data)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGQUIT)
        except OSError:
            pass
        deadline = time.monotonic() + WAIT
        while postmaster(data) == pid and time.monotonic() < deadline:
            time.sleep(0.05)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the owner's to handle
    data, folder = argv[0], (argv[1] if len(argv) > 1 else None)
    while sys.stdin.buffer.read(65536):
        pass  # the owner never writes: this waits for its end of the pipe to close
    reap(data, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
