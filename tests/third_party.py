"""The third-party session files for tests, or a skip when this checkout does not have them.

Where they are looked for is decided in ``bench/shared_fixtures.py``; every test reaches
them through `pi_path` or `pi_bytes`, so that a plain clone skips those tests with the reason.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_fixtures() -> ModuleType:
    """bench/shared_fixtures.py, loaded once by path (bench/ is not a package)."""
    name = "bench_shared_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "shared_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def pi_path(name: str) -> Path:
    """The path of one of the real pi session files (read it, never write it); skips if absent."""
    sf = shared_fixtures()
    reason = sf.missing(sf.PI, [name])
    if reason is not None:
        pytest.skip(reason)
    path: Path = sf.fixture_dir(sf.PI) / name
    return path


def pi_bytes(name: str) -> bytes:
    return pi_path(name).read_bytes()


def claude_path(name: str) -> Path:
    """The path of one of the Claude Code transcript samples (read it, never write it);
    skips if absent."""
    sf = shared_fixtures()
    reason = sf.missing(sf.CLAUDE, [name])
    if reason is not None:
        pytest.skip(reason)
    path: Path = sf.fixture_dir(sf.CLAUDE) / name
    return path
