"""One participant of the cross-process race test (tests/test_races.py), run as a script.

    python tests/race_worker.py ROLE PATH DEADLINE SEED GENERATION CHAOS

ROLE is `appender`, `rotator`, `repairer` or `reader`; PATH the session file to start from
(each role follows rotations from there); DEADLINE a `time.time()` value after which the
worker stops by itself; GENERATION counts the restarts of this role. Only the public API of
`journal` is used, plus rotation's `step_hook` test seam.

With CHAOS set to 1 the worker also invites crashes where a random SIGKILL seldom lands: the
appender takes a while between a tool call and its result, and sometimes writes results of a
megabyte (a kill may then tear the write, or leave the call without its result), a
rotator sometimes SIGKILLs itself at a random step of a rotation, and the repairer sometimes
SIGKILLs itself right before or after one of the renames that publish a repair.

Events are written to stdout, one line each, with a single `os.write` (the test points stdout
at a file, so a SIGKILL never leaves half an event behind an acknowledgement):

    start <pid>                      the worker runs
    path <file>                      the appender opened <file> (the live session)
    ack <id> [<id> ...]              the appender's append returned these ids (acknowledged)
    rot <old> <successor>            a rotation by this worker succeeded
    norot                            a rotation attempt found nothing to rotate
    repair <file> <changed> <json>   a repair ran; <json> lists the problems it fixed
    snap <n>                         the reader checked n snapshots in all (its last event)
    bad <kind> <json>                the reader found an inconsistent snapshot
    suicide                          a chaos worker SIGKILLs itself now
    exc <name> <json>                an exception (name, plus ":gone" for a NotASession about a
                                     path that no longer exists); <json> is the traceback
    end                              the worker stopped by itself at the deadline
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from journal import (
    Durability,
    JournalError,
    NotASession,
    RotationPolicy,
    Session,
    View,
    lineage,
    load,
    repair,
    resolve_live,
    rotate,
    rotation,
)
from journal.tree import Tree
from journal.validate import pairing_problems

FILLER = "".join(random.Random(11).choice("abcdefghij klmnop") for _ in range(8192))
# Seconds between compactions on average: every compaction lets the next rotation succeed, and
# `journal.lineage` follows at most 64 files back, so a default run must stay under that.
COMPACTION_EVERY = 0.3


def say(*words: str) -> None:
    os.write(1, (" ".join(words) + "\n").encode())


def report_exception(error: BaseException, path: str) -> None:
    name = type(error).__name__
    if isinstance(error, NotASession) and not os.path.exists(path):
        name += ":gone"
    say("exc", name, json.dumps("".join(traceback.format_exception(error))))


def text(rnd: random.Random, tag: str, low: int, high: int) -> str:
    size = rnd.randint(low, high)
    start = rnd.randrange(0, len(FILLER) - size)
    return f"{tag} {FILLER[start:start + size]}"


def now_ms() -> int:
    return int(time.time() * 1000)


class Appender:
    """Writes turns (a user message, tool rounds, an answer) and, now and then, a compaction.

    A tool round (an assistant message with its calls, then their results) is written while
    the session stays open, and compactions keep whole turns, so the history is valid whenever
    the lock is free: a repair must never find anything to change while no process is killed.
    """

    def __init__(self, path: str, rnd: random.Random, generation: int, chaos: bool) -> None:
        self.path = path
        self.rnd = rnd
        self.chaos = chaos
        self.tag = f"g{generation}p{os.getpid()}"
        self.turn = 0
        self.turn_users: list[str] = []
        self.steps: list[Callable[[Session], None]] = []
        self.next_compaction = 0.0

    def plan_turn(self) -> None:
        self.turn += 1
        self.steps.append(self.user)
        for k in range(self.rnd.choice((0, 0, 1, 1, 2))):
            self.steps.append(functools.partial(self.tool_round, k=k))
        self.steps.append(self.answer)
        if len(self.turn_users) >= 3 and time.time() >= self.next_compaction:
            self.next_compaction = time.time() + self.rnd.uniform(0.5, 2) * COMPACTION_EVERY
            self.steps.append(self.compaction)

    def acked(self, *ids: str) -> None:
        say("ack", *ids)

    def user(self, s: Session) -> None:
        message = {"role": "user", "timestamp": now_ms(),
                   "content": [{"type": "text", "text": text(self.rnd, f"{self.tag} t{self.turn}",
                                                             100, 2500)}]}
        entry_id = s.append_message(message)
        self.turn_users.append(entry_id)
        self.acked(entry_id)

    def tool_round(self, s: Session, k: int) -> None:
        calls = [f"call_{self.tag}_{self.turn}_{k}_{n}" for n in range(self.rnd.randint(1, 3))]
        assistant = {
            "role": "assistant", "provider": "anthropic", "model": "race-model",
            "api": "anthropic-messages", "stopReason": "toolUse", "timestamp": now_ms(),
            "content": [{"type": "text", "text": f"round {k}"}, *[
                {"type": "toolCall", "id": c, "name": "bash", "arguments": {"command": "ls"}}
                for c in calls]],
        }
        results = [{"role": "toolResult", "toolCallId": c, "toolName": "bash", "isError": False,
                    "timestamp": now_ms(), "content": [{"type": "text", "text": self.output(c)}]}
                   for c in calls]
        self.acked(s.append_message(assistant))
        if self.chaos:
            time.sleep(self.rnd.uniform(0, 0.03))  # the tool runs: a kill now leaves the call open
        self.acked(*s.append_many([{"type": "message", "message": m} for m in results]))

    def output(self, call: str) -> str:
        if self.chaos and self.rnd.random() < 0.05:
            return text(self.rnd, call, 4000, 8000) * self.rnd.randint(40, 200)
        return text(self.rnd, call, 50, 4000)

    def answer(self, s: Session) -> None:
        message = {"role": "assistant", "provider": "anthropic", "model": "race-model",
                   "api": "anthropic-messages", "stopReason": "stop", "timestamp": now_ms(),
                   "content": [{"type": "text", "text": text(self.rnd, "answer", 20, 800)}]}
        self.acked(s.append_message(message))

    def compaction(self, s: Session) -> None:
        kept = self.turn_users[-self.rnd.randint(1, 2)]
        if self.rnd.random() < 0.3:
            # The writer rotates by itself too, racing the rotators that go by path.
            s.rotation_policy = RotationPolicy()
        before = s.path
        entry_id = s.append_compaction(f"summary of turn {self.turn}", kept, 1000 * self.turn)
        s.rotation_policy = None
        self.acked(entry_id)
        if s.path != before:
            say("rot", before, s.path)

    def run(self, deadline: float) -> None:
        while True:
            if not self.steps:
                if time.time() >= deadline:
                    return
                self.plan_turn()
            try:
                with Session.open(self.path, lock_timeout=10,
                                  durability=Durability.never()) as s:
                    self.path = s.path
                    say("path", s.path)
                    for _ in range(self.rnd.randint(1, 6)):
                        if not self.steps:
                            break
                        self.steps.pop(0)(s)
                    self.path = s.path
            except JournalError as e:
                report_exception(e, self.path)
            time.sleep(self.rnd.uniform(0, 0.02))


def die() -> None:
    say("suicide")
    os.kill(os.getpid(), signal.SIGKILL)


def die_at(fatal: str) -> Callable[[str], None]:
    def hook(step: str) -> None:
        if step == fatal:
            die()

    return hook


def rotator(path: str, deadline: float, rnd: random.Random, chaos: bool) -> None:
    while time.time() < deadline:
        rotation.step_hook = None
        if chaos and rnd.random() < 0.15:
            rotation.step_hook = die_at(rnd.choice(rotation.STEPS))
        try:
            result = rotate(path, lock_timeout=3)
        except Exception as e:  # every error is reported; the test decides which are allowed
            report_exception(e, path)
        else:
            if result.rotated and result.successor:
                say("rot", result.path, result.successor)
                path = result.successor
            else:
                say("norot")
        time.sleep(rnd.uniform(0.002, 0.03))


def crash_around_renames(rnd: random.Random) -> None:
    """Make every rename of this process a possible crash point, before or after it."""
    for name in ("replace", "rename"):
        real = getattr(os, name)

        def renaming(src: Any, dst: Any, *args: Any, real: Any = real, **kw: Any) -> None:
            if rnd.random() < 0.2:
                die()
            real(src, dst, *args, **kw)
            if rnd.random() < 0.2:
                die()

        setattr(os, name, renaming)


def repairer(path: str, deadline: float, rnd: random.Random, chaos: bool) -> None:
    if chaos:
        crash_around_renames(rnd)
    while time.time() < deadline:
        try:
            path = resolve_live(path)[0]
            report = repair(path, lock_timeout=3)
        except Exception as e:
            report_exception(e, path)
        else:
            problems = [p.to_json() for p in report.problems]
            say("repair", path, "1" if report.changed else "0", json.dumps(problems))
        time.sleep(rnd.uniform(0.005, 0.04))


def snapshot_problems(path: str, previous: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """What is inconsistent in one look at the live file, its view and its lineage, as
    (kind, detail) pairs; also the lineage seen."""
    bad: list[tuple[str, str]] = []
    name = os.path.basename(path)
    snap = load(path)
    for d in snap.diagnostics:
        if d.reason != "torn_tail" or d.offset != snap.end:
            bad.append(("load_diagnostic", f"{name}: {d.describe()}"))
    if snap.header is None:
        bad.append(("load_no_header", name))
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    bad += [("tree_issue", f"{name}: {i.to_json()}") for i in tree.issues]
    view = View.open(path, full=True)
    bad += [("view_diagnostic", f"{name}: {d.describe()}") for d in view.diagnostics
            if d.reason != "torn_tail"]
    bad += [("view_context_pairing", f"{name}: {p}")
            for p in pairing_problems(view.context().messages)]
    files = lineage(path)
    if len(files) < len(previous):
        # Files are never deleted here (no retention): a shorter lineage lost some.
        shown = [os.path.basename(f) for f in files]
        bad.append(("lineage_shrank", f"lineage({name}) gave {len(files)} file(s) {shown}, "
                    f"after {len(previous)} before (last of those: "
                    f"{os.path.basename(previous[-1])})"))
    return bad, files


def reader(path: str, deadline: float, rnd: random.Random) -> None:
    count = 0
    files: list[str] = []
    while time.time() < deadline:
        try:
            path = resolve_live(path)[0]
            bad, seen = snapshot_problems(path, files)
            files = seen if len(seen) >= len(files) else files
        except Exception as e:
            report_exception(e, path)
        else:
            count += 1
            for kind, detail in bad:
                say("bad", kind, json.dumps(detail))
        time.sleep(rnd.uniform(0, 0.01))
    say("snap", str(count))


def main(argv: list[str]) -> None:
    role, path, deadline, seed = argv[0], argv[1], float(argv[2]), int(argv[3])
    generation, chaos = int(argv[4]), argv[5] == "1"
    rnd = random.Random(seed)
    say("start", str(os.getpid()))
    workers: dict[str, Any] = {
        "appender": lambda: Appender(path, rnd, generation, chaos).run(deadline),
        "rotator": lambda: rotator(path, deadline, rnd, chaos),
        "repairer": lambda: repairer(path, deadline, rnd, chaos),
        "reader": lambda: reader(path, deadline, rnd),
    }
    try:
        workers[role]()
    except BaseException as e:
        report_exception(e, path)
        raise
    say("end")


if __name__ == "__main__":
    main(sys.argv[1:])
