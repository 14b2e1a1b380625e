"""The error a tool raises for a failure the model should see and can act on."""

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
