"""The grep tool: a regex search over the files under a workspace path."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from typing import Any

from tools.base import Tool, ToolResult
from tools.errors import ToolError, WorkspaceEscape
from tools.opening import open_any
from tools.textio import capped_lines, looks_binary
from tools.workspace import Workspace

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
        max_line_bytes: int = 1 << 20,
    ) -> None:
        super().__init__(workspace)
        self.max_matches = max_matches
        self.max_chars = max_chars
        self.max_line_chars = max_line_chars
        self.max_line_bytes = max_line_bytes

    def execute(self, args: dict[str, Any]) -> ToolResult:
        flags = re.IGNORECASE if args.get("ignore_case", False) else 0
        try:
            regex = re.compile(args["pattern"], flags)
        except re.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from exc
        glob: str | None = args.get("glob")
        search = _Search(
            regex, self.max_matches, self.max_chars, self.max_line_chars, self.max_line_bytes
        )
        with open_any(self.workspace, args.get("path", ".")) as opened:
            shown_root = opened.shown
            if stat.S_ISDIR(opened.st.st_mode):
                self._search_tree(search, opened.fd, shown_root, glob)
            elif stat.S_ISREG(opened.st.st_mode):
                search.file(opened.fd, shown_root)
            else:
                raise ToolError(
                    f"{shown_root} is not a regular file or a directory; refused",
                    {"path": shown_root},
                )

        details = {
            "path": shown_root,
            "matches": len(search.out),
            "files_searched": search.files,
            "truncated": search.truncated,
            "lines_cut": search.lines_cut,
        }
        text = "\n".join(search.out) or "no matches"
        if search.truncated:
            text += (
                f"\n[cut: stopped after {len(search.out)} matches; "
                "narrow the pattern, path or glob]"
            )
        if search.lines_cut:
            text += (
                f"\n[{_lines(search.lines_cut)} longer than {self.max_line_bytes} bytes "
                f"{'was' if search.lines_cut == 1 else 'were'} searched only in "
                f"{'its' if search.lines_cut == 1 else 'their'} first {self.max_line_bytes} "
                "bytes]"
            )
        return ToolResult(text, details=details)

    def _search_tree(self, search: _Search, top_fd: int, shown_top: str, glob: str | None) -> None:
        """Search the regular files below `top_fd` in a stable order, never leaving it.

        `os.fwalk` descends by file descriptor without following symlinks; a symlink to a
        file is searched when it leads to a regular file inside the workspace.
        """
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top_fd):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            prefix = os.path.normpath(os.path.join(shown_top, dirpath))
            for name in sorted(filenames):
                if search.truncated:
                    return
                if glob is not None and not fnmatch.fnmatchcase(name, glob):
                    continue
                shown = name if prefix == "." else f"{prefix}/{name}"
                self._search_entry(search, dir_fd, name, shown)

    def _search_entry(self, search: _Search, dir_fd: int, name: str, shown: str) -> None:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                return
            try:
                with open_any(self.workspace, shown) as target:
                    if stat.S_ISREG(target.st.st_mode):
                        search.file(target.fd, shown)
            except (WorkspaceEscape, ToolError, OSError):
                pass
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                search.file(fd, shown)
        finally:
            os.close(fd)


_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Search:
    """The state of one grep call: matches so far, counts, whether a cap was hit."""

    def __init__(
        self,
        regex: re.Pattern[str],
        max_matches: int,
        max_chars: int,
        max_line_chars: int,
        max_line_bytes: int,
    ) -> None:
        self.regex = regex
        self.max_matches = max_matches
        self.max_chars = max_chars
        self.max_line_chars = max_line_chars
        self.max_line_bytes = max_line_bytes
        self.out: list[str] = []
        self.chars = 0
        self.files = 0
        self.lines_cut = 0
        self.truncated = False

    def file(self, fd: int, shown: str) -> None:
        """Search one open regular file, unless it looks binary."""
        try:
            if looks_binary(fd):
                return
            self.files += 1
            with os.fdopen(os.dup(fd), "rb") as fh:
                for number, (raw, cut) in enumerate(capped_lines(fh, self.max_line_bytes), 1):
                    self.lines_cut += cut
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if self.regex.search(line) and not self._add(f"{shown}:{number}: ", line):
                        return
        except OSError:
            return

    def _add(self, where: str, line: str) -> bool:
        if len(line) > self.max_line_chars:
            line = line[: self.max_line_chars] + " [line cut]"
        entry = where + line
        if len(self.out) >= self.max_matches or self.chars + len(entry) + 1 > self.max_chars:
            self.truncated = True
            return False
        self.out.append(entry)
        self.chars += len(entry) + 1
        return True


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"
