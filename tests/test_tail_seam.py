"""The live tail reaches a session's bytes and its change notifications only through the
storage seam (`journal.storage`): what a `Storage` (given by `open_storage`) serves is what
is delivered, and every wait goes through the `Watch` it opens.

The proof is a storage whose bytes are not where a file-reading tail would look: the session
named `s.jsonl` (its catalog entry: a file holding only the header, which is what a folder
lists) keeps its bytes in `s.jsonl.bytes`. A tail that read `s.jsonl` itself would deliver
nothing; a tail that watched `s.jsonl` itself would sleep through every append (the follows
here wait 30 s between reads when nothing wakes them).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson
import watchfiles

from journal.storage import FileStorage, StopFlag, Storage
from journal.storage.filesystem import FileReader
from journal.storage.filewatch import FileWatch
from journal.tail import ENTRY, REPLACED, TailEvent, afollow, follow_events

HEADER = {"type": "session", "version": 3, "id": "s-1",
          "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
QUIET = 30.0  # seconds between reads when no wake-up comes: longer than any test waits


def entries(prefix: str, count: int, parent: str | None = None) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        entry_id = f"{prefix}{i:07x}"[:8]
        out.append({"type": "message", "id": entry_id, "parentId": parent,
                    "timestamp": "2026-01-01T00:00:01.000Z",
                    "message": {"role": "user", "content": f"{prefix} {i}", "timestamp": 0}})
        parent = entry_id
    return out


def encoded(values: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(v) + b"\n" for v in values)


def append(path: Path, values: list[dict[str, Any]]) -> None:
    with open(path, "ab") as f:
        f.write(encoded(values))


def ids(values: list[dict[str, Any]]) -> list[str]:
    return [v["id"] for v in values]


class CountingReader(FileReader):
    def __init__(self, storage: CountingStorage) -> None:
        super().__init__(storage.open_stream())
        self.counts = storage.counts

    def read(self, offset: int, length: int) -> bytes:
        data = super().read(offset, length)
        self.counts["bytes read"] += len(data)
        return data


class CountingWatch(FileWatch):
    def __init__(self, stop: StopFlag, timeout: float, poll: bool | None,
                 counts: Counter[str], seen: list[tuple[str, ...]]) -> None:
        super().__init__(stop, timeout, poll)
        self.counts = counts
        self.seen = seen

    def wait(self, storages: Collection[Any], places: Collection[str] = ()) -> bool:
        self.counts["waits"] += 1
        self.seen.append(tuple(sorted(s.locator for s in storages)))
        return super().wait(storages, places)

    async def wait_async(self, storages: Collection[Any], places: Collection[str] = ()) -> bool:
        self.counts["waits"] += 1
        self.seen.append(tuple(sorted(s.locator for s in storages)))
        return await super().wait_async(storages, places)


class CountingStorage(FileStorage):
    """The file backend, counting what the tail asks of it."""

    def __init__(self, path: str, counts: Counter[str], seen: list[tuple[str, ...]]) -> None:
        super().__init__(path)
        self.counts = counts
        self.seen = seen

    def open_reader(self) -> CountingReader:
        self.counts["readers"] += 1
        return CountingReader(self)

    def mark(self) -> Any:
        self.counts["marks"] += 1
        return super().mark()

    def open_watch(self, stop: StopFlag, timeout: float, poll: bool | None = None) -> FileWatch:
        self.counts["watches"] += 1
        return CountingWatch(stop, timeout, poll, self.counts, self.seen)


class Shadowed(CountingStorage):
    """The session named `path`, whose bytes (and changes) are in `path + ".bytes"`."""

    def __init__(self, path: str, counts: Counter[str], seen: list[tuple[str, ...]]) -> None:
        super().__init__(path + ".bytes", counts, seen)


class Factory:
    def __init__(self, kind: type[CountingStorage]) -> None:
        self.kind = kind
        self.counts: Counter[str] = Counter()
        self.seen: list[tuple[str, ...]] = []

    def __call__(self, path: str) -> Storage:
        return self.kind(path, self.counts, self.seen)


class Tail:
    """follow_events in a thread."""

    def __init__(self, path: Path, **options: Any) -> None:
        self.stop = threading.Event()
        self.events: list[TailEvent] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, args=(path, options), daemon=True)
        self.thread.start()

    def run(self, path: Path, options: dict[str, Any]) -> None:
        try:
            for event in follow_events(path, stop=self.stop, timeout=QUIET, **options):
                self.events.append(event)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def delivered(self) -> list[str]:
        return [e.entry["id"] for e in list(self.events) if e.kind == ENTRY and e.entry]

    def wait_for(self, count: int, within: float = 3.0) -> list[str]:
        deadline = time.monotonic() + within
        while len(self.delivered()) < count and time.monotonic() < deadline:
            assert self.error is None, self.error
            time.sleep(0.01)
        return self.delivered()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive()
        assert self.error is None, self.error


def shadowed_session(tmp_path: Path, body: list[dict[str, Any]]) -> tuple[Path, Path]:
    """`s.jsonl` as a folder lists it (the header only) and the bytes it stands for."""
    name = tmp_path / "s.jsonl"
    name.write_bytes(encoded([HEADER]))
    data = tmp_path / "s.jsonl.bytes"
    data.write_bytes(encoded([HEADER, *body]))
    return name, data


def test_every_delivered_byte_and_every_wake_up_comes_through_the_storage(tmp_path):
    first = entries("a", 3)
    name, data = shadowed_session(tmp_path, first)
    factory = Factory(Shadowed)
    tail = Tail(name, from_start=True, open_storage=factory)
    try:
        assert tail.wait_for(3) == ids(first)
        fresh = entries("b", 2, first[-1]["id"])
        sent = time.monotonic()
        append(data, fresh)
        assert tail.wait_for(5) == ids(first + fresh)
        assert time.monotonic() - sent < 2.0  # woken by the storage's watch, not the 30 s
        # a replacement of the storage's bytes (a repair, say) is noticed through its mark
        added = entries("c", 1, fresh[-1]["id"])
        tmp = tmp_path / ".s.tmp"
        tmp.write_bytes(encoded([HEADER, *first, *fresh, *added]))
        os.replace(tmp, data)
        assert tail.wait_for(6) == ids(first + fresh + added)
    finally:
        tail.close()
    assert REPLACED in [e.kind for e in tail.events]
    assert name.read_bytes() == encoded([HEADER])  # the name's own file holds no entry
    counts = factory.counts
    assert counts["watches"] == 1 and counts["waits"] >= 2
    assert set(factory.seen) == {(str(data),)}  # every wait was on the storage's bytes
    # every entry byte was read through a reader of the storage (the first read included)
    assert counts["bytes read"] >= data.stat().st_size - len(encoded([HEADER]))
    assert counts["readers"] >= 2 and counts["marks"] >= 2


def test_asyncio_follows_through_the_storage_too(tmp_path):
    first = entries("a", 2)
    name, data = shadowed_session(tmp_path, first)
    factory = Factory(Shadowed)
    fresh = entries("b", 2, first[-1]["id"])

    async def main() -> tuple[list[str], float]:
        got: list[str] = []
        stop = asyncio.Event()
        sent = [0.0]

        def later() -> None:  # once the follower is waiting
            sent[0] = time.monotonic()
            append(data, fresh)

        async for entry in afollow(name, from_start=True, stop=stop, timeout=QUIET,
                                   open_storage=factory):
            got.append(entry["id"])
            if len(got) == 2:
                asyncio.get_running_loop().call_later(0.3, later)
            if len(got) == 4:
                stop.set()
                break
        return got, time.monotonic() - sent[0]

    got, latency = asyncio.run(asyncio.wait_for(main(), 10))
    assert got == ids(first + fresh)
    assert latency < 2.0
    assert factory.counts["watches"] == 1 and factory.counts["waits"] >= 1
    assert set(factory.seen) == {(str(data),)}


def test_a_folder_of_sessions_is_waited_on_by_one_watch_and_one_watcher(tmp_path, monkeypatch):
    """Directory mode stays cheap: one standing watch, one watchfiles watcher, over every
    followed session (not a watcher, or a thread, per session)."""
    real_watch = watchfiles.watch
    watchers: list[tuple[str, ...]] = []

    def spy(*paths: Any, **options: Any) -> Any:
        watchers.append(paths)
        return real_watch(*paths, **options)

    monkeypatch.setattr(watchfiles, "watch", spy)
    names = [tmp_path / f"s{i}.jsonl" for i in range(3)]
    for i, path in enumerate(names):
        path.write_bytes(encoded([{**HEADER, "id": f"s-{i}"}]))
    factory = Factory(CountingStorage)
    tail = Tail(tmp_path, open_storage=factory)
    try:
        deadline = time.monotonic() + 3
        while factory.counts["waits"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = []
        for i, path in enumerate(names):
            append(path, entries(f"{i}", 1))
            sent.append(f"{i}0000000")
        assert sorted(tail.wait_for(3)) == sent
    finally:
        tail.close()
    assert factory.counts["watches"] == 1
    assert watchers == [(str(tmp_path),)]
    assert set(factory.seen) == {tuple(str(p) for p in names)}
