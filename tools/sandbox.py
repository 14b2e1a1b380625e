"""An optional sandbox for the bash tool: bubblewrap with only the workspace writable.

Without it, a command runs with the user's full rights. With it, the whole file system is
mounted read-only, the workspace is mounted back writable, and /tmp and /run are private,
empty tmpfs mounts for each call (so the host's Unix sockets under /run are out of reach).
The command gets its own process and IPC namespaces (host processes are invisible and cannot
be signalled; when the tool kills the sandbox, everything in it dies, detached children
included), a new session (no terminal to inject input into), and a cleared environment that
keeps only PATH, HOME, LANG and TERM (no API keys). The network is not cut off: services
listening on the host's network ports stay reachable.
"""

from __future__ import annotations

import functools
import os
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


KEPT_ENVIRONMENT = ("PATH", "HOME", "LANG", "TERM")


def sandboxed(argv: list[str], workspace: Path) -> list[str]:
    """`argv` wrapped to run under bubblewrap with only `workspace` writable."""
    root = str(workspace)
    kept = [part for name in KEPT_ENVIRONMENT if (value := os.environ.get(name)) is not None
            for part in ("--setenv", name, value)]
    return [
        BWRAP,
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--tmpfs", "/run",
        "--bind", root, root,
        "--chdir", root,
        "--unshare-pid",
        "--unshare-ipc",
        "--new-session",
        "--die-with-parent",
        "--clearenv",
        *kept,
        "--",
        *argv,
    ]  # fmt: skip
