"""The `journal` command: its sub-commands, each a thin layer that calls the library and prints.

`journal repair` and `journal tail` live in their own modules (shared with `journal-repair` and
`journal-tail`); errors become exit codes in `app.run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import orjson

from .. import codec
from ..claude import DIALECTS
from ..context import Context
from ..errors import DamagedArchive, JournalError, NotASession, UnknownEntry
from ..folder_rotation import STATUSES, SessionRotation, live_sessions, rotate_folder
from ..info import inspect
from ..interrupt import Terminated
from ..pg.url import hide_passwords, is_database_url, names_session, shown
from ..render import describe_entry, describe_message
from ..rotation import RotationResult
from ..session import Session
from ..snapshot import load, open_for_reading, require_session
from ..tree import TreeNode
from ..view import View, check_session, locate
from .app import ByteProgress, default_sessions_dir, entry_parser, print_error, run, seconds
from .catalog import add_catalog_parsers
from .claude import add_import_parser
from .database import add_database_parsers
from .export import add_export_parser
from .pgserver import add_pg_server_parser
from .repair import add_repair_parser
from .search import add_search_parser
from .tail import add_tail_parser
from .usage import add_usage_parser


def _emit_json(value: Any) -> None:
    sys.stdout.write(codec.dumps(value, orjson.OPT_INDENT_2).decode() + "\n")


def _emit_json_line(value: Any) -> None:
    sys.stdout.write(codec.dumps(value).decode() + "\n")


def add_dialect(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dialect", choices=DIALECTS, default=None,
                   help="read the file as a pi session or a Claude Code transcript (default: "
                   "told from its records)")


def reading(args: argparse.Namespace) -> str:
    """The file a read command reads for `args.path`: a rotated or moved path is followed to
    its live successor (said on stderr) unless `--no-follow`."""
    target, moved = locate(args.path, follow=not args.no_follow)
    if moved is not None:
        print(f"journal: {moved} was rotated; reading {target}", file=sys.stderr)
    return target


# commands


def cmd_new(args: argparse.Namespace) -> int:
    with Session.create(args.dir or default_sessions_dir(), cwd=args.cwd) as session:
        result = {"path": session.path, "id": session.session_id}
    if args.json:
        _emit_json(result)
    else:
        print(result["path"])
    return 0


MAX_INPUT_LINE = 256 << 20


def read_entries_from(stream: BinaryIO) -> list[dict[str, Any]]:
    """Entries (objects with a `type`) or bare messages (with a `role`), one JSON per line.

    Every line is checked before anything is written; a bad one raises with its line number.
    Lines are read as JSON.parse reads them (lone surrogate escapes kept), and one longer than
    `MAX_INPUT_LINE` is refused before it is held whole (`/dev/zero` as input, say).
    """
    entries: list[dict[str, Any]] = []
    number = 0
    while raw := stream.readline(MAX_INPUT_LINE + 1):
        number += 1
        if len(raw) > MAX_INPUT_LINE:
            raise JournalError(f"stdin line {number}: longer than {MAX_INPUT_LINE:,} bytes; "
                               "nothing was appended")
        if not raw.strip():
            continue
        try:
            value = codec.loads(raw)
        except orjson.JSONDecodeError as e:
            raise JournalError(f"stdin line {number}: not valid JSON ({e})") from e
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            entries.append(value)
        elif isinstance(value, dict) and isinstance(value.get("role"), str):
            entries.append({"type": "message", "message": value})
        else:
            raise JournalError(
                f"stdin line {number}: expected an entry with a 'type' or a message with a 'role'"
            )
    return entries


def cmd_append(args: argparse.Namespace) -> int:
    from ..anywhere import live as live_session

    live = live_session(args.path)  # where the entries go: `--parent` is looked for there
    if not is_database_url(live):
        open_for_reading(live).close()
    entries = read_entries_from(sys.stdin.buffer)
    if not entries:
        raise JournalError("nothing to append: stdin held no entries")
    if args.parent is not None and not _holds(live, args.parent):
        raise JournalError(f"{live}: no entry with id {args.parent!r}; nothing was appended")
    with Session.open(args.path, lock_timeout=args.lock_timeout,
                      migrate=not args.no_migrate) as session:
        if args.parent is not None:
            try:
                session.branch(args.parent)
            except UnknownEntry as e:
                raise JournalError(f"{session.path}: no entry with id {args.parent!r}; "
                                   "nothing was appended") from e
        ids = session.append_many(entries)
        written = session.path
    if args.json:
        _emit_json({"path": written, "ids": ids})
    else:
        for entry_id in ids:
            print(entry_id)
    return 0


def _holds(path: str, entry_id: str) -> bool:
    """Whether session `path` holds an entry with this id: read before anything is locked
    or written, the tail first, the whole file only if the tail does not hold it."""
    tree = View.open(path, follow=False).tree
    if tree.index_of(entry_id) is None and not tree.complete:
        tree = View.open(path, full=True, follow=False).tree
    return tree.index_of(entry_id) is not None


def cmd_show(args: argparse.Namespace) -> int:
    snap = load(reading(args), dialect=args.dialect)
    require_session(snap)
    rows: list[tuple[int, dict[str, Any]]] = []
    for at, entry in zip(snap.lines, snap.entries, strict=True):
        rows.append((at, {"line": at, "entry": entry}))
    bases = snap.claude.line_base if snap.claude is not None else {}
    for d in [*snap.diagnostics, *snap.field_issues]:
        # a subagent file's damage goes where its lines are numbered on (as its entries)
        number = bases.get(d.file, 0) + (d.line or 0) if d.file is not None else d.line
        rows.append((number or 0, {"line": number, "diagnostic": d.to_json()}))
    rows.sort(key=lambda r: r[0])
    if args.json:
        if snap.header is not None:
            _emit_json_line({"line": 1, "header": snap.header})
        for _, row in rows:
            _emit_json_line(row)
        return 0
    if snap.header is not None:
        h = snap.header
        print(f"{1:>6}  session v{snap.version} {h.get('id')} cwd={h.get('cwd')}")
    elif snap.claude is not None:
        c = snap.claude
        print(f"{'':>6}  Claude Code transcript {c.first('sessionId')} cwd={c.first('cwd')} "
              f"(version {c.first('version')}; {len(c.metadata)} metadata records, "
              f"{len(c.subagent_files)} subagent files)")
    for _, row in rows:
        if "entry" in row:
            e = row["entry"]
            print(f"{row['line']:>6}  {e.get('id')} {describe_entry(e)}")
        else:
            d = row["diagnostic"]
            inside = (f" of {d['file']} (its line {d['line'] or '?'})" if "file" in d else "")
            print(f"{row['line'] or '?':>6}  !! {d['reason']} at byte {d['offset']:,} "
                  f"({d['length']:,} bytes){inside}: {d['detail']}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    info = inspect(reading(args), dialect=args.dialect)
    if args.json:
        _emit_json(info.to_json())
        return 0
    data = info.to_json()
    print(f"path:      {info.path}")
    if info.dialect == "claude":
        print(f"session:   {data['id']} (Claude Code transcript, written by version "
              f"{(info.header or {}).get('version')}; read in place, never appended to)")
        if info.subagent_files:
            print(f"subagents: {len(info.subagent_files)} files")
    else:
        print(f"session:   {data['id']} (format version {info.version})")
    print(f"cwd:       {data['cwd']}")
    print(f"created:   {data['created']}")
    if data["parentSession"]:
        print(f"parent:    {data['parentSession']}")
    if info.name:
        print(f"name:      {info.name}")
    print(f"size:      {info.size:,} bytes")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(info.by_type.items(), key=lambda kv: -kv[1]))
    print(f"entries:   {info.entries:,} ({kinds})")
    print(f"leaf:      {info.leaf_id}")
    if info.labels:
        print("labels:    " + ", ".join(f"{k}={v!r}" for k, v in info.labels.items()))
    if info.lock_holder is not None:
        holder = info.lock_holder
        print(f"writer:    pid {holder.get('pid', '?')} on {holder.get('host', '?')} "
              f"since {holder.get('since', '?')}")
    elif info.lock_file == "stale":
        print(f"writer:    none (stale lock file {info.path}.lock, no holder; harmless)")
    else:
        print("writer:    none (not locked)")
    if info.pending_rotation:
        print(f"rotation:  {info.pending_rotation}")
    if info.sealed:
        print("sealed:    yes (a rotation sealed it; nothing is appended to it again)")
        print(f"continues: {info.successor or 'in a successor that is not here'}")
        if info.live is not None and info.live != info.successor:
            print(f"live:      {info.live}")
        if info.missing_successor is not None:
            print(f"broken:    the lineage is broken: session {info.missing_successor}, which "
                  "a seal names as its successor, is not in the database; no live session "
                  "continues it")
    for damaged in info.damaged_archives:
        hidden = ("the files before it cannot be found" if damaged["blocks"] == "before"
                  else "the files after it, the live one among them, cannot be found")
        print(f"damaged:   {damaged['path']}, an archive of its lineage ({damaged['reason']}): "
              f"{hidden}; put back a good copy of it")
    problems = len(info.problems)
    # a check changes nothing: each problem's action is what a repair would do
    print(f"problems:  {problems}" + (" (nothing was changed; each says what 'journal repair' "
                                      "would do)" if problems else ""))
    for p in info.problems[:20]:
        where = f"line {p.line}" if p.line else (f"entry {p.entry_id}" if p.entry_id else "file")
        if p.file is not None:  # a Claude Code transcript's subagent file
            where = f"{p.file}, {where}" if where != "file" else p.file
        print(f"  !! {where}: {p.kind}: {p.action}" + (f" ({p.detail})" if p.detail else ""))
    if problems > 20:
        print(f"  ... and {problems - 20} more (use --json for all)")
    if info.notes:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(info.note_counts.items()))
        print(f"notes:     {kinds} (states pi handles itself; not damage)")
    if problems:
        print(f"run 'journal repair {info.path}' to fix them")
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    path = reading(args)
    # only the tail the context needs (all of it for --leaf)
    view = View.open(path, follow=False, dialect=args.dialect)
    try:
        context: Context = view.context(args.leaf or None, raw=not args.for_model)
    except UnknownEntry as e:
        raise JournalError(f"{path}: no entry with id {args.leaf!r}") from e
    report = context.pairing if args.for_model else None
    if args.json:
        data = context.to_json()
        if report is not None:
            data["pairingFixes"] = [vars(f) for f in report.fixes]
        _emit_json(data)
        return 0
    model = context.model or {}
    print(f"model {model.get('provider')}/{model.get('modelId')}, thinking "
          f"{context.thinking_level}, leaf {context.leaf_id}, {len(context.messages)} messages")
    for message in context.messages:
        print(f"  {message.get('role')!s:<17} {describe_message(message)}")
    if report is not None and report.changed:
        print(f"pairing fixes applied for the model: {report.counts}")
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    tree = View.open(reading(args), full=True, follow=False, dialect=args.dialect).tree
    leaf_id = tree.leaf_id
    if args.json:
        # flat, in the order and with the indent of the text output: a chain as long as the
        # session would be too deep for JSON as nested objects
        _emit_json({"leafId": leaf_id, "nodes": [
            {"depth": depth, "id": node.entry.get("id"),
             "parentId": node.entry.get("parentId"), "label": node.label,
             "children": len(node.children), "leaf": node.entry.get("id") == leaf_id,
             "entry": node.entry}
            for depth, node in _walk_nested(tree.nested())]})
        return 0
    for depth, node in _walk_nested(tree.nested()):
        entry = node.entry
        mark = " ← leaf" if entry.get("id") == leaf_id else ""
        label = f" [{node.label}]" if node.label else ""
        print(f"{'  ' * depth}{entry.get('id')}{label} {describe_entry(entry)}{mark}")
    return 0


def _walk_nested(roots: list[TreeNode]) -> Iterator[tuple[int, TreeNode]]:
    """Depth-first, indenting only where a node has several children (a chain stays flat)."""
    stack: list[tuple[int, TreeNode]] = [(0, r) for r in reversed(roots)]
    while stack:
        depth, node = stack.pop()
        yield depth, node
        child_depth = depth + 1 if len(node.children) > 1 else depth
        stack.extend((child_depth, c) for c in reversed(node.children))


def cmd_rotate(args: argparse.Namespace) -> int:
    from ..anywhere import rotate
    from ..rotation import check_keep

    try:
        check_keep(args.keep)
    except ValueError:
        raise JournalError("--keep takes a number of archives, 0 or more") from None
    from ..lineage import resolve_live

    if is_database_url(args.path):
        from ..pg.rotation import UnsupportedOption, check_options

        try:
            check_options(compress=not args.no_compress, keep=args.keep,
                          archive_dir=args.archive_dir)
        except UnsupportedOption as e:
            raise JournalError(DATABASE_ROTATION_FLAGS[e.option]) from None
        if not names_session(args.path):
            return _rotate_folder(args)  # a whole database, as a folder
        try:
            result = rotate(args.path, archive_dir=args.archive_dir, keep=args.keep,
                            compress=not args.no_compress, dry_run=args.dry_run,
                            lock_timeout=args.lock_timeout)
        except BaseException as e:
            # stopped after its commit (Ctrl-C, say): that it rotated, and what is left to do
            for note in getattr(e, "__notes__", ()):
                print(f"journal: {note}", file=sys.stderr)
            raise
        return _print_rotation(result, args)
    if os.path.isdir(args.path):
        return _rotate_folder(args)
    check_session(resolve_live(args.path)[0])  # refuse what is no session before any change
    with ByteProgress("compressing the archive", enabled=not args.json) as bar:
        result = rotate(args.path, archive_dir=args.archive_dir, keep=args.keep,
                        compress=not args.no_compress, dry_run=args.dry_run,
                        lock_timeout=args.lock_timeout, progress=bar)
    return _print_rotation(result, args)


DATABASE_ROTATION_FLAGS = {
    "compress": "--no-compress is for files: a database session's archives are exported "
                "(--archive-dir) as .jsonl.gz",
    "keep": "--keep on a database session moves the older archives out of the database, to "
            "files: give --archive-dir DIR too",
}
"""`journal.pg.rotation.check_options`'s refusals in the flags' words."""


def _rotate_folder(args: argparse.Namespace) -> int:
    """`journal rotate DIR` (or `DATABASE`: a URL without `session`, `pg:`): every live
    session under it, one line of progress each on stderr; exit 2 if any failed, else 1 if
    any was busy, else 0."""
    options = {"archive_dir": args.archive_dir, "keep": args.keep, "dry_run": args.dry_run,
               "lock_timeout": args.lock_timeout}
    if is_database_url(args.path):
        from ..pg.database_rotation import rotate_database_sessions
        from ..pg.lineages import live_database_sessions

        where, key = shown(args.path), "database"
        sessions = live_database_sessions(args.path)
        if not sessions:  # as a folder with none: a database named by mistake is said
            raise JournalError(f"{where}: no sessions in this database")
        outcomes = rotate_database_sessions(args.path, sessions=sessions, **options)
    else:
        where, key = args.path, "folder"
        sessions = live_sessions(args.path)
        if not sessions:  # as `repair DIR`: a folder named by mistake is said, not passed over
            raise JournalError(f"{args.path}: no sessions (*.jsonl) under this folder")
        outcomes = rotate_folder(args.path, compress=not args.no_compress, sessions=sessions,
                                 **options)
    done: list[SessionRotation] = []
    try:
        _rotate_each(args, outcomes, len(sessions), done)
    except (KeyboardInterrupt, Terminated) as e:
        # a database session stopped after its commit: that it rotated, and what is left
        for note in getattr(e, "__notes__", ()):
            print(f"journal: {note}", file=sys.stderr)
        # each session's rotation is whole or finished by the next rotate: say where it stood
        print(f"journal: rotate interrupted after {len(done)} of {len(sessions)} session(s); "
              "run it again to finish (a rotation cut short is finished by the next one)",
              file=sys.stderr)
        raise
    counts = {status: sum(o.status == status for o in done) for status in STATUSES}
    if args.json:
        _emit_json({key: where, "dryRun": args.dry_run, "counts": counts,
                    "sessions": [o.to_json() for o in done]})
    else:
        verb = "would rotate" if args.dry_run else "rotated"
        print(f"{where}: {len(done)} session(s): {verb} {counts['rotated']}, skipped "
              f"{counts['skipped']}, busy {counts['busy']}, failed {counts['failed']}")
    if counts["failed"]:
        return 2
    return 1 if counts["busy"] else 0


def _rotate_each(args: argparse.Namespace, outcomes: Iterator[SessionRotation], total: int,
                 done: list[SessionRotation]) -> None:
    """`journal rotate DIR`'s (or `DATABASE`'s) sessions one by one, each said as it is done
    (into `done`)."""
    for n, outcome in enumerate(outcomes, 1):
        done.append(outcome)
        state = ("would rotate" if args.dry_run and outcome.status == "rotated"
                 else outcome.status)
        # a busy session is a note (its writer is at work: a later run takes it), not an error
        why = f" ({outcome.reason})" if outcome.reason and outcome.status != "failed" else ""
        print(f"journal: [{n}/{total}] {outcome.path}: {state}{why}", file=sys.stderr)
        if outcome.status == "failed":
            print_error(hide_passwords(outcome.reason))
        elif outcome.status == "busy":
            continue
        elif args.json:
            continue
        elif outcome.result is not None:
            _print_rotation(outcome.result, args)
        else:
            print(f"{outcome.path}: not rotated: {outcome.reason}")


def _print_rotation(result: RotationResult, args: argparse.Namespace) -> int:
    if args.json:
        _emit_json(result.to_json())
        return 0
    if not result.rotated:
        print(f"{result.path}: not rotated: {result.reason}")
    else:
        verb = "would rotate" if result.dry_run else "rotated"
        print(f"{result.path}: {verb} into {result.successor}")
        kept = result.entries_copied
        print(f"  kept {kept:,} {'entry' if kept == 1 else 'entries'} "
              f"({result.successor_size:,} bytes of {result.old_size:,})")
        if result.compressing_elsewhere:
            print(f"  archive: {result.archive} (left for another process to compress)")
        else:
            print(f"  archive: {result.archive or 'none (see the warning)'}")
        if not result.dry_run:
            print(f"  writer lock held {result.lock_held_ms:.1f} ms, "
                  f"total {result.total_ms:.1f} ms")
    for temp in result.removed_temps:
        print(f"  removed {temp}, the temp of an export a crash stopped")
    exported = "would export" if result.dry_run else "exported"
    for session, exported_to in result.exported.items():
        if not (result.rotated and session == result.path):  # its archive: said above
            print(f"  {exported} archive {session} to {exported_to}")
    for removed in result.removed_archives:
        print(f"  removed old archive {removed}")
    moved = "would move" if result.dry_run else "moved"
    for session, moved_to in result.moved_out.items():
        print(f"  {moved} old archive {session} out of the database to {moved_to}")
    for warning in result.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from ..anywhere import is_sealed, lineage
    from ..lineage import trace

    if is_database_url(args.path):
        chain = lineage(args.path)
        # the last may be sealed too: its successor's row deleted (a broken lineage)
        live_one = None if is_sealed(chain[-1]) else shown(chain[-1])
        chain = [shown(url) for url in chain]
        return _print_lineage(args, chain, live_one, [])
    traced = trace(args.path)
    damaged = list(traced.damaged)
    if traced.live is not None:
        try:
            os.stat(traced.live)  # a folder on the way that cannot be entered is said as such
        except FileNotFoundError:
            raise NotASession(args.path, "no such file, and no successor of it was found") \
                from None
        check_session(traced.live)
    # the last found may be sealed too: archives copied (or exported) without the live file
    live_one = None if traced.live is None or is_sealed(traced.live) else traced.live
    return _print_lineage(args, traced.files, live_one, damaged)


def _print_lineage(args: argparse.Namespace, chain: list[str], live_one: str | None,
                   damaged: list[DamagedArchive]) -> int:
    """The lineage's files, then what stopped it: each damaged archive is a `Warning:` line
    (one each) and the status 1, as for any finding."""
    for damage in damaged:
        print(f"Warning: {damage}", file=sys.stderr)
    if args.json:
        found: dict[str, Any] = {"lineage": chain, "live": live_one}
        if damaged:
            found["damaged"] = [{"path": d.path, "reason": d.reason,
                                 "blocks": "after" if d.after else "before"} for d in damaged]
        _emit_json(found)
        return 1 if damaged else 0
    broken = {d.path for d in damaged}
    for n, path in enumerate(chain):
        label = ("damaged " if path in broken
                 else "live " if n == len(chain) - 1 and live_one else "archived")
        print(f"{label} {path}")
    blocking = next((d for d in damaged if d.after), None)
    if blocking is not None:
        print(f"(its live file is not found: {blocking.path} is damaged and cannot be "
              "followed)")
    elif live_one is None:
        print(f"(its successor is not here: {chain[-1]} is sealed too)")
    return 1 if damaged else 0


def cmd_quarantine_list(args: argparse.Namespace) -> int:
    from ..quarantine import numbered_records, side_file_of

    if is_database_url(args.path):
        from ..pg.repair import quarantined

        side, rows = "the journal.quarantine table", quarantined(args.path)
    else:
        side = side_file_of(args.path)
        if not os.path.exists(side):
            raise JournalError(f"{side}: no such file (nothing was quarantined)")
        rows = [{"line": n, **{k: v for k, v in r.items()
                               if k not in ("bytes", "data", "text")}}
                for n, r in numbered_records(side)]
    if args.json:
        _emit_json(rows)
        return 0
    for row in rows:
        print(f"{row['line']:>4}  {row.get('time')}  {row.get('source')} byte "
              f"{row.get('offset', 0):,} ({row.get('length', 0):,} bytes): {row.get('reason')}"
              + (f" ({row['detail']})" if row.get("detail") else ""))
    print(f"{len(rows)} record(s) in {side}; 'journal quarantine show {shown(args.path)} N' prints "
          "one, 'journal quarantine restore ... N FILE' writes it to a new file")
    return 0


def cmd_quarantine_show(args: argparse.Namespace) -> int:
    from ..quarantine import quarantined_record

    if is_database_url(args.path):
        from ..pg.repair import quarantined_record as database_record

        record = database_record(args.path, args.number)
    else:
        record = quarantined_record(args.path, args.number)
    if args.json:
        _emit_json({k: v for k, v in record.items() if k != "data"})
        return 0
    sys.stdout.flush()
    sys.stdout.buffer.write(record["data"])  # the bytes as they were in the session
    return 0


def cmd_quarantine_restore(args: argparse.Namespace) -> int:
    from ..quarantine import restore_quarantined

    if is_database_url(args.path):
        from ..pg.repair import restore_record

        written = restore_record(args.path, args.number, args.file)
    else:
        written = restore_quarantined(args.path, args.number, args.file)
    print(f"wrote {written:,} bytes to {args.file}")
    return 0


def _line_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a record's line number (1 or more), "
                                         f"not {text!r}")
    return value


# parser


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def add_no_follow(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-follow", action="store_true",
                   help="read the file named, even if it was rotated or moved away "
                   "(default: follow it to its live successor)")


SESSION_HELP = "session file, or a database session (postgresql://...?session=<id>, pg:<id>)"


def build_parser() -> argparse.ArgumentParser:
    parser = entry_parser(
        "journal", "Inspect and maintain agent session logs (pi session format v3, JSONL).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("new", help="create an empty session file",
                       description="Create a new session file and print its path (or a "
                       "database session, and print its URL).")
    p.add_argument("dir", nargs="?", help="directory for the file (a .jsonl path names the file), "
                   "a database session's URL (postgresql://...?session=<id>, pg:<id>), or a "
                   "database (postgresql://.../db, pg: for $JOURNAL_DATABASE_URL's): a new "
                   "session there, named by its id; default $JOURNAL_SESSIONS_DIR or ./sessions")
    p.add_argument("--cwd", help="working directory recorded in the header (default: here)")
    _add_json(p)
    p.set_defaults(func=cmd_new)

    p = sub.add_parser("append", help="append entries or messages read from stdin",
                       description="Append JSON lines from stdin: entries (with 'type') or bare "
                       "messages (with 'role'). ids, parentIds and timestamps are assigned; all "
                       "lines are committed in one write, or none.")
    p.add_argument("path", help=SESSION_HELP)
    p.add_argument("--parent", metavar="ID",
                   help="append on the branch ending at this entry (default: the leaf); "
                   "the first new entry's parent is ID")
    p.add_argument("--lock-timeout", type=seconds, default=10.0, metavar="S",
                   help="seconds to wait for another writer (default 10)")
    p.add_argument("--no-migrate", action="store_true",
                   help="refuse a version 1 or 2 file instead of migrating it to version 3")
    _add_json(p)
    p.set_defaults(func=cmd_append)

    p = sub.add_parser("show", help="list entries with line numbers, flag bad lines",
                       description="List every entry with its line number; unreadable byte "
                       "ranges are flagged with '!!'.")
    p.add_argument("path", help=SESSION_HELP)
    p.add_argument("--json", action="store_true", help="print JSON lines")
    add_no_follow(p)
    add_dialect(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("info", help="header, counts, size, problems, lock holder",
                       description="Summarise a session file without locking it.")
    p.add_argument("path", help=SESSION_HELP)
    _add_json(p)
    add_no_follow(p)
    add_dialect(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("context", help="print what the model sees for the leaf",
                       description="Project the branch ending at the leaf (or --leaf) into "
                       "the messages, model and thinking level a model would be given.")
    p.add_argument("path", help=SESSION_HELP)
    p.add_argument("--leaf", metavar="ID", help="project this entry's branch instead")
    p.add_argument("--for-model", action="store_true",
                   help="print what a model is sent: tool calls and results paired up "
                   "(default: the raw projection, exactly what the file holds)")
    _add_json(p)
    add_no_follow(p)
    add_dialect(p)
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("tree", help="print the entry tree with labels and the leaf",
                       description="Print the session's tree; branches indent, chains stay flat.")
    p.add_argument("path", help=SESSION_HELP)
    p.add_argument("--json", action="store_true",
                   help="print JSON: the leaf id and every node in the text's order")
    add_no_follow(p)
    add_dialect(p)
    p.set_defaults(func=cmd_tree)

    p = sub.add_parser("rotate", help="continue a long session in a short successor file",
                       description="After a compaction, write a successor file holding the "
                       "current settings and everything from the compaction's first kept entry "
                       "on; verify it gives the same context, seal the old file and move it to "
                       "the archive. Done under the writer lock; compression happens after. "
                       "Given a folder (or a database: its URL without ?session=, pg:), "
                       "every live session in it that can be rotated (exit 2 if any failed, "
                       "1 if any was busy).")
    p.add_argument("path", help="session file or database session URL (a rotated one is "
                   "followed to its successor), or a folder or a database (postgresql://"
                   ".../db, pg:): every live session in it that can be rotated")
    p.add_argument("--archive-dir", metavar="DIR",
                   help="where old files go (default: archive/ next to the session); a "
                   "database session's archive stays in the database and is also exported "
                   "here as .jsonl.gz")
    p.add_argument("--keep", type=int, metavar="N",
                   help="keep only the newest N archives of this lineage (default: all); in a "
                   "database, older archives are moved out to --archive-dir (their rows "
                   "deleted once the file is written and read back) and read from there")
    p.add_argument("--no-compress", action="store_true", help="archive without gzip")
    p.add_argument("--dry-run", action="store_true", help="say what would happen; change nothing")
    p.add_argument("--lock-timeout", type=seconds, default=10.0, metavar="S",
                   help="seconds to wait for another writer (default 10; with a folder, one "
                   "wait shared by every session found busy, tried again at the end)")
    _add_json(p)
    p.set_defaults(func=cmd_rotate)

    p = sub.add_parser("lineage", help="list a session's files from first archive to live",
                       description="Follow parentSession links and successor markers to list "
                       "every file of a rotated session, oldest first, the live one last; "
                       "for a database session, its sessions' URLs (the sealed ones it "
                       "continues, then those continuing it). A compressed archive that "
                       "cannot be read stops it: listed as 'damaged', a warning says why, "
                       "exit 1.")
    p.add_argument("path", help="any file of the lineage (an archived or moved path works), "
                   "or any database session of it (URL or pg:<id>)")
    _add_json(p)
    p.set_defaults(func=cmd_lineage)

    p = sub.add_parser("quarantine", help="list, print or restore bytes repair set aside",
                       description="The byte ranges taken out of a session (torn tails, bad "
                       "lines) are kept in <file>.quarantine: list them, print one, or write "
                       "one to a new file. The session itself is never written.")
    qsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = qsub.add_parser("list", help="one line per record: its number, offset, size, reason")
    q.add_argument("path", help="session file (or its .quarantine file), or a database "
                   "session (postgresql://...?session=ID, pg:ID)")
    _add_json(q)
    q.set_defaults(func=cmd_quarantine_list)
    q = qsub.add_parser("show", help="print a record's bytes as they were in the session")
    q.add_argument("path", help="session file (or its .quarantine file), or a database "
                   "session (postgresql://...?session=ID, pg:ID)")
    q.add_argument("number", type=_line_number, metavar="N", help="the record's number (list)")
    q.add_argument("--json", action="store_true",
                   help="print the record as JSON (bytes in base64, text when UTF-8)")
    q.set_defaults(func=cmd_quarantine_show)
    q = qsub.add_parser("restore", help="write a record's bytes to a new file",
                        description="Write the bytes of record N to FILE, which must not "
                        "exist (never into the session, never over a file).")
    q.add_argument("path", help="session file (or its .quarantine file), or a database "
                   "session (postgresql://...?session=ID, pg:ID)")
    q.add_argument("number", type=_line_number, metavar="N", help="the record's number (list)")
    q.add_argument("file", metavar="FILE", help="a new file to write the bytes to")
    q.set_defaults(func=cmd_quarantine_restore)

    add_repair_parser(sub)
    add_tail_parser(sub)
    add_catalog_parsers(sub)
    add_usage_parser(sub)
    add_search_parser(sub)
    add_export_parser(sub)
    add_import_parser(sub)
    add_database_parsers(sub)
    add_pg_server_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `journal` command."""
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
