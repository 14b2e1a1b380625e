"""Repair and rotation keep the original file's mode and owner; new files are private."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from journal import Session
from journal.rotation import rotate

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def rotatable(folder: Path) -> str:
    with Session.create(folder, cwd="/proj") as s:
        for i in range(8):
            s.append_message(user(f"old {i} " + "x" * 600))
        kept = s.append_message(user("kept"))
        s.append_compaction("summary", kept, 100)
        return s.path


def owned(path: str, mode: int) -> tuple[int, int]:
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    st = os.stat(path)
    return st.st_uid, st.st_gid


def journal(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=60)


def test_repair_keeps_mode_and_owner(tmp_path: Path) -> None:
    path = rotatable(tmp_path / "sessions")
    with open(path, "ab") as f:
        f.write(b'{"not": json}\n')
    who = owned(path, 0o644)
    done = journal(tmp_path, "repair", path)
    assert done.returncode == 0, done.stderr
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o644, oct(st.st_mode)
    assert (st.st_uid, st.st_gid) == who


@pytest.mark.parametrize("compress", [False, True])
def test_rotation_keeps_mode_and_owner_of_successor_and_archive(tmp_path: Path,
                                                                compress: bool) -> None:
    path = rotatable(tmp_path / "sessions")
    who = owned(path, 0o640)
    result = rotate(path, compress=compress)
    assert result.rotated and result.successor and result.archive
    for made in (result.successor, result.archive):
        st = os.stat(made)
        assert stat.S_IMODE(st.st_mode) == 0o640, (made, oct(st.st_mode))
        assert (st.st_uid, st.st_gid) == who, made


def test_rotation_into_another_file_system_keeps_mode_and_owner(tmp_path: Path) -> None:
    from mounts import tmpfs

    path = rotatable(tmp_path / "sessions")
    who = owned(path, 0o644)
    with tmpfs(tmp_path / "elsewhere", "1m") as mnt:
        result = rotate(path, archive_dir=str(mnt), compress=False)
        assert result.rotated and result.archive
        st = os.stat(result.archive)
        assert stat.S_IMODE(st.st_mode) == 0o644 and (st.st_uid, st.st_gid) == who


def test_new_session_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
            path = s.path
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def exported(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`journal export` run with the common umask, 022."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "journal.cli", "export", *argv],
                          capture_output=True, text=True, env=env, timeout=60,
                          preexec_fn=lambda: os.umask(0o022))


@pytest.mark.parametrize("fmt", ["md", "html", "jsonl"])
def test_an_export_file_is_private_whatever_the_umask(tmp_path: Path, fmt: str) -> None:
    """It holds the same conversation as the session file, which is 0600."""
    path = rotatable(tmp_path / "sessions")
    out = tmp_path / f"out.{fmt}"
    done = exported(tmp_path, path, "--format", fmt, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_an_export_over_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = rotatable(tmp_path / "sessions")
    out = tmp_path / "shared.html"
    out.write_text("old page")
    os.chmod(out, 0o644)  # its owner shares it on purpose
    done = exported(tmp_path, path, "--format", "html", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    assert out.read_text() != "old page"


def test_a_claude_export_is_private_whatever_the_umask(tmp_path: Path) -> None:
    path = rotatable(tmp_path / "sessions")
    done = exported(tmp_path, path, "--dialect", "claude", "-o", str(tmp_path / "c.jsonl"))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "c.jsonl").st_mode) == 0o600
