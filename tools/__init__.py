"""Tools an agent can call: file reading and editing, search and a shell, working in one
workspace directory.

The file tools (read, write, edit, ls, grep) are confined to the workspace: they walk every
path from the workspace folder by file descriptor, never follow a symlink out of it, refuse
FIFOs and devices, and never change a file that has other hard links. The bash tool is not
confined: its commands run with the user's rights, the workspace being only their working
directory, unless it is built with `sandbox=True` (bubblewrap, only the workspace writable).

This package knows nothing of the journal or the agent: it takes a tool name and
arguments and gives back a `ToolResult`.
"""

from tools.base import Tool, ToolResult
from tools.errors import ToolError, WorkspaceEscape
from tools.files import EditTool, LsTool, ReadTool, WriteTool
from tools.registry import default_tools, run_tool, tool_schemas
from tools.sandbox import SandboxUnavailable, require_sandbox, sandbox_available
from tools.search import GrepTool
from tools.shell import BashTool
from tools.workspace import Workspace

__all__ = [
    "BashTool",
    "EditTool",
    "GrepTool",
    "LsTool",
    "ReadTool",
    "SandboxUnavailable",
    "Tool",
    "ToolError",
    "ToolResult",
    "Workspace",
    "WorkspaceEscape",
    "WriteTool",
    "default_tools",
    "require_sandbox",
    "run_tool",
    "sandbox_available",
    "tool_schemas",
]
