"""Links between a session file, its successors and its archives, and crash recovery for them.

Rotation seals an old file with a `custom` entry of type `journal.successor` naming the file that
continues it, and the successor's header names the archived old file as `parentSession`. From
any file of a lineage these links lead to the live one, even after the old file moved into the
archive. A rotation in progress is recorded in an intent file (`<old>.rotating`) so a crash at
any step can be finished or undone deterministically by the next writer.
"""

from __future__ import annotations

import gzip
import logging
import os
from typing import Any

import orjson

from . import codec
from .log import fsync_directory
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
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def read_header(path: str) -> Entry | None:
    try:
        with _open(path) as f:
            first = f.readline(1 << 20)
    except (OSError, EOFError):
        return None
    try:
        value = codec.loads(first)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and value.get("type") == "session" else None


def last_entry(path: str) -> Entry | None:
    """The last complete entry of a (possibly gzip-compressed) session file."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                last = b""
                for raw in f:
                    if raw.endswith(b"\n") and raw.strip():
                        last = raw
            return _entry_of(last)
        with open(path, "rb") as f:
            end = last_newline_end(f, os.fstat(f.fileno()).st_size)
            for line in codec.iter_lines_reverse(f, end):
                if line.raw.strip():
                    return _entry_of(line.raw)
    except (OSError, EOFError):
        return None
    return None


def _entry_of(raw: bytes) -> Entry | None:
    try:
        value = codec.loads(raw)
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
        with open(intent_path(path), "rb") as f:
            intent = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
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
    target = intent_path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, orjson.dumps(intent) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(target))


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
        with open(target, "rb") as f:
            intent = orjson.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError):
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
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    try:
        os.rename(path, archive)
    except OSError:
        with open(path, "rb") as src, open(archive, "wb") as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
        os.unlink(path)
    fsync_directory(os.path.dirname(archive))
    fsync_directory(os.path.dirname(path))


def recover_pending(path: str, lock_timeout: float) -> None:
    """Recover every interrupted rotation on the way from `path` to the live file."""
    from .lock import WriterLock

    current = os.path.abspath(path)
    for _ in range(MAX_HOPS):
        for pending in pending_rotations(current):
            with WriterLock(pending, lock_timeout):
                recover_rotation(pending)
        live, hops = resolve_live(current)
        if live == current:
            return
        current = live
