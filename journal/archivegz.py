"""Compressed archives (`.jsonl.gz`), written and read a chunk at a time.

An archive is as long as its session grew (gigabytes, for some): it is compressed, checked
and unpacked in chunks, never held whole. Every archive is compressed alike (level 1, no
name, no time: the same bytes in, the same archive out), by file rotation and by the
database's exports alike. A file is known for an archive's own by the `Digest` of the bytes
it unpacks to, which the database records when an archive moves out of it.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from .errors import JournalError

__all__ = ["CHUNK", "Digest", "chunks", "compressor", "digest_of", "unpack", "write"]

CHUNK = 1 << 20


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
    with gzip.GzipFile(fileobj=f, mode="rb") as gz:
        while part := gz.read(CHUNK):
            hasher.update(part)
            size += len(part)
            if into is not None:
                into.write(part)
    return Digest(size, hasher.hexdigest())
