"""The writing commands against every kind of bad input: one `Error:` line, exit 2, no
traceback, and nothing created, changed or left behind (no lock file either).

Each command runs in a real process, as a user runs it, on a path with a space and
non-ASCII letters."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import scenario_path
from journal import Session

BIN = Path(sys.executable).parent

BAD_INPUTS: dict[str, bytes | str | None] = {
    "missing": None,
    "directory": "dir",
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "random": os.urandom(4096).replace(b"\n", b"") + b"\x00\xff",
    "non-session JSONL": b'{"hello": "world"}\n{"type": 3}\n',
    "one huge line": b'{"x": "' + b"y" * (3 << 20) + b'"',
}
MESSAGE = b'{"role": "user", "content": "hello", "timestamp": 1}\n'


def commands(path: str, kind: str) -> list[tuple[list[str], bytes]]:
    """(argv, stdin) of every writing command on `path`."""
    found = [
        ([str(BIN / "journal"), "append", path], MESSAGE),
        ([str(BIN / "journal"), "rotate", path], b""),
        ([str(BIN / "journal"), "rotate", "--dry-run", path], b""),
        ([str(BIN / "journal-agent"), "run", "--session", path, "--model",
          f"scripted:{scenario_path('short.json')}", "say hello"], b""),
    ]
    if kind != "directory":  # a folder is what `repair DIR` is for
        found += [([str(BIN / "journal"), "repair", path], b""),
                  ([str(BIN / "journal"), "repair", "--check", path], b""),
                  ([str(BIN / "journal-repair"), path], b"")]
    if kind not in ("missing", "directory"):  # `new DIR` makes its folder
        found.append(([str(BIN / "journal"), "new", path], b""))
    return found


def listing(folder: Path) -> dict[str, str]:
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = (hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file()
                      else "folder")
    return found


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_every_writing_command_refuses_bad_input_cleanly(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "a dir"
    folder.mkdir()
    path = folder / "sé ssion ✓.jsonl"
    content = BAD_INPUTS[kind]
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "LANG": "C.UTF-8",
           "JOURNAL_SESSIONS_DIR": str(home / "sessions")}
    before = listing(tmp_path)
    for argv, stdin in commands(str(path), kind):
        proc = subprocess.run(argv, input=stdin, capture_output=True, cwd=tmp_path, env=env,
                              timeout=60)
        err = proc.stderr.decode("utf-8", "replace")
        shown = f"{argv[0].rsplit('/', 1)[-1]} {argv[1]}: exit {proc.returncode}\n{err}"
        assert proc.returncode == 2, shown
        assert "Traceback" not in err, shown
        assert sum(line.startswith("Error: ") for line in err.splitlines()) == 1, shown
        assert proc.stdout == b"", shown
        assert listing(tmp_path) == before, shown


def as_nobody() -> list[str]:
    """A command prefix that runs as an unprivileged user (none when not root); skips the test
    when there is no way to be one, or when that user cannot run this project's interpreter
    (a checkout in a folder private to root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to be a non-root user")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import journal, agent"],
                           capture_output=True, text=True, cwd="/", timeout=60)
    if probe.returncode != 0:
        pytest.skip("the unprivileged user cannot run this checkout's interpreter "
                    f"(is it in a folder private to root?): {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every user can reach (pytest's own are private to root)."""
    made = Path(tempfile.mkdtemp(prefix="journal-test-"))
    os.chmod(made, 0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("closed", ["the file", "its folder"])
def test_a_session_the_user_cannot_read_is_one_error_line_in_every_command(
        open_folder: Path, closed: str) -> None:
    prefix = as_nobody()
    tmp_path = open_folder
    folder = tmp_path / "a dir"
    folder.mkdir()
    os.chmod(folder, 0o777)  # the user can reach and write the folder, not read the file
    with Session.create(folder / "sé ssion ✓.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "hi", "timestamp": 1})
        path = s.path
    if closed == "the file":
        os.chmod(path, 0)
    else:
        os.chmod(folder, 0o700)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(folder), "LANG": "C.UTF-8",
           "JOURNAL_SESSIONS_DIR": str(folder)}
    before = listing(tmp_path)
    reads = [[str(BIN / "journal"), verb, path] for verb in ("show", "info", "context", "tree",
                                                              "lineage", "tail")]
    for argv, stdin in [*commands(path, "unreadable")[:-1], *((r, b"") for r in reads)]:
        proc = subprocess.run([*prefix, *argv], input=stdin, capture_output=True,
                              cwd=tmp_path, env=env, timeout=60)
        err = proc.stderr.decode("utf-8", "replace")
        shown = f"{argv[0].rsplit('/', 1)[-1]} {argv[1]}: exit {proc.returncode}\n{err}"
        assert proc.returncode == 2, shown
        assert "Traceback" not in err, shown
        assert sum(line.startswith("Error: ") for line in err.splitlines()) == 1, shown
        assert "permission denied" in err.lower(), shown
        assert listing(tmp_path) == before, shown
