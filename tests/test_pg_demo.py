"""`journal-agent demo --postgres`: the main job on a throwaway embedded PostgreSQL server,
end to end (a crash, a lease that frees itself, a resume, fencing)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
import pg_server  # noqa: E402

from agent.cli import main  # noqa: E402


def test_the_postgres_demo_runs_end_to_end(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    pg_server.server()  # skips, with the reason, where no embedded server can start
    assert main(["demo", "--postgres", "--dir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    assert any(line.startswith("→ stop after") and "compaction" in line for line in lines)
    assert any("killed it with SIGKILL" in line for line in lines)
    assert any(line.startswith("opened again in") for line in lines)
    assert any("pairing fixed for it: missing_result 1" in line for line in lines)
    assert "writer A is refused: LeaseLost" in lines
    assert "done in" in out
