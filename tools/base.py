"""The result type and the base class shared by every tool."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tools.args import validate_args
from tools.errors import ToolError, WorkspaceEscape
from tools.workspace import Workspace


@dataclass(frozen=True)
class ToolResult:
    """What one tool call produced: text for the model, facts for the program.

    `content` is what goes back to the model as the tool result; `details` holds
    machine-readable facts (exit code, byte counts, whether output was cut) that the
    caller may record or display; `is_error` marks a failed call.
    """

    content: str
    is_error: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def error(cls, message: str, details: dict[str, Any] | None = None) -> ToolResult:
        return cls(content=message, is_error=True, details=dict(details or {}))


class Tool(ABC):
    """One tool the model can call, bound to a workspace.

    Subclasses set `name`, `description` and `input_schema` and implement `execute`.
    Callers use `run`, which checks the arguments against the schema and turns every
    expected failure into an error result, so a bad call never ends the agent loop.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def schema(self) -> dict[str, Any]:
        """The tool definition in the Anthropic tool format."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": copy.deepcopy(self.input_schema),
        }

    def run(self, args: Mapping[str, Any] | None) -> ToolResult:
        try:
            checked = validate_args({} if args is None else args, self.input_schema)
            return self.execute(checked)
        except ToolError as exc:
            return ToolResult.error(f"{self.name}: {exc}", exc.details)
        except WorkspaceEscape as exc:
            return ToolResult.error(f"{self.name}: {exc}", {"path": exc.path})
        except OSError as exc:
            if exc.filename is None and isinstance((args or {}).get("path"), str):
                exc.filename = (args or {})["path"]  # a descriptor's error names no file
            return ToolResult.error(f"{self.name}: {_describe_os_error(self.workspace, exc)}")

    @abstractmethod
    def execute(self, args: dict[str, Any]) -> ToolResult:
        """Do the work with checked arguments; raise `ToolError` for failures."""


def _describe_os_error(workspace: Workspace, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return reason
    try:
        shown = workspace.relative(workspace.resolve(exc.filename))
    except (WorkspaceEscape, ToolError, OSError, ValueError):
        shown = str(exc.filename)
    return f"{reason}: {shown}"
