"""Links between a session file, its successors and its archives, and crash recovery for them.

Rotation seals an old file with a `custom` entry of type `journal.successor` naming the file that
continues it, and the successor's header names the archived old file as `parentSession`. From
any file of a lineage these links lead to the live one, even after the old file moved into the
archive. A rotation in progress is recorded in an intent file (`<old>.rotating`) so a crash at
any step can be finished or undone deterministically by the next writer.
"""

from __future__ import annotations

import errno
import gzip
import logging
import os
import stat
from typing import Any

import orjson

from . import codec
from .errors import JournalError
from .files import (
    NewFile,
    fsync_directory,
    make_private_dir,
    read_regular,
    read_small,
    remove_if_regular,
)
from .lock import WriterLock, lock_path_for
from .model import Entry
from .snapshot import last_newline_end

log = logging.getLogger(__name__)

SUCCESSOR_TYPE = "journal.successor"
INTENT_SUFFIX = ".rotating"
ARCHIVE_DIR = "archive"
MAX_HOPS = 64


def is_seal(entry: Entry | None) -> bool:
    return bool(entry) and entry.get("type") == "custom" and entry.get(
        "customType") == SUCCESSOR_TYPE and isinstance(entry.get("data"), dict)


def _open(path: str) -> Any:
    """A reader of a (possibly gzip-compressed) session file; only a regular file is opened."""
    f = read_regular(path)
    return gzip.GzipFile(fileobj=f, mode="rb") if path.endswith(".gz") else f


def read_header(path: str) -> Entry | None:
    try:
        with _open(path) as f:
            first = f.readline(1 << 20)
    except (OSError, EOFError, JournalError):
        return None
    try:
        value = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and value.get("type") == "session" else None


def last_entry(path: str) -> Entry | None:
    """The last complete entry of a (possibly gzip-compressed) session file."""
    try:
        if path.endswith(".gz"):
            with _open(path) as f:
                last = b""
                for raw in f:
                    if raw.endswith(b"\n") and raw.strip():
                        last = raw
            return _entry_of(last)
        with read_regular(path) as f:
            end = last_newline_end(f, os.fstat(f.fileno()).st_size)
            for line in codec.iter_lines_reverse(f, end):
                if line.raw.strip():
                    return _entry_of(line.raw)
    except (OSError, EOFError, JournalError):
        return None
    return None


def _entry_of(raw: bytes) -> Entry | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def seal_of(path: str) -> dict[str, Any] | None:
    """The successor a sealed file names (`successor`, `file`, `sessionId`), or None."""
    entry = last_entry(path)
    return entry["data"] if is_seal(entry) else None


def archived_copies(path: str) -> list[str]:
    """Where rotation may have put `path`: the default archive folder beside it."""
    directory, name = os.path.split(path)
    archive = os.path.join(directory, ARCHIVE_DIR)
    return [os.path.join(archive, name + ext) for ext in ("", ".gz")]


def _successor_in(seal: dict[str, Any], near: str) -> str | None:
    """The successor a seal names; it may itself have moved on into an archive since."""
    candidates = [seal.get("successor")]
    if isinstance(seal.get("file"), str):
        candidates.append(os.path.join(os.path.dirname(near), seal["file"]))
    named = [c for c in candidates if isinstance(c, str)]
    for candidate in named:
        if os.path.exists(candidate) or any(os.path.exists(a) for a in archived_copies(candidate)):
            return candidate
    return None


def _child_by_header(path: str) -> str | None:
    """A session beside `path` whose header names `path` (or its archive) as parent."""
    directory, name = os.path.split(path)
    try:
        names = sorted(os.listdir(directory or "."))
    except OSError:
        return None
    for candidate in names:
        if not candidate.endswith(".jsonl") or candidate == name:
            continue
        header = read_header(os.path.join(directory, candidate))
        parent = header.get("parentSession") if header else None
        if isinstance(parent, str) and os.path.basename(parent) in (name, name + ".gz"):
            return os.path.join(directory, candidate)
    return None


def resolve_live(path: str) -> tuple[str, list[str]]:
    """Follow seals (and archives) from `path` to the live file; also return the hops."""
    current = os.path.abspath(path)
    hops: list[str] = []
    for _ in range(MAX_HOPS):
        if os.path.exists(current):
            seal = seal_of(current) or _published_intent(current)
            if seal is None:
                return current, hops
            following = _successor_in(seal, current)
        else:
            following = None
            for archived in archived_copies(current):
                if os.path.exists(archived):
                    seal = seal_of(archived)
                    following = _successor_in(seal, current) if seal else None
                    break
            following = following or _child_by_header(current)
        if following is None:
            return current, hops
        hops.append(current)
        current = os.path.abspath(following)
    return current, hops


def _published_intent(path: str) -> dict[str, Any] | None:
    """An interrupted rotation whose successor was published counts as a seal: the next
    writer finishes it (see `recover_rotation`), so readers follow it already."""
    try:
        intent = orjson.loads(read_small(intent_path(path)))
    except (OSError, JournalError, orjson.JSONDecodeError):
        return None
    successor = intent.get("successor") if isinstance(intent, dict) else None
    if isinstance(successor, str) and os.path.exists(successor):
        return {"successor": successor}
    return None


def lineage(path: str) -> list[str]:
    """Every file of the lineage, from the first archived one to the live one."""
    live, _ = resolve_live(path)
    chain = [live]
    seen = {live}
    current = live
    for _ in range(MAX_HOPS):
        header = read_header(current)
        parent = header.get("parentSession") if header else None
        if not isinstance(parent, str):
            break
        found = next((p for p in (parent, parent.removesuffix(".gz"), parent + ".gz")
                      if os.path.exists(p)), None)
        if found is None or found in seen:
            break
        chain.append(found)
        seen.add(found)
        current = found
    chain.reverse()
    return chain


# intent files: crash recovery of a rotation


def intent_path(path: str) -> str:
    return path + INTENT_SUFFIX


def write_intent(path: str, intent: dict[str, Any]) -> None:
    """Record a rotation's plan: written whole under a fresh name, then renamed into place
    (a crash leaves the old intent or the new one, and a planted link is replaced, not
    written through)."""
    with NewFile(path, "intent") as new:
        new.write(orjson.dumps(intent) + b"\n")
        new.publish(intent_path(path))


def remove_intent(path: str) -> None:
    try:
        os.unlink(intent_path(path))
    except FileNotFoundError:
        return
    fsync_directory(os.path.dirname(path))


def recover_rotation(path: str) -> str | None:
    """Finish or undo a rotation of `path` that a crash interrupted. Caller holds the lock.

    Until the successor is published under its final name, the old file stays authoritative:
    the temp file is removed. From then on the successor is (it was verified before it was
    published): the old file is sealed if it is not yet, and moved to the archive. Returns
    what was done, or None if there was nothing to recover.
    """
    target = intent_path(path)
    try:
        intent = orjson.loads(read_small(target))
    except FileNotFoundError:
        return None
    except (OSError, JournalError, orjson.JSONDecodeError):
        intent = {}
    if not isinstance(intent, dict):
        intent = {}
    temp, successor, archive = intent.get("temp"), intent.get("successor"), intent.get("archive")
    published = isinstance(successor, str) and os.path.exists(successor)
    if isinstance(temp, str) and os.path.exists(temp):
        os.unlink(temp)
    if not published:
        action = "undone: the old file stays authoritative"
    else:
        if os.path.exists(path) and seal_of(path) is None:
            seal_file(path, successor, intent.get("sessionId"))
        if os.path.exists(path) and isinstance(archive, str):
            move_into_archive(path, archive)
        action = "finished: the successor is live and the old file is archived"
    fsync_directory(os.path.dirname(path))
    remove_intent(path)
    log.warning("%s: an interrupted rotation was %s", path, action)
    return action


def seal_file(path: str, successor: str, session_id: str | None) -> Entry:
    """Append the `journal.successor` marker to a file whose writer lock the caller holds."""
    from .durability import Durability
    from .log import AppendLog
    from .model import custom_entry, new_id
    from .quarantine import cut_torn_tail

    cut_torn_tail(path)
    last = last_entry(path)
    parent = last.get("id") if last else None
    marker = custom_entry(new_id(set()), parent, SUCCESSOR_TYPE,
                          {"successor": successor, "file": os.path.basename(successor),
                           "sessionId": session_id})
    appender = AppendLog(path, Durability.always())
    try:
        appender.commit(codec.encode(marker))
    finally:
        appender.close()
    return marker


def pending_rotations(path: str) -> list[str]:
    """Files whose interrupted rotation concerns `path`: itself, and its parent if `path` is
    the successor that parent's rotation published."""
    found = [path] if os.path.exists(intent_path(path)) else []
    header = read_header(path) if os.path.exists(path) else None
    parent = header.get("parentSession") if header else None
    if isinstance(parent, str):
        name = os.path.basename(parent).removesuffix(".gz")
        beside = os.path.join(os.path.dirname(path), name)
        if os.path.exists(intent_path(beside)):
            found.insert(0, beside)
    return found


def move_into_archive(path: str, archive: str) -> None:
    """Move a sealed file (the caller holds its lock) and its side files into the archive.

    Its backup and quarantine go along as `<archive>.bak` and `<archive>.quarantine`; its
    lock file goes when the lock is released (see `release_after_move`).
    """
    directory = os.path.dirname(archive)
    ensure_archive_folder(path, directory)
    try:
        os.rename(path, archive)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        _copy_across(path, archive)
        os.unlink(path)
    for suffix in (".bak", ".quarantine"):
        side = path + suffix
        if os.path.lexists(side) and stat.S_ISREG(os.lstat(side).st_mode):
            os.rename(side, archive + suffix)
    fsync_directory(directory)
    fsync_directory(os.path.dirname(path))


def ensure_archive_folder(path: str, folder: str) -> None:
    """Create the archive folder of `path` (0700) if needed. The default one, `archive/`
    beside the file, must be a real folder: a link planted there would carry the session
    out of its folder (UnsafeFile). A folder the caller chose may be a link."""
    default = os.path.join(os.path.dirname(os.path.abspath(path)), ARCHIVE_DIR)
    make_private_dir(folder, follow=os.path.abspath(folder) != default)


def release_after_move(lock: WriterLock, path: str) -> None:
    """Release the writer lock of `path`, removing its lock file if the file moved away.

    Called last, when nothing is left to do under the lock: whoever takes the lock after
    that (on a fresh lock file) finds the file gone and follows its seal, so no lock file is
    left beside the archived sessions.
    """
    try:
        if not os.path.lexists(path):
            remove_if_regular(lock_path_for(path))
    finally:
        lock.release()


def _copy_across(path: str, archive: str) -> None:
    """Copy to another file system: a new file (never through a link), same permissions."""
    with read_regular(path) as src, NewFile(archive, "archive",
                                            mode=stat.S_IMODE(os.fstat(src.fileno()).st_mode)
                                            ) as new:
        while chunk := src.read(1 << 22):
            new.write(chunk)
        new.publish()


def recover_pending(path: str, lock_timeout: float) -> None:
    """Recover every interrupted rotation on the way from `path` to the live file."""
    current = os.path.abspath(path)
    for _ in range(MAX_HOPS):
        for pending in pending_rotations(current):
            lock = WriterLock(pending, lock_timeout)
            lock.acquire()
            try:
                recover_rotation(pending)
            finally:
                release_after_move(lock, pending)
        live, hops = resolve_live(current)
        if live == current:
            return
        current = live
