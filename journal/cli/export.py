"""`journal export`: a session (its whole lineage) as Markdown, one HTML page, or JSONL."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import Any

import orjson

from .. import codec
from ..errors import JournalError
from ..exporting import FORMATS, ExportReport, export_to
from ..files import TEMP_SUFFIX, remove_stale_temps
from ..pg.url import shown
from ..publish import NewFile
from .app import progress_note

EXPORT_TAG = "export"


def cmd_export(args: argparse.Namespace) -> int:
    if args.dialect == "claude":
        from .claude import export_as_claude

        unused = [flag for flag, given in (("--format", args.format is not None),
                                           ("--all-branches", args.all_branches),
                                           ("--redact", args.redact)) if given]
        if unused:
            raise JournalError(f"{', '.join(unused)}: not with --dialect claude, which writes "
                               "the session's records as a Claude Code transcript; leave "
                               f"{'it' if len(unused) == 1 else 'them'} out")
        return export_as_claude(args)
    fmt = args.format or "md"
    if args.json and not args.output:
        raise JournalError("--json reports on the file written; give -o FILE")
    progress_note(f"exporting {shown(args.path)} as {fmt}", enabled=not args.json)
    options = {"all_branches": args.all_branches, "redact": args.redact}
    if args.output is None:
        sys.stdout.flush()
        result = export_to(args.path, fmt, sys.stdout.buffer, **options)
        sys.stdout.buffer.flush()
    else:
        result = _export_file(args.path, fmt, args.output, **options)
    for warning in result.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    if args.output is None:
        return 0
    report: dict[str, Any] = {"path": args.output, "format": fmt,
                              "bytes": result.bytes, "entries": result.entries,
                              "files": result.files, "warnings": result.warnings}
    if args.json:
        sys.stdout.write(codec.dumps(report, orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(f"wrote {result.bytes:,} bytes ({result.entries:,} entries from "
              f"{len(result.files)} file(s)) to {args.output}")
    return 0


def _export_file(path: str, fmt: str, output: str, **options: bool) -> ExportReport:
    """Export into a new file beside `output`, published over it once complete
    (`journal.publish`): a failed export leaves nothing behind, and a reader never sees half
    a file; the temps of exports killed in that folder are removed (those no live process
    holds: `files.remove_stale_temps`). The file is private (0600) unless it existed
    (`_export_mode`). `output` naming a file the export read (the session
    itself, one of its archives) is an error: publishing over it would replace the session
    with its export."""
    try:
        new = NewFile(os.path.abspath(output), EXPORT_TAG, mode=_export_mode(output))
    except OSError as e:
        raise JournalError(f"{output}: cannot write ({e.strerror})") from e
    with new:
        remove_stale_temps(os.path.dirname(new.path), suffix=f".{EXPORT_TAG}{TEMP_SUFFIX}")
        with new.stream() as stream:  # closing it flushes it
            result = export_to(path, fmt, stream, **options)
        if any(_same_file(output, read) for read in result.files):
            raise JournalError(f"{output}: is a file of the session being exported; "
                               "nothing was written (give another -o FILE)")
        new.publish()
    return result


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False  # `a` does not exist yet (or `b` is gone): not the same file


def _export_mode(output: str) -> int:
    """0600, as a session file is (an export holds the same conversation); an existing
    FILE keeps its permission bits: who may read it was decided already."""
    try:
        existing = os.stat(output)
    except OSError:
        return 0o600
    return stat.S_IMODE(existing.st_mode) if stat.S_ISREG(existing.st_mode) else 0o600


def add_export_parser(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="export a session as Markdown, one HTML page, or JSONL",
        description="Export a session, all files of a rotated lineage read as one (each entry "
        "once), as Markdown, a self-contained HTML page (no request at view time), or JSONL. "
        "The live branch by default.")
    p.add_argument("path", help="session file (any file of a lineage; archives .gz included), "
                   "or a database session (postgresql://...?session=ID, pg:ID: its lineage; "
                   "a database URL if it holds one lineage)")
    p.add_argument("--format", choices=FORMATS, default=None, help="output format (default md)")
    p.add_argument("--all-branches", action="store_true",
                   help="every branch, not only the live one (md, jsonl; the HTML page always "
                   "holds every branch in its tree)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    p.add_argument("--dialect", choices=("claude",), default=None,
                   help="claude: write the session (a file or a database session, read "
                        "as named) as a Claude Code transcript (-o is a folder or a .jsonl "
                        "path; default: the current folder); see docs/claude.md for what "
                        "does not round-trip")
    p.add_argument("--redact", action="store_true",
                   help="replace what looks like an API key, a token or an e-mail address")
    p.add_argument("--json", action="store_true",
                   help="print a JSON report of the file written (with -o)")
    p.set_defaults(func=cmd_export)
