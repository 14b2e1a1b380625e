"""The storage seam's contract, run against every backend.

Each backend supplies a `Backend`: how to make an empty storage in a test folder, the code a
second process runs to hold its writer lock, and how to make the next commit's write come up
short (what a filling disk does). The backends are the file system, PostgreSQL (the run's
embedded server, tests/pg_server.py; skipped when it cannot start) and, for tests only, a
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
import pg_server
import pytest
from memory_storage import MemoryStorage

from journal import Durability
from journal.codec import Line
from journal.errors import JournalError, LockTimeout, WriteFailed
from journal.storage import FileStorage, Mark, Storage, as_storage

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


def _postgres(folder: Path) -> Storage:
    """A session of the run's embedded PostgreSQL server, named after the test's folder."""
    pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
    from journal.pg.storage import PostgresStorage

    url = pg_server.shared_database()
    return PostgresStorage(url, str(folder))


def _postgres_short_write(monkeypatch: pytest.MonkeyPatch, storage: Storage) -> None:
    """The next commit's connection is killed mid-commit, and so is the appender's retry (what
    a network that keeps failing does): both wait on the session's row, held here (the retry
    locks it before it looks the batch up), and are terminated there; then the row is let
    go."""
    import psycopg

    from journal.pg.storage import COMMIT_ATTEMPTS, PostgresStorage

    assert isinstance(storage, PostgresStorage)
    holder = psycopg.connect(storage.conninfo, autocommit=True)
    holder.execute("BEGIN")
    holder.execute("SELECT 1 FROM journal.streams WHERE session = %s FOR UPDATE",
                   (storage.session,))

    def kill() -> None:
        killed: set[int] = set()
        try:
            with psycopg.connect(storage.conninfo, autocommit=True) as admin:
                deadline = time.monotonic() + 20
                while len(killed) < COMMIT_ATTEMPTS and time.monotonic() < deadline:
                    for (pid,) in admin.execute(
                            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND (query LIKE '%%journal.append%%' "
                            "OR query LIKE '%%FROM journal.streams%%FOR UPDATE') "
                            "AND datname = current_database()").fetchall():
                        if pid not in killed:
                            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                            killed.add(pid)
                    time.sleep(0.005)
        finally:
            holder.execute("ROLLBACK")
            holder.close()

    threading.Thread(target=kill, daemon=True).start()


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
    Backend(
        "postgres",
        _postgres,
        "import sys\n"
        "from journal.storage import as_storage\n"
        "lock = as_storage(sys.argv[1]).lock(5)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n",
        _postgres_short_write,
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


def test_publish_based_on_a_size_the_session_no_longer_has_replaces_nothing(
        storage: Storage) -> None:
    """A replacement made from what was read refuses to land once the session has grown
    since (an appender without the lock: a database's need not hold the lease)."""
    from journal.errors import SessionChanged

    read = storage.size()
    appender = storage.open_appender()
    try:
        appender.commit(lines(1, "meanwhile")[0])
    finally:
        appender.close()
    grown = forward(storage)
    called: list[bool] = []
    with pytest.raises(SessionChanged, match="changed while it was being replaced"):
        storage.publish(HEADER + b"".join(lines(2, "r")), "contract",
                        lambda: called.append(True), based_on=read)
    assert forward(storage) == grown and called == []
    storage.publish(HEADER + b"".join(lines(2, "r")), "contract", based_on=storage.size())
    assert forward(storage) == [HEADER, *lines(2, "r")]


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


# what the live tail needs: a reader that follows its generation, and one standing watch


def commit(storage: Storage, data: bytes) -> None:
    appender = storage.open_appender()
    try:
        appender.commit(data)
    finally:
        appender.close()


def test_a_reader_reads_later_appends_of_its_generation_and_keeps_it_after_a_replacement(
        storage: Storage) -> None:
    reader = storage.open_reader()
    try:
        mark = storage.mark()
        assert mark is not None and reader.generation == mark.generation
        assert reader.extent() == reader.size == len(HEADER)
        commit(storage, b"".join(lines(2)))
        assert reader.size == len(HEADER)  # what it held at opening
        assert reader.extent() == len(HEADER) + len(b"".join(lines(2)))
        assert reader.read(len(HEADER), 1 << 20) == b"".join(lines(2))
        assert reader.read(len(HEADER) + len(lines(1)[0]), 5) == lines(2)[1][:5]
        assert reader.read(reader.extent(), 100) == b""
        storage.publish(HEADER + lines(1, "new")[0], "contract")
        now = storage.mark()
        assert now is not None and now.generation != reader.generation
        # still the generation it opened, to its end
        assert reader.read(0, 1 << 20) == HEADER + b"".join(lines(2))
    finally:
        reader.close()
    with storage.open_reader() as fresh:
        assert fresh.generation == now.generation
        assert fresh.read(0, 1 << 20) == HEADER + lines(1, "new")[0]


def test_one_standing_watch_waits_on_many_sessions_and_ends_on_stop(
        backend: Backend, tmp_path: Path) -> None:
    stores = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        made = backend.make(tmp_path / name)
        made.create(HEADER)
        stores.append(made)
    stop = threading.Event()
    watch = stores[0].open_watch(stop, 0.3)
    try:
        watch.wait(stores)  # a new watch may wake once at once (see the protocol)
        started = time.monotonic()
        assert watch.wait(stores) is True  # nothing changed: the interval passes
        assert time.monotonic() - started >= 0.25

        long_watch = stores[0].open_watch(stop, 30)
        try:
            long_watch.wait(stores)
            before = stores[1].mark()
            timer = threading.Timer(0.2, commit, (stores[1], lines(1)[0]))
            timer.start()
            started = time.monotonic()
            try:
                while stores[1].mark() == before and time.monotonic() - started < 5:
                    assert long_watch.wait(stores) is True
            finally:
                timer.join()
            assert stores[1].mark() != before
            assert time.monotonic() - started < 2  # woken by the append, not the 30 s
        finally:
            long_watch.close()

        stop.set()
        started = time.monotonic()
        assert watch.wait(stores) is False
        assert time.monotonic() - started < 1
    finally:
        watch.close()


def test_a_stop_set_while_waiting_ends_the_wait(backend: Backend, storage: Storage) -> None:
    stop = threading.Event()
    watch = storage.open_watch(stop, 30)
    try:
        watch.wait([storage])
        threading.Timer(0.2, stop.set).start()
        started = time.monotonic()
        while watch.wait([storage]):
            assert time.monotonic() - started < 5
        assert time.monotonic() - started < 2
    finally:
        watch.close()


def test_the_file_backend_has_no_mark_for_what_is_not_a_session_file(tmp_path: Path) -> None:
    folder = tmp_path / "x.jsonl"
    folder.mkdir()
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    assert FileStorage(str(folder)).mark() is None
    assert FileStorage(str(fifo)).mark() is None
    assert FileStorage(str(tmp_path / "missing.jsonl")).mark() is None


def test_the_standing_watch_waits_on_the_event_loop_too(storage: Storage) -> None:
    import asyncio

    async def main() -> tuple[float, Mark | None]:
        stop = asyncio.Event()
        watch = storage.open_watch(stop, 30)
        try:
            await watch.wait_async([storage])
            before = storage.mark()
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, commit, storage, lines(1)[0])
            started = time.monotonic()
            while storage.mark() == before and time.monotonic() - started < 5:
                assert await watch.wait_async([storage]) is True
            waited = time.monotonic() - started
            stop.set()
            assert await watch.wait_async([storage]) is False
            return waited, before
        finally:
            await watch.aclose()

    waited, before = asyncio.run(main())
    assert storage.mark() != before
    assert waited < 2
