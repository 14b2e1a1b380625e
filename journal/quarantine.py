"""Quarantine side files: byte ranges taken out of a session, kept byte for byte.

Invariant 3: nothing is lost silently. Before any byte range leaves a session file (a torn
tail on open, a bad line in repair), it is appended here with its offset and the reason.
The side file is JSON lines; `bytes` holds the exact bytes in base64, `text` a readable copy
when they are valid UTF-8.
"""

from __future__ import annotations

import base64
import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .codec import TORN_TAIL
from .errors import WriteFailed
from .log import fsync_directory
from .model import now_iso
from .snapshot import last_newline_end

log = logging.getLogger(__name__)

SUFFIX = ".quarantine"


def quarantine_path_for(session_path: str) -> str:
    return session_path + SUFFIX


@dataclass(frozen=True)
class Quarantined:
    """One byte range that was moved out of a session file."""

    source: str
    offset: int
    data: bytes
    reason: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "time": now_iso(),
            "source": os.path.basename(self.source),
            "offset": self.offset,
            "length": len(self.data),
            "reason": self.reason,
            "detail": self.detail,
            "bytes": base64.b64encode(self.data).decode("ascii"),
        }
        try:
            record["text"] = self.data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        return record


def quarantine(session_path: str, items: list[Quarantined]) -> str:
    """Append `items` to the session's quarantine file and sync it; return its path.

    The copy is durable before the caller removes anything from the session file. A failed
    write is cut back (like a commit), so the caller removes nothing and a later quarantine
    does not glue onto a fragment.
    """
    target = quarantine_path_for(session_path)
    if not items:
        return target
    data = b"".join(orjson.dumps(q.to_json()) + b"\n" for q in items)
    try:
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise WriteFailed(target, 0, f"cannot open the quarantine file: {e.strerror}") from e
    try:
        start = _drop_torn_record(fd)
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes")
            os.fsync(fd)
        except OSError as e:
            os.ftruncate(fd, start)
            raise WriteFailed(target, start, f"quarantine failed: {e.strerror or e}") from e
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(target))
    return target


def _drop_torn_record(fd: int) -> int:
    """Cut a record a crash left without newline: its bytes were never removed from the
    session (removal waits for this copy), so nothing is lost. Returns the end offset."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    with os.fdopen(os.dup(fd), "rb") as f:
        end = last_newline_end(f, size)
    os.ftruncate(fd, end)
    return end


def read_quarantine(path: str) -> Iterator[dict[str, Any]]:
    """The records of a quarantine file, with `data` decoded back to bytes.

    A line that cannot be read (a record torn by a crash) is skipped with a warning.
    """
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
                record["data"] = base64.b64decode(record["bytes"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("%s: line %d is not a readable quarantine record", path, number)
                continue
            yield record


def cut_torn_tail(path: str) -> list[Quarantined]:
    """Quarantine and cut a last line without newline (invariant 2). Caller holds the lock."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = last_newline_end(f, size)
        if end == size:
            return []
        f.seek(end)
        fragment = f.read(size - end)
    torn = Quarantined(path, end, fragment, TORN_TAIL, "no newline at end of file")
    where = quarantine(path, [torn])
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, end)
        os.fsync(fd)
    finally:
        os.close(fd)
    log.warning("%s: torn last line at byte %s (%d bytes) quarantined to %s",
                path, f"{end:,}", len(fragment), where)
    return [torn]
