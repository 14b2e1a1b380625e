"""Copies of a database session's archive: moved out, read and pulled a chunk at a time,
never held whole (memory measured with tracemalloc against the session's size); a reader's
unpacked copy let go when its stream closes; a full disk, a short read and an export already
there handled without a partial or stray copy."""

from __future__ import annotations

import errno
import gc
import gzip
import hashlib
import io
import os
import tempfile
import uuid
from pathlib import Path

import orjson
import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import psycopg  # noqa: E402
from memory_peak import peak_of  # noqa: E402

from journal import JournalError, archivegz, codec, load  # noqa: E402
from journal.errors import NoSpace  # noqa: E402
from journal.pg import rotation as pg_rotation  # noqa: E402
from journal.pg.rotation import move_out, rotate_database, stream_row  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.transfer import pull, push_bytes  # noqa: E402
from journal.pg.url import session_url  # noqa: E402
from journal.seal import is_seal  # noqa: E402

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


def sealed_session(pg_url: str) -> tuple[str, PostgresStorage]:
    url = session_url(pg_url, str(uuid.uuid4()))
    push_bytes(long_session(40, 2000), url)
    assert rotate_database(url).rotated
    return url, PostgresStorage.from_url(url)


def open_temporaries() -> set[str]:
    """The deleted files of the temporary folder this process has open (an unpacked copy
    has no name: O_TMPFILE, or unlinked at once)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(tempfile.gettempdir()) and target.endswith("(deleted)"):
            found.add(target)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_closing_a_stream_lets_go_of_its_archive_copy(pg_url: str, tmp_path: Path) -> None:
    """`open_for_reading` hands out a reader's stream alone: closing it closes the unpacked
    copy of a moved-out archive at once, not when the collector gets to it."""
    from journal.snapshot import open_for_reading

    url, archive = sealed_session(pg_url)
    move_out(archive, str(tmp_path / "a"))
    before = open_temporaries()
    gc.disable()  # the reader and its stream hold each other: only close may free the copy
    try:
        for _ in range(3):
            stream = open_for_reading(url)
            assert stream.readline().startswith(b'{"type":"session"')
            assert len(open_temporaries() - before) == 1
            stream.close()
            assert open_temporaries() - before == set()
        with archive.open_reader() as reader:
            reader.stream.read()
            reader.stream.close()
            assert open_temporaries() - before == set()
            assert reader.read(0, 10) == b'{"type":"s'  # unpacked again when read again
            assert len(open_temporaries() - before) == 1
        assert open_temporaries() - before == set()
    finally:
        gc.enable()


def test_an_export_already_there_is_taken_without_a_copy(
        pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export that stopped before it was recorded left its file: moving the archive out
    takes that file as it is, writing nothing (on a full disk, say)."""
    url, archive = sealed_session(pg_url)
    target = pg_rotation.export_archive(archive, str(tmp_path / "a"))
    with psycopg.connect(archive.conninfo, autocommit=True) as conn:  # as if never recorded
        conn.execute("UPDATE journal.streams SET exported_to = NULL WHERE session = %s",
                     (archive.session,))
    before = Path(target).stat()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pg_rotation, "NewFile", full)
    assert move_out(archive, str(tmp_path / "a")) == target
    assert Path(target).stat().st_ino == before.st_ino  # the very file
    assert stream_row(archive)["moved_out_at"] is not None  # type: ignore[index]
    assert is_seal(load(url).entries[-1])  # read from that file


def test_a_short_read_publishes_no_archive(pg_url: str, tmp_path: Path) -> None:
    """Rows missing under a size that says otherwise: the copy stops, no file is published
    or recorded, the rows stay (and a later move, once the rows are whole, can go on)."""
    url, archive = sealed_session(pg_url)
    with psycopg.connect(archive.conninfo, autocommit=True) as conn:
        gone = conn.execute(
            "DELETE FROM journal.entries WHERE (stream, generation, byte_offset) = (SELECT "
            "e.stream, e.generation, max(e.byte_offset) FROM journal.entries e JOIN "
            "journal.streams s ON s.id = e.stream AND s.generation = e.generation WHERE "
            "s.session = %s GROUP BY 1, 2) RETURNING *", (archive.session,)).fetchall()
    assert len(gone) == 1
    with pytest.raises(JournalError, match="bytes could be read"):
        move_out(archive, str(tmp_path / "a"))
    assert [p for p in (tmp_path / "a").rglob("*") if p.is_file()] == []
    row = stream_row(archive)
    assert row is not None and row["exported_to"] is None and row["moved_out_at"] is None
    with pytest.raises(JournalError, match="bytes could be read"):
        pull(url, tmp_path / "pulled")
    assert not any(p.is_file() for p in (tmp_path / "pulled").rglob("*"))


def test_a_full_temporary_folder_is_said_so(pg_url: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a moved-out archive unpacks it into the temporary folder: when that is full,
    the error says so (NoSpace), not that the archive cannot be read."""
    url, archive = sealed_session(pg_url)
    move_out(archive, str(tmp_path / "a"))

    class Full(io.BytesIO):
        def write(self, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", lambda **kwargs: Full())
    with pytest.raises(NoSpace, match="no space left"):
        load(url)
