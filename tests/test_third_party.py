"""The third-party session files are found outside the repository, or their tests skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from third_party import ROOT, shared_fixtures

sf = shared_fixtures()


def _shared_copy(root: Path, names: tuple[str, ...]) -> Path:
    (root / "pi").mkdir(parents=True)
    for name in names:
        (root / "pi" / name).write_bytes(b"{}\n")
    return root


def test_the_environment_variable_names_the_folder(tmp_path: Path) -> None:
    root = _shared_copy(tmp_path / "elsewhere", sf.PI_FILES)
    environ = {sf.ENV_VAR: str(root)}
    assert sf.fixture_dir(sf.PI, environ) == root / "pi"
    assert sf.missing(sf.PI, sf.PI_FILES, environ) is None


def test_without_the_variable_the_folder_is_beside_the_repository() -> None:
    assert sf.shared_root({}) == ROOT.parent / "shared" / "fixtures"
    assert sf.shared_root({sf.ENV_VAR: ""}) == ROOT.parent / "shared" / "fixtures"
    assert sf.fixture_dir(sf.CLAUDE, {}) == ROOT.parent / "shared" / "fixtures" / "claude"


def test_the_reason_names_the_path_and_the_way_out(tmp_path: Path) -> None:
    environ = {sf.ENV_VAR: str(tmp_path / "absent")}
    reason = sf.missing(sf.PI, sf.PI_FILES, environ)
    assert reason is not None
    assert str(tmp_path / "absent" / "pi") in reason and sf.ENV_VAR in reason

    root = _shared_copy(tmp_path / "partial", sf.PI_FILES[:1])
    reason = sf.missing(sf.PI, sf.PI_FILES, {sf.ENV_VAR: str(root)})
    assert reason is not None and str(root / "pi" / sf.PI_FILES[1]) in reason


def test_the_repository_holds_no_third_party_session_file() -> None:
    assert not (ROOT / "fixtures" / "pi").exists()
    assert not (ROOT / "fixtures" / "claude").exists()


def test_tests_on_real_pi_files_skip_with_the_reason_when_they_are_absent(tmp_path: Path) -> None:
    """A plain clone: the tests that read a pi file are skipped, none fails or errors."""
    selected = [
        "tests/test_context.py::test_real_fixtures_have_the_expected_shape",
        "tests/test_agent_tokens.py::test_real_fixture_messages_estimate",
        "tests/test_repair.py::test_corpus",
    ]
    env = {**os.environ, sf.ENV_VAR: str(tmp_path / "absent")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-rs", "-p", "no:cacheprovider", *selected],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert " passed" in out and " skipped" in out, out
    assert "failed" not in out and "error" not in out.lower(), out
    assert f"third-party pi session files not found at {tmp_path / 'absent' / 'pi'}" in out, out
