"""The command line: `journal`, `journal-repair`, `journal-tail`, and the `run()` they share.

- `app`: `run()`, which every entry point (`journal-agent` included) hands its parser to:
  argument parsing, logging, errors as exit codes (0 ok, 1 findings, 2 error, 130 Ctrl-C);
- `commands`: the `journal` command and its sub-commands;
- `repair`: `journal repair` and `journal-repair`;
- `tail`: `journal tail` and `journal-tail`, and `TailPrinter`, which writes tail events as
  readable lines or JSON lines (the agent's demo prints a session's tail with it).

Each entry point is a function taking the argument list (default `sys.argv[1:]`) and returning
the exit code.
"""

from .app import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_version,
    entry_parser,
    package_version,
    run,
    seconds,
)
from .commands import main
from .repair import repair_main
from .tail import TailPrinter, tail_main

__all__ = [
    "EXIT_ERROR",
    "EXIT_FINDINGS",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "TailPrinter",
    "add_version",
    "entry_parser",
    "main",
    "package_version",
    "repair_main",
    "run",
    "seconds",
    "tail_main",
]
