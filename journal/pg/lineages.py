"""Database sessions grouped as the catalog commands read them: one list per rotated lineage.

`database_lineages(url)` names every logical session a URL stands for, each as the session
URLs of its lineage, oldest first and the live session last, as `journal.discovery` gives
files: a database URL (no `session`) stands for every session in that database, a session
URL (`...?session=<id>`, or `pg:<id>`) for that session's lineage (the sealed sessions it
continues and the ones continuing it). A lineage is linked by each sealed session's
`successor` (set by a database rotation and by `journal push`), the same link
`journal ls URL` and `journal pull` follow. Search, usage and export then read each session
through the storage seam (`journal.load`, `PostgresStorage.open_reader`) as they read files.
The URLs hold the password the caller gave (they are read with it); results name them
without it (`journal.pg.url.shown`).

`live_database_sessions(url)` is the rule by which a whole database is maintained (`journal
repair pg:`, `journal rotate pg:`): the last session of each lineage, as
`journal.folder_rotation.live_sessions` gives a folder's live files.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .connect import with_shared
from .url import (
    BadDatabaseUrl,
    names_session,
    no_such_session,
    parse_database,
    parse_url,
    session_url,
    shown,
)

__all__ = ["database_lineages", "live_database_sessions"]


def _split(url: str) -> tuple[str, str | None]:
    """(conninfo, session or None for the whole database) of `url`."""
    if names_session(url):
        parsed = parse_url(url)
        return parsed.conninfo, parsed.session
    return parse_database(url), None


def database_lineages(url: str) -> list[list[str]]:
    """The lineages `url` names, each as session URLs oldest first (see the module
    docstring), in the order their live sessions were created.

    Raises:
        NotASession: `url` names a session the database does not hold.
        DatabaseError, BadDatabaseUrl: the database cannot be reached, a malformed URL.
    """
    conninfo, wanted = _split(url)

    def query(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute("SELECT session, successor FROM journal.streams "
                            "WHERE generation IS NOT NULL ORDER BY created_at, id").fetchall()

    rows = [(str(r[0]), str(r[1]) if r[1] else None) for r in with_shared(conninfo, query)]
    present = {session for session, _ in rows}
    after = {s: n for s, n in rows if n is not None and n in present and n != s}
    before: dict[str, str] = {}
    for session, successor in after.items():
        before.setdefault(successor, session)
    claimed: set[str] = set()
    chains: list[list[str]] = []
    for session, _ in rows:
        if session in after:
            continue  # sealed: read with the session that continues it
        chain = [session]
        while chain[0] in before and before[chain[0]] not in chain:
            chain.insert(0, before[chain[0]])
        chain = [s for s in chain if s not in claimed]
        claimed.update(chain)
        chains.append(chain)
    chains.extend([s] for s, _ in rows if s not in claimed)  # a loop of successors
    if wanted is not None:
        chains = [c for c in chains if wanted in c]
        if not chains:
            raise no_such_session(shown(session_url(conninfo, wanted)))
    return [[session_url(conninfo, s) for s in chain] for chain in chains]


def live_database_sessions(url: str) -> list[tuple[str, int]]:
    """The live session of each lineage in the database `url` names (a URL without
    `session`, or `pg:` alone) and how many sessions its lineage has, its sealed ones
    included: the sessions `journal repair` and `journal rotate` of a whole database go
    through, one per lineage (a sealed session is reached through its live one, as a
    folder's archives are through their live file), in `database_lineages`' order. Where a
    lineage is broken (a successor's row deleted out of band), its last session is the last
    sealed one there is; the repair or rotation of it says so (`BrokenLineage`).

    The URLs hold the password `url` gave (each is opened with it); name them with `shown`.

    Raises:
        BadDatabaseUrl: `url` names one session (`?session=`, `pg:<id>`), or is malformed.
        NoJournalSchema: the database holds no journal schema (none is made).
        DatabaseError: the database cannot be reached or refused the read.

    Example:
        >>> for session, sessions in live_database_sessions("pg:"):  # doctest: +SKIP
        ...     print(shown(session), sessions)
    """
    if names_session(url):
        raise BadDatabaseUrl(f"{shown(url)}: names a session, not a database: a whole "
                             "database is named by its URL without ?session=, or pg: alone")
    return [(chain[-1], len(chain)) for chain in database_lineages(url)]
