"""Live tail: real writers (a subprocess, or the rotation and repair protocols done by hand)
against a real follower running in a thread, plus the `journal tail` command line."""

from __future__ import annotations

import asyncio
import gzip
import io
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import watchfiles

from journal import Durability, Session, load
from journal.cli import TailPrinter, tail_main
from journal.cli.tail import format_entry
from journal.tail import TailEvent, afollow, follow, follow_events

WRITER = """
import sys
from journal import Durability, Session, load
path, count = sys.argv[1], int(sys.argv[2])
with Session.open(path, durability=Durability.never()) as session:
    for i in range(count):
        session.append_message({"role": "user", "content": f"msg {i}", "timestamp": i})
"""


# helpers


def header(session_id: str = "s-1", parent: str | None = None) -> dict[str, Any]:
    h: dict[str, Any] = {"type": "session", "version": 3, "id": session_id,
                         "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
    if parent is not None:
        h["parentSession"] = parent
    return h


def chain(prefix: str, count: int, parent: str | None = None) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        entry_id = f"{prefix}{i:07x}"[:8]
        out.append({"type": "message", "id": entry_id, "parentId": parent,
                    "timestamp": "2026-01-01T00:00:01.000Z",
                    "message": {"role": "user", "content": f"{prefix} {i}", "timestamp": 0}})
        parent = entry_id
    return out


def marker(successor: str, session_id: str | None, parent: str) -> dict[str, Any]:
    data: dict[str, Any] = {"successor": successor, "file": os.path.basename(successor)}
    if session_id is not None:
        data["sessionId"] = session_id
    return {"type": "custom", "customType": "journal.successor", "data": data,
            "id": "feedf00d", "parentId": parent, "timestamp": "2026-01-01T00:00:02.000Z"}


def lines(values: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(v) + b"\n" for v in values)


def append(path: Path, values: list[dict[str, Any]] | bytes) -> None:
    data = values if isinstance(values, bytes) else lines(values)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def write_atomically(path: Path, values: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(lines(values))
    os.replace(tmp, path)


def ids(values: list[dict[str, Any]]) -> list[str]:
    return [v["id"] for v in values]


class Follower:
    """follow_events running in a thread, collecting what it yields."""

    def __init__(self, path: Path, **options: Any) -> None:
        self.stop = threading.Event()
        self.events: list[TailEvent] = []
        self.error: BaseException | None = None
        self.finished = False
        self._cond = threading.Condition()
        options.setdefault("timeout", 0.2)
        self._thread = threading.Thread(target=self._run, args=(path, options), daemon=True)
        self._thread.start()

    def _run(self, path: Path, options: dict[str, Any]) -> None:
        try:
            for event in follow_events(path, stop=self.stop, **options):
                with self._cond:
                    self.events.append(event)
                    self._cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            with self._cond:
                self.finished = True
                self._cond.notify_all()

    def entries(self) -> list[dict[str, Any]]:
        return [e.entry for e in self.events if e.kind == "entry" and e.entry is not None]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events if e.kind != "entry"]

    def wait(self, predicate: Any, timeout: float = 10.0) -> None:
        with self._cond:
            self._cond.wait_for(lambda: predicate() or self.finished, timeout)
        assert self.error is None, self.error
        assert predicate(), (self.kinds(), ids(self.entries()))

    def wait_entries(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        self.wait(lambda: len(self.entries()) >= count, timeout)
        return self.entries()

    def settle(self, seconds: float = 0.4) -> None:
        """Give a wrong extra delivery the chance to show up."""
        time.sleep(seconds)

    def close(self) -> None:
        self.stop.set()
        self._thread.join(5)
        assert not self._thread.is_alive()


@pytest.fixture
def followers():
    started: list[Follower] = []

    def start(path: Path, **options: Any) -> Follower:
        f = Follower(path, **options)
        started.append(f)
        return f

    yield start
    for f in started:
        f.close()


@pytest.fixture
def session_file(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    path = tmp_path / "a.jsonl"
    entries = chain("e", 5)
    path.write_bytes(lines([header(), *entries]))
    return path, entries


# follow


def test_burst_from_a_writer_process_arrives_once_each_in_order(tmp_path, followers):
    with Session.create(tmp_path / "burst.jsonl", cwd="/", durability=Durability.never()) as s:
        path = Path(s.path)
    f = followers(path, from_start=True)
    count = 10_000
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(count)], check=True,
                   timeout=60)
    got = f.wait_entries(count, timeout=30)
    f.settle(0.3)
    got = f.entries()
    assert [e["message"]["content"] for e in got] == [f"msg {i}" for i in range(count)]
    assert len(set(ids(got))) == count
    assert all(e.path == str(path) for e in f.events)


def test_last_and_since_choose_where_to_start(session_file):
    path, entries = session_file
    stop = threading.Event()
    stop.set()
    assert ids(follow(path, last=2, stop=stop)) == ids(entries[-2:])
    assert ids(follow(path, last=50, stop=stop)) == ids(entries)
    assert ids(follow(path, since_id=entries[1]["id"], stop=stop)) == ids(entries[2:])
    assert ids(follow(path, from_start=True, stop=stop)) == ids(entries)
    assert list(follow(path, stop=stop)) == []
    with pytest.raises(ValueError):
        list(follow(path, last=1, from_start=True, stop=stop))


def test_default_starts_at_the_end_and_delivers_new_entries(session_file, followers):
    path, entries = session_file
    f = followers(path, last=1)
    f.wait_entries(1)
    new = chain("n", 3, entries[-1]["id"])
    for entry in new:
        append(path, [entry])
    assert ids(f.wait_entries(4)) == ids(entries[-1:] + new)


def test_append_racing_the_watcher_start_is_not_held_back(session_file, followers,
                                                          monkeypatch):
    path, entries = session_file
    real_watch = watchfiles.watch
    fresh = chain("n", 1, entries[-1]["id"])
    sent: list[float] = []

    def append_first(*paths: Any, **options: Any) -> Any:
        # lands after the follower's last read and before the watcher exists: no event
        if not sent:
            append(path, fresh)
            sent.append(time.monotonic())
        return real_watch(*paths, **options)

    monkeypatch.setattr(watchfiles, "watch", append_first)
    f = followers(path, last=1, timeout=5.0)
    f.wait_entries(2, timeout=6)
    assert ids(f.entries()) == ids(entries[-1:] + fresh)
    assert time.monotonic() - sent[0] < 1.0


@pytest.mark.parametrize("points_to", ["successor", "nowhere"])
def test_rotation_mid_follow_has_no_gap_and_no_duplicate(tmp_path, followers, points_to):
    directory = tmp_path / "sessions"
    directory.mkdir()
    old = directory / "old.jsonl"
    first = chain("e", 5)
    old.write_bytes(lines([header("s-old"), *first]))
    f = followers(old, from_start=True)
    f.wait_entries(5)

    more = chain("m", 2, first[-1]["id"])
    append(old, more)
    archived = directory / "archive" / "old.jsonl"
    successor = directory / "new.jsonl"
    fresh = chain("n", 2, more[-1]["id"])
    # The successor repeats the kept entries with their ids, then goes on.
    write_atomically(successor, [header("s-new", str(archived)), *first[3:], *more, *fresh])
    named = successor if points_to == "successor" else directory / "moved-away.jsonl"
    seal = marker(str(named), "s-new" if points_to == "successor" else None, more[-1]["id"])
    append(old, [seal])
    archived.parent.mkdir()
    os.rename(old, archived)
    later = chain("l", 1, fresh[-1]["id"])
    append(successor, later)

    expected = ids(first + more) + [seal["id"]] + ids(fresh + later)
    f.wait_entries(len(expected))
    f.settle()
    assert ids(f.entries()) == expected
    rotated = [e for e in f.events if e.kind == "rotated"]
    assert len(rotated) == 1 and rotated[0].path == str(old)
    from_successor = [e.entry["id"] for e in f.events if e.kind == "entry"
                      and e.path == str(successor)]
    assert from_successor == ids(fresh + later)


@pytest.mark.parametrize("target", ["file", "directory"])
def test_follows_a_real_rotation_without_gap_or_duplicate(tmp_path, followers, target):
    import gzip

    directory = tmp_path / "sessions"
    session = Session.create(directory, cwd="/", durability=Durability.never())
    path = Path(session.path)
    f = followers(path if target == "file" else directory, from_start=True)
    big = "x" * 2000
    before = [session.append_message({"role": "user", "content": f"{i} {big}", "timestamp": i})
              for i in range(6)]
    session.append_compaction("summary of the start", before[3], 12345)
    mid = [session.append_message({"role": "user", "content": f"mid {i}", "timestamp": i})
           for i in range(2)]
    result = session.rotate()
    assert result.rotated, result.reason
    after = [session.append_message({"role": "user", "content": f"after {i}", "timestamp": i})
             for i in range(3)]
    session.close()
    assert session.path == result.successor and result.archive is not None

    opener = gzip.open if result.archive.endswith(".gz") else open
    with opener(result.archive, "rb") as archived:
        old_ids = [orjson.loads(line)["id"] for line in archived.read().splitlines()[1:]]
    new_ids = [orjson.loads(line)["id"]
               for line in Path(result.successor).read_bytes().splitlines()[1:]]
    expected = old_ids + [i for i in new_ids if i not in old_ids]
    assert set(before + mid) <= set(old_ids) and new_ids[-3:] == after
    f.wait_entries(len(expected))
    f.settle()
    assert ids(f.entries()) == expected
    assert "rotated" in f.kinds() and "new_session" not in f.kinds()


def rotated_plain(folder: Path) -> tuple[Path, list[str], list[str]]:
    """A session rotated into an uncompressed archive (still readable as a plain file, its
    seal last), and the successor then written to: (archive, its entry ids, the ids
    appended to the successor)."""
    session = Session.create(folder, cwd="/", durability=Durability.never())
    big = "x" * 2000
    first = [session.append_message({"role": "user", "content": f"{i} {big}", "timestamp": i})
             for i in range(6)]
    session.append_compaction("summary of the start", first[3], 12345)
    result = session.rotate(compress=False)
    assert result.rotated and result.archive is not None, result.reason
    after = [session.append_message({"role": "user", "content": f"after {i}", "timestamp": i})
             for i in range(3)]
    session.close()
    archive = Path(result.archive)
    return archive, [e["id"] for e in load(archive).entries], after


def test_a_one_shot_tail_of_a_sealed_file_stops_at_its_seal(tmp_path, capsys):
    archive, old_ids, after = rotated_plain(tmp_path / "s")
    events = list(follow_events(archive, last=2, stop=lambda: True))
    assert [e.entry["id"] for e in events if e.kind == "entry"] == old_ids[-2:]
    assert [e.kind for e in events][-1] == "rotated"
    # following goes on into the successor, as before
    stop = threading.Event()
    got: list[str] = []
    for event in follow_events(archive, last=2, stop=stop, timeout=0.1):
        if event.kind == "entry":
            got.append(event.entry["id"])
            if got[-1] == after[-1]:
                stop.set()
    assert got[:2] == old_ids[-2:] and got[-3:] == after
    for extra in ([], ["--no-follow"]):
        code, out, err = run_cli(capsys, str(archive), "-n", "2", *extra)
        assert code == 0 and err == ""
        rows = out.splitlines()
        assert len(rows) == 2 and rows[1].split()[1] == "rotated", rows
        assert "after" not in out


@pytest.mark.parametrize("start", ["from_start", "last"])
def test_repair_mid_follow_delivers_only_new_entries(session_file, followers, start):
    path, entries = session_file
    options = {"from_start": True} if start == "from_start" else {"last": 1}
    f = followers(path, **options)
    already = 5 if start == "from_start" else 1
    f.wait_entries(already)
    fresh = chain("n", 2, entries[-1]["id"])
    # a repair rewrites the file atomically: same entries (same ids), a new inode
    write_atomically(path, [header(), *entries, *fresh])
    later = chain("l", 1, fresh[-1]["id"])
    append(path, later)
    f.wait_entries(already + 3)
    f.settle()
    assert ids(f.entries()) == ids(entries[-already:] + fresh + later)
    assert "replaced" in f.kinds()


def test_a_real_repair_mid_follow_is_a_replacement_that_repeats_nothing(session_file,
                                                                         followers):
    from journal.repair import repair

    path, entries = session_file
    append(path, b"this line is damaged\n")
    f = followers(path, from_start=True)
    f.wait_entries(5)
    report = repair(path)
    assert report.changed
    with Session.open(path, durability=Durability.never()) as s:
        new_id = s.append_message({"role": "user", "content": "after repair", "timestamp": 0})
    f.wait_entries(6)
    f.settle()
    assert ids(f.entries()) == [*ids(entries), new_id]
    assert "replaced" in f.kinds()


def test_truncation_mid_follow_warns_and_resyncs(session_file, followers, caplog):
    path, entries = session_file
    f = followers(path, from_start=True)
    f.wait_entries(5)
    data = path.read_bytes()
    keep = len(lines([header(), *entries[:2]]))
    assert data[:keep].endswith(b"\n")
    with caplog.at_level(logging.WARNING, logger="journal.tail"):
        os.truncate(path, keep)
        f.wait(lambda: "truncated" in f.kinds())
        fresh = chain("n", 2, entries[1]["id"])
        append(path, fresh)
        f.wait_entries(7)
        f.settle()
    assert ids(f.entries()) == ids(entries + fresh)
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_torn_tail_cut_by_the_next_writer_is_never_delivered(session_file, followers):
    path, entries = session_file
    f = followers(path, last=1)
    f.wait_entries(1)
    append(path, b'{"type":"message","id":"torn0001","parentId":null,"timest')
    time.sleep(0.3)
    # opening for writing quarantines the torn line and cuts it away (invariant 2)
    with Session.open(path, durability=Durability.never()) as s:
        f.wait(lambda: "truncated" in f.kinds())
        new_id = s.append_message({"role": "user", "content": "after", "timestamp": 0})
    got = f.wait_entries(2)
    f.settle()
    assert ids(f.entries()) == [entries[-1]["id"], new_id]
    assert "torn0001" not in ids(got)


def test_cut_partial_line_replaced_at_once_by_a_longer_one(session_file, followers):
    path, entries = session_file
    f = followers(path, last=1)
    f.wait_entries(1)
    size = path.stat().st_size
    append(path, b'{"type":"message","id":"torn0001"')
    time.sleep(0.3)
    # cut the torn line and append a longer one in the same instant (the follower sleeps
    # between wake-ups): the size never drops below what the follower has read
    fresh = chain("n", 1, entries[-1]["id"])
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, lines(fresh), size)
    finally:
        os.close(fd)
    f.wait_entries(2)
    f.settle()
    assert ids(f.entries()) == [entries[-1]["id"], fresh[0]["id"]]
    assert "truncated" in f.kinds()


def test_partial_line_is_delivered_once_complete(session_file, followers, caplog):
    path, entries = session_file
    f = followers(path, last=1)
    f.wait_entries(1)
    line = orjson.dumps(chain("p", 1, entries[-1]["id"])[0]) + b"\n"
    with caplog.at_level(logging.WARNING, logger="journal.tail"):
        append(path, line[:40])
        time.sleep(0.5)
        assert len(f.entries()) == 1
        append(path, line[40:])
        got = f.wait_entries(2)
        f.settle()
    assert ids(f.entries()) == [entries[-1]["id"], "p0000000"]
    assert got[-1]["message"]["content"] == "p 0"
    assert not caplog.records


def test_deleted_file_ends_after_the_grace_period(session_file, followers):
    path, _ = session_file
    f = followers(path, last=1, grace=0.3, timeout=0.1)
    f.wait_entries(1)
    started = time.monotonic()
    path.unlink()
    f.wait(lambda: f.finished)
    assert time.monotonic() - started >= 0.3
    assert f.kinds() == ["deleted", "ended"]
    assert "gone for" in f.events[-1].detail


def test_deleted_file_is_continued_by_a_successor_naming_it(session_file, followers):
    path, entries = session_file
    f = followers(path, last=2, grace=5)
    f.wait_entries(2)
    path.unlink()
    f.wait(lambda: "deleted" in f.kinds())
    successor = path.with_name("b.jsonl")
    fresh = chain("n", 2, entries[-1]["id"])
    write_atomically(successor, [header("s-2", str(path)), *entries[2:], *fresh])
    f.wait_entries(4)
    f.settle()
    assert ids(f.entries()) == ids(entries[-2:] + fresh)
    assert f.kinds() == ["deleted", "rotated"]
    assert not f.finished


def test_deleted_file_that_comes_back_is_resynced(session_file, followers):
    path, entries = session_file
    f = followers(path, from_start=True, grace=5)
    f.wait_entries(5)
    path.unlink()
    f.wait(lambda: "deleted" in f.kinds())
    fresh = chain("n", 1, entries[-1]["id"])
    write_atomically(path, [header(), *entries, *fresh])
    f.wait_entries(6)
    f.settle()
    assert ids(f.entries()) == ids(entries + fresh)
    assert f.kinds() == ["deleted", "replaced"]


def test_directory_follows_every_session_and_new_ones(tmp_path, followers):
    a = tmp_path / "a.jsonl"
    first = chain("a", 2)
    a.write_bytes(lines([header("s-a"), *first]))
    ignored = [tmp_path / "a.jsonl.quarantine", tmp_path / "a.jsonl.lock",
               tmp_path / "a.bak.jsonl", tmp_path / ".a.jsonl.tmp.jsonl"]
    for path in ignored:
        path.write_bytes(lines([header("s-x"), *chain("x", 1)]))
    f = followers(tmp_path, last=1)
    f.wait_entries(1)
    more = chain("b", 1, first[-1]["id"])
    append(a, more)
    with Session.create(tmp_path / "c.jsonl", cwd="/", durability=Durability.never()) as s:
        c_id = s.append_message({"role": "user", "content": "hello", "timestamp": 0})
        c_path = s.path
    for path in ignored:
        append(path, chain("y", 1))
    f.wait_entries(3)
    f.settle()
    assert ids(f.entries()) == [first[-1]["id"], more[0]["id"], c_id]
    assert [e.path for e in f.events if e.kind == "new_session"] == [c_path]


def test_directory_rotation_is_not_a_new_session_and_repeats_nothing(tmp_path, followers):
    old = tmp_path / "2026-01-01_old.jsonl"
    first = chain("e", 4)
    old.write_bytes(lines([header("s-old"), *first]))
    f = followers(tmp_path, from_start=True)
    f.wait_entries(4)
    successor = tmp_path / "2026-01-02_new.jsonl"
    archived = tmp_path / "archive" / old.name
    fresh = chain("n", 2, first[-1]["id"])
    # the successor is published (naming the archive it will be compressed into) before the
    # old file is sealed: the follower finds it first, as part of the old file's lineage
    gz = str(archived) + ".gz"
    write_atomically(successor, [header("s-new", gz), *first[2:], *fresh])
    f.wait_entries(6)
    seal = marker(str(successor), "s-new", first[-1]["id"])
    append(old, [seal])
    archived.parent.mkdir()
    os.rename(old, archived)
    f.wait_entries(7)
    f.settle()
    assert ids(f.entries()) == ids(first + fresh) + [seal["id"]]
    assert "new_session" not in f.kinds() and "rotated" in f.kinds()


def test_directory_from_start_reads_a_sealed_file_and_its_successor_once(tmp_path):
    old, successor = tmp_path / "z-old.jsonl", tmp_path / "a-new.jsonl"
    first = chain("e", 3)
    fresh = chain("n", 2, first[-1]["id"])
    seal = marker(str(successor), "s-new", first[-1]["id"])
    old_header = header("s-old")
    new_header = {**header("s-new", str(tmp_path / "archive" / old.name)),
                  "timestamp": "2026-01-02T00:00:00.000Z"}
    old.write_bytes(lines([old_header, *first, seal]))
    successor.write_bytes(lines([new_header, *first[1:], *fresh]))
    events = list(follow_events(tmp_path, from_start=True, stop=lambda: True))
    got = [e.entry["id"] for e in events if e.kind == "entry"]
    assert got == ids(first) + [seal["id"]] + ids(fresh)


def test_polling_mode_delivers_appends_within_the_same_second(session_file, followers,
                                                              monkeypatch):
    path, entries = session_file
    calls: list[dict[str, Any]] = []
    real_watch = watchfiles.watch

    def spy(*paths: Any, **options: Any) -> Any:
        calls.append(options)
        return real_watch(*paths, **options)

    monkeypatch.setattr(watchfiles, "watch", spy)
    frozen = os.stat(path).st_mtime
    f = followers(path, last=1, poll=True, timeout=1.0)
    f.wait_entries(1)
    fresh = chain("n", 5, entries[-1]["id"])
    for i, entry in enumerate(fresh):
        time.sleep(0.15)  # the follower is waiting, not still reading
        append(path, [entry])
        os.utime(path, (frozen, frozen))  # an mtime that never moves: polling sees nothing
        sent = time.monotonic()
        f.wait_entries(2 + i, timeout=5)
        # seen by a poll (every 50 ms), not by the re-read at the 1 s timeout (0.85 s after)
        assert time.monotonic() - sent < 0.7
    assert ids(f.entries()) == ids(entries[-1:] + fresh)
    assert calls and all(c["force_polling"] for c in calls)


def test_falls_back_to_polling_when_inotify_cannot_start(session_file, followers,
                                                        monkeypatch, caplog):
    path, entries = session_file
    real_watch = watchfiles.watch
    modes: list[bool] = []

    def no_inotify(*paths: Any, **options: Any) -> Any:
        modes.append(options["force_polling"])
        if not options["force_polling"]:
            raise OSError(24, "inotify_init: too many open files")
        return real_watch(*paths, **options)

    monkeypatch.setattr(watchfiles, "watch", no_inotify)
    with caplog.at_level(logging.WARNING, logger="journal.tail"):
        f = followers(path, last=1)
        f.wait_entries(1)
        deadline = time.monotonic() + 5
        while len(modes) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        fresh = chain("n", 2, entries[-1]["id"])
        append(path, fresh)
        f.wait_entries(3)
    assert modes == [False, True]
    assert any("polling instead" in r.getMessage() for r in caplog.records)


def test_stop_callable_and_closing_the_generator_end_the_follow(session_file):
    path, _ = session_file
    deadline = time.monotonic() + 0.3
    started = time.monotonic()
    assert len(list(follow(path, last=2, stop=lambda: time.monotonic() > deadline))) == 2
    assert time.monotonic() - started < 2
    events = follow_events(path, last=1)
    assert next(events).kind == "entry"
    events.close()


def test_missing_path_and_unknown_since_raise(tmp_path, session_file):
    from journal.errors import NotASession, UnknownEntry

    with pytest.raises(NotASession):
        next(follow(tmp_path / "nope.jsonl"))
    with pytest.raises(UnknownEntry, match="nope0000"):
        next(follow(session_file[0], since_id="nope0000"))


def test_afollow_works_in_asyncio(session_file):
    path, entries = session_file
    fresh = chain("n", 3, entries[-1]["id"])

    async def main() -> list[dict[str, Any]]:
        stop = asyncio.Event()
        got: list[dict[str, Any]] = []

        async def write_later() -> None:
            for entry in fresh:
                await asyncio.sleep(0.05)
                await asyncio.to_thread(append, path, [entry])

        writer = asyncio.create_task(write_later())
        async for entry in afollow(path, last=1, stop=stop, timeout=0.2):
            got.append(entry)
            if len(got) == 4:
                stop.set()
        await writer
        return got

    got = asyncio.run(asyncio.wait_for(main(), 10))
    assert ids(got) == ids(entries[-1:] + fresh)


# command line


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = tail_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_the_last_n_entries(session_file, capsys):
    path, entries = session_file
    code, out, err = run_cli(capsys, str(path), "-n", "3")
    assert code == 0 and err == ""
    rows = [re.sub(r"^\d{4}-\d\d-\d\d ", "", r) for r in out.splitlines()]  # not today
    assert len(rows) == 3
    assert [r.split()[1] for r in rows] == ["user"] * 3
    assert [r.split(None, 2)[2] for r in rows] == ["e 2", "e 3", "e 4"]
    code, out, _ = run_cli(capsys, str(path))
    assert len(out.splitlines()) == 5


def test_cli_json_and_since(session_file, capsys):
    path, entries = session_file
    code, out, _ = run_cli(capsys, str(path), "--json", "-n", "2")
    assert code == 0
    assert [orjson.loads(line) for line in out.splitlines()] == entries[-2:]
    code, out, _ = run_cli(capsys, str(path), "--json", "--since", entries[2]["id"])
    assert code == 0
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == ids(entries[3:])


def test_cli_directory_marks_each_file(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_bytes(lines([header("s-a"), *chain("a", 2)]))
    (tmp_path / "b.jsonl").write_bytes(lines([header("s-b"), *chain("b", 1)]))
    code, out, _ = run_cli(capsys, str(tmp_path), "-n", "1")
    assert code == 0
    assert out.splitlines()[0] == "==> a.jsonl <==" and out.splitlines()[2] == "==> b.jsonl <=="
    code, out, _ = run_cli(capsys, str(tmp_path), "--json", "-n", "1")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [(os.path.basename(r["path"]), r["entry"]["id"]) for r in rows] == [
        ("a.jsonl", "a0000001"), ("b.jsonl", "b0000000")]


def test_cli_errors(tmp_path, session_file, capsys):
    code, out, err = run_cli(capsys, str(tmp_path / "missing.jsonl"))
    assert code == 2 and out == ""
    assert err.startswith("Error: ") and "missing.jsonl" in err
    code, _, err = run_cli(capsys, str(session_file[0]), "--since", "nope0000")
    assert code == 2 and err.startswith("Error: ") and "nope0000" in err
    with pytest.raises(SystemExit) as exit_info:
        tail_main([str(session_file[0]), "-n", "-1"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        tail_main([str(session_file[0]), "-n", "2", "--since", "x"])


def test_tail_command_plugs_into_the_journal_parser(session_file, capsys):
    import argparse

    from journal.cli import run
    from journal.cli.tail import add_tail_parser

    parser = argparse.ArgumentParser(prog="journal")
    add_tail_parser(parser.add_subparsers(dest="command", required=True))
    path, entries = session_file
    assert run(parser, ["tail", str(path), "-n", "1", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out) == entries[-1]
    assert run(parser, ["tail", str(path.with_name("gone.jsonl"))]) == 2
    assert capsys.readouterr().err.startswith("Error: ")


def test_cli_follow_then_ctrl_c_exits_0(session_file):
    """Following, then Ctrl-C: exit 0. A damaged line met on the way is a `Warning: ...` line
    on stderr, as every command writes its notes (not logging's `WARNING:`)."""
    path, entries = session_file
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from journal.cli import tail_main; "
         "sys.exit(tail_main())", "-f", "-n", "1", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().rstrip().endswith("e 4")
        append(path, b"{not json\n")
        append(path, chain("n", 1, entries[-1]["id"]))
        assert proc.stdout.readline().rstrip().endswith("n 0")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in err
    warned = [line for line in err.splitlines() if "invalid_json" in line]
    assert len(warned) == 1 and warned[0].startswith(f"Warning: {path}: byte ")
    assert "WARNING" not in err


def tail_process(*argv: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from journal.cli import tail_main; "
         "sys.exit(tail_main())", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def line_of(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The next line the process prints, failing (not hanging) if none comes in time."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)  # a reader still waiting ends when the test kills the process
    assert got, f"no line within {timeout:g}s"
    return got[0]


def interrupted(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C a following tail; what it wrote on stderr (it exits 0, as a follow ends)."""
    try:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        return proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()


def test_cli_follow_of_a_live_file_named_relatively_says_no_rotation(session_file):
    """A live file named by a relative path is followed as it is: its real path is the
    same file, not a successor, so nothing is said of a rotation."""
    path, entries = session_file
    proc = tail_process("-f", "-n", "1", path.name, cwd=path.parent)
    try:
        assert line_of(proc).rstrip().endswith("e 4")
        append(path, chain("n", 1, entries[-1]["id"]))
        assert line_of(proc).rstrip().endswith("n 0")
    finally:
        err = interrupted(proc)
    assert "rotated" not in err and "following" not in err, err


def test_cli_follow_of_an_archive_whose_successor_is_not_here(tmp_path, capsys):
    """`-f` of a sealed file whose successor was moved away: a plain one is followed, said
    so, and taken on into the successor when it comes back; a compressed one (which never
    changes) prints its last entries and its seal, says there is nothing to follow, and
    exits 1, rather than reading its gzip bytes as lines."""
    archive, old_ids, after = rotated_plain(tmp_path / "s")
    [successor] = [p for p in archive.parent.parent.glob("*.jsonl")]
    away = tmp_path / "away"
    away.mkdir()
    successor.rename(away / successor.name)
    proc = tail_process("-f", "-n", "1", str(archive))
    try:
        assert line_of(proc).split()[1] == "rotated"
        (away / successor.name).rename(successor)
        with Session.open(successor) as session:
            session.append_message({"role": "user", "content": "back again", "timestamp": 1})
        rows = [line_of(proc).rstrip() for _ in range(len(after) + 1)]
        assert [row.split()[-1] for row in rows] == ["0", "1", "2", "again"], rows
    finally:
        err = interrupted(proc)
    assert f"rotated into {successor.name}, which is not here; following it" in err, err

    compressed = archive.with_name(archive.name + ".gz")
    compressed.write_bytes(gzip.compress(archive.read_bytes()))
    archive.unlink()
    successor.unlink()
    code, out, err = run_cli(capsys, "-f", "-n", "2", str(compressed))
    rows = out.splitlines()
    assert code == 1 and len(rows) == 2, (code, out, err)
    assert rows[1].split()[1:] == ["rotated", "continued", "in", successor.name]
    assert "which is not here; a compressed file never changes" in err
    assert "Warning" not in err
    code, out, err = run_cli(capsys, "-f", "--since", old_ids[-3], "--json", str(compressed))
    assert code == 1 and [orjson.loads(r)["id"] for r in out.splitlines()] == old_ids[-2:]


def test_cli_follow_of_a_compressed_file_that_is_no_archive_or_from_an_entry(
        tmp_path, session_file, capsys):
    """A session gzipped by hand (no seal) is not followed as bytes (it never changes): its
    last entries, said so, exit 1. An archive whose live session is here, given with
    `--since`, is refused rather than searched for the entry in the live session."""
    path, entries = session_file
    gzipped = path.with_name(path.name + ".gz")
    gzipped.write_bytes(gzip.compress(path.read_bytes()))
    code, out, err = run_cli(capsys, "-f", "-n", "2", "--json", str(gzipped))
    assert code == 1 and [orjson.loads(r) for r in out.splitlines()] == entries[-2:], err
    assert "is not a rotation's archive; a compressed file never changes" in err
    assert "Warning" not in err

    archive, old_ids, after = rotated_plain(tmp_path / "s")
    compressed = archive.with_name(archive.name + ".gz")
    compressed.write_bytes(gzip.compress(archive.read_bytes()))
    archive.unlink()
    code, out, err = run_cli(capsys, "-f", "--since", old_ids[-2], str(compressed))
    assert code == 2 and out == "", err
    assert err.startswith("Error: ") and "is not followed from one of its entries" in err


def test_human_lines_for_the_kinds_of_entries():
    base = {"id": "x", "parentId": None, "timestamp": "2026-01-01T00:00:00.000Z"}

    def line(entry: dict[str, Any]) -> str:
        return "".join(text for text, _ in format_entry({**base, **entry}))

    call = {"type": "message", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look.\nmore"},
        {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "src/a.py"}}]}}
    assert line(call).endswith("assistant  Let me look.; → read(src/a.py)")
    result = {"type": "message", "message": {"role": "toolResult", "toolName": "bash",
                                             "isError": True, "content": [
                                                 {"type": "text", "text": "boom\nsecond"}]}}
    assert line(result).endswith("result     bash error, 11 chars: boom")
    compaction = {"type": "compaction", "summary": "did things", "firstKeptEntryId": "k1",
                  "tokensBefore": 123456}
    assert "123,456 tokens before, keeps from k1: did things" in line(compaction)
    assert line({"type": "model_change", "provider": "anthropic", "modelId": "m"}).endswith(
        "model      anthropic/m")
    assert re.match(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d ", line(call))


def test_colour_only_on_a_terminal_without_no_color(session_file, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    entry = session_file[1][0]
    event = TailEvent("entry", "a.jsonl", entry)
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Tty()
    TailPrinter(out, io.StringIO()).show(event)
    assert "\x1b[" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    TailPrinter(out, io.StringIO()).show(event)
    assert "\x1b[" not in out.getvalue() and "e 0" in out.getvalue()
    monkeypatch.delenv("NO_COLOR")
    plain = io.StringIO()
    TailPrinter(plain, io.StringIO()).show(event)
    assert "\x1b[" not in plain.getvalue()


# stepped by hand: several changes between two wake-ups


def step(follower: Any) -> list[str]:
    return [e.entry["id"] for e in follower.poll() if e.kind == "entry" and e.entry]


def test_a_cut_line_rewritten_with_one_of_the_same_length_is_noticed(session_file):
    from journal.tail import Follower

    path, entries = session_file
    follower = Follower(path, last=1)
    follower.open()
    try:
        assert step(follower) == ids(entries[-1:])
        # the same length and the same last bytes: only the id at its start differs
        other = {**entries[-1], "id": "0ther000"}
        assert len(orjson.dumps(other)) == len(orjson.dumps(entries[-1]))
        os.truncate(path, len(lines([header(), *entries[:-1]])))
        append(path, [other])
        assert step(follower) == ["0ther000"]
        assert step(follower) == []
    finally:
        follower.close()


def test_a_file_replaced_then_rotated_between_reads_is_read_from_the_archive(tmp_path):
    from journal.rotation import rotate
    from journal.tail import Follower

    with Session.create(tmp_path, cwd="/", durability=Durability.never()) as s:
        path = s.path
        old = [s.append_message({"role": "user", "content": "x" * 700, "timestamp": i})
               for i in range(3)]
    follower = Follower(path, grace=0.0)
    follower.open()
    try:
        assert step(follower) == []
        # a repair-like replacement adds an entry; then a rotation archives that version
        added = {"type": "message", "id": "added000", "parentId": old[-1],
                 "timestamp": "2026-01-01T00:00:00.000Z",
                 "message": {"role": "user", "content": "only in the replacement",
                             "timestamp": 0}}
        write_atomically(Path(path), [orjson.loads(line) for line in
                                      Path(path).read_bytes().splitlines()] + [added])
        with Session.open(path, durability=Durability.never()) as s:
            kept = s.append_message({"role": "user", "content": "kept", "timestamp": 0})
            s.append_compaction("summary", kept, 100)
        result = rotate(path)
        assert result.rotated and result.successor
        got = list(follower.poll())
        assert [src.path for src in follower.sources] == [result.successor]
        with Session.open(result.successor, durability=Durability.never()) as s:
            later = s.append_message({"role": "user", "content": "later", "timestamp": 0})
        assert step(follower) == [later]
    finally:
        follower.close()
    delivered = [e.entry["id"] for e in got if e.kind == "entry" and e.entry]
    assert delivered[0] == "added000" and kept in delivered
    assert len(delivered) == len(set(delivered))
    assert "ended" not in [e.kind for e in got]


def test_a_copied_folder_is_followed_within_the_copy(tmp_path):
    """A seal's absolute successor path is only a hint: the successor beside the sealed file
    (in the copy) is the one followed, not the original folder's."""
    from journal.tail import Follower

    orig, copy = tmp_path / "orig", tmp_path / "copy"
    for folder in (orig, copy):
        folder.mkdir()
    first = chain("e", 2)
    fresh = chain("n", 1, first[-1]["id"])
    successor = [header("s-new", str(orig / "archive" / "old.jsonl")), *first, *fresh]
    (orig / "new.jsonl").write_bytes(lines(successor))
    (copy / "new.jsonl").write_bytes(lines(successor))
    old = copy / "old.jsonl"
    old.write_bytes(lines([header("s-old"), *first]))
    follower = Follower(old, from_start=True, grace=0.0)
    follower.open()
    try:
        assert step(follower) == ids(first)
        append(old, [marker(str(orig / "new.jsonl"), "s-new", first[-1]["id"])])
        assert step(follower) == ["feedf00d", *ids(fresh)]
        assert [src.path for src in follower.sources] == [str(copy / "new.jsonl")]
    finally:
        follower.close()


def test_a_seal_never_leads_the_tail_out_of_the_session_folder(tmp_path):
    """A seal pointing elsewhere (an older absolute path into the folder a copy was made
    from, or a relative path climbing out) is not followed when the successor is missing
    beside the sealed file: the tail reads nothing from outside and ends after its grace."""
    from journal.tail import Follower

    orig, copy = tmp_path / "orig", tmp_path / "copy"
    for folder in (orig, copy):
        folder.mkdir()
    first = chain("e", 2)
    fresh = chain("n", 1, first[-1]["id"])
    (orig / "new.jsonl").write_bytes(
        lines([header("s-new", str(orig / "archive" / "old.jsonl")), *first, *fresh]))
    for pointer in (str(orig / "new.jsonl"), "../orig/new.jsonl"):
        old = copy / "old.jsonl"
        old.write_bytes(lines([header("s-old"), *first]))
        follower = Follower(old, from_start=True, grace=0.0)
        follower.open()
        try:
            assert step(follower) == ids(first)
            seal = marker(pointer, "s-new", first[-1]["id"])
            seal["data"].pop("file", None)
            append(old, [seal])
            delivered = step(follower)
            assert not set(ids(fresh)) & set(delivered), (pointer, delivered)
            assert all(str(orig) not in src.path for src in follower.sources), pointer
        finally:
            follower.close()


def test_an_id_reused_two_rotations_later_is_still_delivered(tmp_path):
    """Ids are unique per file. Rotation copies kept entries from the file it seals only, so
    a follower skips repeats of that file's ids alone: a new entry that happens to reuse the
    id of an entry two files back is a new entry, and is delivered."""
    from journal.tail import Follower

    first = chain("a", 3)  # a0000000..a0000002; only the last is kept by the first rotation
    middle_new = chain("b", 2, first[-1]["id"])
    last_new = [{**chain("c", 1, middle_new[-1]["id"])[0], "id": first[0]["id"]}]
    q, p, live = tmp_path / "q.jsonl", tmp_path / "p.jsonl", tmp_path / "s.jsonl"
    q.write_bytes(lines([header("s-q"), *first]))
    follower = Follower(q, from_start=True, grace=0.0)
    follower.open()
    try:
        assert step(follower) == ids(first)
        kept_in_p = [{**first[-1], "parentId": None}, *middle_new]
        p.write_bytes(lines([header("s-p", "q.jsonl"), *kept_in_p]))
        append(q, [marker("p.jsonl", "s-p", first[-1]["id"])])
        seal_p = {**marker("s.jsonl", "s-s", middle_new[-1]["id"]), "id": "feedf00e"}
        append(p, [seal_p])
        kept_in_s = [{**middle_new[-1], "parentId": None}]
        live.write_bytes(lines([header("s-s", "p.jsonl"), *kept_in_s,
                                {**last_new[0], "parentId": middle_new[-1]["id"]}]))
        delivered = step(follower)
        assert delivered == ["feedf00d", *ids(middle_new), "feedf00e", first[0]["id"]]
    finally:
        follower.close()


def test_a_symlinked_session_is_followed_beside_its_real_file(tmp_path):
    """The link is resolved once, at start: the successor a seal names relative to the
    session's folder is looked for beside the real file, not beside the link."""
    from journal.tail import Follower

    real, elsewhere = tmp_path / "sessions", tmp_path / "elsewhere"
    real.mkdir()
    elsewhere.mkdir()
    first = chain("e", 2)
    old = real / "old.jsonl"
    old.write_bytes(lines([header("s-old"), *first]))
    link = elsewhere / "link.jsonl"
    link.symlink_to(old)
    follower = Follower(link, from_start=True, grace=0.0)
    follower.open()
    try:
        assert step(follower) == ids(first)
        fresh = chain("n", 1, first[-1]["id"])
        (real / "new.jsonl").write_bytes(lines([header("s-new", "archive/old.jsonl"), *fresh]))
        seal = {**marker("new.jsonl", "s-new", first[-1]["id"]),
                "data": {"successor": "new.jsonl", "file": "new.jsonl", "sessionId": "s-new"}}
        append(old, [seal])
        assert step(follower) == [seal["id"], *ids(fresh)]
        assert [src.path for src in follower.sources] == [str(real / "new.jsonl")]
    finally:
        follower.close()


def test_a_fifo_named_like_a_session_never_blocks_the_follower(tmp_path):
    """A FIFO can be swapped in between a directory listing and the open; opening it must
    not wait for a writer that never comes."""
    from journal.header import FirstLine, peek
    from journal.tail.source import open_regular

    fifo = tmp_path / "x.jsonl"
    os.mkfifo(fifo)
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.extend([open_regular(str(fifo)), peek(str(fifo))]),
        daemon=True)
    worker.start()
    worker.join(3)
    assert results == [None, FirstLine(False, None)]


def test_a_line_that_never_ends_costs_the_follower_no_memory(tmp_path):
    """A writer that appends a huge line without its newline (or `cat /dev/zero >> file`):
    the follower keeps only the line's length, not its bytes."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(lines([header(), *chain("e", 2)]))
    with open(path, "ab") as f:
        block = b"x" * (1 << 24)
        for _ in range(16):  # 256 MiB, no newline
            f.write(block)
    # VmHWM, not ru_maxrss: the latter keeps the forking parent's (pytest's) peak
    code = f"""
from journal.tail import Follower
follower = Follower({str(path)!r}, from_start=True, grace=0.0)
follower.open()
delivered = [e for e in follower.poll() if e.kind == "entry"]
follower.close()
with open("/proc/self/status") as status:
    peak = next(int(x.split()[1]) for x in status if x.startswith("VmHWM:"))
print(len(delivered), peak // 1024)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    count, peak_mb = map(int, done.stdout.split())
    assert count == 2
    assert peak_mb < 120, f"peak RSS {peak_mb} MB while a 256 MiB line was pending"


def test_a_line_longer_than_the_tail_reads_is_skipped_and_the_rest_delivered(
        tmp_path, monkeypatch, caplog):
    import journal.tail.source
    from journal.tail import Follower

    monkeypatch.setattr(journal.tail.source, "MAX_LINE", 10_000)
    path = tmp_path / "s.jsonl"
    first = chain("e", 1)
    path.write_bytes(lines([header(), *first]))
    follower = Follower(path, from_start=True, grace=0.0)
    follower.open()
    try:
        assert step(follower) == ids(first)
        with open(path, "ab") as f:
            f.write(b"y" * 50_000)
        assert step(follower) == []
        later = chain("n", 2, first[-1]["id"])
        with caplog.at_level(logging.WARNING):
            append(path, b"\n" + lines(later))
            assert step(follower) == ids(later)
        assert "longer than the tail reads" in caplog.text
    finally:
        follower.close()


def test_the_tail_modules_share_no_private_names():
    """Within journal/tail/, what a module uses of a sibling (inherited methods included) is
    public: no `_name` defined in one module is used in another."""
    import ast

    folder = Path(__file__).resolve().parents[1] / "journal" / "tail"
    trees = {path.name: ast.parse(path.read_text()) for path in sorted(folder.glob("*.py"))}
    defined: dict[str, set[str]] = {}
    for name, tree in trees.items():
        defined[name] = {node.name for node in ast.walk(tree)
                         if isinstance(node, ast.FunctionDef | ast.ClassDef)
                         and node.name.startswith("_") and not node.name.startswith("__")}
    shared = []
    for name, tree in trees.items():
        used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 for alias in node.names}
        for other, private in defined.items():
            if other != name:
                shared += [f"{name} uses {other}'s {p}" for p in sorted(used & private
                                                                        - defined[name])]
    assert len(trees) == 6 and shared == []


def test_a_new_entry_reusing_an_archived_id_is_still_delivered_after_a_rotation(tmp_path):
    """The follower skips by id only what rotation copied into the successor (up to the
    seal's `lastCopied`): a later entry whose writer drew an id of the archive (a writer that
    does not check the archive, such as pi, or ours before its scan of the archive is done)
    is still delivered."""
    from journal.rotation import rotate
    from journal.tail import Follower

    with Session.create(tmp_path, cwd="/", durability=Durability.never()) as s:
        path = s.path
        early = s.append_message({"role": "user", "content": "early " + "x" * 3000,
                                  "timestamp": 0})
        kept = s.append_message({"role": "user", "content": "kept", "timestamp": 0})
        compaction = s.append_compaction("summary", kept, 100)
    follower = Follower(path, grace=0.0)
    follower.open()
    try:
        result = rotate(path)
        assert result.rotated and result.successor
        got = [e.entry for e in follower.poll() if e.kind == "entry" and e.entry]
        assert [e["customType"] for e in got] == ["journal.successor"]  # only the seal: the
        assert not {kept, compaction} & {e["id"] for e in got}  # copies were delivered
        leaf = load(result.successor).entries[-1]["id"]
        seal = load(result.archive).entries[-1]
        assert seal["customType"] == "journal.successor"
        assert seal["data"]["lastCopied"] == leaf
        reused = {"type": "message", "id": early, "parentId": leaf,
                  "timestamp": "2026-12-01T00:00:00.000Z",
                  "message": {"role": "user", "content": "new, with an old id",
                              "timestamp": 0}}
        append(Path(result.successor), [reused])
        assert step(follower) == [early]
    finally:
        follower.close()


@pytest.mark.parametrize("target", ["file", "directory", "poll"])
def test_a_follow_of_files_ended_by_sigterm_exits_143(tmp_path, target):
    """`journal tail -f` of a file or folder stopped by SIGTERM exits 143 as the docs say
    (and as a database follow does): watchfiles turned the handler's exception into a
    KeyboardInterrupt, which the follow ends on with 0, so a supervisor could not tell a
    stop from a normal end."""
    folder = tmp_path / "sessions"
    with Session.create(folder, cwd="/") as session:
        session.append_message({"role": "user", "content": "hello", "timestamp": 1})
        path = session.path
    argv = [str(path if target == "file" else folder), "-f", "--json"]
    if target == "poll":
        argv.append("--poll")
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from journal.cli import tail_main; "
         "sys.exit(tail_main())", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": root})
    try:
        assert proc.stdout is not None
        assert "hello" in proc.stdout.readline()  # following by now
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
