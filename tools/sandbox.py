"""An optional sandbox for the bash tool: bubblewrap with only the workspace writable.

Without it, a command runs with the user's full rights. With it, the whole file system is
mounted read-only, the workspace is mounted back writable, and /tmp is a private, empty
tmpfs for each call. Processes keep the host's process ids (no pid namespace), so the
tool's timeout can kill the whole process group as it does without the sandbox. The
network is not cut off.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

BWRAP = "bwrap"


class SandboxUnavailable(Exception):
    """The sandbox was asked for but bubblewrap is missing or cannot run here."""


@functools.cache
def sandbox_available() -> bool:
    """Whether bubblewrap is installed and can set up its namespaces on this machine."""
    if shutil.which(BWRAP) is None:
        return False
    try:
        probe = subprocess.run(
            [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def require_sandbox() -> None:
    """Raise `SandboxUnavailable`, saying what to install, unless the sandbox can run."""
    if not sandbox_available():
        raise SandboxUnavailable(
            "the bash tool's sandbox needs bubblewrap ('bwrap' on PATH, Debian package "
            "bubblewrap) and unprivileged user namespaces; install it or run without the "
            "sandbox"
        )


def sandboxed(argv: list[str], workspace: Path) -> list[str]:
    """`argv` wrapped to run under bubblewrap with only `workspace` writable."""
    root = str(workspace)
    return [
        BWRAP,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--bind", root, root,
        "--chdir", root,
        "--die-with-parent",
        "--",
        *argv,
    ]  # fmt: skip
