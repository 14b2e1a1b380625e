"""Reading and writing through open file descriptors: binary sniffing, lines of bounded size.

A text file may be one line of hundreds of megabytes; reading a line whole would take that
much memory (and more to decode it) just to show its first few thousand characters. Lines
are therefore read with a byte cap and the rest of an overlong line is skipped in chunks.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from typing import BinaryIO

SNIFF_BYTES = 8192


def looks_binary(fd: int) -> bool:
    """Whether the file's first bytes contain a NUL, the same test git and grep use."""
    return b"\0" in os.pread(fd, SNIFF_BYTES, 0)


def capped_lines(fh: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """Yield each line's first `max_bytes` bytes and whether more of the line was skipped.

    A line yielded whole keeps its newline; a cut one has none. Memory stays within a few
    times `max_bytes` whatever the length of a line.
    """
    while chunk := fh.readline(max_bytes):
        if len(chunk) < max_bytes or chunk.endswith(b"\n"):
            yield chunk, False
            continue
        skipped = False
        while rest := fh.readline(max_bytes):
            skipped = skipped or rest not in (b"\n", b"\r\n")
            if rest.endswith(b"\n"):
                break
        yield chunk, skipped


def read_all(fd: int) -> bytes:
    """The whole content of a regular file, from its start."""
    parts = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def replace_content(fd: int, data: bytes) -> None:
    """Make `data` the whole content of the file open for writing on `fd`.

    The file is changed in place (not replaced by another), so its other attributes stay;
    callers refuse hard-linked files first.
    """
    if len(data) > os.fstat(fd).st_size:
        # take the space first: a full disk then fails before a byte changes, instead of
        # leaving the new start glued to a cut-off old end
        try:
            os.posix_fallocate(fd, 0, len(data))
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)
    os.ftruncate(fd, len(data))
