"""`journal-agent demo --postgres`: the main job on a throwaway embedded PostgreSQL server,
end to end (a crash, a lease that frees itself, repair, a resume, fencing, rotation)."""

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
    # the main job's repair and rotation, as the file demo shows them
    assert "repair fixed missing_result: added a synthetic error result" in lines
    assert any(line.startswith("rotated: ") and "under the lease" in line for line in lines)
    assert any(line.startswith("opened by its old name, it writes on in") for line in lines)
    assert "done in" in out


def test_a_terminated_postgres_demo_leaves_no_server_behind(tmp_path: Path) -> None:
    """SIGTERM (what a service manager or `timeout` sends) ends the demo through its cleanup:
    the embedded server stops and its folder goes."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import tempfile

    pg_server.server()
    root = Path(__file__).resolve().parents[1]
    scratch = Path(tempfile.mkdtemp(prefix="journal-demo-term-"))  # TMPDIR the server can reach
    scratch.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1",
           "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "demo", "--postgres", "--dir",
                             str(tmp_path / "demo")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        port = None
        for raw in proc.stdout:
            line = raw.decode()
            if line.startswith("session postgresql://"):
                port = int(line.split("@127.0.0.1:", 1)[1].split("/", 1)[0])
                break
        assert port is not None, proc.stderr.read() if proc.stderr else ""
        assert [p.name for p in scratch.iterdir() if p.name.startswith("journal-pg-")]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there any more
    assert [p.name for p in scratch.iterdir()] == []
    scratch.rmdir()
