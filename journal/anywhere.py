"""`repair`, `rotate` and `lineage` for a session wherever it is kept: a file path, or a
database session's URL (`postgresql://...?session=<id>`, `pg:<id>`), as the commands take
either. A URL goes to the database backend's own function (`journal.pg.repair`,
`journal.pg.rotation`, `journal.pg.lineages`), loaded on first use, so `import journal`
still loads no driver; a path to the file backend's (`journal.repair`, `journal.rotation`,
`journal.lineage`).
"""

from __future__ import annotations

import os

from . import lineage as files_lineage
from . import repair as files_repair
from . import rotation as files_rotation
from .errors import JournalError
from .lock import DEFAULT_LOCK_TIMEOUT
from .pg.url import is_database_url, shown
from .progress import Progress
from .repair import RepairReport
from .rotation import RotationResult
from .snapshot import refuse_misread

__all__ = ["is_sealed", "lineage", "live", "predecessors", "repair", "rotate", "successor"]


def repair(
    path: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    migrate: bool = False,
    strict: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Progress | None = None,
    dialect: str | None = None,
) -> RepairReport:
    """Repair one session in place, or report what would change (`dry_run`): a file
    (`journal.repair.repair`: a `.bak`, a `.quarantine` side file) or a database session
    (`journal.pg.repair.repair_database`: a new generation under the lease, the removed
    lines in its quarantine table). See those for what each does and raises.

    Example:
        >>> report = repair("sessions/a.jsonl")  # doctest: +SKIP
        >>> report.changed, report.counts
    """
    if is_database_url(path):
        if dialect is not None:
            refuse_misread(path, dialect)  # a database holds pi sessions only
        from .pg.repair import repair_database

        return repair_database(path, dry_run=dry_run, migrate=migrate, strict=strict,
                               lock_timeout=lock_timeout, progress=progress)
    return files_repair.repair(path, dry_run=dry_run, migrate=migrate, strict=strict,
                               lock_timeout=lock_timeout, progress=progress, dialect=dialect)


def rotate(
    path: str | os.PathLike[str],
    *,
    archive_dir: str | None = None,
    keep: int | None = None,
    compress: bool = True,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Progress | None = None,
) -> RotationResult:
    """Rotate a session not open for writing here into a successor (an open `Session`
    rotates with `Session.rotate()`): a file (`journal.rotation.rotate`) or a database
    session (`journal.pg.rotation.rotate_database`, whose archives stay in the database
    unless `archive_dir` exports them as `.jsonl.gz`: `compress=False` is refused, and so is
    `keep` without `archive_dir`, the folder the older archives move out to).

    Example:
        >>> result = rotate("sessions/a.jsonl")  # doctest: +SKIP
        >>> result.successor, result.lock_held_ms
    """
    if is_database_url(path):
        from .pg.rotation import check_options, rotate_database

        check_options(compress=compress, keep=keep, archive_dir=archive_dir)

        return rotate_database(path, archive_dir=archive_dir, keep=keep, dry_run=dry_run,
                               lock_timeout=lock_timeout)
    return files_rotation.rotate(path, archive_dir=archive_dir, keep=keep, compress=compress,
                                 dry_run=dry_run, lock_timeout=lock_timeout, progress=progress)


def lineage(path: str | os.PathLike[str]) -> list[str]:
    """Every session of a rotated session, oldest first, the live one last: its files
    (`journal.lineage.lineage`), or for a database session its sessions' URLs (the sealed
    ones it continues, then those continuing it: `journal.pg.lineages.database_lineages`).

    Example:
        >>> lineage("sessions/a.jsonl")  # doctest: +SKIP
    """
    if is_database_url(path):
        from .pg.lineages import database_lineages
        from .pg.url import DEFAULT_DATABASE, names_session

        if not names_session(path):
            if path == DEFAULT_DATABASE:  # `?session=` would not make it a session's name
                raise JournalError(f"{path}: names a database, not a session: name one of its "
                                   f"sessions, pg:<id> (`journal ls {path}` lists them)")
            raise JournalError(f"{shown(path)}: names a database, not a session: give "
                               "?session=<id> (`journal ls URL` lists its sessions)")
        chains = database_lineages(path)
        return chains[0] if chains else []
    return files_lineage.lineage(os.fspath(path))


def predecessors(path: str | os.PathLike[str]) -> list[str]:
    """The sessions the live session of `path` continues (each sealed into the next by a
    rotation), oldest first, each by the name it had while it was live, where messages for
    its agent were queued (`journal.inbox_path`): a file's by its name beside the live file,
    not the archive it has moved into since (`journal.lineage.live_names`); a database
    session's by its URL. Empty for a session no rotation made. A damaged archive of a
    file lineage ends them (those before it cannot be found); one on the way to the live
    file raises `DamagedArchive`.

    Example:
        >>> predecessors("/home/me/sessions/2026-01-02T03-04-05-000Z_0191.jsonl")  # doctest: +SKIP
        ['/home/me/sessions/a.jsonl']
    """
    if is_database_url(path):
        return lineage(path)[:-1]
    # those a damaged archive hides cannot be named; the way to the live file must be clear
    traced = files_lineage.trace_to_live(os.fspath(path))
    return files_lineage.live_names(traced.files)[:-1]


def successor(path: str | os.PathLike[str]) -> str | None:
    """The session that continues `path` where a rotation sealed it: for a file, the one its
    seal names, checked against its identity, where it is now (`journal.lineage.
    successor_of`); for a database session, the one its row names (its URL as `shown` names
    it). None when `path` is not sealed, or its successor is not there (deleted, or in a
    folder not here)."""
    if is_database_url(path):
        from .pg.storage import PostgresStorage

        found = PostgresStorage.from_url(path).successor()
        if found is None or PostgresStorage.from_url(found).current_generation() is None:
            return None
        return shown(found)
    return files_lineage.successor_of(os.fspath(path))


def live(path: str | os.PathLike[str]) -> str:
    """The live session that `path` continues into: the session itself when it is not
    sealed; after rotations, the file (`journal.lineage.resolve_live`) or database session
    (`journal.pg.rotation.live_storage`) its seals lead to."""
    if is_database_url(path):
        from .pg.rotation import live_storage
        from .pg.storage import PostgresStorage

        storage = PostgresStorage.from_url(path)
        found = live_storage(storage)
        return path if found.session == storage.session else found.locator
    return files_lineage.resolve_live(os.fspath(path))[0]


def is_sealed(path: str | os.PathLike[str]) -> bool:
    """Whether a rotation sealed `path` (a file ending with its seal, or a database session
    whose row names a successor), whether or not its successor is here."""
    if is_database_url(path):
        from .pg.storage import PostgresStorage

        return PostgresStorage.from_url(path).successor() is not None
    return files_lineage.seal_of(os.fspath(path)) is not None
