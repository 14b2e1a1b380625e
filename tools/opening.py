"""Opening files and folders in the workspace for the file tools, safely.

Every open goes through `Workspace.locate` and then opens the last component relative to
its folder with `O_NOFOLLOW` (a symlink swapped in at the last moment makes the open fail
and the walk start again), and with `O_NONBLOCK`, so a FIFO cannot block the call. What
was opened is then checked with `fstat`: only regular files are read or changed, and a
file with more than one hard link is never changed, because another of its names may be
outside the workspace. Last, the opened file's own path (from /proc) must still be inside,
which catches a folder moved out of the workspace between the walk and the open.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from tools.errors import ToolError, WorkspaceEscape
from tools.walk import make_dirs
from tools.workspace import Workspace

ATTEMPTS = 5
"""Walks tried before giving up on a path that keeps changing under the call."""


class Access(Enum):
    READ = os.O_RDONLY
    WRITE = os.O_WRONLY
    EDIT = os.O_RDWR


@dataclass(frozen=True)
class Opened:
    """An open file or folder, its `fstat` at open, and its path as shown to the model."""

    fd: int
    st: os.stat_result
    shown: str
    created: bool = False


@contextmanager
def open_file(
    ws: Workspace, path: str, access: Access, *, create: bool = False
) -> Iterator[Opened]:
    """Open the regular file at `path` for `access`; it is closed when the block ends.

    With `create`, a missing file and its missing folders are created. Raises `ToolError`
    for a missing file, a folder, a non-regular file, or (to change) a hard-linked file.
    """
    opened = _open(ws, path, access.value, create=create)
    try:
        kind = _kind(opened.st.st_mode)
        if stat.S_ISDIR(opened.st.st_mode):
            hint = "; use ls to list it" if access is Access.READ else ""
            raise ToolError(f"{opened.shown} is a directory{hint}", {"path": opened.shown})
        if not stat.S_ISREG(opened.st.st_mode):
            raise ToolError(
                f"{opened.shown} is not a regular file (it is a {kind}); refused",
                {"path": opened.shown},
            )
        if access is not Access.READ and opened.st.st_nlink > 1:
            raise ToolError(
                f"{opened.shown} has {opened.st.st_nlink} hard links; refused, because "
                "changing it would change the same file under its other names, which may "
                "be outside the workspace (copy it to a new file and edit that)",
                {"path": opened.shown, "links": opened.st.st_nlink},
            )
        yield opened
    finally:
        os.close(opened.fd)


@contextmanager
def open_dir(ws: Workspace, path: str) -> Iterator[Opened]:
    """Open the folder at `path` for listing; it is closed when the block ends."""
    opened = _open(ws, path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield opened
    finally:
        os.close(opened.fd)


@contextmanager
def open_any(ws: Workspace, path: str) -> Iterator[Opened]:
    """Open whatever is at `path` for reading (a folder, a file, a FIFO without blocking)."""
    opened = _open(ws, path, os.O_RDONLY)
    try:
        yield opened
    finally:
        os.close(opened.fd)


def _open(ws: Workspace, path: str, flags: int, *, create: bool = False) -> Opened:
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    shown = path
    for _ in range(ATTEMPTS):
        with ws.locate(path) as location:
            shown = "/".join(location.parts) or "."
            if location.missing:
                if not create:
                    raise _not_found(shown, flags)
                make_dirs(location)
            try:
                fd, created = _open_last(location.dir_fd, location.name, flags, create)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue  # a symlink appeared at the last component: walk again
                raise _explain(exc, shown, flags) from exc
        st = os.fstat(fd)
        if not _still_inside(fd, ws.root):
            os.close(fd)
            raise WorkspaceEscape(path)
        return Opened(fd, st, shown, created)
    raise ToolError(f"{shown} kept changing while it was being opened; try again", {"path": shown})


def _open_last(dir_fd: int, name: str | None, flags: int, create: bool) -> tuple[int, bool]:
    if name is None:
        return os.open(".", flags & ~os.O_NOFOLLOW, dir_fd=dir_fd), False
    if create:
        try:
            return os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dir_fd), True
        except FileExistsError:
            pass
    return os.open(name, flags, dir_fd=dir_fd), False


def _still_inside(fd: int, root: Path) -> bool:
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return True  # no /proc: the walk alone has to do
    return real == root or root in real.parents


def _not_found(shown: str, flags: int) -> ToolError:
    what = "directory" if flags & os.O_DIRECTORY else "file"
    return ToolError(f"{what} not found: {shown}", {"path": shown})


def _explain(exc: OSError, shown: str, flags: int) -> Exception:
    if exc.errno == errno.ENOENT:
        return _not_found(shown, flags)
    if exc.errno == errno.ENXIO:
        return ToolError(
            f"{shown} is not a regular file (a FIFO or socket); refused", {"path": shown}
        )
    if exc.errno == errno.EISDIR:
        return ToolError(f"{shown} is a directory", {"path": shown})
    if exc.errno == errno.ENOTDIR and flags & os.O_DIRECTORY:
        return ToolError(f"{shown} is not a directory", {"path": shown})
    return OSError(exc.errno, exc.strerror, shown)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"
