"""`journal search`: argument handling and output only (the search is `journal.search`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson

from .. import codec
from ..textsearch import ROLES, Hit, SearchResult, search
from .app import (
    EXIT_FINDINGS,
    EXIT_OK,
    ByteProgress,
    is_terminal,
    paths_or_default,
    tsv_line,
)

DESCRIPTION = (
    "Search sessions for text: user and assistant messages, thinking, tool calls (name and "
    "arguments) and their results, bash executions, compaction and branch summaries, session "
    "names and labels, in live files and their archives (.gz included). A rotated session is "
    "one session: an entry its successor repeats is shown once. Case is smart (ignored unless "
    "the query has an upper-case letter) unless -i or -s says otherwise. Exit status as "
    "grep's: 0 when something was found, 1 when nothing was, 2 on an error (a bad query or "
    "date, a path that does not exist); a file that cannot be read is a warning on stderr and "
    "changes nothing, with --json too."
)


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of hits (1 or more), not {text!r}")
    return value


def add_search_parser(sub: Any) -> None:
    """Add `journal search` to the `journal` command's sub-parsers."""
    p = sub.add_parser("search", help="find text across sessions and their archives",
                       description=DESCRIPTION)
    p.add_argument("query", help="the text to find (a regular expression with --regex)")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="folders (their sessions at any depth, archives included) or session "
                   "files, or a database (postgresql://.../db: every session) or a database "
                   "session (...?session=ID, pg:ID: its lineage); "
                   "default $JOURNAL_SESSIONS_DIR or ./sessions")
    p.add_argument("--role", action="append", metavar="ROLE",
                   choices=[*ROLES, "summary"],
                   help="only entries of this role (repeatable): " + ", ".join(ROLES)
                   + ", or summary (both kinds)")
    p.add_argument("--tool", action="append", metavar="NAME",
                   help="only calls of this tool and their results (repeatable)")
    p.add_argument("--since", metavar="DATE",
                   help="only entries from this date or ISO time on (UTC unless it says)")
    p.add_argument("--until", metavar="DATE",
                   help="only entries up to this date (the whole day) or ISO time")
    p.add_argument("-e", "--regex", action="store_true",
                   help="the query is a (Python) regular expression")
    case = p.add_mutually_exclusive_group()
    case.add_argument("-i", "--ignore-case", dest="ignore_case", action="store_true",
                      default=None, help="ignore case")
    case.add_argument("-s", "--case-sensitive", dest="ignore_case", action="store_false",
                      help="match case exactly")
    p.add_argument("-n", "--limit", type=_limit, metavar="N", help="stop after N hits")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    paths = paths_or_default(args.paths)
    with ByteProgress("searching", enabled=not args.json) as bar:
        result = search(args.query, paths, role=args.role, tool=args.tool, since=args.since,
                        until=args.until, regex=args.regex, ignore_case=args.ignore_case,
                        limit=args.limit, progress=bar)
    if args.json:
        sys.stdout.write(codec.dumps(result.to_json(), orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print(result)
    return EXIT_OK if result.hits else EXIT_FINDINGS


def _print(result: SearchResult) -> None:
    for problem in result.problems:
        print(f"Warning: {problem.path}: {problem.message}", file=sys.stderr)
    if is_terminal(sys.stdout):
        _print_rich(result)
    else:
        for hit in result.hits:
            print(tsv_line([hit.session, hit.entry_id or "", hit.timestamp or "", _who(hit),
                            hit.snippet]))
    more = " (stopped at --limit)" if result.truncated else ""
    print(f"{len(result.hits)} hit(s) in {result.sessions} session(s), {result.files} file(s), "
          f"{result.bytes:,} bytes{more}", file=sys.stderr)


def _who(hit: Hit) -> str:
    return f"{hit.role}:{hit.tool}" if hit.tool else hit.role


def _print_rich(result: SearchResult) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    table.add_column("session", overflow="ellipsis", max_width=32)
    table.add_column("entry", no_wrap=True)
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("match", overflow="fold", min_width=20)
    for hit in result.hits:
        snippet = Text(hit.snippet)
        for start, end in hit.spans:
            snippet.stylize("bold red", start, end)
        when = (hit.timestamp or "")[:16].replace("T", " ")
        table.add_row(os.path.basename(hit.session), hit.entry_id or "", when, _who(hit),
                      snippet)
    Console(no_color=bool(os.environ.get("NO_COLOR"))).print(table)
