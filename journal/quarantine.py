"""Quarantine side files: byte ranges taken out of a session, kept byte for byte.

Invariant 3: nothing is lost silently. Before any byte range leaves a session file (a torn
tail on open, a bad line in repair), it is appended here with its offset and the reason.
The side file is JSON lines; `bytes` holds the exact bytes in base64, `text` a readable copy
when they are valid UTF-8 (for ranges up to `TEXT_LIMIT`).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .codec import TORN_TAIL
from .errors import JournalError, NoSpace, WriteFailed
from .files import fsync_directory, open_regular, open_side_file, write_all
from .model import now_iso
from .publish import create_file
from .snapshot import last_newline_end

log = logging.getLogger(__name__)

SUFFIX = ".quarantine"
# a readable copy (`text`) is kept for ranges up to this size; `bytes` always holds them all
TEXT_LIMIT = 1 << 20
B64_BLOCK = 3 << 20  # a multiple of 3: the blocks' encodings join into one base64 string
KEY_FIELD = re.compile(rb'\{"key":"([0-9a-f]{32})"')
KEY_HEAD = 64


def text_of(data: bytes) -> str | None:
    """A record's bytes as its `text`: where they are UTF-8, up to TEXT_LIMIT of them."""
    if len(data) > TEXT_LIMIT:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


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

    def _fields(self) -> dict[str, Any]:
        """Every field of the record but `bytes`."""
        record: dict[str, Any] = {
            "time": now_iso(),
            "source": os.path.basename(self.source),
            "offset": self.offset,
            "length": len(self.data),
            "reason": self.reason,
            "detail": self.detail,
        }
        text = text_of(self.data)
        if text is not None:
            record["text"] = text
        return record

    def encoded(self, key: str) -> Iterator[bytes]:
        """The record as one JSON line, in pieces: `bytes` is base64-encoded a block at a
        time (base64 needs no JSON escaping), so a huge range is never held encoded whole."""
        head = orjson.dumps({"key": key, **self._fields()})
        yield head[:-1] + b',"bytes":"'
        view = memoryview(self.data)
        for start in range(0, len(view), B64_BLOCK):
            yield base64.b64encode(view[start:start + B64_BLOCK])
        yield b'"}\n'


def quarantine(session_path: str, items: list[Quarantined]) -> str:
    """Append `items` to the session's quarantine file and sync it; return its path.

    The copy is durable before the caller removes anything from the session file. A failed
    write is cut back (like a commit), so the caller removes nothing and a later quarantine
    does not glue onto a fragment. A record already in the file (same source file, offset,
    reason and bytes: an operation killed after this copy and run again) is not written
    twice. The side file is never opened through a link (UnsafeFile).
    """
    target = quarantine_path_for(session_path)
    if not items:
        return target
    source = _source_state(session_path)
    try:
        fd = open_side_file(target)
    except OSError as e:
        raise WriteFailed(target, 0, f"cannot open the quarantine file: {e.strerror}") from e
    try:
        start = _drop_torn_record(fd)
        known = _keys_in(fd, start)
        try:
            for q in items:
                key = _key(q, source)
                if key in known:
                    continue
                known.add(key)
                for piece in q.encoded(key):
                    write_all(fd, piece, target)
            os.fsync(fd)
        except (OSError, NoSpace) as e:
            os.ftruncate(fd, start)
            if isinstance(e, NoSpace):
                raise
            raise WriteFailed(target, start, f"quarantine failed: {e.strerror or e}") from e
    finally:
        os.close(fd)
    fsync_directory(os.path.dirname(target))
    return target


def _source_state(session_path: str) -> str:
    """The session file's identity. Bytes at an offset of one file never change (it is only
    appended to, or cut back after a torn tail), so a record of the same file, offset, reason
    and bytes is the same record, whoever writes it and whatever was appended since."""
    try:
        st = os.stat(session_path)
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


def _key(q: Quarantined, source: str) -> str:
    digest = hashlib.sha256()
    for part in (source, os.path.basename(q.source), str(q.offset), q.reason):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(q.data)
    return digest.hexdigest()[:32]


def _keys_in(fd: int, end: int) -> set[str]:
    """The keys of the records already in the quarantine file (each record starts with its
    key), reading blocks and looking only at the start of each line: memory stays small
    however long a record is."""
    keys: set[str] = set()
    head = b""
    pos = 0
    while pos < end:
        block = os.pread(fd, min(1 << 20, end - pos), pos)
        if not block:
            break
        pos += len(block)
        start = 0
        while start < len(block):
            nl = block.find(b"\n", start)
            stop = nl if nl >= 0 else len(block)
            if len(head) < KEY_HEAD:
                head += block[start:min(stop, start + KEY_HEAD - len(head))]
            if nl < 0:
                break
            found = KEY_FIELD.match(head)
            if found:
                keys.add(found.group(1).decode("ascii"))
            head = b""
            start = nl + 1
    return keys


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
    for _, record in numbered_records(path):
        yield record


def numbered_records(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each readable record of a quarantine file, as
    `read_quarantine` reads them: the line number names a record for `restore`."""
    with os.fdopen(open_regular(path), "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
                record["data"] = base64.b64decode(record["bytes"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("%s: line %d is not a readable quarantine record", path, number)
                continue
            yield number, record


def side_file_of(path: str) -> str:
    """The quarantine file of session `path`, or `path` itself if it names one. JournalError
    for a folder: each session of one has a quarantine file of its own."""
    if os.path.isdir(path):
        raise JournalError(f"{path}: a folder, not a session: name a session file (its "
                           f"quarantine is <session file>{SUFFIX})")
    return path if path.endswith(SUFFIX) else quarantine_path_for(path)


def quarantined_record(path: str, number: int) -> dict[str, Any]:
    """The record on line `number` of the quarantine file of `path` (a session file or its
    quarantine file), its number first (`line`, as `journal quarantine list` gives it).
    Raises JournalError if there is no such file or no such record."""
    side = side_file_of(path)
    try:
        for line, record in numbered_records(side):
            if line == number:
                return {"line": line, **record}
    except FileNotFoundError as e:
        raise JournalError(f"{side}: no such file (nothing was quarantined)") from e
    raise JournalError(f"{side}: no readable record on line {number} "
                       "(see 'journal quarantine list')")


def restore_quarantined(path: str, number: int, target: str) -> int:
    """Write the bytes of quarantine record `number` (of session `path`) to a new file
    `target`; return how many. Never into an existing file (the session included): a file
    already at `target` is refused and nothing is written."""
    record = quarantined_record(path, number)
    data: bytes = record["data"]
    try:
        create_file(target, data, 0o600)
    except FileExistsError as e:
        raise JournalError(f"{target}: already exists; nothing was written (restore writes "
                           "a new file only; choose another name)") from e
    return len(data)


def cut_torn_tail(path: str) -> list[Quarantined]:
    """Quarantine and cut a last line without newline (invariant 2). Caller holds the lock."""
    with os.fdopen(open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = last_newline_end(f, size)
        if end == size:
            return []
        f.seek(end)
        fragment = f.read(size - end)
    torn = Quarantined(path, end, fragment, TORN_TAIL, "no newline at end of file")
    where = quarantine(path, [torn])
    fd = open_regular(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, end)
        os.fsync(fd)
    finally:
        os.close(fd)
    log.warning("%s: torn last line at byte %s (%d bytes) quarantined to %s",
                path, f"{end:,}", len(fragment), where)
    return [torn]
