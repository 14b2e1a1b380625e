"""kill -9 in the middle of appending: acknowledged entries survive, a torn tail is quarantined.

One helper process is started with `sys.executable`; for every round it forks a worker that
opens a session and appends in a loop, reporting each acknowledged id on the shared stdout pipe
after the append returned. The test SIGKILLs that worker at a random moment, then checks the
file: every acknowledged id is there, at most the last line is torn, reopening quarantines the
torn bytes exactly, and the next append lands on a clean line.

Set JOURNAL_CRASH_SEED to replay a run; the seed is printed, and is part of every failure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from journal import Durability, Session, load, read_quarantine

ROUNDS = 220
ROUNDS_PER_FILE = 5
REPO = Path(__file__).resolve().parents[1]

# The helper: reads one JSON command per line, forks a worker for it, reports when it is gone.
# Everything goes through os.write(1, ...) so that lines (all < PIPE_BUF) reach the pipe whole
# and nothing sits in a stdio buffer that a fork would duplicate.
HELPER = r'''
import base64
import json
import os
import random
import sys
import traceback

from journal import Durability, Session

FILLER = base64.b64encode(random.Random(7).randbytes(3 << 17)).decode()


def say(text):
    os.write(1, (text + "\n").encode())


def size_for(rnd):
    pick = rnd.random()
    if pick < 0.35:
        return rnd.randint(20, 2_000)
    if pick < 0.85:
        return rnd.randint(5_000, 50_000)
    return rnd.randint(60_000, 400_000)


def message(rnd, tag):
    size = size_for(rnd)
    start = rnd.randrange(0, len(FILLER) - size)
    return {"role": "user", "content": tag + ":" + FILLER[start:start + size], "timestamp": 0}


def work(cmd):
    rnd = random.Random(cmd["seed"])
    policy = Durability.always() if cmd["durability"] == "always" else Durability.never()
    session = Session.open(cmd["path"], durability=policy, lock_timeout=10)
    rec = session.recovered
    say("open %d %d %d %d" % (os.getpid(), len(rec), rec[0].offset if rec else -1,
                              len(rec[0].data) if rec else -1))
    seq = 0
    while True:
        seq += 1
        if rnd.random() < 0.2:
            n = rnd.randint(2, 5)
            group = [{"type": "message", "message": message(rnd, "%d.%d/%d" % (seq, k + 1, n))}
                     for k in range(n)]
            ids = session.append_many(group)
        else:
            ids = [session.append_message(message(rnd, str(seq)))]
        say("ack " + " ".join(ids))


for line in sys.stdin:
    cmd = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            work(cmd)
        except BaseException:
            say("error " + json.dumps(traceback.format_exc()))
        finally:
            os._exit(3)
    say("forked %d" % pid)
    _, status = os.waitpid(pid, 0)
    say("reaped %d %d" % (pid, status))
'''


class Helper:
    """The long-lived helper process and its line protocol."""

    def __init__(self, script: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=str(script.parent),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout
        self.worker: int | None = None  # the worker of the current round, until reaped

    def send(self, cmd: dict) -> None:
        self.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.stdin.flush()

    def read(self) -> list[str]:
        line = self.stdout.readline()
        if not line:
            raise AssertionError(f"helper exited (code {self.proc.poll()})")
        words = line.decode().split()
        if words and words[0] == "error":
            raise AssertionError("worker failed:\n" + json.loads(line.decode()[6:]))
        return words

    def close(self) -> None:
        if self.worker is not None:  # a round that failed half-way: stop its worker first
            try:
                os.kill(self.worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def tail_state(path: str) -> tuple[int, bytes]:
    """(offset just past the last newline, bytes after it) of the file as it is now."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = size
        while pos > 0:
            start = max(0, pos - (1 << 20))
            f.seek(start)
            block = f.read(pos - start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                end = start + nl + 1
                f.seek(end)
                return end, f.read(size - end)
            pos = start
        f.seek(0)
        return 0, f.read()


def check_after_kill(
    path: str, acked: set[str], before: list[str], why: str
) -> tuple[list[str], bool]:
    """The invariants that must hold right after a kill.

    Returns the entry ids in file order, and whether the last complete entry is a message of
    an `append_many` group that did not reach the file whole (an unacknowledged group torn by
    the kill after some of its lines).
    """
    snap = load(path)
    ids = [e["id"] for e in snap.entries]
    assert len(ids) == len(set(ids)), f"{why}: duplicate ids"
    missing = acked - set(ids)
    assert not missing, f"{why}: {len(missing)} acknowledged id(s) lost: {sorted(missing)[:5]}"
    assert ids[: len(before)] == before, f"{why}: entries present before the kill changed"
    for i, entry in enumerate(snap.entries):
        expected = snap.entries[i - 1]["id"] if i else None
        assert entry["parentId"] == expected, f"{why}: chain broken at entry {i}"
    end, fragment = tail_state(path)
    if fragment:
        assert [d.reason for d in snap.diagnostics] == ["torn_tail"], (
            f"{why}: diagnostics {[d.describe() for d in snap.diagnostics]}"
        )
        torn = snap.diagnostics[0]
        assert (torn.offset, torn.length) == (end, len(fragment)), f"{why}: torn range"
        assert snap.end == end and snap.size == end + len(fragment), f"{why}: end/size"
        # A tear cuts one commit short: what is left is the start of an entry line (which
        # may be shorter than the entry's opening bytes themselves).
        opening = b'{"type":"message"'
        assert fragment.startswith(opening) or opening.startswith(fragment), (
            f"{why}: fragment {fragment[:40]!r}"
        )
    else:
        assert snap.diagnostics == [], (
            f"{why}: diagnostics {[d.describe() for d in snap.diagnostics]}"
        )
        assert snap.end == snap.size
    partial = False
    if len(ids) > len(before):
        tag = snap.entries[-1]["message"]["content"].split(":", 1)[0]
        if "/" in tag:
            k, n = tag.split(".")[1].split("/")
            partial = k != n
    return ids, partial


def check_quarantined(path: str, offset: int, fragment: bytes, why: str) -> None:
    records = list(read_quarantine(path + ".quarantine"))
    assert records, f"{why}: no quarantine record"
    last = records[-1]
    assert last["reason"] == "torn_tail", why
    assert last["offset"] == offset, f"{why}: quarantined at {last['offset']}, torn at {offset}"
    assert last["data"] == fragment, f"{why}: quarantined bytes differ from the torn fragment"


def recover_in_parent(path: str, acked: set[str], why: str) -> list[str]:
    """Reopen (which must quarantine a torn tail), append once, and check the line is clean."""
    end, fragment = tail_state(path)
    before = load(path)
    with Session.open(path, lock_timeout=10, durability=Durability.always()) as s:
        if fragment:
            assert len(s.recovered) == 1, f"{why}: recovered {s.recovered}"
            rec = s.recovered[0]
            assert (rec.offset, rec.data) == (end, fragment), f"{why}: recovered range"
            check_quarantined(path, end, fragment, why)
            assert os.path.getsize(path) == end, f"{why}: torn tail not cut"
        else:
            assert s.recovered == [], f"{why}: recovered without a torn tail"
        new_id = s.append_message({"role": "user", "content": "after the crash", "timestamp": 0})
    acked.add(new_id)
    snap = load(path)
    assert snap.diagnostics == [], f"{why}: {[d.describe() for d in snap.diagnostics]}"
    ids = [e["id"] for e in snap.entries]
    assert ids == [e["id"] for e in before.entries] + [new_id], f"{why}: unexpected entries"
    assert snap.entries[-1]["message"]["content"] == "after the crash"
    expected_parent = before.entries[-1]["id"] if before.entries else None
    assert snap.entries[-1]["parentId"] == expected_parent, f"{why}: new entry's parent"
    return ids


@pytest.mark.slow
def test_kill_9_while_appending(tmp_path: Path) -> None:
    seed = int(os.environ.get("JOURNAL_CRASH_SEED", time.time_ns() % 1_000_000_007))
    rnd = random.Random(seed)
    script = tmp_path / "crash_helper.py"
    script.write_text(HELPER)
    helper = Helper(script)
    torn_seen = 0
    partial_groups = 0
    worker_recoveries = 0
    acks_total = 0
    path = ""
    acked: set[str] = set()
    ids: list[str] = []
    try:
        for round_no in range(ROUNDS):
            why = f"seed {seed}, round {round_no}"
            if round_no % ROUNDS_PER_FILE == 0:
                with Session.create(tmp_path / f"s{round_no}.jsonl", cwd=str(tmp_path)) as s:
                    path = s.path
                acked, ids = set(), []
            end, fragment = tail_state(path)
            if fragment and rnd.random() < 0.5:
                ids = recover_in_parent(path, acked, why)
                end, fragment = tail_state(path)

            helper.send({
                "path": path,
                "seed": rnd.getrandbits(32),
                "durability": "always" if rnd.random() < 0.2 else "never",
            })
            blind = rnd.random() < 0.15
            stop_after = 0 if blind else rnd.randint(1, 30)
            worker: int | None = None
            opened: list[str] | None = None
            seen = 0
            while worker is None or seen < stop_after:
                words = helper.read()
                if words[0] == "forked":
                    worker = helper.worker = int(words[1])
                elif words[0] == "open":
                    opened = words
                elif words[0] == "ack":
                    acked.update(words[1:])
                    seen += 1
                else:
                    raise AssertionError(f"{why}: unexpected {words}")
            if blind:
                # A kill at a random time after the fork: it may land while the worker is
                # still opening the file, that is while it recovers a torn tail.
                time.sleep(rnd.uniform(0, 0.004))
            else:
                time.sleep(rnd.choice([0, 0, rnd.uniform(0, 0.002)]))
            os.kill(worker, signal.SIGKILL)
            # Acks already in the pipe were acknowledged before the kill: they count.
            while True:
                words = helper.read()
                if words[0] == "ack":
                    acked.update(words[1:])
                    seen += 1
                elif words[0] == "open":
                    opened = words
                elif words[0] == "reaped":
                    assert int(words[1]) == worker, f"{why}: reaped {words[1]}, killed {worker}"
                    assert os.WIFSIGNALED(int(words[2])), f"{why}: worker ended {words[2]}"
                    assert os.WTERMSIG(int(words[2])) == signal.SIGKILL, why
                    helper.worker = None
                    break
                else:
                    raise AssertionError(f"{why}: unexpected {words}")
            acks_total += seen

            if opened is not None and fragment:
                # The worker reopened the file torn by the previous round: it must have
                # quarantined exactly that fragment before appending.
                worker_recoveries += 1
                assert opened[2:] == ["1", str(end), str(len(fragment))], f"{why}: {opened}"
                check_quarantined(path, end, fragment, why)
            elif opened is not None:
                assert opened[2] == "0", f"{why}: worker recovered from a clean file: {opened}"

            ids, partial = check_after_kill(path, acked, ids, why)
            if tail_state(path)[1]:
                torn_seen += 1
            partial_groups += partial
            if round_no % ROUNDS_PER_FILE == ROUNDS_PER_FILE - 1 or round_no == ROUNDS - 1:
                ids = recover_in_parent(path, acked, why)
    finally:
        helper.close()
    print(
        f"\nkill -9 rounds: {ROUNDS}, acknowledged appends: {acks_total}, "
        f"torn tails observed: {torn_seen}, recovered by the next worker: {worker_recoveries}, "
        f"append_many groups left partly in the file: {partial_groups}, seed {seed}"
    )
