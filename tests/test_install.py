"""The package as a user gets it: a wheel, installed into a fresh venv, used from elsewhere.

The wheel is built from a copy of the sources (so the checkout gets no `build/` or
`*.egg-info`), then installed with `--no-index --no-deps` into fresh venvs made without pip (this
interpreter's pip installs into them with `--python`). Nothing is downloaded: the dependencies a
venv is meant to have (the store's, or the store's and the agent extra's, resolved from the
package's own metadata) are the distributions this environment already holds, linked into a
folder the fresh venv reads through a `.pth` file. A dependency the package does not declare
is therefore missing there, as it would be for a user.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

# pip and venvs get their own, longer limits (600 s a call) than the run's 240 s a test
pytestmark = [pytest.mark.install, pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "journal", "agent", "tools")
PIP_TIMEOUT = 600


def _environ(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "ANTHROPIC_API_KEY")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_NO_CACHE_DIR="1",
               PIP_NO_INDEX="1", HOME=str(home))
    return env


def _pip(home: Path, *args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                            env=_environ(home), timeout=PIP_TIMEOUT)
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stderr[-3000:]}"


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
    _pip(base, "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir",
         str(base / "dist"), str(source))
    (built,) = (base / "dist").glob("journal-*.whl")
    return built


def _closure(extras: set[str]) -> set[str]:
    """The distributions `journal` (with `extras`) needs, by the package's own metadata."""
    wanted: set[str] = set()
    todo = [(r, extras) for r in metadata.requires("journal") or []]
    while todo:
        text, active = todo.pop()
        requirement = Requirement(text)
        environment = {"extra": ""}
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({**environment, "extra": e})
                for e in (active or {""})):
            continue
        name = requirement.name.lower().replace("_", "-")
        if name in wanted or name == "journal":
            continue
        wanted.add(name)
        todo += [(r, set(requirement.extras)) for r in metadata.requires(name) or []]
    return wanted


def _link_dependencies(names: set[str], into: Path) -> None:
    """Link each distribution's top-level files and folders (and its metadata) into `into`."""
    into.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        for file in dist.files or []:
            top = file.parts[0]
            source = Path(str(dist.locate_file(top)))
            target = into / top
            if top not in ("..", "__pycache__") and source.exists() and not target.exists():
                target.symlink_to(source)


def _fresh_venv(where: Path, wheel: Path, extras: set[str]) -> Path:
    """A new venv holding the wheel, and its dependencies for `extras`; its bin directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=120, env=_environ(where))
    python = where / "bin" / "python"
    _pip(where, "--python", str(python), "install", "-q", "--no-deps", str(wheel))
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, env=_environ(where)).stdout.strip()
    deps = where / "deps"
    _link_dependencies(_closure(extras), deps)
    Path(site, "dependencies.pth").write_text(f"{deps}\n")
    return where / "bin"


def _run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env=_environ(cwd), timeout=timeout)


def test_wheel_without_the_agent_extra_installs_the_store_alone(
    wheel: Path, tmp_path: Path
) -> None:
    bin_dir = _fresh_venv(tmp_path / "venv", wheel, set())
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
    # the price table is package data: `journal usage` finds it in the installed wheel
    counted = _run([str(bin_dir / "journal"), "usage", "sessions", "--json"], elsewhere)
    assert counted.returncode == 0, counted.stderr
    prices = json.loads(counted.stdout)["prices"]
    assert Path(prices["path"]).is_relative_to(tmp_path / "venv") and prices["asOf"]
    # the agent's command is installed too, and says what it needs instead of a traceback
    agent = _run([str(bin_dir / "journal-agent"), "demo", "--dir", "demo"], elsewhere)
    assert agent.returncode == 2, agent.stdout + agent.stderr
    assert agent.stderr.startswith("Error: journal-agent needs the agent extra"), agent.stderr
    assert "Traceback" not in agent.stderr and len(agent.stderr.splitlines()) == 1
    assert "pip install 'journal[agent]'" in agent.stderr
    assert not (elsewhere / "demo").exists()


def test_wheel_with_the_agent_extra_runs_the_demo_from_anywhere(
    wheel: Path, tmp_path: Path
) -> None:
    bin_dir = _fresh_venv(tmp_path / "venv", wheel, {"agent"})
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
