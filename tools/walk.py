"""Resolving a path one component at a time below a directory file descriptor.

A path checked by name and then used by name can be redirected in between: another process
(the bash tool, say) swaps a folder for a symlink to somewhere else, and the write lands
there. Here every directory along the way is opened with `O_NOFOLLOW` relative to the one
before it, so a swap makes that open fail instead of leading elsewhere; symlinks met on the
way are read and followed by this code, and only while their target stays below the root.
`..` goes back to the directory actually walked through, never to whatever `..` names now.
The caller opens the last component relative to the returned directory, again with
`O_NOFOLLOW`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass

from tools.errors import WorkspaceEscape

MAX_SYMLINKS = 40
"""Symlinks followed in one walk before giving up, as the kernel does (ELOOP)."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Location:
    """Where a path leads: an open directory and the name of the last component in it.

    `dir_fd` is owned by the location (close it with `close`). `name` is None when the path
    names that directory itself. `missing` lists directories between `dir_fd` and `name`
    that do not exist (yet). `parts` are the components from the root to the end, symlinks
    resolved, for showing the path.
    """

    dir_fd: int
    name: str | None
    missing: tuple[str, ...]
    parts: tuple[str, ...]

    def close(self) -> None:
        os.close(self.dir_fd)


def locate(root_fd: int, root: str, path: str) -> Location:
    """Walk `path` (relative to `root`, or absolute below it) starting from `root_fd`.

    Raises `WorkspaceEscape` when the path or a symlink on it leads above `root`,
    `NotADirectoryError` when a middle component is a file, `OSError(ELOOP)` after
    `MAX_SYMLINKS` symlinks.
    """
    pending = deque(_components(path, root, path))
    stack = [os.dup(root_fd)]
    names: list[str] = []
    missing: list[str] = []
    hops = 0
    try:
        while pending:
            name = pending.popleft()
            if name == "..":
                if missing:
                    missing.pop()
                elif names:
                    os.close(stack.pop())
                    names.pop()
                else:
                    raise WorkspaceEscape(path)
                continue
            if missing:
                missing.append(name)
                continue
            last = not pending
            try:
                st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                missing.append(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                try:
                    target = os.readlink(name, dir_fd=stack[-1])
                except OSError:
                    pending.appendleft(name)  # no longer a symlink: look again
                    continue
                if os.path.isabs(target):
                    while len(stack) > 1:
                        os.close(stack.pop())
                    names.clear()
                pending.extendleft(reversed(_components(target, root, path)))
                continue
            if last:
                return Location(stack.pop(), name, (), (*names, name))
            if not stat.S_ISDIR(st.st_mode):
                shown = "/".join((*names, name))
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), shown)
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise
                hops += 1  # swapped since the stat: look again, a bounded number of times
                if hops > MAX_SYMLINKS:
                    raise
                pending.appendleft(name)
                continue
            stack.append(fd)
            names.append(name)
        if missing:
            final = missing.pop()
            return Location(stack.pop(), final, tuple(missing), (*names, *missing, final))
        return Location(stack.pop(), None, (), tuple(names))
    finally:
        for fd in stack:
            os.close(fd)


def make_dirs(location: Location) -> None:
    """Create the location's missing directories, each inside the one made before it.

    On return `location.dir_fd` is the innermost one and `missing` is empty.
    """
    for name in location.missing:
        try:
            os.mkdir(name, 0o777, dir_fd=location.dir_fd)
        except FileExistsError:
            pass
        fd = os.open(name, DIR_FLAGS, dir_fd=location.dir_fd)
        os.close(location.dir_fd)
        location.dir_fd = fd
    location.missing = ()


def _components(path: str, root: str, given: str) -> list[str]:
    """The components of `path` below `root`; absolute paths must lie under `root`."""
    if "\0" in path:
        raise WorkspaceEscape(given)
    if os.path.isabs(path):
        prefix = root.rstrip("/") + "/"
        if path.rstrip("/") == root.rstrip("/"):
            path = ""
        elif path.startswith(prefix):
            path = path[len(prefix) :]
        else:
            raise WorkspaceEscape(given)
    return [part for part in path.split("/") if part not in ("", ".")]
