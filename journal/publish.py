"""Atomic publication: the one place a file is written whole and then given its final name.

Every file the store makes (a rotation's successor, a repaired file, an intent, an archive
copy, a compressed archive, a new session's header, a backup's second name) is published here,
so each keeps the same guarantees:

- The bytes go to a temp created with `O_CREAT | O_EXCL | O_NOFOLLOW` under a fresh random name
  beside the final name (never through a planted link, never reusing a file), `flock`ed while
  it exists so a cleaner can tell a live writer's temp from a crash's (`files.remove_stale_temps`);
  a temp a cleaner removed in the instant between its creation and its flock is noticed and
  made again under another name.
- A full disk is measured before writing and reported as NoSpace naming the file.
- The temp is synced, renamed over its final name (a rename replaces a link, it never writes
  through it) or, where nothing may be replaced (archives), hard-linked to it, and the
  directory is synced: after `publish()` returns, the new name survives
  a crash. With `dir_fd` every step works in one folder descriptor, whatever its path comes
  to name meanwhile.
- On any failure before publication the temp is removed and the final name is untouched.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from types import TracebackType
from typing import BinaryIO

from .errors import NoSpace, UnsafeFile
from .files import (
    NO_SPACE_ERRNOS,
    TEMP_SUFFIX,
    free_bytes,
    fsync_directory,
    remove_if_regular,
    write_all,
)

__all__ = ["NewFile", "create_file", "link_as", "link_no_replace", "publish_bytes",
           "temp_path_for"]

# errnos of a file system that makes no hard links (FAT, some network and FUSE mounts)
NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK})


def temp_path_for(final: str, tag: str) -> str:
    """A fresh hidden name beside `final`: `.<name>.<random>.<tag>.tmp`."""
    directory, name = os.path.split(final)
    return os.path.join(directory, f".{name}.{secrets.token_hex(6)}.{tag}{TEMP_SUFFIX}")


class NewFile:
    """A file created under a fresh temp name and published under its final name.

    Use as a context manager: unless `publish()` was called, the temp is removed on exit
    (an error, a full disk). While open it is `flock`ed (see `remove_stale_temps`).

    Example:
        >>> with NewFile("dir/a.jsonl", "repair", mode=0o644) as new:  # doctest: +SKIP
        ...     new.write(data)
        ...     new.publish()
    """

    def __init__(self, final: str, tag: str, mode: int = 0o600, *,
                 name: str | None = None, dir_fd: int | None = None,
                 like: str | os.stat_result | None = None) -> None:
        """Create the temp beside `final`: `.<final>.<random>.<tag>.tmp`, or exactly `name`
        (a name nobody can guess in advance, recorded elsewhere, such as a rotation's temp
        in its intent); an existing file of that name is never reused (UnsafeFile).

        With `dir_fd` (an open descriptor of `final`'s folder, see `open_folder`) every step
        works in that folder itself, whatever its path comes to name meanwhile.

        With `like` (the file this one replaces or continues, or its `fstat`) the new file
        takes its permission bits instead of `mode`, and, when running as root, its owner and
        group: a repair or rotation never changes who may read a session.
        """
        original = os.stat(like) if isinstance(like, str) else like
        if original is not None:
            mode = stat.S_IMODE(original.st_mode)
        self.final = final
        self.published = False
        self.fd: int | None = None
        self.dir_fd = dir_fd
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        candidates = [name] if name is not None else [temp_path_for(final, tag)
                                                      for _ in range(16)]
        for candidate in candidates:
            self.path = candidate
            try:
                self.fd = os.open(self._in_folder(candidate), flags, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                continue
            if self._held():
                break
            self.fd = None  # a sweeper took it before the flock: take another name
        if self.fd is None:
            raise UnsafeFile(self.path, "already exists (it was not made by this operation)")
        try:
            if original is not None and os.geteuid() == 0:
                os.fchown(self.fd, original.st_uid, original.st_gid)
            os.fchmod(self.fd, mode & 0o777)
        except BaseException:
            self.discard()
            raise

    def _held(self) -> bool:
        """flock the temp just made; False (and closed) if its name no longer leads to it:
        between the create and the flock, `remove_stale_temps` saw it free and removed it."""
        fd = self._fd()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: by a sweeper removing it
            ours = os.path.samestat(os.lstat(self._in_folder(self.path), dir_fd=self.dir_fd),
                                    os.fstat(fd))
        except (BlockingIOError, FileNotFoundError):
            ours = False
        except BaseException:
            self.discard()
            raise
        if not ours:
            os.close(fd)
        return ours

    def write(self, data: bytes | memoryview) -> None:
        write_all(self._fd(), data, self.path)

    def stream(self) -> BinaryIO:
        """A buffered writer over the temp (closing it leaves the temp open)."""
        return open(self._fd(), "wb", closefd=False)  # noqa: SIM115 - the caller closes it

    def sync(self) -> None:
        fd = self._fd()
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno in NO_SPACE_ERRNOS:
                needed = os.fstat(fd).st_size
                raise NoSpace(self.path, needed, free_bytes(os.path.dirname(self.path))) from e
            raise

    def publish(self, final: str | None = None, *, replace: bool = True) -> str:
        """Sync, then rename over the final name (or `final`) and sync the directory. With
        `replace=False` an existing final name is left as it is: FileExistsError (a hard
        link gives the name, then the temp's name is dropped; a file system without hard
        links falls back to a rename after a look)."""
        target = final or self.final
        self.sync()
        here, there = self._in_folder(self.path), self._in_folder(target)
        if replace or not link_no_replace(here, there, src_dir_fd=self.dir_fd,
                                          dst_dir_fd=self.dir_fd):
            os.rename(here, there, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        else:
            os.unlink(here, dir_fd=self.dir_fd)
        self.published = True
        if self.dir_fd is None:
            fsync_directory(os.path.dirname(target))
        else:
            os.fsync(self.dir_fd)
        self.close()
        return target

    def _in_folder(self, path: str) -> str:
        """`path` as given, or its name in the folder when working through `dir_fd`."""
        return path if self.dir_fd is None else os.path.basename(path)

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def discard(self) -> None:
        """Remove the temp (if it is still ours) and close it."""
        if not self.published:
            here = self._in_folder(self.path)
            try:
                if self.fd is not None and os.path.samestat(
                        os.lstat(here, dir_fd=self.dir_fd), os.fstat(self.fd)):
                    os.unlink(here, dir_fd=self.dir_fd)
            except FileNotFoundError:
                pass
        self.close()

    def _fd(self) -> int:
        if self.fd is None:
            raise ValueError(f"{self.path}: already closed")
        return self.fd

    def __enter__(self) -> NewFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.discard()


def create_file(path: str, data: bytes, mode: int = 0o600) -> None:
    """Create `path` (which must not exist) holding `data`, synced, or leave nothing behind.

    Raises FileExistsError if `path` exists (a link there included), NoSpace on a full disk.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, mode & 0o777)
        write_all(fd, data, path)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    fsync_directory(os.path.dirname(path))


def publish_bytes(final: str, data: bytes, tag: str, mode: int = 0o600, *,
                  name: str | None = None) -> str:
    """Publish `data` under `final` atomically (see the module docstring); return `final`."""
    with NewFile(final, tag, mode, name=name) as new:
        new.write(data)
        return new.publish()


def link_no_replace(source: str, target: str, *, src_dir_fd: int | None = None,
                    dst_dir_fd: int | None = None) -> bool:
    """Give `source` the name `target` as well, never over an existing file: True once
    linked; FileExistsError if `target` exists; False when the file system makes no hard
    links (the caller renames instead, having looked that `target` is free)."""
    try:
        os.link(source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
                follow_symlinks=False)
    except OSError as e:
        if e.errno not in NO_HARD_LINKS:
            raise
        if os.path.lexists(target) if dst_dir_fd is None else _exists_in(target, dst_dir_fd):
            raise FileExistsError(errno.EEXIST, "File exists", target) from None
        return False
    return True


def _exists_in(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def link_as(existing: str, alias: str) -> None:
    """Make `alias` a second name of `existing` (no copy, so no space needed), atomically
    replacing whatever `alias` named; a link planted at `alias` is replaced, not followed."""
    link = temp_path_for(alias, "link")
    os.link(existing, link)
    try:
        os.replace(link, alias)
    except BaseException:
        remove_if_regular(link)
        raise
    # renaming a name over another name of the same file does nothing and leaves both (POSIX):
    # so when `alias` already was `existing` (a crash after an earlier link), drop the temp
    remove_if_regular(link)
