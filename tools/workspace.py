"""Confinement of tool paths to one workspace directory."""

from __future__ import annotations

import os
from pathlib import Path


class WorkspaceEscape(Exception):
    """A path that resolves outside the workspace, through `..`, an absolute path or a symlink."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path!r} is outside the workspace")
        self.path = path


class Workspace:
    """A directory the tools may read and write under, and nothing outside it.

    Paths are checked after `os.path.realpath`, so every symlink along the way is
    followed before containment is judged. The check is made when a call starts; a
    symlink swapped in between the check and the file access is not guarded against.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = Path(os.path.realpath(root))
        if not real.is_dir():
            raise NotADirectoryError(f"workspace root is not a directory: {root}")
        self.root = real

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """Return the real absolute path for `path`, relative paths being taken from the root.

        Raises `WorkspaceEscape` when the result is not the root or below it.
        """
        text = os.fspath(path)
        if "\0" in text:
            raise WorkspaceEscape(text)
        real = Path(os.path.realpath(os.path.join(self.root, text)))
        if not self.contains(real):
            raise WorkspaceEscape(text)
        return real

    def contains(self, real_path: Path) -> bool:
        """Whether an already resolved path is the root or lies below it."""
        return real_path == self.root or self.root in real_path.parents

    def relative(self, real_path: Path) -> str:
        """The path as shown to the model: relative to the root, `.` for the root itself."""
        rel = real_path.relative_to(self.root)
        return rel.as_posix() if rel.parts else "."
