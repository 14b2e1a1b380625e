"""Commands that work on session files only, and what they say when given a database session.

docs/postgres.md promises that a command that does not (yet) work on a database session says
so, rather than looking for a file named `pg:<id>` in the current folder and reporting that
it is missing. `files_only(command)` wraps such a command: any database session among its
path arguments is one `Error:` line (exit 2) before anything is read or written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..errors import JournalError
from ..pg.url import is_database_url

__all__ = ["PATH_ARGUMENTS", "files_only"]

PATH_ARGUMENTS = ("path", "paths", "dir", "dirs", "source", "dest")
"""The argument names under which the commands take session paths or folders."""

Command = Callable[[argparse.Namespace], int]


def files_only(command: Command, name: str) -> Command:
    """`command`, refusing a database session among its path arguments; `name` is how the
    error names the command (`journal tail`)."""

    def checked(args: argparse.Namespace) -> int:
        for key in PATH_ARGUMENTS:
            value = getattr(args, key, None)
            for target in value if isinstance(value, list) else [value]:
                if is_database_url(target):
                    raise JournalError(
                        f"{target}: a database session; {name} works on session files only "
                        "(see docs/postgres.md)")
        return command(args)

    checked.__doc__ = command.__doc__
    return checked
