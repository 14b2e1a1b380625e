"""A real `journal` command in a child process, held still at a chosen moment for a signal.

`start(args, pause_at=N)` runs `journal.cli.main(args)` in a new Python process in which the
N-th file the command publishes (`journal.publish.NewFile`) stops just before it is
published: its bytes are in the temp, synced, and the files published before it are in place
(with `published=True`, just after it is published, before `publish()` returns). The child
prints `paused <temp path>` on stdout and sleeps; the test then sends it SIGTERM or SIGKILL,
or, started with `resumable=True`, lets it go on with `resume(child)`.
Everything else is the command as installed: its own signal handling, its cleanup.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import os, sys, time
from journal import publish

step = "publish" if sys.argv[2].startswith("after") else "sync"
real, count = getattr(publish.NewFile, step), [0]

def paused(self, *args, **kwargs):
    done = real(self, *args, **kwargs)
    count[0] += 1
    if count[0] == int(sys.argv[1]):
        os.write(1, f"paused {self.path}\\n".encode())
        if sys.argv[2].endswith("+resume"):
            sys.stdin.readline()  # the test's resume(), or its end closing the pipe
        else:  # in steps: a SIGTERM just before one long sleep began would not end it
            for _ in range(1200):
                time.sleep(0.1)
    return done

setattr(publish.NewFile, step, paused)
from journal.cli import main
sys.exit(main(sys.argv[3:]))
"""


def start(args: list[str], *, pause_at: int = 1, published: bool = False,
          resumable: bool = False) -> tuple[subprocess.Popen[str], str]:
    """The child running `journal ARGS`, and the temp it paused at (a failed child's stderr
    in the AssertionError)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(pause_at),
                              ("after" if published else "before")
                              + ("+resume" if resumable else ""), *args],
                             stdin=subprocess.PIPE if resumable else None,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line.startswith("paused "):
        child.kill()
        _, err = child.communicate()
        raise AssertionError(f"the command did not pause: {line!r} {err}")
    return child, line.split(" ", 1)[1].rstrip("\n")


def resume(child: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """Let a child started with `resumable=True` go on; its exit status, stdout, stderr."""
    out, err = child.communicate("\n", timeout=timeout)
    return child.returncode, out, err
