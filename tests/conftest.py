from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# Copies of the real pi session files from the shared fixtures, kept in the repo.
PI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pi"


def pi_fixture_dir() -> Path:
    return PI_FIXTURES


@pytest.fixture
def pi_fixture(tmp_path: Path):
    """Copy one of the real pi session files into tmp_path and return the copy's path."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copyfile(pi_fixture_dir() / name, target)
        return target

    return copy
