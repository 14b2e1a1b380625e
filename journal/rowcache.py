"""The catalog's cache: what `journal ls` read of each lineage, kept between runs.

One JSON file maps the live path of each lineage to what reading it found (its files, a
Claude Code transcript's subagent files with them, and
what `journal.catalog` reads of them: ids, names, times, entry count, damage, and tokens and
cost under a given price table). An entry is used only while every file of its lineage is
the same file as when it was read: same device and inode, size, modification and change
times (nanoseconds). An append, a rewrite (even of the same size with its time put back: the
change time moves), a replacement by rename or a rotation each change one of these, and the
lineage is read again. So does a rotation's intent beside one of its files: a rotation killed
after publishing its successor leaves the old file as it was, but joins it to the successor's
lineage (`journal.discovery.lineage_of`).

A file modified within `RACY_SECONDS` of the read is not cached: a file system with coarse
times could see it change again within the same tick (git's "racy" rule). The lock state and
a pending rotation are never cached; they are checked on every run.

The file is `$XDG_CACHE_HOME/journal/catalog.json` (`~/.cache/journal/catalog.json` when
that is unset); `default_cache_path()` says where. It is written whole to a temporary file
and renamed, mode 0600. A cache that cannot be read, or of another version, is ignored; one
that cannot be written is left as it was. Deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any

import orjson

from .claude import subagent_files
from .errors import JournalError
from .lineage import intent_path
from .publish import publish_bytes

__all__ = ["RACY_SECONDS", "RowCache", "default_cache_path", "file_signature"]

VERSION = 2
RACY_SECONDS = 2.0

Signature = list[Any]
"""[path, device, inode, size, mtime_ns, ctime_ns] of one file."""


def default_cache_path() -> str:
    """`$XDG_CACHE_HOME/journal/catalog.json`, or `~/.cache/journal/catalog.json`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "journal", "catalog.json")


def file_signature(path: str) -> Signature | None:
    """What identifies the content of `path` without reading it, or None if it cannot be
    statted."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def prices_key(table_json: dict[str, Any]) -> str:
    """A short digest of a price table's prices (its path left out): cached costs are only
    used under the same prices."""
    data = {"asOf": table_json.get("asOf"), "models": table_json.get("models")}
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


class RowCache:
    """The cache file at `path`, read once when made; `save()` writes it back."""

    def __init__(self, path: str, *, racy_seconds: float = RACY_SECONDS) -> None:
        self.path = path
        self.racy_ns = int(racy_seconds * 1e9)
        self.started_ns = time.time_ns()
        self.entries: dict[str, dict[str, Any]] = {}
        self.touched: set[str] = set()
        self.checked: dict[str, dict[str, Any] | None] = {}
        self.changed = False
        self.hits = 0
        self.misses = 0
        try:
            with open(path, "rb") as f:
                data = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError):
            return
        if isinstance(data, dict) and data.get("version") == VERSION \
                and isinstance(data.get("sessions"), dict):
            self.entries = {k: v for k, v in data["sessions"].items() if isinstance(v, dict)}

    def lookup(self, live: str) -> dict[str, Any] | None:
        """The cached entry of the lineage whose live file is `live`, if every file of it is
        unchanged since; else None."""
        if live in self.checked:
            return self.checked[live]
        entry = self.entries.get(live)
        files = entry.get("files") if entry is not None else None
        count = entry.get("lineage") if entry is not None else None
        valid = isinstance(files, list) and bool(files) and isinstance(count, int) and all(
            isinstance(sig, list) and sig and file_signature(str(sig[0])) == sig
            for sig in files) and [str(sig[0]) for sig in files[count:]] == subagent_files(live) \
            and not any(os.path.lexists(intent_path(str(sig[0]))) for sig in files[:count])
        self.checked[live] = entry if valid else None
        if not valid:
            self.misses += 1
            return None
        self.hits += 1
        self.touched.add(live)
        return entry

    def files_of(self, live: str) -> list[str] | None:
        """The lineage of `live` as cached, if it is still valid (see `lookup`)."""
        entry = self.lookup(live)
        if entry is None:
            return None
        return [str(sig[0]) for sig in entry["files"][:entry["lineage"]]]

    def store(self, live: str, signatures: Sequence[Signature | None], data: dict[str, Any],
              lineage: int | None = None) -> bool:
        """Keep `data` for the lineage whose files had `signatures` before they were read:
        the first `lineage` are the lineage's files (all when None), the others the
        subagent files of a Claude Code transcript (`journal.claude.subagent_files`). Nothing
        is kept if a file could not be statted or was modified too recently."""
        self.touched.add(live)
        if any(sig is None for sig in signatures):
            return False
        if any(sig[4] >= self.started_ns - self.racy_ns for sig in signatures if sig):
            self.entries.pop(live, None)
            return False
        count = len(signatures) if lineage is None else lineage
        self.entries[live] = {**data, "files": list(signatures), "lineage": count}
        self.checked.pop(live, None)
        self.changed = True
        return True

    def save(self) -> None:
        """Write the cache back if anything changed: the entries met on this run, and the
        others whose live file still exists."""
        stale = [k for k in self.entries if k not in self.touched and not os.path.exists(k)]
        for key in stale:
            del self.entries[key]
        if not self.changed and not stale:
            return
        try:
            os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
            publish_bytes(self.path, orjson.dumps({"version": VERSION,
                                                   "sessions": self.entries}), "cache")
        except (OSError, JournalError):
            pass  # the cache is an optimisation: a run that cannot keep it still listed
