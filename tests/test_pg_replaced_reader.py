"""A reader of a database session whose generation a second replacement deleted (two
repairs while it read) is told so, GenerationGone, where it once ended short without a word:
a file reader reads on (its descriptor keeps the old file), but the rows of a database
generation older than the one before the current one are deleted (`publish`)."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

from journal import GenerationGone, Session  # noqa: E402
from journal.entrystream import LineageStream  # noqa: E402
from journal.pg.storage import PostgresStorage  # noqa: E402
from journal.pg.url import session_url  # noqa: E402


def made(url: str, count: int, size: int) -> tuple[PostgresStorage, bytes]:
    """A session of `count` messages of about `size` bytes: its storage and its bytes."""
    with Session.create(url, cwd="/") as session:
        session.append_many([{"type": "message", "message": {
            "role": "user", "content": f"{i} " + "x" * size, "timestamp": 1}}
            for i in range(count)])
    storage = PostgresStorage.from_url(url)
    with storage.open_reader() as reader:
        return storage, bytes(reader.read(0, reader.size))


def test_a_reader_whose_generation_was_deleted_says_so(pg_url: str) -> None:
    storage, data = made(session_url(pg_url, "replaced-twice"), 1000, 1000)
    with storage.open_reader() as reader:
        first = reader.stream.read(64 << 10)  # part way through, as a long export is
        assert len(first) == 64 << 10
        storage.publish(data, "repair")
        with storage.open_reader() as between:  # the generation before the current one
            storage.publish(data, "repair")  # ... whose reader still reads on
            assert bytes(between.read(0, between.size)) == data
        with pytest.raises(GenerationGone, match="replaced, and replaced again since"):
            reader.stream.read()


def test_a_stream_of_entries_is_not_cut_short_by_two_repairs(pg_url: str) -> None:
    """What `export`, `search` and `usage` read with (4 MiB at a time) once gave 4 of 12
    entries and a `torn_tail` warning about a line the session does not have torn."""
    url = session_url(pg_url, "streamed")
    storage, data = made(url, 12, 1 << 20)
    stream = LineageStream([url])
    read = 0
    with pytest.raises(GenerationGone):
        for _ in stream.entries():
            read += 1
            if read == 1:
                storage.publish(data, "repair")
                storage.publish(data, "repair")
    assert read < 12 and not stream.warnings


def test_a_reader_of_a_session_replaced_once_reads_every_byte(pg_url: str) -> None:
    """One replacement keeps the generation before it for its readers: they read on."""
    storage, data = made(session_url(pg_url, "replaced-once"), 1000, 1000)
    with storage.open_reader() as reader:
        first = reader.stream.read(64 << 10)
        storage.publish(data, "repair")
        assert first + reader.stream.read() == data
