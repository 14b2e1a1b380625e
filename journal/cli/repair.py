"""`journal repair` and the `journal-repair` command: argument handling and output only."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence

import orjson

from ..anywhere import repair
from ..claude import CLAUDE, PI, dialect_of, subagent_files
from ..discovery import is_subagent_file
from ..errors import JournalError, describe_os_error
from ..identity import first_names
from ..pg.url import hide_passwords, is_database_url, names_session, short_name, shown
from ..repair import RepairReport, session_files
from ..snapshot import refuse_misread
from .app import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    ByteProgress,
    entry_parser,
    print_error,
    progress,
    run,
    seconds,
)

DESCRIPTION = (
    "Repair damaged session files without losing a byte: torn or glued lines, NUL runs, "
    "invalid UTF-8, missing or extra headers, duplicate ids, broken parent links, and tool "
    "results without calls, answered twice or out of place on the active branch. States pi "
    "writes and handles itself when it sends a request (aborted turns, calls whose result "
    "was never written) are notes: left as they are unless --strict. The fixed file "
    "replaces the old one atomically under the writer lock; the old one is kept as "
    "<file>.bak and every dropped or rewritten byte range goes to <file>.quarantine. "
    "A Claude Code transcript is detected and repaired in Claude Code's own format "
    "(docs/claude.md)."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="session files, or directories to repair every *.jsonl under, or "
                   "database sessions (postgresql://...?session=ID, pg:ID: removed lines "
                   "go to the journal.quarantine table), or databases (postgresql://.../db, "
                   "pg:) to repair every live session in")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="report what would change; write nothing")
    mode.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if anything needs repair, 0 if clean")
    p.add_argument("--strict", action="store_true",
                   help="also fix notes: states pi handles itself when it sends a request "
                        "(default: leave them in the file)")
    p.add_argument("--migrate", action="store_true",
                   help="write version 1/2 files as version 3 (default: keep their version)")
    p.add_argument("--lock-timeout", type=seconds, default=10.0, metavar="S",
                   help="seconds to wait for a live writer to let go (default 10)")
    p.add_argument("--dialect", choices=("pi", "claude"), default=None,
                   help="the files' format (default: detected per file from its records; a "
                        "Claude Code transcript is repaired in its own format)")
    p.add_argument("--json", action="store_true", help="print one JSON report per file")
    p.set_defaults(func=run_repair)


def add_repair_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    configure(sub.add_parser("repair", help="fix corrupted session files (see --help)",
                             description=DESCRIPTION))


def _targets(paths: list[str], dialect: str | None) -> list[str]:
    """The files to repair, each once however it is named (`first_names`: a file under two
    names, a hard link in a transcript's `subagents/` say, under the first): a folder's
    session files (a transcript's subagent files among them), and a Claude Code transcript
    named by itself with its subagent files after it (they are the session's: `journal
    info` counts their damage with its own); a database's live sessions
    (`live_database_sessions`: one per lineage)."""
    out: dict[str, None] = {}
    for path in paths:
        if _whole_database(path):
            from ..pg.lineages import live_database_sessions

            if dialect is not None:
                refuse_misread(path, dialect)  # once, not for each of its sessions
            out.update(dict.fromkeys(session for session, _ in live_database_sessions(path)))
        elif not is_database_url(path) and os.path.isdir(path):
            out.update(dict.fromkeys(session_files(path)))
        else:
            out[path] = None
            out.update(dict.fromkeys(_subagents_of(path, dialect)))
    return list(first_names(out))


def _whole_database(path: str) -> bool:
    """Whether `path` names a database (a URL without `session`, `pg:` alone), not a
    session in one."""
    return is_database_url(path) and not names_session(path)


def _subagents_of(path: str, dialect: str | None) -> list[str]:
    if is_database_url(path) or dialect == PI:
        return []
    try:
        if (dialect or dialect_of(path)) != CLAUDE:
            return []
    except (JournalError, OSError):
        return []  # the repair of the path itself says why it cannot be read
    return subagent_files(path)


def _repair_one(path: str, args: argparse.Namespace, dry: bool,
                bar: ByteProgress) -> RepairReport:
    # a subagent file is a Claude Code transcript by where it is, whatever its bytes say
    # (one killed in its first write holds no whole record to tell it by)
    dialect = args.dialect or (CLAUDE if is_subagent_file(path) else None)
    return repair(path, dry_run=dry, migrate=args.migrate, strict=args.strict,
                  lock_timeout=args.lock_timeout, progress=bar, dialect=dialect)


def run_repair(args: argparse.Namespace) -> int:
    targets = _targets(args.paths, args.dialect)
    if not targets:
        if all(map(_whole_database, args.paths)):
            raise JournalError(f"{', '.join(map(shown, args.paths))}: no sessions in "
                               f"{'this database' if len(args.paths) == 1 else 'these databases'}")
        raise JournalError(f"no session files (*.jsonl) under {', '.join(args.paths)}")
    noun = "sessions" if all(map(is_database_url, targets)) else "files"
    reports: list[RepairReport] = []
    errors: list[tuple[str, str]] = []
    dry = args.dry_run or args.check
    for path in progress(targets, "repairing", enabled=not args.json):
        try:
            # one file: a byte bar while it is checked and written (several: the file bar)
            with ByteProgress(f"repairing {os.path.basename(path)}",
                              enabled=len(targets) == 1 and not args.json) as bar:
                report = _repair_one(path, args, dry, bar)
        except (JournalError, OSError) as e:
            message = describe_os_error(e) if isinstance(e, OSError) else str(e)
            errors.append((path, message))
            print_error(hide_passwords(message))
            continue
        if any(r.path == report.path for r in reports):
            continue  # a file followed to its successor (a rotation it finished), done already
        reports.append(report)
        if args.json:
            sys.stdout.write(orjson.dumps(report.to_json()).decode() + "\n")
        elif not args.check:
            _print_report(report)
    if len(targets) > 1 and not args.json:
        _print_summary(reports, errors, noun)
    if errors:
        return EXIT_ERROR
    if args.check:
        dirty = [r for r in reports if r.changed]
        if not args.json:
            for r in dirty:
                print(f"{r.path}: needs repair ({_kinds(r)})")
            for r in reports:
                if r.notes and not r.changed:
                    print(f"{r.path}: {_notes(r)}")
            if not dirty:
                print("clean" if len(reports) == 1 else f"all {len(reports)} {noun} clean")
        return EXIT_FINDINGS if dirty else EXIT_OK
    return EXIT_OK


def _kinds(report: RepairReport) -> str:
    counts = report.counts
    if report.strict:
        counts = dict(Counter(counts) + Counter(report.note_counts))
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def _notes(report: RepairReport) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.note_counts.items()))
    # printed only without --strict, and then the notes are always left (damage or not)
    return f"notes ({kinds}): states pi handles itself; left as they are (--strict fixes them)"


def _print_report(report: RepairReport) -> None:
    if not report.changed:
        print(f"{report.path}: clean")
        if report.notes:
            print(f"  {_notes(report)}")
        return
    verb = "would fix" if report.dry_run else "fixed"
    found = len(report.problems) + (len(report.notes) if report.strict else 0)
    print(f"{report.path}: {verb} {found} problem(s): {_kinds(report)}")
    for p in report.problems[:20]:
        where = f"line {p.line}" if p.line else (f"entry {p.entry_id}" if p.entry_id else "")
        detail = f" ({p.detail})" if p.detail else ""
        print(f"  {where:>12}  {p.kind}: {p.action}{detail}")
    if len(report.problems) > 20:
        print(f"  ... and {len(report.problems) - 20} more (use --json for all)")
    if report.notes and not report.strict:
        print(f"  {_notes(report)}")
    if report.rewritten:
        print(f"  {_rewritten(report)}")
    if report.backup:
        print(f"  backup: {report.backup}")
    if report.quarantine:
        print(f"  quarantine: {report.quarantine}")


def _rewritten(report: RepairReport) -> str:
    """How many lines are written anew, each one's original bytes a quarantine record: those
    with a problem, and those rewritten only as a consequence of fixing one."""
    total, more = len(report.rewritten), report.rewritten_as_consequence
    if more:
        kinds = ", ".join(sorted({r.kind for r in more}))
        split = f": {total - len(more)} with a problem, {len(more)} more as a consequence ({kinds})"
    else:
        split = ", each with a problem"
    if report.dry_run:
        return (f"would rewrite {total} line(s){split}; the quarantine would keep each one's "
                "original bytes (see --json 'rewritten')")
    return (f"rewrote {total} line(s){split}; the quarantine keeps each one's original bytes "
            "(see --json 'rewritten')")


def _print_summary(reports: list[RepairReport], errors: list[tuple[str, str]],
                   noun: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="repair summary")
    table.add_column(noun.removesuffix("s"))
    table.add_column("result")
    table.add_column("problems", justify="right")
    for r in reports:
        result = ("needs repair" if r.dry_run else "changed") if r.changed else "clean"
        table.add_row(short_name(r.path), result, str(len(r.problems)))
    for path, message in errors:
        table.add_row(short_name(path), "error", hide_passwords(message))
    Console(no_color=bool(os.environ.get("NO_COLOR"))).print(table)


def repair_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `journal-repair` command (same options as `journal repair`)."""
    parser = entry_parser("journal-repair", DESCRIPTION)
    configure(parser)
    return run(parser, argv)
