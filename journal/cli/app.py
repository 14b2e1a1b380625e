"""What every command line entry point shares: `run()` and the exit codes.

`journal`, `journal-repair`, `journal-tail` and `journal-agent` each build an argparse parser
(with `entry_parser`) whose sub-commands set `func`, and hand it to `run()`, which parses the
arguments, sets up logging, calls the command and turns what escapes it into an exit code:

- the command's own return value: 0, or 1 for findings (`--check` found damage, a followed
  file went away, an agent run that did not finish);
- an expected error (a `JournalError`, an `OSError`, or one of the caller's `expected` types):
  one `Error: ...` line on stderr, exit 2, never a traceback;
- Ctrl-C (`KeyboardInterrupt`): exit 130, as a shell reports a process ended by SIGINT (a
  command whose normal end is Ctrl-C, `tail -f` or `chat`, catches it and exits 0);
- SIGTERM (a service manager's stop, `kill`): the command runs inside
  `journal.interrupt.terminated_as_interrupted`, so SIGTERM unwinds it as Ctrl-C does (its
  `finally` clauses and `with` blocks undo what it had half done) and it exits 143; so does
  one that comes after the command's work, while its error is printed or its output
  flushed. One that comes once `run()` has returned, while the interpreter exits, ends the
  process as SIGTERM's default does (docs/cli.md, Exit status, says why that is left so);
- the reader of stdout went away (`journal show big | head -1`): a quiet exit, without the
  second traceback Python would print when it flushes stdout at exit; 0 when the command
  was cut short, its own code when only the last flush failed.

Argument errors are argparse's own: a usage line and exit 2. `package_version()` is the one
reader of the version every entry point's `--version` prints.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar

from ..errors import JournalError, describe_os_error
from ..interrupt import EXIT_TERMINATED, Terminated, terminated, terminated_as_interrupted
from ..pg.url import DATABASE_ENV, DEFAULT_DATABASE, hide_passwords, is_database_url

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

T = TypeVar("T")

Command = Callable[[argparse.Namespace], int]


def entry_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser of an entry point, with the `-v` and `--version` every entry point takes."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log what happens (INFO messages on stderr)")
    add_version(parser)
    return parser


def package_version() -> str:
    """The installed version of the `journal` package (from its metadata), or "unknown" when
    it runs from a checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("journal")
    except PackageNotFoundError:
        return "unknown"


def add_version(parser: argparse.ArgumentParser) -> None:
    """`--version`: print `PROG VERSION` (the package's version) and exit 0. Every parser made
    by `entry_parser` has it already; adding it again changes nothing."""
    try:
        parser.add_argument("--version", action="version",
                            version=f"{parser.prog} {package_version()}",
                            help="print the version and exit")
    except argparse.ArgumentError:
        pass  # the parser has a --version already


class LevelLines(logging.Formatter):
    """Log records as the commands print their own notes: `Warning: ...`, `Info: ...`."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.capitalize()}: {super().format(record)}"


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    expected: tuple[type[Exception], ...] = (),
    loggers: Sequence[str] = ("journal",),
) -> int:
    """Parse `argv`, set up logging, call the chosen command; return the exit code.

    `expected` adds error types (beyond `JournalError` and `OSError`) that are reported as
    one `Error: ...` line and exit 2: the agent's model and sandbox errors, say. `loggers`
    names the program's own loggers, the ones `-q` and `-v` set (`command_logging`).
    """
    args = parse_interleaved(parser, argv)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")  # a lone surrogate prints escaped
    with command_logging(args, loggers):
        code = _outcome(args.func, args, expected)
    # a SIGTERM decides the status however the command ended on it: on its own exception,
    # on the KeyboardInterrupt a library made of it (watchfiles), on an error its cleanup
    # met, or as the normal end of a follow
    return EXIT_TERMINATED if terminated() else code


@contextmanager
def command_logging(args: argparse.Namespace, loggers: Sequence[str]) -> Iterator[None]:
    """Logging while a command runs: `-q` (`args.quiet`: errors only, and it wins) or `-v`
    (`args.verbose`: INFO too) sets the level of the program's own `loggers`; when no
    handler is there to print a record (a command run from a shell), a handler of its own
    on the root logger prints them on stderr as `Warning: ...` lines, at that level
    (WARNING without either). The root logger's level, other libraries' loggers and an
    in-process caller's handlers are left alone (a test, a program calling `main`), and the
    levels and the handler are put back as they were when the command ends."""
    level = logging.ERROR if getattr(args, "quiet", False) else \
        logging.INFO if getattr(args, "verbose", False) else None
    own = [logging.getLogger(name) for name in loggers]
    before = [logger.level for logger in own]
    root = logging.getLogger()
    handler: logging.Handler | None = None
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(LevelLines())
        handler.setLevel(level or logging.WARNING)
        root.addHandler(handler)
    if level is not None:
        for logger in own:
            logger.setLevel(level)
    try:
        yield
    finally:
        for logger, was in zip(own, before, strict=True):
            logger.setLevel(was)
        if handler is not None:
            root.removeHandler(handler)


def _outcome(func: Command, args: argparse.Namespace,
             expected: tuple[type[Exception], ...]) -> int:
    """Run the command; its exit status, what escapes it said as `run` says it. A SIGTERM
    counts until the status is decided: during the command, and while its error is printed
    or its output flushed (a reader that is slow to take the last of it)."""
    try:
        with terminated_as_interrupted():
            return _said(func, args, expected)
    except Terminated:
        return EXIT_TERMINATED


def _said(func: Command, args: argparse.Namespace,
          expected: tuple[type[Exception], ...]) -> int:
    try:
        code = func(args)
    except BrokenPipeError as e:
        return _stdout_closed(e, EXIT_OK)
    except JournalError as e:
        return _failed(str(e))
    except OSError as e:
        return _failed(describe_os_error(e))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except expected as e:
        return _failed(str(e))
    try:
        sys.stdout.flush()  # a closed pipe shows here, not in Python's own flush at exit
    except BrokenPipeError as e:
        return _stdout_closed(e, code)
    return code


LIST_POSITIONALS = ("paths", "dirs")
"""The names of the positionals that take any number of paths (`journal search Q PATH...`)."""


def parse_interleaved(parser: argparse.ArgumentParser,
                      argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, where paths may also come after options: argparse fills a
    list positional with the paths before the first option and refuses the rest
    (`journal search foo -i DIR` was "unrecognized arguments: DIR"); those go on the list.
    Anything else left over is the usual usage error (exit 2)."""
    args, extra = parser.parse_known_args(argv)
    lists = [name for name in LIST_POSITIONALS if isinstance(getattr(args, name, None), list)]
    if extra and len(lists) == 1 and not any(item.startswith("-") for item in extra):
        getattr(args, lists[0]).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def seconds(text: str) -> float:
    """An argparse type: a number of seconds, 0 or more (a timeout)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, 0 or more, not "
                                         f"{text!r}")
    return value


def default_sessions_dir() -> str:
    """Where commands look for sessions when given no path: `$JOURNAL_SESSIONS_DIR`, else
    `./sessions` (the one default every command shares)."""
    return os.environ.get("JOURNAL_SESSIONS_DIR") or os.path.join(os.getcwd(), "sessions")


def paths_or_default(paths: Sequence[str] | None) -> list[str]:
    """What `ls`, `search` and `usage` read: the paths given, else `default_sessions_dir()`
    (which may name a database, as the agent's `--sessions-dir` may). A default folder that
    does not exist while JOURNAL_DATABASE_URL is set is an error saying that `pg:` names that
    database: the variable names the database of `pg:` names, never a default to read."""
    if paths:
        return list(paths)
    default = default_sessions_dir()
    if not is_database_url(default) and not os.path.lexists(default) \
            and os.environ.get(DATABASE_ENV):
        raise JournalError(f"{default}: no such file or folder (the default); the sessions of "
                           f"the database {DATABASE_ENV} names are read by naming it: "
                           f"{DEFAULT_DATABASE}")
    return [default]


def print_error(message: str) -> None:
    """Report an error the way every entry point does: one `Error: ...` line on stderr."""
    print(f"Error: {message}", file=sys.stderr)


def _failed(message: str) -> int:
    print_error(hide_passwords(message))  # a misspelt URL is echoed back, password hidden
    return EXIT_ERROR


def _stdout_closed(e: BrokenPipeError, code: int) -> int:
    """A broken pipe: quietly `code` if it is stdout's reader that went away, else an error.

    stdout stays open (Python flushes it at exit) but from now on writes to /dev/null, so
    no second error is printed as the interpreter exits.
    """
    if not reader_gone(sys.stdout):
        return _failed(describe_os_error(e))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return code


def reader_gone(stream: TextIO) -> bool:
    """Whether `stream` is a pipe (or socket) whose reading end has been closed."""
    try:
        fd = stream.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):
        return False
    return any(mask & (select.POLLERR | select.POLLHUP) for _, mask in events)


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is a terminal: the one rule for drawing for a person (tables, bars)
    rather than writing for a program (tab-separated lines, nothing on stderr)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        return False


_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_line(cells: Iterable[str]) -> str:
    """One row of the tab-separated output written for a program (`ls`, `usage`, `search`
    when stdout is not a terminal): a backslash, tab, newline or carriage return inside a
    cell is written `\\\\`, `\\t`, `\\n`, `\\r` (as PostgreSQL's COPY text format
    does), so that a session's name or path holding one is still one row of the same cells."""
    return "\t".join(cell.translate(_TSV_ESCAPES) for cell in cells)


def shows_progress(enabled: bool = True) -> bool:
    """Whether progress goes on stderr: only to a terminal, and only when `enabled` (a
    command passes `not args.json`: output for a script carries no progress)."""
    return enabled and is_terminal(sys.stderr)


def progress_note(text: str, *, enabled: bool = True) -> None:
    """Say what a long command starts on (`journal: pulling into DIR`) where progress is
    shown (`shows_progress`); elsewhere it is an INFO line, shown with `-v`."""
    if shows_progress(enabled):
        print(f"journal: {text}", file=sys.stderr)
    else:
        log.info("%s", text)


def progress(items: Sequence[T], description: str, *, enabled: bool = True) -> Iterable[T]:
    """`items`, with a transient progress bar on stderr when it is a terminal and `enabled`."""
    if len(items) < 2 or not shows_progress(enabled):
        return items
    from rich.console import Console
    from rich.progress import track

    return track(items, description=description, transient=True, console=Console(stderr=True))


class ByteProgress:
    """A byte-based progress callback (`journal.progress.Progress`) that draws a transient
    bar on stderr when it is a terminal and `enabled`; it draws nothing until the first call
    (a small file, done before the first step, shows none). Use as a context manager; the
    bar is removed at the end."""

    def __init__(self, description: str, *, enabled: bool = True) -> None:
        self.description = description
        self.enabled = shows_progress(enabled)
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 DownloadColumn(), TimeRemainingColumn(), transient=True,
                                 console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=total)
        self._bar.update(self._task, completed=done, total=total)

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
