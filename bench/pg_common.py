"""What the PostgreSQL benchmarks of push and the catalog share: the synthetic session
generator (`bench/gen_session.py`, loaded as a module) and a database to run on."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def generator() -> Any:
    """`bench/gen_session.py` as a module (`generate`, `parse_size`)."""
    spec = importlib.util.spec_from_file_location("bench_gen", ROOT / "bench" / "gen_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gen"] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def database(url: str | None) -> Iterator[str]:
    """`url`, or a throwaway embedded server's (stopped and removed afterwards)."""
    if url is not None:
        yield url
        return
    from journal.pg.server import EmbeddedServer

    server = EmbeddedServer().start()
    try:
        yield server.url()
    finally:
        server.close()
