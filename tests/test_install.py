"""The package as a user gets it: a wheel, installed into a fresh venv, used from elsewhere.

The wheel is built from a copy of the sources (so the checkout gets no `build/` or
`*.egg-info`), then installed into fresh venvs made without pip (this interpreter's pip installs
into them with `--python`). Dependencies come from the package index pip is configured with,
and from its cache; where pip cannot reach one (no network, no local index) the tests skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.install, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "journal", "agent", "tools")
PIP_TIMEOUT = 600
UNREACHABLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
    r"Network is unreachable|ProxyError|Could not fetch URL|connection broken",
    re.IGNORECASE,
)


def _environ() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "ANTHROPIC_API_KEY")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def _pip(*args: str) -> None:
    """Run this interpreter's pip; skip the test when it cannot reach a package index."""
    result = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                            env=_environ(), timeout=PIP_TIMEOUT)
    if result.returncode != 0:
        if UNREACHABLE.search(result.stderr):
            pytest.skip(f"pip cannot install offline here: {result.stderr.strip()[-300:]}")
        pytest.fail(f"pip {' '.join(args)} failed:\n{result.stderr[-3000:]}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.exists():
            shutil.copy2(path, source / name)
    _pip("wheel", "-q", "--no-deps", "--wheel-dir", str(base / "dist"), str(source))
    (built,) = (base / "dist").glob("journal-*.whl")
    return built


def _fresh_venv(where: Path, requirement: str) -> Path:
    """A new venv holding `requirement` and its dependencies; returns its bin directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=120, env=_environ())
    python = where / "bin" / "python"
    _pip("--python", str(python), "install", "-q", requirement)
    return where / "bin"


def _run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env=_environ(), timeout=timeout)


def test_wheel_without_the_agent_extra_installs_the_store_alone(
    wheel: Path, tmp_path: Path
) -> None:
    bin_dir = _fresh_venv(tmp_path / "venv", str(wheel))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import importlib.util, sys\n"
        "import journal\n"
        "print(journal.__file__)\n"
        "print(sorted(m for m in ('anthropic', 'tiktoken', 'asyncio', 'watchfiles')"
        " if m in sys.modules))\n"
        "print(sorted(m for m in ('anthropic', 'tiktoken', 'httpx2')"
        " if importlib.util.find_spec(m) is not None))\n"
    )
    result = _run([str(bin_dir / "python"), "-c", probe], elsewhere)
    assert result.returncode == 0, result.stderr
    where, imported, installed = result.stdout.splitlines()
    assert Path(where).is_relative_to(tmp_path / "venv")
    assert imported == "[]", f"import journal loaded {imported}"
    assert installed == "[]", f"the store alone pulled in {installed}"
    created = _run([str(bin_dir / "journal"), "new", str(elsewhere / "sessions")], elsewhere)
    assert created.returncode == 0, created.stderr
    assert Path(created.stdout.strip()).is_file()


def test_wheel_with_the_agent_extra_runs_the_demo_from_anywhere(
    wheel: Path, tmp_path: Path
) -> None:
    bin_dir = _fresh_venv(tmp_path / "venv", f"{wheel}[agent]")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _run([str(bin_dir / "journal-agent"), "demo", "--dir", "demo"], elsewhere,
                  timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "done in" in result.stdout
    sessions = list((elsewhere / "demo" / "sessions").glob("*.jsonl"))
    assert sessions, "the demo wrote no session"
    probe = "from agent.scenarios import SCENARIOS; print(SCENARIOS / 'demo.json')"
    shipped = _run([str(bin_dir / "python"), "-c", probe], elsewhere)
    assert Path(shipped.stdout.strip()).is_relative_to(tmp_path / "venv"), shipped.stderr
