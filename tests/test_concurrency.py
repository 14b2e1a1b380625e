"""Several processes writing one session: the writer lock serialises them, nothing is garbled.

Each writer is a real separate process (`sys.executable` running a small script with the repo
on PYTHONPATH). They append through the public API only, taking and releasing the lock many
times so that their commits interleave in the file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from journal import Durability, LockTimeout, Session, current_holder, load

REPO = Path(__file__).resolve().parents[1]
WRITERS = 4
PER_WRITER = 500

WRITER = r'''
import json
import os
import random
import sys
import time

from journal import Durability, Session


def appender(path, writer, count, seed):
    rnd = random.Random(seed)
    sys.stdin.readline()  # wait for "go", so that all writers start together
    done = 0
    opens = 0
    while done < count:
        group = min(count - done, rnd.randint(1, 20))
        with Session.open(path, lock_timeout=60, durability=Durability.never()) as s:
            opens += 1
            messages = [
                {"role": "user", "timestamp": done + k,
                 "content": "w%d-%d|" % (writer, done + k) + "x" * rnd.randint(10, 3000)}
                for k in range(group)
            ]
            if rnd.random() < 0.4:
                s.append_many([{"type": "message", "message": m} for m in messages])
            else:
                for m in messages:
                    s.append_message(m)
        done += group
        time.sleep(rnd.uniform(0, 0.01))
    print(json.dumps({"writer": writer, "done": done, "opens": opens}), flush=True)


def holder(path):
    s = Session.open(path, lock_timeout=10)
    print(json.dumps({"pid": os.getpid(), "held": True}), flush=True)
    sys.stdin.read()  # hold the lock until the parent closes our stdin (or kills us)
    s.close()


if sys.argv[1] == "append":
    appender(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
else:
    holder(sys.argv[2])
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "writer.py"
    path.write_text(WRITER)
    return path


def spawn(script: Path, *args: object) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def new_session(tmp_path: Path) -> str:
    with Session.create(tmp_path / "shared.jsonl", cwd=str(tmp_path)) as s:
        return s.path


def start_holder(script: Path, path: str) -> subprocess.Popen[str]:
    proc = spawn(script, "hold", path)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"holder exited with {proc.wait()}"
    assert json.loads(line) == {"pid": proc.pid, "held": True}
    return proc


@pytest.mark.slow
def test_four_processes_append_500_each(tmp_path: Path, script: Path) -> None:
    path = new_session(tmp_path)
    procs = [spawn(script, "append", path, w, PER_WRITER, 1000 + w) for w in range(WRITERS)]
    started = time.monotonic()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"writer failed with {proc.returncode}"
            reports.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    elapsed = time.monotonic() - started
    assert sorted(r["done"] for r in reports) == [PER_WRITER] * WRITERS

    # Every line is one whole JSON object: nothing interleaved inside a line.
    raw = Path(path).read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert len(lines) == 1 + WRITERS * PER_WRITER
    parsed = [orjson.loads(line) for line in lines]
    assert parsed[0]["type"] == "session"

    snap = load(path)
    assert snap.diagnostics == []
    assert snap.end == snap.size == len(raw)
    entries = snap.entries
    assert len(entries) == WRITERS * PER_WRITER
    ids = [e["id"] for e in entries]
    assert len(set(ids)) == len(ids), "duplicate ids"

    # Each (writer, index) exactly once, and each writer's entries in its own order.
    tags = [e["message"]["content"].split("|", 1)[0] for e in entries]
    expected = {f"w{w}-{i}" for w in range(WRITERS) for i in range(PER_WRITER)}
    assert len(tags) == len(set(tags)) and set(tags) == expected
    for w in range(WRITERS):
        mine = [int(t.split("-")[1]) for t in tags if t.startswith(f"w{w}-")]
        assert mine == list(range(PER_WRITER)), f"writer {w} out of order"

    # One writer at a time, each resuming from the leaf the previous one left: the parent chain
    # is a single line through the file. Two writers holding the lock at once would fork it.
    assert entries[0]["parentId"] is None
    seen: set[str] = set()
    for prev, entry in zip(entries, entries[1:], strict=False):
        seen.add(prev["id"])
        assert entry["parentId"] in seen, f"{entry['id']}: parent is not an earlier entry"
        assert entry["parentId"] == prev["id"], f"{entry['id']}: chain forks (two writers?)"

    writer_of = [t.split("-")[0] for t in tags]
    switches = sum(1 for a, b in zip(writer_of, writer_of[1:], strict=False) if a != b)
    opens = sum(r["opens"] for r in reports)
    print(
        f"\n{WRITERS} writers x {PER_WRITER}: {elapsed:.2f}s, {opens} lock acquisitions, "
        f"{switches} writer switches in the file"
    )
    assert switches >= WRITERS * 3, f"writers barely interleaved ({switches} switches)"


def test_lock_timeout_names_the_holder(tmp_path: Path, script: Path) -> None:
    path = new_session(tmp_path)
    proc = start_holder(script, path)
    try:
        assert (current_holder(path) or {}).get("pid") == proc.pid
        started = time.monotonic()
        with pytest.raises(LockTimeout) as info:
            Session.open(path, lock_timeout=0.3, durability=Durability.never())
        waited = time.monotonic() - started
        assert 0.25 <= waited < 5.0, f"waited {waited:.2f}s for a 0.3s timeout"
        err = info.value
        assert err.holder is not None and err.holder["pid"] == proc.pid
        assert f"pid {proc.pid}" in str(err)
        assert path in str(err)
        # The holder is untouched: the file still loads clean and the lock is still theirs.
        assert load(path).diagnostics == []
        assert (current_holder(path) or {}).get("pid") == proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    # Released properly by close(): the next writer gets it at once.
    assert current_holder(path) is None
    with Session.open(path, lock_timeout=2) as s:
        s.append_message({"role": "user", "content": "mine now", "timestamp": 0})
    assert [e["message"]["content"] for e in load(path).entries] == ["mine now"]


def test_lock_of_a_killed_holder_is_released_by_the_kernel(tmp_path: Path, script: Path) -> None:
    path = new_session(tmp_path)
    proc = start_holder(script, path)
    try:
        with pytest.raises(LockTimeout):
            Session.open(path, lock_timeout=0.1)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    started = time.monotonic()
    with Session.open(path, lock_timeout=5) as s:
        acquired = time.monotonic() - started
        assert (current_holder(path) or {}).get("pid") == os.getpid()
        new_id = s.append_message({"role": "user", "content": "after", "timestamp": 0})
    assert acquired < 1.0, f"took {acquired:.2f}s to take a dead holder's lock"
    snap = load(path)
    assert snap.diagnostics == [] and [e["id"] for e in snap.entries] == [new_id]
