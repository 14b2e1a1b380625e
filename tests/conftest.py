from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pg_server
import pytest
from either_backend import file_or_database  # noqa: F401  (the fixture)
from pg_server import pg_url  # noqa: F401  (the fixture, for every test module)
from third_party import pi_path

from tools import Workspace


@pytest.fixture
def pi_fixture(tmp_path: Path) -> Callable[[str], Path]:
    """Copy one of the real pi session files into tmp_path and return the copy's path.

    The files are not part of this repository (see bench/shared_fixtures.py): the test that
    asks for one is skipped, with the reason, when it is absent.
    """

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copyfile(pi_path(name), target)
        return target

    return copy


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A workspace folder for the tools."""
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a file the tools must never reach."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret\n")
    return out


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the embedded PostgreSQL server if a test started one (tests/pg_server.py)."""
    pg_server.stop()
