"""Compressed archives (`.jsonl.gz`), written and read a chunk at a time.

An archive is as long as its session grew (gigabytes, for some): it is compressed, checked
and unpacked in chunks, never held whole. Every archive is compressed alike (level 1, no
name, no time: the same bytes in, the same archive out), by file rotation and by the
database's exports alike. A file is known for an archive's own by the `Digest` of the bytes
it unpacks to, which the database records when an archive moves out of it.

This module owns the rules of archives for every reader too: what names one (the `.gz`
suffix), how one is unpacked, what reading a damaged one raises and how that is told.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, cast

from .errors import JournalError, NotASession

__all__ = ["CHUNK", "DAMAGE", "DAMAGED", "SUFFIX", "UNREADABLE", "Digest", "chunks",
           "compressed_name", "compressor", "decompress", "digest_of", "is_compressed",
           "names_of", "reader", "refuse_writing", "uncompressed_name", "unpack", "unpacked",
           "write"]

CHUNK = 1 << 20
SUFFIX = ".gz"

# What reading a damaged or cut-short archive raises: gzip's own errors are OSErrors
# (BadGzipFile), a cut-short one is EOFError, damaged compressed data is zlib.error; with
# the disk's errors (OSError), what reading an archive may raise.
DAMAGE: tuple[type[Exception], ...] = (gzip.BadGzipFile, EOFError, zlib.error)
UNREADABLE: tuple[type[Exception], ...] = (OSError, *DAMAGE)
DAMAGED = "not a readable gzip archive"


def is_compressed(path: str) -> bool:
    """Whether `path` names a gzip-compressed session (an archive): by its `.gz` suffix."""
    return path.endswith(SUFFIX)


def refuse_writing(path: str) -> None:
    """NotASession if `path` names an archive: archives are read-only (writing, rotating or
    cutting one back would treat its compressed bytes as lines)."""
    if is_compressed(path):
        raise NotASession(path, "a compressed archive is read-only; open its live successor "
                                 "(or decompress it to continue it)")


def uncompressed_name(path: str) -> str:
    """`path` without the archive suffix: the name the session had before it was compressed."""
    return path.removesuffix(SUFFIX)


def compressed_name(path: str) -> str:
    """The name of `path` once compressed (`path` itself if it names an archive already)."""
    return uncompressed_name(path) + SUFFIX


def names_of(path: str) -> list[str]:
    """Both names one session file may carry, the plain one first: sealed files are
    compressed after their successor named them."""
    return [uncompressed_name(path), compressed_name(path)]


def reader(raw: BinaryIO) -> BinaryIO:
    """A reader of the bytes the archive `raw` unpacks to, from its start (closing it leaves
    `raw` open). Reading it raises one of UNREADABLE where the archive is damaged."""
    return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))


@contextmanager
def unpacked(raw: BinaryIO, path: str) -> Iterator[BinaryIO]:
    """`reader(raw)` for the archive at `path`, where a damaged archive raises NotASession
    (an OSError other than gzip's own, from the disk, is raised as it is)."""
    try:
        with reader(raw) as f:
            yield f
    except DAMAGE as e:
        raise NotASession(path, f"{DAMAGED} ({e})") from e


def decompress(data: bytes, path: str) -> bytes:
    """The bytes the archive `data` (the file at `path`) unpacks to; NotASession if it is
    damaged."""
    try:
        return gzip.decompress(data)
    except DAMAGE as e:
        raise NotASession(path, f"{DAMAGED} ({e})") from e


@dataclass(frozen=True)
class Digest:
    """What an archive holds: the length and SHA-256 (hex) of its bytes, uncompressed."""

    size: int
    sha256: str


def compressor(raw: BinaryIO) -> gzip.GzipFile:
    """A writer compressing into `raw` as every archive is compressed (close it to finish
    the archive; `raw` stays open)."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0)


def chunks(stream: BinaryIO, size: int, name: str) -> Iterator[bytes]:
    """The first `size` bytes of `stream` (`name`'s), from where it is, CHUNK bytes at a
    time. JournalError if it ends before: a copy is of all of them or of none."""
    left = size
    while left > 0:
        part = stream.read(min(CHUNK, left))
        if not part:
            raise JournalError(f"{name}: only {size - left:,} of its {size:,} bytes could be "
                               "read")
        left -= len(part)
        yield part


def digest_of(parts: Iterable[bytes]) -> Digest:
    """The digest of the bytes `parts` make up, read once."""
    hasher, size = hashlib.sha256(), 0
    for part in parts:
        hasher.update(part)
        size += len(part)
    return Digest(size, hasher.hexdigest())


def write(parts: Iterable[bytes], raw: BinaryIO) -> Digest:
    """Compress `parts` into `raw` as an archive; the digest of what went in."""
    hasher, size = hashlib.sha256(), 0
    with compressor(raw) as gz:
        for part in parts:
            gz.write(part)
            hasher.update(part)
            size += len(part)
    return Digest(size, hasher.hexdigest())


def unpack(f: BinaryIO, into: BinaryIO | None = None) -> Digest:
    """Decompress the archive `f` from where it is (into `into`, if given); the digest of
    its bytes. OSError, EOFError or zlib.error for a file that is not a whole gzip archive."""
    hasher, size = hashlib.sha256(), 0
    with reader(f) as gz:
        while part := gz.read(CHUNK):
            hasher.update(part)
            size += len(part)
            if into is not None:
                into.write(part)
    return Digest(size, hasher.hexdigest())
