"""`journal tail -f` as a real process against a real writer process, with the changes made
between two of its wake-ups: the tail is stopped (SIGSTOP) while the writer works and continued
(SIGCONT) after, so it sees all the changes at once, as a slow or busy reader would."""

from __future__ import annotations

import gzip
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from journal import Durability, Session
from journal.lineage import lineage

TAIL = "import sys; from journal.cli import tail_main; sys.exit(tail_main())"

TRUNCATE_THEN_APPEND = """
import os, sys
from journal import Durability, Session
path, keep, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.truncate(path, keep)
with Session.open(path, durability=Durability.never()) as s:
    for i in range(count):
        print(s.append_message({"role": "user", "content": f"new {i:04d}", "timestamp": 0}))
"""

ROTATE_TWICE = """
import sys
from journal import Durability, Session
path = sys.argv[1]
with Session.open(path, durability=Durability.never()) as s:
    for round in range(2):
        for i in range(3):
            kept = s.append_message({"role": "user", "content": "x" * 800, "timestamp": i})
        s.append_compaction(f"summary {round}", kept, 1000)
        result = s.rotate()
        assert result.rotated, result.reason
    for i in range(2):
        s.append_message({"role": "user", "content": f"after {i}", "timestamp": i})
    print(s.path)
"""


class Tail:
    """`journal tail -f --json` in its own process; its output lines arrive in a queue."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TAIL, "-f", "--json", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def take(self, count: int, timeout: float = 8.0) -> list[Any]:
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            try:
                got.append(orjson.loads(self.lines.get(timeout=max(0.01, deadline -
                                                                   time.monotonic()))))
            except queue.Empty:
                break
        return got

    def rest(self, settle: float = 0.5) -> list[Any]:
        time.sleep(settle)
        got = []
        while not self.lines.empty():
            got.append(orjson.loads(self.lines.get()))
        return got

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> str:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        finally:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""


@pytest.fixture
def tails():
    started: list[Tail] = []

    def start(*args: str) -> Tail:
        tail = Tail(*args)
        started.append(tail)
        return tail

    yield start
    for tail in started:
        if tail.proc.poll() is None:
            tail.close()


def run_writer(script: str, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", script, *args], check=True, timeout=60,
                          capture_output=True, text=True)
    return done.stdout.split()


def lineage_ids(live: str) -> list[str]:
    out = []
    for path in lineage(live):
        opener: Any = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            out += [orjson.loads(line)["id"] for line in f.read().splitlines()[1:]]
    return out


def new_session(folder: Path, count: int, size: int = 0) -> tuple[str, list[str]]:
    with Session.create(folder, cwd="/", durability=Durability.never()) as s:
        made = [s.append_message({"role": "user", "content": f"old {i:04d}" + "x" * size,
                                  "timestamp": 0}) for i in range(count)]
        return s.path, made


def test_truncation_then_appends_before_the_next_wake_up_are_delivered(tmp_path, tails):
    path, old = new_session(tmp_path, 5)
    tail = tails(path, "-n", "1")
    assert [e["id"] for e in tail.take(1)] == old[-1:]
    data = Path(path).read_bytes().splitlines(keepends=True)
    keep = sum(len(line) for line in data[:3])  # the header and two entries
    tail.pause()
    # the new lines are as long as the old ones: they land where the cut ones were
    new = run_writer(TRUNCATE_THEN_APPEND, path, str(keep), "3")
    tail.resume()
    got = [e["id"] for e in tail.take(3)] + [e["id"] for e in tail.rest()]
    assert got == new
    assert tail.proc.poll() is None


def test_two_rotations_between_wake_ups_are_followed_to_the_live_file(tmp_path, tails):
    path, old = new_session(tmp_path, 3, size=800)
    tail = tails(path, "-n", "1")
    assert [e["id"] for e in tail.take(1)] == old[-1:]
    tail.pause()
    live = run_writer(ROTATE_TWICE, path)[-1]
    tail.resume()
    expected = [i for i in dict.fromkeys(lineage_ids(live)) if i not in old]
    got = [e["id"] for e in tail.take(len(expected))] + [e["id"] for e in tail.rest()]
    assert len(lineage(live)) == 3 and live != path
    assert sorted(got) == sorted(expected) and len(got) == len(set(got))
    assert tail.proc.poll() is None, tail.close()


def test_two_rotations_between_wake_ups_in_directory_mode_repeat_nothing(tmp_path, tails):
    path, old = new_session(tmp_path, 3, size=800)
    tail = tails(str(tmp_path), "-n", "1")
    assert [e["entry"]["id"] for e in tail.take(1)] == old[-1:]
    tail.pause()
    live = run_writer(ROTATE_TWICE, path)[-1]
    tail.resume()
    expected = [i for i in dict.fromkeys(lineage_ids(live)) if i not in old]
    rows = tail.take(len(expected)) + tail.rest()
    got = [row["entry"]["id"] for row in rows]
    assert sorted(got) == sorted(expected) and len(got) == len(set(got))
    assert {row["path"] for row in rows if row["entry"]["id"] not in old} >= {live}
    assert tail.proc.poll() is None, tail.close()

