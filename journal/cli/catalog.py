"""`journal ls` and `journal prune`: argument handling and output only (`journal.catalog`)."""

from __future__ import annotations

import argparse
import bisect
import os
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from .. import codec
from ..accounting import UsageWarning
from ..catalog import (
    SORT_KEYS,
    DatabaseRow,
    PruneReport,
    SessionRow,
    database_rows,
    parse_age,
    prune,
    sessions,
    sort_rows,
)
from ..errors import JournalError
from ..pg.url import is_database_url
from ..prices import load_prices
from ..rowcache import RowCache, default_cache_path
from .app import ByteProgress, is_terminal, paths_or_default, tsv_line
from .filesonly import files_only

LS_DESCRIPTION = (
    "One row per logical session under the folders given (searched recursively; default "
    "$JOURNAL_SESSIONS_DIR or ./sessions): a rotated session is one row with its file count. "
    "Reads each file's header and tail; tokens and cost (as 'journal usage' counts them) "
    "need whole files, so what was read is kept in a cache file ($XDG_CACHE_HOME/journal/"
    "catalog.json, else ~/.cache/journal/catalog.json) and a session none of whose files "
    "changed (size, times, inode) is not read again.")
PRUNE_DESCRIPTION = (
    "Remove (or with --archive-to, move) every whole session under DIR whose last activity is "
    "older than --older-than: its live file, its archives and their .quarantine and .bak "
    "files. A session a writer holds, or one that needs repair, is never touched; each one "
    "is pruned under its writer lock. Also removes, whatever their age, the lock files "
    "(<session>.lock) nobody holds whose session file is gone, as a rotation killed before it "
    "let go of its lock leaves. Says exactly what it would remove (--dry-run) or did.")


def _emit_json(value: Any) -> None:
    sys.stdout.write(codec.dumps(value, orjson.OPT_INDENT_2).decode() + "\n")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _state(row: SessionRow) -> str:
    if isinstance(row, DatabaseRow) and row.state == "locked" and row.holder:
        return f"locked ({row.holder.get('pid', '?')} on {row.holder.get('host', '?')})"
    if row.state == "locked" and row.holder_pid is not None:
        return f"locked ({row.holder_pid})"
    return row.state


def _cells(row: SessionRow) -> list[str]:
    tokens = f"{row.tokens:,}" if row.tokens is not None else ""
    cost = f"{row.cost:,.4f}" if row.cost is not None else ""
    return [row.name or "", row.session_id or "?", row.cwd or "", ", ".join(row.models),
            (row.first or "")[:19], (row.last or "")[:19], f"{row.entries:,}",
            str(len(row.read_files)), _size(row.size), tokens, cost, _state(row)]


HEADINGS = ["name", "id", "cwd", "models", "first", "last", "entries", "files", "size",
            "tokens", "cost", "state"]
RIGHT = ("entries", "files", "size", "tokens", "cost")
# a terminal's table: a row a line in 120 columns (the folder, first entry's time and file
# count are the tab-separated output's and --json's)
TERMINAL = ["name", "id", "models", "last", "entries", "size", "tokens", "cost", "state"]
WIDEST = {"name": 32, "models": 28}  # its columns cut short, at most this wide
SHORT_ID = 8


def short_ids(ids: Sequence[str]) -> list[str]:
    """Each id cut to the shortest prefix, at least SHORT_ID characters, that no other id in
    `ids` starts with (as git abbreviates hashes). A time-ordered id (pi's UUIDv7 session
    ids) begins with its creation time, so sessions made within a minute share their first
    eight characters: the table's id column would not tell them apart."""
    ordered = sorted(set(ids))
    out = []
    for session_id in ids:
        i = bisect.bisect_left(ordered, session_id)
        shared = max((len(os.path.commonprefix([session_id, ordered[j]]))
                      for j in (i - 1, i + 1) if 0 <= j < len(ordered)), default=0)
        out.append(session_id[:max(SHORT_ID, shared + 1)])
    return out


def _database_rows(dirs: list[str], args: argparse.Namespace) -> list[DatabaseRow]:
    if len(dirs) != 1:
        raise JournalError("journal ls lists one database at a time")
    warnings: list[UsageWarning] = []
    rows = database_rows(dirs[0], load_prices(args.prices), warnings)
    for warning in warnings:  # a lineage counted in part: its tokens and cost are less
        print(f"Warning: {warning.path}: {warning.message}", file=sys.stderr)
    return rows


def cmd_ls(args: argparse.Namespace) -> int:
    dirs = paths_or_default(args.dirs)
    found: Sequence[SessionRow]
    if any(is_database_url(d) for d in dirs):
        found = _database_rows(dirs, args)
    else:
        prices = load_prices(args.prices)
        cache = None if args.no_cache else RowCache(default_cache_path())
        with ByteProgress("reading sessions", enabled=not args.json) as bar:
            found = sessions(dirs, progress=bar, prices=prices, cache=cache)
        if cache is not None:
            cache.save()
    rows = sort_rows(list(found), args.sort, args.reverse)
    if args.json:
        _emit_json([r.to_json() for r in rows])
        return 0
    if is_terminal(sys.stdout):
        from rich import box
        from rich.console import Console
        from rich.table import Table

        lines = []
        ids = short_ids([r.session_id or "?" for r in rows])
        for row, short in zip(rows, ids, strict=True):
            cells = dict(zip(HEADINGS, _cells(row), strict=True))
            cells["last"] = cells["last"][:16].replace("T", " ")
            cells["id"] = short
            lines.append([cells[h] for h in TERMINAL])
        console = Console(no_color=bool(os.environ.get("NO_COLOR")))
        widths = [max([len(h), *(len(line[i]) for line in lines)])
                  for i, h in enumerate(TERMINAL)]
        # the name and models are cut short to what the other columns leave of the width,
        # never wrapped a word a line
        spare = console.width - 3 * len(TERMINAL) - sum(
            w for h, w in zip(TERMINAL, widths, strict=True) if h not in WIDEST)
        for heading, most in WIDEST.items():
            i = TERMINAL.index(heading)
            widths[i] = max(len(heading), min(widths[i], most, spare // 2))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for heading, width in zip(TERMINAL, widths, strict=True):
            table.add_column(heading, justify="right" if heading in RIGHT else "left",
                             no_wrap=True, overflow="ellipsis", width=width)
        for row, line in zip(rows, lines, strict=True):
            table.add_row(*line, style="red" if row.state == "needs-repair" else None)
        console.print(table)
    else:
        print(tsv_line([*HEADINGS, "path"]))
        for row in rows:
            print(tsv_line([*_cells(row), row.path]))
    for row in rows:
        if row.problems:
            print(f"Warning: {row.path}: {'; '.join(row.problems)}", file=sys.stderr)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    report = prune([args.dir], parse_age(args.older_than), dry_run=args.dry_run,
                   archive_to=args.archive_to)
    if args.json:
        _emit_json(report.to_json())
    else:
        _print_prune(report)
    return 2 if report.failed else 0


def _print_prune(report: PruneReport) -> None:
    would = report.dry_run
    for item in report.items:
        if item.action == "skip":
            print(f"kept      {item.row.path}: {item.reason}")
            continue
        verb = {"remove": "removed", "archive": "moved"}[item.action]
        if would:
            verb = "would " + {"remove": "remove", "archive": "move"}[item.action]
        elif not item.done:
            verb = "FAILED"
        print(f"{verb:<9} {item.row.path} (last activity {item.row.last}, "
              f"{len(item.files)} file(s))")
        for i, f in enumerate(item.files):
            print(f"    {f}" + (f" -> {item.moved_to[i]}" if item.moved_to else ""))
        if item.error:
            print(f"Error: {item.error}", file=sys.stderr)
    for lock in report.locks:
        if lock.action == "skip":
            print(f"kept      {lock.path}: {lock.reason}")
            continue
        verb = "would remove" if would else "removed" if lock.done else "FAILED"
        print(f"{verb:<9} {lock.path} (a lock file nobody holds; its session file is gone)")
        if lock.error:
            print(f"Error: {lock.error}", file=sys.stderr)
    count = len(report.pruned)
    done = sum(1 for i in report.pruned if i.done)
    files = sum(len(i.files) for i in report.pruned if i.done or would)
    summary = (f"{count} session(s), {files} file(s) would be pruned" if would
               else f"{done} session(s), {files} file(s) pruned")
    summary += f"; {len(report.items) - count} kept (cutoff {report.cutoff})"
    locks = [lock for lock in report.locks if lock.action != "skip"]
    if locks:
        gone = len(locks) if would else sum(1 for lock in locks if lock.done)
        summary += (f"; {gone} stray lock file(s) " + ("would be removed" if would
                                                       else "removed"))
    print(summary)


def add_catalog_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ls", help="one row per session: name, id, models, times, size, tokens, "
                       "cost, state",
                       description=LS_DESCRIPTION)
    p.add_argument("dirs", nargs="*", metavar="DIR",
                   help="folders (or session files), or one database (postgresql://.../db, "
                   "or pg: for $JOURNAL_DATABASE_URL's: its sessions, one row per lineage, "
                   "each field as for files)")
    p.add_argument("--sort", choices=SORT_KEYS, default="last",
                   help="order rows by this (default last activity, newest first)")
    p.add_argument("--reverse", action="store_true", help="the other way round")
    p.add_argument("--prices", metavar="FILE",
                   help="price table for messages that recorded no cost (as 'journal usage')")
    p.add_argument("--no-cache", action="store_true",
                   help="read every session again; neither read nor write the cache file")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("prune", help="remove whole sessions idle longer than an age",
                       description=PRUNE_DESCRIPTION)
    p.add_argument("dir", metavar="DIR", help="folder of sessions")
    p.add_argument("--older-than", required=True, metavar="AGE",
                   help="last activity older than this: 90d, 12h, 2w, 30m, 45s")
    p.add_argument("--dry-run", action="store_true", help="say what would go; touch nothing")
    p.add_argument("--archive-to", metavar="DIR",
                   help="move the files under DIR (keeping their paths) instead of removing")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=files_only(cmd_prune, "journal prune"))
