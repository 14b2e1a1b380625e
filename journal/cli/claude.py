"""`journal import` and `journal export --dialect claude`: moving a session between Claude
Code's transcript format and pi's (argument handling and output only)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from .. import codec
from ..claude.exporter import export_claude
from ..claude.importer import import_claude
from .filesonly import files_only

IMPORT_DESCRIPTION = (
    "Convert a Claude Code transcript (~/.claude/projects/<project>/<session>.jsonl, with its "
    "subagent files) into a new pi v3 session with the same projected context, written in DIR "
    "(default: the current folder) under a pi-style name, or to DIR if it ends in .jsonl. The "
    "transcript is only read. Continue the new session with journal-agent or any pi tool. What "
    "is kept and what is not: docs/claude.md."
)


def cmd_import(args: argparse.Namespace) -> int:
    report = import_claude(args.source, args.dest, subagents=not args.no_subagents)
    for problem in report.problems:
        print(f"Warning: {report.source}: {problem.describe()} (not imported)", file=sys.stderr)
    if args.json:
        sys.stdout.write(codec.dumps(report.to_json()).decode() + "\n")
    else:
        extra = (f", {len(report.subagent_files)} subagent file(s)"
                 if report.subagent_files else "")
        print(f"wrote {report.path} ({report.entries:,} entries, {report.messages:,} "
              f"messages{extra})")
    return 0


def add_import_parser(sub: Any) -> None:
    p = sub.add_parser("import", help="convert a Claude Code transcript into a pi session",
                       description=IMPORT_DESCRIPTION)
    p.add_argument("source", metavar="CLAUDE_FILE", help="the Claude Code transcript (.jsonl)")
    p.add_argument("dest", metavar="DIR", nargs="?", default=None,
                   help="folder of the new session (default: the current folder), or a "
                        ".jsonl path")
    p.add_argument("--no-subagents", action="store_true",
                   help="leave out <session>/subagents/agent-*.jsonl")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.set_defaults(func=files_only(cmd_import, "journal import"))


def export_as_claude(args: argparse.Namespace) -> int:
    """`journal export --dialect claude PATH [-o FILE|DIR]`."""
    report = export_claude(args.path, args.output)
    if args.json:
        sys.stdout.write(codec.dumps(report.to_json(), orjson.OPT_INDENT_2).decode() + "\n")
    else:
        left = ", ".join(f"{k} {n}" for k, n in sorted(report.skipped.items()))
        print(f"wrote {report.path} ({report.records:,} records)"
              + (f"; left out (no Claude Code record): {left}" if left else ""))
    return 0
