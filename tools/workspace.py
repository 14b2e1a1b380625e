"""Confinement of tool paths to one workspace directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools.errors import ToolError, WorkspaceEscape
from tools.walk import Location, locate

__all__ = ["Workspace", "WorkspaceEscape"]


class Workspace:
    """A directory the tools may read and write under, and nothing outside it.

    Paths are walked one component at a time from an open descriptor of the root (see
    `tools.walk`), symlinks being followed only while they stay inside, so a folder swapped
    for a symlink during a call cannot redirect it. The root is remembered by identity
    (device and inode): if the folder is later moved or replaced, the tools refuse to work
    in whatever took its place.

    This confines the file tools (read, write, edit, ls, grep) only. The bash tool runs
    commands with the user's rights; see `tools.shell`.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = Path(os.path.realpath(root))
        if not real.is_dir():
            raise NotADirectoryError(f"workspace root is not a directory: {root}")
        self.root = real
        st = os.stat(real)
        self._identity = (st.st_dev, st.st_ino)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    @contextmanager
    def locate(self, path: str | os.PathLike[str]) -> Iterator[Location]:
        """Walk `path` from the root and yield where it leads; the location is closed after.

        Raises `WorkspaceEscape` when the path leads outside, `ToolError` when the root
        itself has been moved or replaced.
        """
        root_fd = self._open_root()
        try:
            location = locate(root_fd, str(self.root), os.fspath(path))
        finally:
            os.close(root_fd)
        try:
            yield location
        finally:
            location.close()

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """Return the real absolute path for `path`, relative paths being taken from the root.

        Raises `WorkspaceEscape` when the result is not the root or below it. The answer
        is a name, good for showing; the tools themselves open files through `locate`.
        """
        with self.locate(path) as location:
            return self.root.joinpath(*location.parts)

    def contains(self, real_path: Path) -> bool:
        """Whether an already resolved path is the root or lies below it."""
        return real_path == self.root or self.root in real_path.parents

    def relative(self, real_path: Path) -> str:
        """The path as shown to the model: relative to the root, `.` for the root itself."""
        rel = real_path.relative_to(self.root)
        return rel.as_posix() if rel.parts else "."

    def _open_root(self) -> int:
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise self._replaced() from exc
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._identity:
            os.close(fd)
            raise self._replaced()
        return fd

    def _replaced(self) -> ToolError:
        return ToolError(
            f"the workspace folder {self.root} was moved, removed or replaced since the tools "
            "were set up; refusing to work in whatever is there now (restart with the "
            "workspace you mean)",
            {"path": str(self.root)},
        )
