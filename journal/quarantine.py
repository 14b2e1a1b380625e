"""Quarantine side files: byte ranges taken out of a session, kept byte for byte.

Invariant 3: nothing is lost silently. Before any byte range leaves a session file (a torn
tail on open, a bad line in repair), it is appended here with its offset and the reason.
The side file is JSON lines; `bytes` holds the exact bytes in base64, `text` a readable copy
when they are valid UTF-8.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .log import fsync_directory
from .model import now_iso

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

    The copy is durable before the caller removes anything from the session file.
    """
    target = quarantine_path_for(session_path)
    if not items:
        return target
    data = b"".join(orjson.dumps(q.to_json()) + b"\n" for q in items)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(target))
    return target


def read_quarantine(path: str) -> Iterator[dict[str, Any]]:
    """The records of a quarantine file, with `data` decoded back to bytes."""
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                record = orjson.loads(line)
                record["data"] = base64.b64decode(record["bytes"])
                yield record
