"""Tools an agent can call: file reading and editing, search and a shell, all confined
to one workspace directory.

This package knows nothing of the journal or the agent: it takes a tool name and
arguments and gives back a `ToolResult`.
"""

from tools.base import Tool, ToolResult
from tools.errors import ToolError
from tools.files import EditTool, LsTool, ReadTool, WriteTool
from tools.registry import default_tools, run_tool, tool_schemas
from tools.search import GrepTool
from tools.shell import BashTool
from tools.workspace import Workspace, WorkspaceEscape

__all__ = [
    "BashTool",
    "EditTool",
    "GrepTool",
    "LsTool",
    "ReadTool",
    "Tool",
    "ToolError",
    "ToolResult",
    "Workspace",
    "WorkspaceEscape",
    "WriteTool",
    "default_tools",
    "run_tool",
    "tool_schemas",
]
