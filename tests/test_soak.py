"""The soak test of the agent wing (issue 17): a 2,000-turn run, killed half way and resumed.

`tests/soak_worker.py` runs the real runner with `AnthropicModel` (and a fallback model, and
`AnthropicSummarizer`) over one mock transport that scripts the API: tool calls, final
replies, and failures injected by request number (overflows, 529 overloads some of which
outlast the SDK's retry, summarizer 500s). Every request body is checked with
`journal.validate.api_pairing_problems` as it arrives. The session rotates as it grows.

This test runs the worker as a process, queues steering and follow-up messages into the
session from outside while it works, SIGKILLs it past 1,000 turns, queues more while it is
dead, runs a second worker on the same session to 2,000 turns, and then checks, over every
file of the lineage: zero invalid requests, zero requests identical to one that just
overflowed, every queued message delivered exactly once, every injected failure kind seen.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import journal
from agent.steering import FOLLOW_UP, FOLLOW_UP_TYPE, STEER, STEER_TYPE, queue_message
from journal import Session
from journal.validate import pairing_problems

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("soak_worker.py")
TURNS = 2_000
KILL_AT = 1_000


def entries_of(path: str) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class Phase:
    """One worker process: its output lines are read as they come and tallied."""

    def __init__(self, path: str, report: Path, seed: int, tmp: Path) -> None:
        env = {**os.environ, "HOME": str(tmp), "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), path, str(TURNS), str(report), str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True)
        self.events: Counter[str] = Counter()
        self.turns = 0

    def lines(self) -> Any:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            word, _, number = line.strip().partition(" ")
            if word == "turns":
                self.turns = int(number)
            else:
                self.events[word] += 1
            yield self.turns


@pytest.mark.slow
def test_soak_2000_turns_with_failures_steering_and_a_sigkill(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Session.create(str(tmp_path / "sessions"), cwd=str(workspace)) as session:
        path = session.path
    queued: list[str] = []

    def queue(turn: int, kind: str) -> None:
        queued.append(queue_message(path, f"{kind} message at turn {turn}", kind))

    # phase 1: queue from outside while it works, kill it past KILL_AT turns
    first = Phase(path, tmp_path / "first.json", 1, tmp_path)
    seen = -1
    for turns in first.lines():
        if turns != seen and turns % 41 == 0:
            queue(turns, STEER)
        if turns != seen and turns % 113 == 0:
            queue(turns, FOLLOW_UP)
        seen = turns
        if turns >= KILL_AT:
            os.kill(first.process.pid, signal.SIGKILL)
            break
    first.process.wait(30)
    assert first.process.returncode == -signal.SIGKILL
    assert not (tmp_path / "first.json").exists()
    queue(-1, STEER)  # while no agent works: the next run takes them in
    queue(-1, FOLLOW_UP)

    # phase 2: resume on the same session, queueing from another thread until near the end
    second = Phase(path, tmp_path / "second.json", 2, tmp_path)
    stop_queueing = threading.Event()
    seen = -1
    for turns in second.lines():
        if not stop_queueing.is_set() and turns != seen and turns % 53 == 0:
            queue(turns, STEER if turns % 2 else FOLLOW_UP)
        if turns >= TURNS - 300:
            stop_queueing.set()
        seen = turns
    assert second.process.wait(60) == 0
    report = json.loads((tmp_path / "second.json").read_text())

    events = first.events + second.events
    assert events["invalid"] == 0 and report["invalid"] == 0
    assert events["identical"] == 0 and report["identical_after_overflow"] == 0
    # every kind of trouble happened, more than once
    assert events["overflow"] > 5 and events["overload"] > 5
    assert events["model_change"] > 2 and events["summarizer_failure"] > 2
    assert report["compactions"] > 5

    # the whole lineage, each entry once (a successor repeats its predecessor's kept part)
    files = journal.lineage(path)
    assert len(files) > 2, "the session never rotated"
    unique: dict[str, dict[str, Any]] = {}
    for file in files:
        for entry in entries_of(file):
            if entry.get("type") != "session":
                unique.setdefault(entry["id"], entry)
    replies = [e for e in unique.values() if e.get("type") == "message"
               and e["message"]["role"] == "assistant"
               and e["message"].get("stopReason") not in ("error", "aborted")]
    assert len(replies) >= TURNS
    changes = [e["modelId"] for e in unique.values() if e.get("type") == "model_change"]
    assert "claude-haiku-4-5" in changes and "claude-sonnet-4-6" in changes
    deliveries = Counter(e["details"]["queueId"] for e in unique.values()
                         if e.get("type") == "custom_message"
                         and e.get("customType") in (STEER_TYPE, FOLLOW_UP_TYPE))
    assert len(queued) > 30
    assert sorted(deliveries) == sorted(queued), "a queued message was lost or invented"
    assert set(deliveries.values()) == {1}, "a queued message was delivered twice"
    live = journal.resolve_live(path)[0]
    assert journal.load(live).diagnostics == []
    # every inbox was emptied; those of files that rotated away are gone
    inboxes = list(Path(live).parent.glob("*.inbox"))
    assert all(os.listdir(p) == [] for p in inboxes)
    assert {str(p) for p in inboxes} <= {live + ".inbox"}
    with Session.open(live) as session:
        assert pairing_problems(session.context().messages) == []
