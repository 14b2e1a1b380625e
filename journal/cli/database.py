"""`journal push` and `journal pull`: sessions between files and a PostgreSQL database."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from .. import codec
from ..interrupt import Terminated
from ..lock import DEFAULT_LOCK_TIMEOUT
from .app import EXIT_ERROR, EXIT_OK, ByteProgress, progress_note, seconds


def _emit(value: Any) -> None:
    sys.stdout.write(codec.dumps(value, orjson.OPT_INDENT_2).decode() + "\n")


def cmd_push(args: argparse.Namespace) -> int:
    from ..pg.transfer import PushRefused, push

    progress_note(f"pushing {args.path}", enabled=not args.json)
    with ByteProgress("reading sessions", enabled=not args.json) as bar:
        try:
            result = push(args.path, args.url, lock_timeout=args.lock_timeout, progress=bar)
        except PushRefused as e:
            result = e.result
        except (KeyboardInterrupt, Terminated):
            # each lineage is its own transaction: those stored stay, the one under way not
            print("journal: push interrupted: the lineages it stored stay stored, the one it "
                  "was storing is not; run the same push again to finish", file=sys.stderr)
            raise
    for row in result.sessions:
        if row.get("torn"):
            print(f"Warning: {row['file']}: its last line is incomplete (being written, or "
                  f"torn): its {row['torn']:,} bytes were left out", file=sys.stderr)
    if args.json:
        _emit(result.to_json())
    else:
        _print_push(result.sessions)
        counts = {action: sum(1 for row in result.sessions if row["action"] == action)
                  for action in ("new", "appended", "unchanged", "refused")}
        if result.changed or counts["refused"]:
            print(", ".join(f"{n} {action}" for action, n in counts.items() if n))
        elif not result.sessions:
            print(f"nothing to push: no session file in {args.path} (the database was not "
                  "asked)")
        else:
            print(f"nothing to push: the database is up to date ({counts['unchanged']} "
                  "session(s) unchanged)")
    for row in result.refused:
        print(f"Error: {row['file']}: refused: {row['reason']}", file=sys.stderr)
    return EXIT_ERROR if result.refused else EXIT_OK


def _print_push(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        action, name = row["action"], row["name"]
        sealed = f", sealed: continues in {row['sealed']}" if "sealed" in row else ""
        if action == "new":
            print(f"new        {name}  ->  {row['session']}  ({row['lines']:,} line(s), "
                  f"{row['bytes']:,} bytes{sealed})")
        elif action == "appended":
            print(f"appended   {name}  ->  {row['session']}  ({row['lines']:,} line(s), "
                  f"now {row['bytes']:,} bytes{sealed})")
        elif action == "unchanged":
            renamed = (f"file name was {row['renamed']}, now {name}" if "renamed" in row
                       else "")
            said = "; ".join(x for x in (sealed[2:], renamed) if x)
            print(f"unchanged  {name}" + (f"  ({said})" if said else ""))
        else:
            print(f"refused    {name}  ({row['reason']})")


def cmd_pull(args: argparse.Namespace) -> int:
    from ..pg.transfer import pull

    progress_note(f"pulling into {args.dir}", enabled=not args.json)
    result = pull(args.url, args.dir, skip_elsewhere=args.skip_elsewhere)
    for row in result.skipped:
        print(f"Warning: left out {row['file']}: {row['session']} was moved out of the "
              f"database to {row['elsewhere']}, which is not on this machine", file=sys.stderr)
    for row in result.files:
        if "renamed_from" in row:
            print(f"Warning: {row['session']} written as {row['file']}, not as "
                  f"{row['renamed_from']}: a file name of its lineage is an earlier "
                  "session's", file=sys.stderr)
    if args.json:
        _emit(result.to_json())
        return 0
    for row in result.files:
        if row["already"]:
            print(f"already there {row['file']}  ({row['bytes']:,} bytes, the same)")
        else:
            print(f"wrote {row['file']}  ({row['bytes']:,} bytes)")
    for row in result.archived:
        print(f"removed {row['file']}  (an earlier pull's copy of a session rotated since: "
              f"its {row['bytes']:,} bytes begin {row['archive']})")
    there = sum(1 for row in result.files if row["already"])
    also = f", {there} already there" if there else ""
    left = f", {len(result.skipped)} archive(s) left out" if result.skipped else ""
    gone = (f", {len(result.archived)} earlier copy(ies) removed" if result.archived
            else "")
    print(f"{len(result.files) - there} file(s) written{also}{left}{gone}")
    return 0


def add_database_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "push", help="bring a PostgreSQL database up to date with session files (with their "
        "lineage)",
        description="Store session files in a database, byte for byte: a file with every "
        "archived file it continues, or every session file under a folder. Each becomes the "
        "session named by its header's id; a sealed file leads to its successor there too. "
        "A session the database lacks is stored, one it holds the beginning of gets the "
        "file's new complete lines appended, one it holds whole is left as it is, and one "
        "of which it holds more or other bytes is refused, with its whole lineage (the "
        "other lineages are pushed; exit 2). Run again, it changes nothing.")
    p.add_argument("path", help="a session file (its lineage is pushed) or a folder")
    p.add_argument("url", nargs="?", help="the database: postgresql://user@host:port/db "
                   "(default: JOURNAL_DATABASE_URL)")
    p.add_argument("--lock-timeout", type=seconds, default=DEFAULT_LOCK_TIMEOUT, metavar="S",
                   help="seconds to wait for a database writer of a session to be appended "
                   f"to (default {DEFAULT_LOCK_TIMEOUT:g})")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_push)

    p = sub.add_parser(
        "pull", help="write database sessions back to files (byte-identical to those pushed)",
        description="Write sessions from a database into a folder under their file names "
        "(archives under archive/ as their successors name them: a lineage pushed from "
        "files comes back as it went, .gz archives included; one rotated in the database "
        "has plain .jsonl archives): a session URL writes its lineage, a database URL every "
        "session. A lineage with a file name an earlier one has is written whole into a "
        "folder named by its first session's id (with a warning). "
        "A file already there with the bytes the pull would write counts as written (a "
        "pull that was killed is finished by running it again). An earlier pull's copy of a "
        "session rotated since (a beginning of its archive now) is removed once the "
        "archive is written, as file rotation moves it. Refused, writing nothing, "
        "if a file exists already with other bytes, if such a copy holds bytes the "
        "database lacks, or if an archive moved out of "
        "the database (rotate --keep) is in a file not on this machine.")
    p.add_argument("url", help="postgresql://...?session=ID or pg:ID (a lineage), or "
                   "postgresql://.../db (every session)")
    p.add_argument("dir", help="the folder to write into (made if missing)")
    p.add_argument("--skip-elsewhere", action="store_true",
                   help="leave out the archives moved out to files not on this machine "
                   "(each with a warning) and write the rest")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_pull)
