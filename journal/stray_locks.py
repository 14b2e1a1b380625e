"""Lock files left beside session files that are gone, and their removal by `journal prune`.

A rotation killed after it archived the old file and removed its intent, before it let go of
the writer lock, leaves `<old file>.lock` beside the name the old file had; so does a
`Session.create` killed between taking the lock and creating its file. Nobody locks that name
again (writers lock the live successor), so no writer ever removes it. `clear_stray_locks`
finds such files under some folders and removes each one `journal.lock.remove_stray_lock`
lets go of: nobody holds it, its session file is still gone, and it is a lock this store
made.

Which files count: `<name>.lock` where `<name>` is a session file's name by the catalog's rule
(`journal.discovery.is_session_name`: `*.jsonl`, `*.jsonl.gz`, numbered names in `archive/`)
and no file of that name (nor its rotation intent) exists. Any other `.lock` a user keeps in
the folder is not looked at.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .discovery import is_session_name
from .errors import describe_os_error
from .lineage import ARCHIVE_DIR, intent_path
from .lock import LOCK_SUFFIX, remove_stray_lock

__all__ = ["PENDING_INTENT", "StrayLock", "clear_stray_locks", "stray_lock_files"]

PENDING_INTENT = ("an interrupted rotation of its session file is pending: run journal repair "
                  "or journal rotate first")


@dataclass
class StrayLock:
    """What prune did (or would do) with one lock file whose session file is gone: `action`
    is `remove` or `skip` (with `reason`); `done` once removed; `error` if removing failed."""

    path: str
    action: str
    reason: str | None = None
    done: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "action": self.action, "reason": self.reason,
                "done": self.done, "error": self.error}


def stray_lock_files(dirs: Iterable[str]) -> Iterator[str]:
    """Lock files under the folders `dirs` (walked at any depth, links not followed; a file
    given is no folder and has none) named for a session file that does not exist, by their
    real paths, folder by folder in name order."""
    for given in dirs:
        top = os.path.realpath(given)
        if not os.path.isdir(top):
            continue
        for root, subdirs, names in os.walk(top):
            subdirs.sort()
            in_archive = os.path.basename(root) == ARCHIVE_DIR
            for name in sorted(names):
                session = name[: -len(LOCK_SUFFIX)]
                if not name.endswith(LOCK_SUFFIX) or not is_session_name(
                        session, in_archive=in_archive):
                    continue
                if not os.path.lexists(os.path.join(root, session)):
                    yield os.path.join(root, name)


def clear_stray_locks(dirs: Iterable[str], *, dry_run: bool = False) -> list[StrayLock]:
    """Remove every lock file under `dirs` whose session file is gone (`stray_lock_files`)
    and that `journal.lock.remove_stray_lock` lets go of; one `StrayLock` for each, removed
    or kept with its reason. One beside a pending rotation intent stays with the rest of that
    rotation (finishing it removes it). `dry_run` says what would go and touches nothing."""
    found: list[StrayLock] = []
    for path in stray_lock_files(dirs):
        intent = intent_path(path[: -len(LOCK_SUFFIX)])
        if os.path.lexists(intent):
            found.append(StrayLock(path, "skip", PENDING_INTENT))
            continue
        item = StrayLock(path, "remove")
        found.append(item)
        try:
            reason = remove_stray_lock(path, also_gone=[intent], dry_run=dry_run)
        except OSError as e:
            item.error = describe_os_error(e)
            continue
        if reason is not None:
            item.action, item.reason = "skip", reason
        else:
            item.done = not dry_run
    return found
