"""`journal tail` and `journal-tail`: the last entries of a session, and a live follow.

    journal tail PATH|DIR [-f] [-n N | --since ID] [--json] [--poll] [--no-follow]

Without `-f`, prints the last N entries (default 10) of the file, or of each session in the
directory, and exits. With `-f`, keeps following: appends, rotations into a successor file,
repairs, truncations, and (for a directory) new sessions. `journal-tail` takes the same options
with the same meaning (`-f` is not implied).

Human output is one line per entry: local time (with the date when it is not today), role or
kind, then the gist (first line of text, tool calls with a short argument summary, tool
results with ok/error and size, compactions with the tokens before, model changes,
rotations). Colour only on a terminal, and never with NO_COLOR set. `--json` prints the
entries themselves as JSON lines, for jq; following a directory, each line is
`{"path": <file>, "entry": <entry>}`.

Exit status: 0 (also when Ctrl-C ends a follow, its normal end), 1 when a followed file went
away for good (or was given a compressed file that leads to no live session), 2
on errors (`Error: ...` on stderr), 130 when Ctrl-C cuts short a tail without `-f`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from contextlib import closing
from datetime import date, datetime
from typing import IO, TYPE_CHECKING, Any

from .. import codec
from ..anywhere import is_sealed, live, successor
from ..archivegz import is_compressed
from ..claude import DIALECTS
from ..errors import JournalError, UnknownEntry
from ..identity import same_file
from ..lineage import last_entry
from ..model import Entry
from ..pg.url import DEFAULT_DATABASE, is_database_url, names_session, short_name, shown
from ..render import (
    content_size,
    content_text,
    custom_text,
    first_line,
    summarize_arguments,
)
from ..seal import is_seal
from ..tail import (
    DELETED,
    ENDED,
    ENTRY,
    NEW_SESSION,
    REPLACED,
    ROTATED,
    TailEvent,
    follow_events,
    marker_successor,
)
from ..view import check_session, locate
from .app import EXIT_FINDINGS, EXIT_OK, entry_parser, run

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_LINES = 10
LABEL_WIDTH = 10

Segments = list[tuple[str, str]]
"""A line as (text, rich style) pieces; joined without styles when colour is off."""


def add_tail_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the `tail` command to the `journal` command's subparsers."""
    p = subparsers.add_parser(
        "tail", help="print the last entries, or follow a session (-f)",
        description="Print the last N entries of a session file, or of each session in a "
        "directory; with -f, keep printing entries as they are committed, through rotations, "
        "repairs and new sessions.",
    )
    _add_arguments(p)
    p.set_defaults(func=cmd_tail)
    return p


def tail_main(argv: Sequence[str] | None = None) -> int:
    """The `journal-tail` console script: the same options and meaning as `journal tail`."""
    parser = entry_parser(
        "journal-tail",
        "Print the last entries of an agent session (pi format v3); with -f, follow it.")
    _add_arguments(parser)
    parser.set_defaults(func=cmd_tail)
    return run(parser, argv)


def cmd_tail(args: argparse.Namespace) -> int:
    since = args.since
    path = args.path
    if is_database_url(path) and not names_session(path):
        raise _whole_database(path)
    if not os.path.isdir(path):
        path, moved = locate(path, follow=not args.no_follow)
        if moved is not None:
            print(f"journal: {moved} was rotated; reading {path}", file=sys.stderr)
        if is_database_url(path) and not args.no_follow:
            from ..tail.dbchain import first_readable

            path = first_readable(path)  # not an archive moved out to a file not here
        snap = check_session(path, dialect=args.dialect)  # no session at the start: an error
        if is_compressed(path) and not args.follow:
            return _tail_archive(path, snap.entries, args)
        if args.follow and (is_compressed(path) or (since is None and not args.no_follow)):
            # a sealed session (an archive never changes): its live one's last entries, and
            # on from there, rather than every successor's entries since the seal
            live_one = live(path)
            if live_one != path and not same_file(live_one, path):
                if since is not None:  # only for a compressed archive, which is not read on
                    raise JournalError(
                        f"{path}: a compressed archive is not followed from one of its "
                        f"entries: 'journal tail --since {since} {path}' prints what follows "
                        f"it there, and 'journal tail -f {shown(live_one)}' follows its live "
                        "session")
                print(f"journal: {shown(path)} was rotated; following {shown(live_one)}",
                      file=sys.stderr)
                path = live_one
            elif is_compressed(path):
                return _follow_archive_only(path, snap.entries, args)
            elif not is_database_url(path) and is_sealed(path):
                return _follow_orphan(path, args)
    try:
        return _follow(path, args)
    except UnknownEntry as e:
        raise _not_since(path, e) from None


def _not_since(path: str, error: UnknownEntry) -> UnknownEntry:
    """The error for `--since ID` that `path` does not hold. A sealed session is read as it
    is named, not along its lineage (a file as a database session): the error then names its
    successor, which holds what was appended by the sealed one's name since its rotation."""
    found = None if os.path.isdir(path) else successor(path)
    if found is None:
        return error
    now = live(path)
    where = shown(found)
    if where != shown(now) and not same_file(found, now):
        where += f" (live now: {shown(now)})"
    named = UnknownEntry(error.entry_id)
    named.args = (f"{shown(path)}: no entry with id {error.entry_id!r}; it was rotated into "
                  f"{where}, where entries appended by its name since then go: name that one",)
    return named


def _whole_database(url: str) -> JournalError:
    """The error for a database given whole: unlike a folder's files, its sessions are not
    tailed together (a database follower follows one session's lineage), so it says how to
    name one."""
    database = shown(url)
    joiner = "&" if "?" in database else "?"
    one = "pg:<id>" if url == DEFAULT_DATABASE else f"{database}{joiner}session=<id>"
    return JournalError(f"{database}: a database: tail reads (and with -f follows) one of its "
                        f"sessions, there is no tail of a whole database; name one: {one} "
                        f"('journal ls {database}' lists them)")


def _follow(path: str, args: argparse.Namespace) -> int:
    """Print `path`'s events (a file, a folder or a database session) as the options say."""
    since = args.since
    events = follow_events(
        path,
        last=None if since is not None else args.lines,
        since_id=since,
        stop=None if args.follow else (lambda: True),
        poll=True if args.poll else None,
        dialect=args.dialect,
    )
    printer = TailPrinter(
        sys.stdout, sys.stderr, as_json=args.json, many=os.path.isdir(path),
        flush=args.follow,
    )
    try:  # SIGTERM (run() makes it unwind as Ctrl-C does) removes a follower's registration
        with closing(events):
            for event in events:
                printer.show(event)
    except KeyboardInterrupt:
        if not args.follow:
            raise
        return EXIT_OK  # Ctrl-C is how a follow is meant to end
    return EXIT_FINDINGS if printer.gone and not os.path.isdir(path) else EXIT_OK


def _follow_orphan(path: str, args: argparse.Namespace) -> int:
    """`-f` of a plain sealed file whose successor is not here (moved away, deleted): it is
    followed as it is, and its successor taken up if it appears."""
    named = short_name(marker_successor(last_entry(path), path) or "its successor")
    print(f"journal: {shown(path)} was rotated into {named}, which is not here; following "
          "it until its successor appears", file=sys.stderr)
    return _follow(path, args)


def _follow_archive_only(path: str, entries: list[Entry], args: argparse.Namespace) -> int:
    """`-f` of a compressed file that leads to no live session: an archive whose successor
    is not here (or a database session's archive exported to a file), or a file gzipped by
    hand. It never changes and is not watched: its last entries, then exit 1, as when a
    followed file went away for good."""
    _tail_archive(path, entries, args)
    seal = entries[-1] if entries else None
    why = (f"was rotated into {short_name(marker_successor(seal, path) or 'its successor')}, "
           "which is not here" if seal is not None and is_seal(seal)
           else "is not a rotation's archive")
    print(f"journal: {shown(path)} {why}; a compressed file never changes, so there is "
          "nothing to follow", file=sys.stderr)
    return EXIT_FINDINGS


def _tail_archive(path: str, entries: list[Entry], args: argparse.Namespace) -> int:
    """The last of a compressed archive's `entries` (it never changes: there is nothing to
    follow), as a tail of a plain file prints them."""
    if args.since is not None:
        ids = [e.get("id") for e in entries]
        if args.since not in ids:
            raise JournalError(f"{path}: no entry with id {args.since!r}")
        entries = entries[ids.index(args.since) + 1:]
    else:
        entries = entries[len(entries) - args.lines:] if args.lines else []
    printer = TailPrinter(sys.stdout, sys.stderr, as_json=args.json)
    for entry in entries:
        printer.show(TailEvent(ENTRY, path, entry))
        if is_seal(entry):  # said in words, as a follower says it
            printer.show(TailEvent(ROTATED, path, entry, marker_successor(entry, path) or ""))
    return EXIT_OK


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH|DIR", help="a session file, a directory of them, or a "
                   "database session (postgresql://...?session=ID, pg:ID)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep following; Ctrl-C to stop")
    start = p.add_mutually_exclusive_group()
    start.add_argument("-n", "--lines", type=_count, default=DEFAULT_LINES, metavar="N",
                       help=f"start with the last N entries (default {DEFAULT_LINES}; "
                       "per file for a directory)")
    start.add_argument("--since", metavar="ID", help="start after the entry with this id")
    p.add_argument("--json", action="store_true",
                   help="print entries as JSON lines (for a directory: {path, entry})")
    p.add_argument("--poll", action="store_true",
                   help="poll instead of inotify (network and some container file systems)")
    p.add_argument("--no-follow", action="store_true",
                   help="read the file named, even if it was rotated or moved away "
                   "(default: follow it to its live successor)")
    p.add_argument("--dialect", choices=DIALECTS, default=None,
                   help="read every file as a pi session or a Claude Code transcript "
                   "(default: told from each file's records)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count of 0 or more, not {text!r}")
    return value


class TailPrinter:
    """Writes tail events: readable lines (coloured on a terminal) or JSON lines."""

    def __init__(
        self, out: IO[str], err: IO[str], *, as_json: bool = False, many: bool = False,
        flush: bool = False, color: bool | None = None,
    ) -> None:
        self.out = out
        self.err = err
        self.as_json = as_json
        self.many = many
        self.flush = flush
        self.current: str | None = None
        self.gone = False
        if color is None:
            color = not as_json and _is_terminal(out) and not os.environ.get("NO_COLOR")
        self.console: Console | None = None
        if color:
            from rich.console import Console

            self.console = Console(file=out, force_terminal=True, color_system="standard",
                                   highlight=False, markup=False, emoji=False, soft_wrap=True)

    def show(self, event: TailEvent) -> None:
        if event.kind == ENTRY and event.entry is not None:
            self._entry(event.path, event.entry)
        elif event.kind == ROTATED and not self.as_json:
            when = clock(event.entry.get("timestamp") if event.entry else _now_ms())
            self._write([(when, "dim"), (" ", ""), (_label("rotated"), "bold yellow"),
                         (f"continued in {short_name(event.detail)}", "yellow")])
        elif event.kind == NEW_SESSION and not self.as_json:
            self._heading(event.path, " (new session)")
        elif event.kind in (DELETED, REPLACED):
            # truncations and ends are warnings the library logs; these are only info there
            self.err.write(f"journal tail: {event.path}: {event.detail}\n")
            self.err.flush()
        self.gone = self.gone or event.kind == ENDED
        if self.flush:
            self.out.flush()

    def _entry(self, path: str, entry: Entry) -> None:
        if self.as_json:
            value: Any = {"path": path, "entry": entry} if self.many else entry
            self.out.write(codec.dumps(value).decode() + "\n")
            return
        if is_seal(entry):
            return  # the rotated event that follows says it in words
        if self.many and path != self.current:
            self._heading(path, "")
        self._write(format_entry(entry))

    def _heading(self, path: str, note: str) -> None:
        self.current = path
        self._write([(f"==> {short_name(path)} <=={note}", "bold")])

    def _write(self, segments: Segments) -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text.assemble(*segments))
        else:
            self.out.write("".join(text for text, _ in segments) + "\n")


def format_entry(entry: Entry) -> Segments:
    """One entry as a compact line: `HH:MM:SS label     gist`, as styled pieces."""
    label, style, body = describe(entry)
    return [(clock(entry.get("timestamp")), "dim"), (" ", ""), (_label(label), style),
            *body]


def describe(entry: Entry) -> tuple[str, str, Segments]:
    """(label, label style, body pieces) for an entry."""
    kind = entry.get("type")
    if kind == "message":
        return _describe_message(entry.get("message") or {})
    if kind == "compaction":
        tokens = entry.get("tokensBefore")
        before = f"{tokens:,}" if isinstance(tokens, int) else "?"
        summary = first_line(str(entry.get("summary", "")), 60)
        return "compaction", "bold yellow", [(
            f"{before} tokens before, keeps from {entry.get('firstKeptEntryId')}: {summary}",
            "yellow")]
    if kind == "model_change":
        return "model", "magenta", [(f"{entry.get('provider')}/{entry.get('modelId')}", "")]
    if kind == "thinking_level_change":
        return "thinking", "magenta", [(str(entry.get("thinkingLevel")), "")]
    if kind == "branch_summary":
        summary = first_line(str(entry.get("summary", "")))
        return "branch", "yellow", [(f"from {entry.get('fromId')}: {summary}", "")]
    if kind == "label":
        label = entry.get("label")
        text = f"{entry.get('targetId')} = {label!r}" if label else (
            f"{entry.get('targetId')} cleared")
        return "label", "dim", [(text, "")]
    if kind == "session_info":
        return "name", "dim", [(repr(entry.get("name")), "")]
    if kind == "custom":
        text = custom_text(entry)
        return "custom", "dim", [(str(entry.get("customType")), "dim"),
                                 *([(f": {text}", "")] if text else [])]
    if kind == "custom_message":
        text = first_line(content_text(entry.get("content")))
        return "custom", "dim", [(f"{entry.get('customType')}: {text}", "")]
    return str(kind), "dim", [("(unknown entry type, kept as is)", "dim")]


def _describe_message(message: dict[str, Any]) -> tuple[str, str, Segments]:
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        return "user", "bold cyan", [(first_line(content_text(content)) or "(no text)", "")]
    if role == "assistant":
        return "assistant", "bold green", _assistant_body(message)
    if role == "toolResult":
        error = bool(message.get("isError"))
        size = content_size(content)
        preview = first_line(content_text(content), 60)
        body: Segments = [(f"{message.get('toolName')} ", ""),
                          ("error" if error else "ok", "bold red" if error else "green"),
                          (f", {size:,} chars", "")]
        if preview:
            body.append((f": {preview}", "dim"))
        return "result", "blue", body
    if role == "bashExecution":
        command = first_line(str(message.get("command", "")))
        return "bash", "blue", [(f"$ {command} (exit {message.get('exitCode')})", "")]
    if role in ("compactionSummary", "branchSummary"):
        return str(role), "yellow", [(first_line(str(message.get("summary", ""))), "")]
    return str(role), "dim", [(first_line(content_text(content)), "")]


def _assistant_body(message: dict[str, Any]) -> Segments:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    parts: Segments = []
    text = first_line(content_text(content))
    if text:
        parts.append((text, ""))
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "toolCall":
            if parts:
                parts.append(("; ", ""))
            args = summarize_arguments(block.get("arguments"))
            parts.append((f"→ {block.get('name')}({args})", "cyan"))
    if not parts:
        thinking = any(isinstance(b, dict) and b.get("type") == "thinking" for b in blocks)
        parts.append(("(thinking)" if thinking else "(empty)", "dim"))
    stop = message.get("stopReason")
    if stop in ("error", "aborted", "length"):
        reason = message.get("errorMessage")
        suffix = f": {first_line(str(reason), 60)}" if reason else ""
        parts.append((f" [{stop}{suffix}]", "bold red"))
    return parts


def clock(timestamp: Any, today: date | None = None) -> str:
    """HH:MM:SS in local time from an ISO timestamp (or epoch milliseconds), with the date
    before it (YYYY-MM-DD HH:MM:SS) when it is not `today` (default: the local today)."""
    try:
        if isinstance(timestamp, str):
            when = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone()
        elif isinstance(timestamp, int | float) and not isinstance(timestamp, bool):
            when = datetime.fromtimestamp(timestamp / 1000)
        else:
            return "--:--:--"
    except (ValueError, OverflowError, OSError):
        return "--:--:--"
    if when.date() != (today or date.today()):
        return when.strftime("%Y-%m-%d %H:%M:%S")
    return when.strftime("%H:%M:%S")


def _now_ms() -> float:
    return datetime.now().timestamp() * 1000


def _label(text: str) -> str:
    return f"{text:<{LABEL_WIDTH}} "


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(tail_main())
