"""Every reader of a compressed archive reads it through `journal.archivegz`, and an archive
whose compressed data is damaged (gzip's header intact, its deflate stream not: reading it
raises zlib.error, which is neither an OSError nor an EOFError) is reported as damaged by
each of them rather than escaping as a traceback."""

from __future__ import annotations

import gzip
import logging
import zlib
from pathlib import Path

import pytest

from journal import archivegz, load
from journal.errors import NotASession
from journal.header import peek
from journal.idscan import IdScan
from journal.lineage import last_entry
from journal.repair import plan
from journal.storage import as_storage
from journal.tail.source import Delivered, Source, SourceReader, open_regular

HEADER = (b'{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z",'
          b'"cwd":"/"}\n')


def entry(i: int) -> bytes:
    return (b'{"type":"message","id":"%08x","parentId":null,"timestamp":'
            b'"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"hi %d",'
            b'"timestamp":1}}\n' % (i + 1, i))


BODY = HEADER + b"".join(entry(i) for i in range(200))


def damaged() -> bytes:
    """An archive of BODY whose gzip header is whole and whose deflate data is not."""
    data = bytearray(gzip.compress(BODY, mtime=0))
    for i in range(12, 40):  # past the 10-byte gzip header
        data[i] ^= 0x5A
    with pytest.raises(zlib.error):
        gzip.decompress(bytes(data))
    return bytes(data)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "old.jsonl.gz"
    path.write_bytes(damaged())
    return path


def test_the_rules_of_an_archive() -> None:
    assert archivegz.is_compressed("a/b.jsonl.gz") and not archivegz.is_compressed("b.jsonl")
    assert archivegz.decompress(gzip.compress(BODY), "x.gz") == BODY
    with pytest.raises(NotASession, match=r"^x\.gz: not a readable gzip archive \(Error -3"):
        archivegz.decompress(damaged(), "x.gz")
    with pytest.raises(NotASession, match="not a readable gzip archive"):
        archivegz.decompress(b"\x1f\x8bnot really", "x.gz")


def test_the_names_of_an_archive() -> None:
    assert archivegz.compressed_name("a/b.jsonl") == "a/b.jsonl.gz"
    assert archivegz.compressed_name("a/b.jsonl.gz") == "a/b.jsonl.gz"
    assert archivegz.uncompressed_name("a/b.jsonl.gz") == "a/b.jsonl"
    assert archivegz.uncompressed_name("a/b.jsonl") == "a/b.jsonl"
    assert archivegz.names_of("b.jsonl.gz") == archivegz.names_of("b.jsonl") == [
        "b.jsonl", "b.jsonl.gz"]


def test_load_and_repair_say_the_archive_is_damaged(archive: Path) -> None:
    with pytest.raises(NotASession, match="not a readable gzip archive"):
        load(str(archive))
    with pytest.raises(NotASession, match="not a readable gzip archive"):
        plan(str(archive))


def test_the_header_and_last_entry_of_a_damaged_archive_are_none(archive: Path) -> None:
    assert peek(str(archive)).header is None
    assert last_entry(str(archive)) is None


def test_the_id_scan_of_a_damaged_archive_ends_quietly(
        archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background scan of the ids in an archive a session continues: a damaged one gives
    no ids (fresh ids are then checked against the entries read), and nothing escapes the
    thread."""
    import threading

    escaped: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    scan = IdScan(str(archive))
    assert scan.wait(10) is False
    assert escaped == []
    whole = archive.with_name("whole.jsonl.gz")
    whole.write_bytes(gzip.compress(BODY))
    read = IdScan(str(whole))
    assert read.wait(10) and "000000c8" in read


class _Reader(SourceReader):
    since_id = None


def test_the_tail_warns_of_a_damaged_archive_and_goes_on(
        archive: Path, caplog: pytest.LogCaptureFixture) -> None:
    storage = as_storage(str(archive))
    src = Source(path=str(archive), delivered=Delivered(), storage=storage,
                 reader=open_regular(storage))
    try:
        with caplog.at_level(logging.WARNING, logger="journal"):
            events = list(_Reader().read_compressed(src))
    finally:
        src.close()
    assert events == []
    assert any("compressed archive unreadable" in r.getMessage() for r in caplog.records)


def test_the_tail_reads_a_whole_archive(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl.gz"
    path.write_bytes(gzip.compress(BODY))
    storage = as_storage(str(path))
    src = Source(path=str(path), delivered=Delivered(), storage=storage,
                 reader=open_regular(storage))
    try:
        events = list(_Reader().read_compressed(src))
    finally:
        src.close()
    assert [e.entry["id"] for e in events if e.entry is not None] == [
        f"{i + 1:08x}" for i in range(200)]

