"""What tests ask of processes they did not start themselves."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Whether the process `pid` runs (a zombie, ended but not yet waited for, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
