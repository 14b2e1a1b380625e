"""`journal usage`: tokens and cost of sessions, per session, model or day."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson

from .. import codec
from ..accounting import BY, By, Tally, UsageReport, usage
from ..discovery import check_paths
from ..pg.url import is_database_url
from ..prices import PRICES_ENV, load_prices
from .app import ByteProgress, is_terminal, paths_or_default, tsv_line


def cmd_usage(args: argparse.Namespace) -> int:
    prices = load_prices(args.prices)
    paths = paths_or_default(args.paths)
    check_paths([p for p in paths if not is_database_url(p)])  # as ls and search do
    with ByteProgress("reading sessions", enabled=not args.json) as bar:
        report = usage(paths, prices=prices, progress=bar)
    for warning in report.warnings:
        print(f"Warning: {warning.path}: {warning.message}", file=sys.stderr)
    if args.json:
        sys.stdout.write(codec.dumps(report.to_json(args.by), orjson.OPT_INDENT_2).decode()
                         + "\n")
        return 0
    if is_terminal(sys.stdout):
        _print_table(report, args.by)
    else:  # for a program, as ls and search write: a heading line, then a row a line
        for line in _lines(report, args.by):
            print(tsv_line(line))
        for note in _notes(report, args.by):
            print(note, file=sys.stderr)
    return 0


HEADINGS = ["msgs", "input", "output", "cache read", "cache write", "cost $", "cost from"]


def _lines(report: UsageReport, by: By) -> list[list[str]]:
    """The table's heading and rows (the total last, where there are several rows)."""
    named = {s.path: s.name or "" for s in report.sessions} if by == "session" else None
    lines = [[by, *(["name"] if named is not None else []), *HEADINGS]]
    rows = report.rows(by)
    for key, tally in rows:
        extra = [named[key]] if named is not None else []
        lines.append([_shown(key) if named is not None else key, *extra, *_cells(tally)])
    if len(rows) > 1:
        lines.append(["total", *([""] if named is not None else []), *_cells(report.total)])
    return lines


def _print_table(report: UsageReport, by: By) -> None:
    from rich.console import Console
    from rich.table import Table

    heading, *rows = _lines(report, by)
    table = Table(title=f"Usage by {by}", title_justify="left")
    for name in heading:
        if name in HEADINGS[:-1]:  # the counts and the cost
            table.add_column(name, justify="right")
        elif name == "cost from":
            table.add_column(name)
        else:  # what a row is of, and a session's name
            table.add_column(name, overflow="fold")
    total = rows.pop() if len(rows) > 1 else None
    for row in rows:
        table.add_row(*row)
    if total is not None:
        table.add_section()
        table.add_row(*total, style="bold")
    console = Console(soft_wrap=False)
    console.print(table)
    for note in _notes(report, by):
        console.print(note, highlight=False)


def _notes(report: UsageReport, by: By) -> list[str]:
    """What the rows are counted from and on: the sessions, the prices, messages counted in
    several rows, models without a price."""
    files = sum(len(s.files) for s in report.sessions)
    notes = [f"{len(report.sessions)} session(s) in {files} file(s); prices from "
             f"{report.prices.path} (as of {report.prices.as_of}) for messages that "
             "recorded no cost"]
    repeated = report.repeated
    if repeated.messages:
        notes.append(f"{repeated.messages:,} message(s) ({repeated.total_tokens:,} tokens, "
                     f"${repeated.cost:,.4f}) are in more than one session (history a fork, "
                     "a resumed transcript or an import copied): counted in each session's "
                     "row, once in the total" + (" and in these rows" if by != "session" else ""))
    if report.unpriced_models:
        notes.append("no cost recorded and no price for: " + ", ".join(report.unpriced_models)
                     + f" (add them to a price file: --prices FILE or ${PRICES_ENV})")
    return notes


def _shown(path: str) -> str:
    """A path as short as it can be said: relative to here when it is below here (a database
    session's URL as it is)."""
    if is_database_url(path):
        return path
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _cells(tally: Tally) -> list[str]:
    source = tally.cost_source
    if source == "mixed":
        source = f"mixed ({tally.computed} computed)"
    if tally.unpriced:
        source += f", {tally.unpriced} unpriced"
    return [f"{tally.messages:,}", f"{tally.input:,}", f"{tally.output:,}",
            f"{tally.cache_read:,}", f"{tally.cache_write:,}", f"{tally.cost:,.4f}", source]


def add_usage_parser(sub: Any) -> None:
    """Register `journal usage` on the `journal` command's sub-parsers."""
    p = sub.add_parser(
        "usage", help="tokens and cost per session, model or day",
        description="Count the tokens (input, output, cache read, cache write) and cost "
        "recorded on assistant messages, each rotated session once (its archives included, "
        "kept entries not counted twice); a response several sessions hold (a fork's or a "
        "resumed Claude Code transcript's copied history) counts in each one's row and once "
        "in the total. A message that recorded no cost is priced from "
        f"the price table (bundled; --prices FILE or ${PRICES_ENV} replace it).")
    p.add_argument("paths", nargs="*", metavar="PATH|DIR",
                   help="session files or folders, searched at any depth, or a database "
                   "(postgresql://.../db: every session) or a database session "
                   "(...?session=ID, pg:ID: its lineage) (default: "
                   "$JOURNAL_SESSIONS_DIR or ./sessions)")
    p.add_argument("--by", choices=BY, default="session",
                   help="one row per session (default), model or day (UTC)")
    p.add_argument("--prices", metavar="FILE",
                   help=f"price table to use (default: ${PRICES_ENV}, else the bundled one)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_usage)
