"""Small helpers for telling text files from binary ones."""

from __future__ import annotations

from pathlib import Path

SNIFF_BYTES = 8192


def looks_binary(path: Path) -> bool:
    """Whether the file's first bytes contain a NUL, the same test git and grep use."""
    with path.open("rb") as fh:
        return b"\0" in fh.read(SNIFF_BYTES)
