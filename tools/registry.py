"""The default tool set and dispatch of a call by tool name."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from tools.base import Tool, ToolResult
from tools.files import EditTool, LsTool, ReadTool, WriteTool
from tools.search import GrepTool
from tools.shell import BashTool
from tools.workspace import Workspace


def default_tools(
    workspace: Workspace | str | os.PathLike[str], *, sandbox: bool = False
) -> list[Tool]:
    """One instance of every tool, working in `workspace`.

    The file tools are confined to it; the bash tool runs with the user's rights unless
    `sandbox` is set (see `BashTool`).
    """
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    return [
        ReadTool(ws),
        WriteTool(ws),
        EditTool(ws),
        LsTool(ws),
        GrepTool(ws),
        BashTool(ws, sandbox=sandbox),
    ]


def tool_schemas(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """The tool list to send to the model."""
    return [tool.schema() for tool in tools]


def run_tool(
    tools: Iterable[Tool] | Mapping[str, Tool], name: str, args: Mapping[str, Any] | None
) -> ToolResult:
    """Run the tool called `name`; an unknown name gives an error result, not an exception."""
    by_name = dict(tools) if isinstance(tools, Mapping) else {tool.name: tool for tool in tools}
    tool = by_name.get(name)
    if tool is None:
        available = ", ".join(sorted(by_name)) or "none"
        return ToolResult.error(
            f"unknown tool {name!r}; available tools: {available}", {"tool": name}
        )
    return tool.run(args)
