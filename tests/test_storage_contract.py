"""The storage seam's contract, run against every backend.

Each backend supplies a `Backend`: how to make an empty storage in a test folder, the code a
second process runs to hold its writer lock, and how to make the next commit's write come up
short (what a filling disk does). The backends are the file system and, for tests only, a
session held in memory (tests/memory_storage.py); a new backend adds itself to BACKENDS and
must pass every test here unchanged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import memory_storage
import pytest
from memory_storage import MemoryStorage

from journal import Durability
from journal.codec import Line
from journal.errors import JournalError, LockTimeout, WriteFailed
from journal.storage import FileStorage, Storage, as_storage

REAL_WRITE = os.write
HEADER = b'{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/"}\n'


@dataclass
class Backend:
    name: str
    make: Callable[[Path], Storage]
    holder: str
    """Python run in another process with the storage's locator as argv[1]: takes the writer
    lock, prints "held", and keeps it until its stdin closes."""
    short_next_write: Callable[[pytest.MonkeyPatch, Storage], None]


def _file_short_write(monkeypatch: pytest.MonkeyPatch, storage: Storage) -> None:
    """The kernel takes a third of the next append to the session file, as on a full disk."""
    path = storage.locator
    armed = [True]

    def write(fd: int, data: bytes) -> int:
        if armed[0] and os.path.samestat(os.fstat(fd), os.stat(path)):
            armed[0] = False
            return REAL_WRITE(fd, bytes(data)[: len(data) // 3])
        return REAL_WRITE(fd, data)

    monkeypatch.setattr(os, "write", write)


def _memory_short_write(monkeypatch: pytest.MonkeyPatch, storage: Storage) -> None:
    """The store takes a third of the next commit, then refuses the rest (as a full disk)."""
    real = memory_storage.device_write
    calls = [0]

    def device_write(buffer: bytearray, data: memoryview) -> int:
        calls[0] += 1
        if calls[0] == 1:
            buffer += data[: len(data) // 3]
            return len(data) // 3
        if calls[0] == 2:
            return 0
        return real(buffer, data)

    monkeypatch.setattr(memory_storage, "device_write", device_write)


BACKENDS = [
    Backend(
        "file",
        lambda folder: FileStorage(str(folder / "s.jsonl")),
        "import sys\n"
        "from journal.storage import FileStorage\n"
        "lock = FileStorage(sys.argv[1]).lock(5)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n",
        _file_short_write,
    ),
    Backend(
        "memory",
        lambda folder: MemoryStorage(str(folder / "s.mem")),
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "from memory_storage import MemoryStorage\n"
        "lock = MemoryStorage(sys.argv[1]).lock(5)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n",
        _memory_short_write,
    ),
]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    backend: Backend = request.param
    return backend


@pytest.fixture
def storage(backend: Backend, tmp_path: Path) -> Storage:
    made = backend.make(tmp_path)
    made.create(HEADER)
    return made


def lines(n: int, tag: str = "m") -> list[bytes]:
    return [b'{"type":"custom","id":"%s%d"}\n' % (tag.encode(), i) for i in range(n)]


def forward(storage: Storage, start: int = 0) -> list[bytes]:
    with storage.open_reader() as reader:
        return [item.raw + b"\n" for item in reader.lines(start) if isinstance(item, Line)]


def test_a_batch_is_appended_as_one_unit_and_read_forward(storage: Storage) -> None:
    appender = storage.open_appender(Durability.always())
    try:
        first = appender.commit(b"".join(lines(3)))
        second = appender.commit(b"".join(lines(2, "n")))
    finally:
        appender.close()
    assert first == len(HEADER)
    assert second == first + len(b"".join(lines(3)))
    assert forward(storage) == [HEADER, *lines(3), *lines(2, "n")]
    assert forward(storage, second) == lines(2, "n")
    assert storage.size() == second + len(b"".join(lines(2, "n")))


def test_a_short_write_is_rolled_back_and_the_next_commit_lands_whole(
        backend: Backend, storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    appender = storage.open_appender(Durability.always())
    try:
        appender.commit(lines(1)[0])
        before = storage.size()
        backend.short_next_write(monkeypatch, storage)
        with pytest.raises(WriteFailed):
            appender.commit(b"".join(lines(5, "lost")))
        assert storage.size() == before
        appender.commit(lines(1, "after")[0])
    finally:
        appender.close()
    assert forward(storage) == [HEADER, lines(1)[0], lines(1, "after")[0]]


def test_read_backward_from_the_end_gives_the_lines_in_reverse(storage: Storage) -> None:
    appender = storage.open_appender()
    try:
        appender.commit(b"".join(lines(50)))
    finally:
        appender.close()
    with storage.open_reader() as reader:
        backward = [line.raw + b"\n" for line in reader.lines_backward(reader.size)]
        offsets = [line.offset for line in reader.lines_backward(reader.size)]
    assert backward == list(reversed([HEADER, *lines(50)]))
    assert offsets == sorted(offsets, reverse=True) and offsets[-1] == 0


def test_publish_replaces_whole_or_not_at_all(storage: Storage) -> None:
    old = forward(storage)
    replacement = HEADER + b"".join(lines(4, "r"))

    def refuse() -> None:
        raise JournalError("refused before the swap")

    with pytest.raises(JournalError):
        storage.publish(replacement, "contract", refuse)
    assert forward(storage) == old
    with storage.open_reader() as before:
        storage.publish(replacement, "contract")
        seen = before.stream.read()
    assert seen in (b"".join(old), replacement)  # a reader sees one version, never a mix
    assert forward(storage) == [HEADER, *lines(4, "r")]


def test_create_never_overwrites(storage: Storage) -> None:
    with pytest.raises((FileExistsError, JournalError)):
        storage.create(HEADER + lines(1)[0])
    assert forward(storage) == [HEADER]


def test_the_writer_lock_excludes_another_process(backend: Backend, storage: Storage) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    holder = subprocess.Popen([sys.executable, "-c", backend.holder, storage.locator],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        started = time.monotonic()
        with pytest.raises(LockTimeout):
            storage.lock(0.3)
        assert time.monotonic() - started >= 0.25
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    lock = storage.lock(5)
    try:
        assert lock.held
    finally:
        lock.release()
    assert not lock.held


def test_watch_sees_an_append_and_times_out_without_one(storage: Storage) -> None:
    mark = storage.mark()
    size = storage.size()
    started = time.monotonic()
    assert mark is not None and storage.watch(mark, 0.3) is None
    assert time.monotonic() - started >= 0.25

    def append_later() -> None:
        time.sleep(0.2)
        appender = as_storage(storage).open_appender()
        try:
            appender.commit(lines(1)[0])
        finally:
            appender.close()

    writer = threading.Thread(target=append_later)
    writer.start()
    try:
        started = time.monotonic()
        seen = storage.watch(mark, 5)
        waited = time.monotonic() - started
    finally:
        writer.join()
    assert seen is not None and seen.size == size + len(lines(1)[0])
    assert seen.generation == mark.generation
    assert 0.1 <= waited < 2
    assert storage.watch(mark, 1) == seen  # already different: returns at once


def test_watch_sees_a_replacement_of_the_same_length(storage: Storage) -> None:
    mark = storage.mark()
    assert mark is not None
    same_length = HEADER.replace(b'"cwd":"/"', b'"cwd":"~"')
    assert len(same_length) == len(HEADER)

    def replace_later() -> None:
        time.sleep(0.2)
        storage.publish(same_length, "contract")

    replacer = threading.Thread(target=replace_later)
    replacer.start()
    try:
        seen = storage.watch(mark, 5)
    finally:
        replacer.join()
    assert seen is not None and seen.size == mark.size
    assert seen.generation != mark.generation
    assert storage.mark() == seen
