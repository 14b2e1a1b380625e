"""Sealing: the `journal.successor` marker that ends a rotated file and names what continues it.

A seal is the last entry of a file rotation replaced: a `custom` entry whose data names the
successor's file (relative to the session's folder), its session id (the identity a follower
checks) and the way from the archive to it (see `seal_pointers`). It is written once, durably
(synced whatever the session's durability policy), by the holder of the file's writer lock:
by rotation while it switches files, or by the recovery of a rotation a crash interrupted.
This module owns the marker's shape and its commit; `lineage` reads seals to follow them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container
from typing import Any

from . import codec, model
from .durability import Durability
from .log import AppendLog
from .model import Entry

__all__ = ["SUCCESSOR_TYPE", "commit_seal", "is_seal", "last_copied", "make_seal",
           "seal_pointers", "write_seal"]

SUCCESSOR_TYPE = "journal.successor"

SealCommit = Callable[[bytes], object]
"""Appends one encoded line durably to the file being sealed (its writer lock held)."""


def is_seal(entry: Entry | None) -> bool:
    return entry is not None and entry.get("type") == "custom" and entry.get(
        "customType") == SUCCESSOR_TYPE and isinstance(entry.get("data"), dict)


def seal_pointers(successor: str, session_id: str, archive: str | None,
                  last_copied: str | None = None) -> dict[str, Any]:
    """What a seal records: the successor's name (its folder is the session's folder), its
    session id (the identity a follower checks), the way from the archive to it, and the id
    of the last entry rotation copied into it (where a follower stops skipping by id)."""
    name = os.path.basename(successor)
    data: dict[str, Any] = {"successor": name, "file": name, "sessionId": session_id}
    if archive is not None:
        data["fromArchive"] = os.path.relpath(successor, os.path.dirname(archive))
    if last_copied is not None:
        data["lastCopied"] = last_copied
    return data


def make_seal(taken: Container[str], parent_id: str | None, successor: str, session_id: str,
              archive: str | None, last_copied: str | None = None) -> Entry:
    """The seal entry, chained after `parent_id`, with an id not in `taken`."""
    return model.custom_entry(model.new_id(taken), parent_id, SUCCESSOR_TYPE,
                              seal_pointers(successor, session_id, archive, last_copied))


def last_copied(seal: Entry | None) -> str | None:
    """The id of the last entry the sealing rotation copied into the successor, if the seal
    says (seals of earlier versions, and of a recovered rotation, do not)."""
    data = seal.get("data") if seal is not None else None
    found = data.get("lastCopied") if isinstance(data, dict) else None
    return found if isinstance(found, str) and found else None


def commit_seal(commit: SealCommit, seal: Entry) -> None:
    """Append `seal` through `commit` (an open writer's durable append)."""
    if not is_seal(seal):
        raise ValueError("not a journal.successor seal")
    commit(codec.encode(seal))


def write_seal(path: str, seal: Entry) -> None:
    """Append `seal` to the file `path` (whose lock the caller holds), synced."""
    appender = AppendLog(path, Durability.always())
    try:
        commit_seal(appender.commit, seal)
    finally:
        appender.close()
