"""The bash tool's watcher (tools/groupwatch.py), run as the tool runs it: it kills the
process groups still named when the agent's pipe closes, and never a group whose number went
to another process since."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from processes import alive

import tools.groupwatch as groupwatch

WATCHER = str(Path(groupwatch.__file__))


def test_the_watcher_kills_the_groups_named_and_spares_a_number_given_to_another() -> None:
    ours = subprocess.Popen(["sleep", "30"], start_new_session=True)
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        watcher = subprocess.Popen([sys.executable, WATCHER, "--watch"],
                                   stdin=subprocess.PIPE, start_new_session=True)
        assert watcher.stdin is not None
        started = groupwatch.start_time(ours.pid)
        watcher.stdin.write(f"+{ours.pid} {started}\n".encode())
        # `other` stands for a process that was given a watched group's number later:
        # the start time recorded is not its own
        watcher.stdin.write(f"+{other.pid} 1\n".encode())
        watcher.stdin.close()  # the agent ended
        assert watcher.wait(10) == 0
        deadline = time.monotonic() + 5
        while alive(ours.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(ours.pid)
        assert alive(other.pid)
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
