"""Commands that work on session files only, and what they say when given a database.

docs/postgres.md promises that a command that does not (yet) work on a database says so,
rather than looking for a file named `pg:<id>` in the current folder and reporting that it is
missing. `files_only(command)` wraps such a command: any database name among its path
arguments (a session in a database, `pg:<id>`, or a whole database, `pg:`) is one `Error:`
line (exit 2) saying which it names, before anything is read or written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..errors import JournalError
from ..pg.url import DATABASE_ENV, DEFAULT_DATABASE, is_database_url, names_session

__all__ = ["PATH_ARGUMENTS", "files_only"]

PATH_ARGUMENTS = ("path", "paths", "dir", "dirs", "source", "dest")
"""The argument names under which the commands take session paths or folders."""

Command = Callable[[argparse.Namespace], int]


def files_only(command: Command, name: str) -> Command:
    """`command`, refusing a database or a database session among its path arguments; `name`
    is how the error names the command (`journal prune`)."""

    def checked(args: argparse.Namespace) -> int:
        for key in PATH_ARGUMENTS:
            value = getattr(args, key, None)
            for target in value if isinstance(value, list) else [value]:
                if is_database_url(target):
                    raise JournalError(f"{target}: {_what(target)}; {name} works on session "
                                       "files only (see docs/postgres.md)")
        return command(args)

    checked.__doc__ = command.__doc__
    return checked


def _what(target: str) -> str:
    """What the database name `target` names: a session in a database, or a database (`pg:`
    alone, or a URL without `session`)."""
    if names_session(target):
        return "names a session in a database, not a file"
    if target == DEFAULT_DATABASE:
        return f"names a database (the one {DATABASE_ENV} names), not a file or folder"
    return "names a database, not a file or folder"
