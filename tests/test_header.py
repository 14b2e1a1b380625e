"""One header reader: lineage, the tail, `resume`, the writer's preflight and the loader agree.

Before, lineage read a header without its newline and refused one after a byte order mark,
while the loader and the tail did the opposite; now every reader goes through
`journal.header`.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from journal import NotASession, Session, load, resume
from journal.header import HEADER_LIMIT, FirstLine, peek, read_header

HEADER = (b'{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z",'
          b'"cwd":"/"}')
ENTRY = (b'{"type":"message","id":"a","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z",'
         b'"message":{"role":"user","content":"x"}}\n')

FIRST_LINES = {
    "plain": HEADER + b"\n",
    "byte order mark": b"\xef\xbb\xbf" + HEADER + b"\n",
    "carriage return": HEADER + b"\r\n",
    "no newline yet": HEADER,
    "not json": b"{garbage\n",
    "not a session": b'{"type":"message"}\n',
    "blank": b"\n",
}


@pytest.mark.parametrize("name", sorted(FIRST_LINES))
def test_every_reader_sees_the_header_the_loader_sees(tmp_path: Path, name: str) -> None:
    first = FIRST_LINES[name]
    body = ENTRY if first.endswith(b"\n") else b""
    path = tmp_path / "s.jsonl"
    path.write_bytes(first + body)
    archive = tmp_path / "old.jsonl.gz"
    archive.write_bytes(gzip.compress(first + body))
    loaded = load(path).header
    assert read_header(str(path)) == loaded
    assert read_header(str(archive)) == loaded
    assert resume(path).header == loaded
    seen = peek(str(path))
    assert seen.complete == first.endswith(b"\n")
    assert seen.end == (len(first) if loaded is not None else 0)
    if loaded is None:
        with pytest.raises(NotASession):
            Session.open(path)
    else:
        with Session.open(path) as session:
            assert session.header == loaded


def test_a_first_line_longer_than_the_limit_is_no_header_and_is_not_read_to_its_end(
        tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"type":"session","pad":"' + b"x" * 200 + b'"}\n' + ENTRY)
    assert peek(str(path), limit=64) == FirstLine(True)
    assert peek(str(path)).header is not None
    assert HEADER_LIMIT == 1 << 20


def test_what_cannot_be_read_says_nothing(tmp_path: Path) -> None:
    (tmp_path / "folder.jsonl").mkdir()
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all")
    link = tmp_path / "dangling.jsonl"
    os.symlink(tmp_path / "gone", link)
    for path in ("folder.jsonl", "bad.jsonl.gz", "dangling.jsonl", "missing.jsonl"):
        assert peek(str(tmp_path / path)) == FirstLine(False)
        assert read_header(str(tmp_path / path)) is None
