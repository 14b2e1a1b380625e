"""Which files under some folders are sessions, grouped into logical sessions (lineages).

The one rule every catalog command (`ls`, `prune`, `search`, `usage`) finds sessions by:

* a path given that is a file is taken as it is (with its lineage);
* a folder is walked at any depth; symbolic links in it are not followed;
* a session file is named `*.jsonl` or `*.jsonl.gz`, and inside an `archive/` folder also
  `*.jsonl.N` and `*.jsonl.N.gz` (the names rotation gives when a name is taken); hidden
  files and side files (`.quarantine`, `.lock`, `.bak`, `.orig`, `.tmp`, `.swp`, `~`,
  `.rotating`) are not sessions;
* a Claude Code transcript's subagent files (`<session>/subagents/agent-*.jsonl` beside
  `<session>.jsonl`) belong to that transcript (`journal.claude` reads them with it): they
  are not sessions of their own while it exists, and one named stands for its transcript
  (so naming the folder, the transcript or any of its files gives the same session); without
  its transcript a subagent file is a session of its own, named or found in a folder;
* a database URL (`postgresql://...` without `session`: every session in it) or a database
  session (`...?session=<id>`, `pg:<id>`: its lineage) stands for its lineages of session
  URLs, linked by their rows' `successor` (`journal.pg.lineages`);
* files are grouped into lineages (`journal.lineage`): the live file and the sealed files it
  continues, oldest first. A predecessor belongs to the lineage only when it is sealed, or
  when its rotation, interrupted by a crash, published the file after it (a fork's parent
  names no successor and is a session of its own). Each file is in one lineage; plain files
  come before archives, so an archive is claimed by its live file.

A folder given that does not exist or cannot be listed raises `JournalError`; a file whose
lineage cannot be followed is a lineage of its own (its reader says what is wrong with it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence

from .claude.reading import SUBAGENTS, subagent_files
from .errors import JournalError
from .identity import same_file
from .lineage import ARCHIVE_DIR, pending_successor, seal_of, trace_to_live
from .pg.url import is_database_url

__all__ = ["check_paths", "find_lineages", "is_session_name", "is_subagent_file", "lineage_of",
           "session_paths", "subagents_of", "transcript_of"]

_IGNORED_PARTS = (".quarantine", ".lock", ".bak", ".orig", ".tmp", ".swp", "~", ".rotating")
_ARCHIVED_NAME = re.compile(r".+\.jsonl(\.[0-9]+)?(\.gz)?")


def is_session_name(name: str, *, in_archive: bool = False) -> bool:
    """Whether a file called `name` is a session file (`in_archive`: in an `archive/`
    folder, where rotation may number a name that was taken)."""
    if name.startswith(".") or any(part in name for part in _IGNORED_PARTS):
        return False
    if in_archive:
        return _ARCHIVED_NAME.fullmatch(name) is not None
    return name.endswith((".jsonl", ".jsonl.gz")) and len(name) > len(".jsonl")


def check_paths(paths: Sequence[str]) -> None:
    """Raise `JournalError` for a path that does not exist or a folder that cannot be read."""
    for top in paths:
        if not os.path.lexists(top):
            raise JournalError(f"{top}: no such file or folder")
        if os.path.isdir(top) and not os.access(top, os.R_OK | os.X_OK):
            raise JournalError(f"{top}: permission denied")


def session_paths(paths: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    """Session files under `paths`, by their real paths: files given first as they are, then
    a folder's plain files, then its archives (`archive/` folders and `.gz` files)."""
    later: list[str] = []
    for given in paths:
        top = os.path.realpath(os.fspath(given))
        if not os.path.isdir(top):
            yield transcript_of(top) or top
            continue
        for root, subdirs, names in os.walk(top):
            subdirs.sort()
            in_archive = os.path.basename(root) == ARCHIVE_DIR
            for name in sorted(names):
                path = os.path.join(root, name)
                if not is_session_name(name, in_archive=in_archive) or os.path.islink(path):
                    continue
                if is_subagent_file(path):
                    continue
                if in_archive or not name.endswith(".jsonl"):
                    later.append(path)
                else:
                    yield path
    yield from later


def is_subagent_file(path: str) -> bool:
    """Whether `path` is a subagent transcript of a Claude Code session that exists:
    `<dir>/<session>/subagents/agent-*.jsonl` with `<dir>/<session>.jsonl` beside."""
    return transcript_of(path) is not None


def transcript_of(path: str) -> str | None:
    """The Claude Code transcript a subagent file belongs to (`<dir>/<session>.jsonl` for
    `<dir>/<session>/subagents/agent-*.jsonl`), when that file exists; else None."""
    folder, name = os.path.split(path)
    if os.path.basename(folder) != SUBAGENTS or not name.startswith("agent-") \
            or not name.endswith(".jsonl"):
        return None
    transcript = os.path.dirname(folder) + ".jsonl"
    return transcript if os.path.isfile(transcript) else None


def subagents_of(chain: list[str]) -> list[str]:
    """The subagent files read with a lineage's live file when it is a Claude Code
    transcript (a transcript is never rotated: its lineage is itself): with `chain`, every
    file a reader of the lineage reads, so `usage` and `ls` count their bytes in progress."""
    return [] if is_database_url(chain[-1]) else subagent_files(chain[-1])


def lineage_of(path: str) -> list[str]:
    """The lineage of `path` (real paths, oldest first), cut to the files rotation links:
    a predecessor counts only when it is sealed, or when a rotation of it that a crash
    interrupted has published the file after it (it is sealed by whoever finishes that
    rotation: one session meanwhile too, with its rotation pending)."""
    # its live file not found (DamagedArchive): the caller takes `path` alone
    traced = trace_to_live(path)
    files = traced.files
    # a damaged archive behind the live file is of its lineage (its successor's header
    # names it): read with it, its damage is said as the lineage's
    damaged = {d.path for d in traced.damaged}
    kept = [files[-1]]
    for earlier in reversed(files[:-1]):
        if earlier not in damaged and seal_of(earlier) is None and not _published(
                earlier, kept[-1]):
            break
        kept.append(earlier)
    kept.reverse()
    return kept


def _published(earlier: str, later: str) -> bool:
    """Whether `later` is the successor an interrupted rotation of `earlier` published."""
    successor = pending_successor(earlier)
    return successor is not None and same_file(successor, later)


def find_lineages(paths: Iterable[str | os.PathLike[str]], *,
                  known: Callable[[str], list[str] | None] | None = None) -> list[list[str]]:
    """Every logical session under `paths`, as its files (oldest first, the live one last),
    each file in one lineage, in the order their files were met.

    `known`, if given, is asked first for a path's lineage (a cache); None means follow it.

    Raises:
        JournalError: a path given does not exist, or is a folder that cannot be read.
    """
    given = [os.fspath(p) for p in paths]
    databases = [p for p in given if is_database_url(p)]
    given = [p for p in given if not is_database_url(p)]
    check_paths(given)
    claimed: set[str] = set()
    found: list[list[str]] = []
    if databases:  # the driver is loaded only when a database is named
        from .pg.lineages import database_lineages

        for url in databases:
            for chain in database_lineages(url):
                if not claimed.intersection(chain):
                    claimed.update(chain)
                    found.append(chain)
    for path in session_paths(given):
        if path in claimed:
            continue
        files = known(path) if known is not None else None
        if files is None:
            try:
                files = lineage_of(path)  # real paths: the live file's, and its folder's
            except (OSError, JournalError):
                files = [path]
            if path not in files:  # a copy or a link the lineage does not reach: itself
                files = [path]
        files = [f for f in files if f not in claimed and (f == path or os.path.lexists(f))]
        claimed.update(files)
        found.append(files or [path])
    return found
