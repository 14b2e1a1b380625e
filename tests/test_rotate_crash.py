"""Crash safety of rotation: a crash after any step loses nothing and is resolved on next use.

For every step in `journal.rotate.STEPS` a rotation is interrupted right after that step, once
by an exception from `step_hook` and once by a real SIGKILL of a child process. Afterwards
there must be exactly one authoritative live file that `resolve_live` finds, every entry of the
old file must still be on disk, the live context must be unchanged, and the next
`Session.open` must finish or undo the half-done rotation (no intent, no temp file, no second
live successor) and accept appends; a further `rotate()` must then behave normally.

Until the successor is published the old file stays authoritative; from then on the
successor is (it was verified before publishing), and recovery seals and archives the old file.

Properties that the current code is known to miss are listed in `KNOWN_GAPS`: the test then
checks everything else and reports an xfail naming them, and fails as soon as a listed gap no
longer shows (so the list is kept honest) or an unlisted property breaks.
"""

from __future__ import annotations

import gzip
import importlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from journal import Session, load
from journal.context import Context, build_context
from journal.errors import JournalError
from journal.lineage import ARCHIVE_DIR, INTENT_SUFFIX, lineage, resolve_live, seal_of
from journal.tree import Tree

# the attribute `journal.rotate` is the re-exported function, which shadows the module for
# `import journal.rotate as m`; take the module itself
rotate_mod = importlib.import_module("journal.rotation")
ROOT = Path(__file__).resolve().parents[1]
STEPS = rotate_mod.STEPS
PUBLISHED = STEPS.index("published")
CHILD_TIMEOUT = 30

# step -> names of checks known to fail there (see the module docstring)
KNOWN_GAPS: dict[str, set[str]] = {
    # the successor is renamed into place before the old file is sealed: until the next open
    # finishes the rotation (its intent file says so) the old file is still unsealed
    "published": {"one live file after the crash"},
}

CHILD_SCRIPT = """
import importlib, os, signal, sys

rotate_mod = importlib.import_module("journal.rotation")

path, crash_step = sys.argv[1], sys.argv[2]

def hook(name):
    print(name, flush=True)
    if name == crash_step:
        os.kill(os.getpid(), signal.SIGKILL)

rotate_mod.step_hook = hook
rotate_mod.rotate(path)
print("survived", flush=True)
"""


class InjectedCrash(Exception):
    """Raised by the step hook to interrupt a rotation in-process."""


# building a session


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(text: str, model: str = "m1") -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}],
            "provider": "anthropic", "model": model, "stopReason": "stop", "timestamp": 2}


def make_session(directory: Path) -> str:
    """A closed session with two compactions, labels, a name and an abandoned branch."""
    s = Session.create(directory, cwd="/proj")
    s.append_session_info("crash test")
    s.append_thinking_level_change("high")
    s.append_message(user("first " + "a" * 1500))
    s.append_message(assistant("ok"))
    for round_ in range(2):
        ids = [s.append_message(user(f"r{round_} q{i} " + "b" * 2500)) for i in range(5)]
        s.append_message(assistant(f"r{round_} done"))
        s.append_label_change(ids[3], f"kept {round_}")
        s.append_compaction(f"summary {round_}", ids[3], 10_000 * (round_ + 1))
    fork = s.append_message(user("a detour"))
    s.append_message(assistant("detour answer"))
    s.branch_with_summary(fork, "abandoned the detour")
    s.append_message(user("back on track"))
    s.append_message(assistant("final", model="m2"))
    path = s.path
    s.close()
    return path


# reading the directory


def context_of(path: str) -> Context:
    snap = load(path)
    tree = Tree(snap.entries)
    return build_context(tree, tree.leaf_id)


def read_bytes(path: str) -> bytes:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def entry_ids(path: str) -> set[str]:
    ids = set()
    for line in read_bytes(path).splitlines():
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line holds no entry; "no entry lost" then names what is missing
        if value.get("type") != "session":
            ids.add(value["id"])
    return ids


def session_files(directory: str) -> list[str]:
    """Session files directly in `directory` (no lock, intent, quarantine or temp files)."""
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(".jsonl") and not n.startswith("."))


def live_files(directory: str) -> list[str]:
    return [p for p in session_files(directory) if seal_of(p) is None]


def every_file(directory: str) -> list[str]:
    """All session files of the directory and its archive, compressed or not."""
    found = session_files(directory)
    archive = os.path.join(directory, ARCHIVE_DIR)
    if os.path.isdir(archive):
        found += sorted(os.path.join(archive, n) for n in os.listdir(archive)
                        if n.endswith((".jsonl", ".jsonl.gz")))
    return found


def leftovers(directory: str, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(suffix))


def where_old_is(old: str) -> str | None:
    """The old file, or its archived copy, whichever exists."""
    directory, name = os.path.split(old)
    for candidate in (old, os.path.join(directory, ARCHIVE_DIR, name),
                      os.path.join(directory, ARCHIVE_DIR, name + ".gz")):
        if os.path.exists(candidate):
            return candidate
    return None


# crashing


@contextmanager
def hooked(hook) -> Iterator[None]:
    previous = rotate_mod.step_hook
    rotate_mod.step_hook = hook
    try:
        yield
    finally:
        rotate_mod.step_hook = previous


def crash_by_exception(path: str, step: str) -> None:
    reached: list[str] = []

    def hook(name: str) -> None:
        reached.append(name)
        if name == step:
            raise InjectedCrash(name)

    with hooked(hook), pytest.raises(InjectedCrash):
        rotate_mod.rotate(path)
    assert reached == list(STEPS[: STEPS.index(step) + 1])


def crash_by_sigkill(path: str, step: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    child = subprocess.run([sys.executable, "-c", CHILD_SCRIPT, path, step], env=env,
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.split() == list(STEPS[: STEPS.index(step) + 1]), child.stderr


CRASHERS = {"exception": crash_by_exception, "sigkill": crash_by_sigkill}


class Checks:
    """Named checks that are collected rather than raised, so known gaps can be told apart."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}

    def __call__(self, name: str, ok: bool, detail: object = "") -> bool:
        if not ok:
            self.failed.setdefault(name, str(detail))
        return ok

    def conclude(self, known: set[str]) -> None:
        unexpected = {k: v for k, v in self.failed.items() if k not in known}
        assert not unexpected, f"failed checks: {unexpected}"
        fixed = known - set(self.failed)
        assert not fixed, f"known gaps no longer show, remove them from KNOWN_GAPS: {fixed}"
        if known:
            pytest.xfail(f"known gaps: {self.failed}")


# the test


@pytest.mark.parametrize("how", sorted(CRASHERS))
@pytest.mark.parametrize("step", STEPS)
def test_crash_after_step_is_finished_or_undone(tmp_path, step, how):
    directory = str(tmp_path / "sessions")
    old = make_session(Path(directory))
    old_bytes = read_bytes(old)
    old_ids = entry_ids(old)
    before = context_of(old)
    successor_wins = STEPS.index(step) >= PUBLISHED
    check = Checks()

    CRASHERS[how](old, step)

    # right after the crash, before anyone recovers
    others = [p for p in session_files(directory) if p != old]
    assert len(others) <= 1, f"more than one successor candidate: {others}"
    if successor_wins:
        assert others, "a sealed rotation must have published its successor"
        expected = others[0]
    else:
        expected = old
    live = live_files(directory)
    check("one live file after the crash", live == [expected], live)
    check("resolve_live leads to the live file", resolve_live(old)[0] == expected,
          resolve_live(old))
    holder = where_old_is(old)
    check("no entry lost after the crash",
          holder is not None and read_bytes(holder).startswith(old_bytes), holder)
    check("live context unchanged after the crash", context_of(expected).same_as(before))

    # the next open finishes or undoes the rotation and accepts appends
    with Session.open(old, lock_timeout=5) as session:
        check("open lands on the authoritative file", session.path == expected, session.path)
        check("open sees the same context", session.context().same_as(before))
        new_id = session.append_message(user("written after the crash"))
        live_now = session.path
    check("the appended entry is in the live file",
          load(live_now).entries[-1]["id"] == new_id)
    check("temp files removed by the next open", not leftovers(directory, ".rotate.tmp"),
          leftovers(directory, ".rotate.tmp"))
    check("no rotation intent left behind", not leftovers(directory, INTENT_SUFFIX),
          leftovers(directory, INTENT_SUFFIX))
    check("one live file after the next open", live_files(directory) == [expected],
          live_files(directory))
    if successor_wins:
        check("old file archived by the next open",
              not os.path.exists(old) and where_old_is(old) is not None, where_old_is(old))
        chain = lineage(expected)
        check("lineage reaches the archived old file",
              len(chain) == 2 and chain[0] == where_old_is(old), chain)
    else:
        check("the unused successor was removed", not others or not os.path.exists(others[0]))

    # a later rotation behaves normally: old file rotates again, a fresh successor does not
    context_now = context_of(live_now)
    result = rotate_mod.rotate(old)
    if successor_wins:
        check("rotate after recovery has nothing to do", not result.rotated and result.reason,
              result)
        final = live_now
    else:
        check("rotate after recovery rotates cleanly", result.rotated and result.successor
              and os.path.exists(result.successor), result)
        final = result.successor or live_now
    check("one live file after the next rotate", live_files(directory) == [final],
          live_files(directory))
    check("resolve_live leads to the final live file", resolve_live(old)[0] == final)
    check("final context is the context after the append",
          context_of(final).same_as(context_now))
    everything = set().union(*(entry_ids(p) for p in every_file(directory)))
    check("no entry lost in the end", old_ids | {new_id} <= everything,
          (old_ids | {new_id}) - everything)
    check("no rotation intent left behind", not leftovers(directory, INTENT_SUFFIX),
          "after the next rotate")

    check.conclude(KNOWN_GAPS.get(step, set()))


# related ways to lose entries around an interrupted rotation


def test_successor_opened_directly_after_crash_at_published_keeps_its_entries(tmp_path):
    directory = str(tmp_path / "sessions")
    old = make_session(Path(directory))
    crash_by_exception(old, "published")
    (successor,) = [p for p in session_files(directory) if p != old]
    with Session.open(successor, lock_timeout=5) as session:
        written_to = session.path
        new_id = session.append_message(user("written to the published successor"))
    with Session.open(old, lock_timeout=5) as session:
        live = session.path
    assert written_to != successor or new_id in entry_ids(live), (
        "an entry committed to a session file was deleted by rotation recovery")


@pytest.mark.parametrize("step", STEPS[STEPS.index("published"):])
def test_session_whose_rotation_failed_does_not_write_where_nobody_reads(tmp_path, step):
    directory = tmp_path / "sessions"
    path = make_session(directory)
    session = Session.open(path, lock_timeout=5)

    def hook(name: str) -> None:
        if name == step:
            raise InjectedCrash(name)

    try:
        with hooked(hook), pytest.raises(InjectedCrash):
            session.rotate()
        try:
            new_id = session.append_message(user("written after a failed rotation"))
        except JournalError:
            new_id = None  # refusing to write is fine; writing into the archive is not
    finally:
        session.close()
    with Session.open(path, lock_timeout=5) as reopened:
        live = reopened.path
    assert new_id is None or new_id in entry_ids(live)


# a rotation killed after its commit, before its retention


def journal_command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "journal.cli", *argv]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def killed_while_compressing(path: str, *options: str) -> None:
    """Run `journal rotate PATH OPTIONS` and SIGKILL it once it compresses the archive:
    after the rotation's commit (the lock released), before its retention."""
    archive = os.path.join(os.path.dirname(path), ARCHIVE_DIR)
    child = subprocess.Popen(journal_command("rotate", path, *options), env=child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT
        while not leftovers(archive, ".compress.tmp"):
            assert child.poll() is None, f"it ended before compressing: {child.communicate()}"
            assert time.monotonic() < deadline, "it never began compressing"
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=CHILD_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL


def test_keep_is_applied_by_a_rerun_after_a_rotation_killed_before_its_retention(
        tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    path = make_session(folder)
    for _ in range(2):  # two archives, kept: no --keep yet
        assert rotate_mod.rotate(path).rotated
        with Session.open(path) as s:
            s.append_message(user("more " + "c" * 3000))
            kept = s.append_message(user("kept"))
            s.append_compaction("again", kept, 1000)
    with Session.open(path) as s:  # long enough to be killed while it is compressed
        s.append_message(user("big " + os.urandom(6 << 20).hex()))
        kept = s.append_message(user("the kept part"))
        s.append_compaction("the big one", kept, 1000)
        before, expected = s.path, s.context()
    archive = os.path.join(folder, ARCHIVE_DIR)
    older = sorted(lineage(before)[:-1])

    killed_while_compressing(path, "--keep", "1")

    live = resolve_live(path)[0]
    assert live != before and context_of(live).same_as(expected)  # it had rotated
    newest = os.path.join(archive, os.path.basename(before))
    assert os.path.exists(newest)  # not compressed yet, and nothing removed:
    assert all(os.path.exists(p) for p in older)
    assert leftovers(archive, ".compress.tmp")

    dry = subprocess.run(journal_command("rotate", path, "--keep", "1", "--dry-run",
                                         "--json"), env=child_env(), capture_output=True,
                         text=True, timeout=CHILD_TIMEOUT)
    assert dry.returncode == 0, dry.stderr
    assert orjson.loads(dry.stdout)["removedArchives"] == []
    assert all(os.path.exists(p) for p in older)  # a dry run removes nothing

    again = subprocess.run(journal_command("rotate", path, "--keep", "1", "--json"),
                           env=child_env(), capture_output=True, text=True,
                           timeout=CHILD_TIMEOUT)
    assert again.returncode == 0, again.stderr
    result = orjson.loads(again.stdout)
    assert not result["rotated"]  # nothing more to rotate: what the killed one left is done
    assert sorted(result["removedArchives"]) == older
    assert sorted(os.listdir(archive)) == [os.path.basename(newest) + ".gz"]
    assert lineage(live) == [newest + ".gz", live]
    assert context_of(live).same_as(expected)

    # (the first file's archive is gone now: the live file is named from here on)
    done = subprocess.run(journal_command("rotate", live, "--keep", "1", "--json"),
                          env=child_env(), capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT)
    assert done.returncode == 0 and orjson.loads(done.stdout)["removedArchives"] == []
