"""A real, small tmpfs for full-disk and read-only tests (root only; skipped elsewhere)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of `size` (e.g. "512k") on the new folder `where`, unmount it after;
    skip the test where mounting is not permitted."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700",
                               "tmpfs", str(where)], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)
