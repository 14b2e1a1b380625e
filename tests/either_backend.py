"""For tests that run the same on a file session and a database session: the fixture
`file_or_database` (a place to create a session in: a file path, or a database session URL;
every test module has it through conftest.py) and `stored` (a session's bytes as its
storage holds them)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["file", "database"])
def file_or_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A place to create a session in: a file, or a database session URL."""
    if request.param == "file":
        return str(tmp_path / "s.jsonl")
    pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
    from journal.pg.url import session_url

    url: str = request.getfixturevalue("pg_url")
    return session_url(url, "either")


def stored(where: str) -> bytes:
    """The bytes of the session at `where`, as its storage holds them."""
    from journal.storage import as_storage

    with as_storage(where).open_reader() as reader:
        return reader.stream.read()
