"""The grep tool: a regex search over the files under a workspace path."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.base import Tool, ToolResult
from tools.errors import ToolError
from tools.textio import looks_binary
from tools.workspace import Workspace, WorkspaceEscape

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules"})
"""Directories that hold tool metadata or generated files and would only bury the matches."""


class GrepTool(Tool):
    name = "grep"
    description = (
        "Search file contents with a Python regular expression. Returns matching lines as "
        "'path:line: text'. Searches every text file under path (default: the whole "
        "workspace), skipping .git, __pycache__ and node_modules; glob filters by file "
        "name (e.g. '*.py'). Results are capped."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Regular expression (Python syntax) to search for.",
            },
            "path": {
                "type": "string",
                "description": "File or directory to search, relative to the workspace. "
                "Default '.'.",
            },
            "glob": {
                "type": "string",
                "description": "Only search files whose name matches this glob, e.g. '*.py'.",
            },
            "ignore_case": {
                "type": "boolean",
                "description": "Match case-insensitively. Default false.",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_matches: int = 200,
        max_chars: int = 50_000,
        max_line_chars: int = 500,
    ) -> None:
        super().__init__(workspace)
        self.max_matches = max_matches
        self.max_chars = max_chars
        self.max_line_chars = max_line_chars

    def execute(self, args: dict[str, Any]) -> ToolResult:
        flags = re.IGNORECASE if args.get("ignore_case", False) else 0
        try:
            regex = re.compile(args["pattern"], flags)
        except re.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from exc
        root = self.workspace.resolve(args.get("path", "."))
        shown_root = self.workspace.relative(root)
        if not root.exists():
            raise ToolError(f"path not found: {shown_root}", {"path": shown_root})
        glob: str | None = args.get("glob")

        out: list[str] = []
        chars = 0
        matches = 0
        files = 0
        truncated = False
        for path in self._files(root, glob):
            files += 1
            for number, line in _matching_lines(path, regex):
                entry = f"{self.workspace.relative(path)}:{number}: {self._clip(line)}"
                if matches >= self.max_matches or chars + len(entry) + 1 > self.max_chars:
                    truncated = True
                    break
                out.append(entry)
                chars += len(entry) + 1
                matches += 1
            if truncated:
                break

        details = {
            "path": shown_root,
            "matches": matches,
            "files_searched": files,
            "truncated": truncated,
        }
        if not out:
            return ToolResult("no matches", details=details)
        text = "\n".join(out)
        if truncated:
            text += f"\n[cut: stopped after {matches} matches; narrow the pattern, path or glob]"
        return ToolResult(text, details=details)

    def _files(self, root: Path, glob: str | None) -> Iterator[Path]:
        """Text files to search, in a stable order; symlinks out of the workspace are skipped."""
        if not root.is_dir():
            if not looks_binary(root):
                yield root
            return
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in sorted(filenames):
                if glob is not None and not fnmatch.fnmatchcase(name, glob):
                    continue
                path = Path(dirpath, name)
                if path.is_symlink():
                    try:
                        target = self.workspace.resolve(path)
                    except WorkspaceEscape:
                        continue
                    if not target.is_file():
                        continue
                elif not path.is_file():
                    continue
                try:
                    if looks_binary(path):
                        continue
                except OSError:
                    continue
                yield path

    def _clip(self, line: str) -> str:
        if len(line) <= self.max_line_chars:
            return line
        return line[: self.max_line_chars] + " [line cut]"


def _matching_lines(path: Path, regex: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if regex.search(line):
                    yield number, line
    except OSError:
        return
