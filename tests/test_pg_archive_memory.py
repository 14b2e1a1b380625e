"""An archive of a database session is moved out, read and pulled a chunk at a time: never
held whole (memory measured with tracemalloc against the session's size)."""

from __future__ import annotations

import gzip
import hashlib
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import archivegz, codec, load  # noqa: E402
from journal.pg.rotation import move_out, rotate_database, stream_row  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.transfer import pull, push_bytes  # noqa: E402
from journal.pg.url import session_url  # noqa: E402

STAMP = "2026-05-28T00:00:00.000Z"


def long_session(entries: int = 1000, text_bytes: int = 8000) -> bytes:
    """A version 3 session of `entries` messages in one chain, each of a different text
    (so its archive does not compress to nothing), a compaction keeping the last two."""
    lines = [orjson.dumps({"type": "session", "version": 3, "id": str(uuid.uuid4()),
                           "timestamp": STAMP, "cwd": "/w"})]
    parent = None
    for n in range(entries):
        text = hashlib.sha256(str(n).encode()).hexdigest() * (text_bytes // 64)
        entry_id = f"{n:08x}"
        lines.append(orjson.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                   "timestamp": STAMP, "message": {
                                       "role": "user" if n % 2 == 0 else "assistant",
                                       "content": [{"type": "text", "text": text}],
                                       "timestamp": 1}}))
        parent = entry_id
    lines.append(orjson.dumps({"type": "compaction", "id": "c0000001", "parentId": parent,
                               "timestamp": STAMP, "summary": "before",
                               "firstKeptEntryId": f"{entries - 2:08x}",
                               "tokensBefore": 1000}))
    return b"\n".join(lines) + b"\n"


def peak_of(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_moving_out_reading_and_pulling_an_archive_never_hold_it_whole(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archivegz, "CHUNK", 1 << 16)  # 64 KiB at a time: a small bound
    monkeypatch.setattr(codec, "CHUNK", 1 << 16)  # as a reader of lines may read
    data = long_session()
    size = len(data)
    assert size > 8_000_000
    url = session_url(pg_url, str(uuid.uuid4()))
    push_bytes(data, url)
    assert rotate_database(url).rotated
    archive = PostgresStorage.from_url(url)
    whole = peak_of(lambda: load(url))
    assert whole > size  # the measure sees a whole read

    moved: list[str] = []
    peak = peak_of(lambda: moved.append(move_out(archive, str(tmp_path / "archives"))))
    assert peak < size * 0.2, ("move_out", peak, size)
    with gzip.open(moved[0]) as f:
        sealed = f.read()
    assert sealed.startswith(data) and len(sealed) > size  # its bytes and the seal
    assert stream_row(archive)["moved_out_at"] is not None  # type: ignore[index]

    def read_all() -> int:
        count = 0
        with archive.open_reader() as reader:
            for _ in reader.lines():
                count += 1
        return count

    counts: list[int] = []
    peak = peak_of(lambda: counts.append(read_all()))
    assert counts == [len(sealed.splitlines())]
    assert peak < size * 0.2, ("read", peak, size)

    peak = peak_of(lambda: pull(url, tmp_path / "pulled"))
    assert peak < size * 0.2, ("pull", peak, size)
    pulled = [p for p in (tmp_path / "pulled").rglob("*") if p.is_file()]
    archives = [p for p in pulled if p.parent.name == "archive"]  # and the live successor
    assert len(pulled) == 2 and len(archives) == 1
    got = archives[0].read_bytes()
    assert (gzip.decompress(got) if archives[0].suffix == ".gz" else got) == sealed
