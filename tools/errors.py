"""The errors a tool raises: a failure the model should see, and an escape from the workspace."""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """A failure of one tool call: bad arguments, a missing file, a refused edit.

    `Tool.run` turns it into an error `ToolResult`; it never reaches the agent loop.
    """

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})

    def __str__(self) -> str:
        return self.message


class WorkspaceEscape(Exception):
    """A path that resolves outside the workspace, through `..`, an absolute path or a symlink."""

    def __init__(self, path: str) -> None:
        super().__init__(f"path {path!r} is outside the workspace")
        self.path = path
