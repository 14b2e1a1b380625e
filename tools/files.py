"""The file tools: read, write, edit and ls."""

from __future__ import annotations

import os
from typing import Any

from tools.base import Tool, ToolResult
from tools.errors import ToolError
from tools.opening import Access, open_dir, open_file
from tools.textio import capped_lines, looks_binary, read_all, replace_content
from tools.workspace import Workspace


class ReadTool(Tool):
    name = "read"
    description = (
        "Read a text file in the workspace. Returns the file's text. Long files are cut "
        "(at most 2000 lines or 50000 characters per call) with a note telling the offset "
        "to continue from. Use offset (1-based line number) and limit (number of lines) "
        "to read a part of a file."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "Line number to start reading from (1-based). Default 1.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Maximum number of lines to read.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }

    def __init__(
        self, workspace: Workspace, *, max_lines: int = 2000, max_chars: int = 50_000
    ) -> None:
        super().__init__(workspace)
        self.max_lines = max_lines
        self.max_chars = max_chars

    def execute(self, args: dict[str, Any]) -> ToolResult:
        offset: int = args.get("offset", 1)
        limit: int | None = args.get("limit")
        with open_file(self.workspace, args["path"], Access.READ) as opened:
            shown = opened.shown
            if looks_binary(opened.fd):
                raise ToolError(f"{shown} looks like a binary file; not shown", {"path": shown})
            size = opened.st.st_size
            lines, total, stop, long_line = self._read_lines(opened.fd, offset, limit)

        details: dict[str, Any] = {
            "path": shown,
            "bytes": size,
            "total_lines": total,
            "truncated": stop == "cap",
        }
        if total == 0 and offset == 1:
            details.update(start_line=0, end_line=0)
            return ToolResult("(empty file)", details=details)
        if offset > total:
            raise ToolError(
                f"offset {offset} is beyond the end of {shown} ({total} lines)", details
            )

        end = offset + len(lines) - 1
        details.update(start_line=offset, end_line=end)
        text = "".join(lines)
        note = None
        if long_line:
            note = (
                f"[cut: line {end} is longer than {self.max_chars} characters; showing its start]"
            )
        elif stop == "cap":
            note = (
                f"[cut: showing lines {offset}-{end} of {total}; use offset={end + 1} to continue]"
            )
        elif stop == "limit":
            note = f"[showing lines {offset}-{end} of {total}; use offset={end + 1} to continue]"
        if note:
            text = f"{text}\n{note}" if text.endswith("\n") else f"{text}\n\n{note}"
        return ToolResult(text, details=details)

    def _read_lines(
        self, fd: int, offset: int, limit: int | None
    ) -> tuple[list[str], int, str | None, bool]:
        """The lines to show, the file's line count, why showing stopped, whether cut mid-line.

        No more than a few times the character cap is ever held, however long a line is.
        """
        lines: list[str] = []
        chars = 0
        total = 0
        stop: str | None = None
        long_line = False
        max_line_bytes = 4 * self.max_chars + 4  # UTF-8 takes at most 4 bytes a character
        with os.fdopen(os.dup(fd), "rb") as fh:
            for total, (raw, _cut) in enumerate(capped_lines(fh, max_line_bytes), start=1):
                if total < offset or stop:
                    continue
                if limit is not None and len(lines) >= limit:
                    stop = "limit"
                    continue
                line = raw.decode("utf-8", errors="replace")
                if len(lines) >= self.max_lines or chars + len(line) > self.max_chars:
                    if not lines:
                        lines.append(line[: self.max_chars])
                        long_line = True
                    stop = "cap"
                    continue
                lines.append(line)
                chars += len(line)
        return lines, total, stop, long_line


class WriteTool(Tool):
    name = "write"
    description = (
        "Write a file in the workspace, replacing it if it exists. Parent directories are "
        "created as needed."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any]) -> ToolResult:
        data = args["content"].encode("utf-8")
        with open_file(self.workspace, args["path"], Access.WRITE, create=True) as opened:
            replace_content(opened.fd, data)
        shown, created = opened.shown, opened.created
        verb = "created" if created else "overwrote"
        return ToolResult(
            f"{verb} {shown} ({len(data)} bytes)",
            details={"path": shown, "bytes": len(data), "created": created},
        )


class EditTool(Tool):
    name = "edit"
    description = (
        "Edit a file by replacing one exact piece of text. old_text must match the file "
        "exactly (including whitespace and indentation) and exactly once; include enough "
        "surrounding lines to make it unique. Read the file first."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "old_text": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace; must occur exactly once.",
            },
            "new_text": {"type": "string", "description": "The text to put in its place."},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any]) -> ToolResult:
        old: str = args["old_text"]
        new: str = args["new_text"]
        if old == new:
            raise ToolError("old_text and new_text are the same; nothing to change")
        with open_file(self.workspace, args["path"], Access.EDIT) as opened:
            shown = opened.shown
            raw = read_all(opened.fd)
            text, start = _locate_edit(raw, old, shown)
            updated = text[:start] + new + text[start + len(old) :]
            data = updated.encode("utf-8")
            replace_content(opened.fd, data)
        line = text.count("\n", 0, start) + 1
        return ToolResult(
            f"edited {shown}: replaced 1 occurrence at line {line}",
            details={"path": shown, "line": line, "bytes_before": len(raw), "bytes": len(data)},
        )


def _locate_edit(raw: bytes, old: str, shown: str) -> tuple[str, int]:
    """The file's text and where its one occurrence of `old` starts, or a `ToolError`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{shown} is not valid UTF-8; it cannot be edited safely") from exc
    positions = _find_all(text, old)
    if not positions:
        raise ToolError(
            f"old_text not found in {shown}; it must match the file exactly, "
            "including whitespace and indentation",
            {"path": shown, "matches": 0},
        )
    if len(positions) > 1:
        lines = ", ".join(str(text.count("\n", 0, p) + 1) for p in positions[:10])
        raise ToolError(
            f"old_text matches {len(positions)} times in {shown} (at lines {lines}); "
            "include more surrounding text so it matches exactly once",
            {"path": shown, "matches": len(positions)},
        )
    return text, positions[0]


def _find_all(text: str, needle: str) -> list[int]:
    """Start offsets of every occurrence of `needle`, overlapping ones included."""
    found = []
    start = text.find(needle)
    while start != -1:
        found.append(start)
        start = text.find(needle, start + 1)
    return found


class LsTool(Tool):
    name = "ls"
    description = "List a directory in the workspace, sorted by name; directories end with '/'."
    input_schema = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory path, relative to the workspace. Default '.'.",
            },
        },
        "additionalProperties": False,
    }

    def __init__(self, workspace: Workspace, *, max_entries: int = 1000) -> None:
        super().__init__(workspace)
        self.max_entries = max_entries

    def execute(self, args: dict[str, Any]) -> ToolResult:
        with open_dir(self.workspace, args.get("path", ".")) as opened:
            shown = opened.shown
            with os.scandir(opened.fd) as it:
                entries = sorted(e.name + "/" if _is_dir(e) else e.name for e in it)
        details: dict[str, Any] = {
            "path": shown,
            "entries": len(entries),
            "truncated": len(entries) > self.max_entries,
        }
        if not entries:
            return ToolResult("(empty directory)", details=details)
        text = "\n".join(entries[: self.max_entries])
        if details["truncated"]:
            text += f"\n[cut: showing {self.max_entries} of {len(entries)} entries]"
        return ToolResult(text, details=details)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
