"""Opening files safely: only regular files, never through a link (creating and replacing
them is `journal.publish`'s job; removing the temps a crash left is this module's).

Anyone who can write a sessions folder (a tool the agent runs, say) can plant a symbolic link,
a FIFO or a device under a name the store is about to use. So:

- A file is read or appended to only after `fstat` on the opened descriptor says it is a
  regular file; it is opened with `O_NONBLOCK` so a FIFO cannot hang the open.
- A side file the store appends to (the quarantine) is opened with `O_NOFOLLOW` and must have
  no other hard link.
- A file the store creates (temps, intents, archives) is published by `journal.publish`:
  created under a fresh random name and `flock`ed while it exists, so `remove_stale_temps`
  here can tell a temp a live process is writing from one a crash left behind.
- Directories the store creates are private (0700).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import stat
from typing import BinaryIO

from .errors import NoSpace, NotASession, UnsafeFile

log = logging.getLogger(__name__)

TEMP_SUFFIX = ".tmp"
COMPRESS_TAG = "compress"
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
REMOVE_TRIES = 5  # times remove_if_unheld locks a name that keeps leading to another file


def fsync_directory(path: str) -> None:
    """Make a directory's entries (a new or renamed file) durable."""
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def describe_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def open_regular(path: str, flags: int = os.O_RDONLY, *, dir_fd: int | None = None) -> int:
    """Open `path` (following links, as a session path may be one) only if it is a regular file.

    Raises OSError as `os.open` does, and NotASession for a FIFO, device, socket or directory
    (checked on the opened descriptor, so a swap after a check cannot slip one in). With
    `dir_fd`, `path` is a name in that folder and a link there is not followed.
    """
    if dir_fd is not None:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotASession(path, f"is {describe_kind(mode)}, not a session file; only "
                              "regular files are read or written")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, *, follow: bool = True) -> BinaryIO:
    """A buffered binary reader over `path` if it is a regular file (see `open_regular`);
    `follow=False`: not through a link (OSError, ELOOP)."""
    return os.fdopen(open_regular(path, os.O_RDONLY if follow else os.O_RDONLY | os.O_NOFOLLOW),
                     "rb")


def file_digest(path: str) -> tuple[int, str] | None:
    """The length and SHA-256 of the regular file `path` (never through a link); None for
    anything else there (a link, a folder, a FIFO) or nothing."""
    hasher, size = hashlib.sha256(), 0
    try:
        with read_regular(path, follow=False) as f:
            while part := f.read(1 << 20):
                hasher.update(part)
                size += len(part)
    except (OSError, NotASession):
        return None
    return size, hasher.hexdigest()


def read_small(path: str, limit: int = 1 << 20) -> bytes:
    """The first `limit` bytes of a small regular file (an intent, a lock's holder record)."""
    fd = open_regular(path)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def open_side_file(path: str, mode: int = 0o600) -> int:
    """Open (creating it if needed) a side file to append to, never through a link.

    Raises UnsafeFile if the name is a symbolic link, not a regular file, or a file with other
    hard links (writing it would change a file elsewhere).
    """
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFile(path, "is a symbolic link") from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(path, f"is {describe_kind(st.st_mode)}")
        if st.st_nlink != 1:
            raise UnsafeFile(path, f"has {st.st_nlink} hard links (it is also a file elsewhere)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes | memoryview, path: str) -> None:
    """Write every byte of `data` to `fd`; a full disk raises NoSpace naming `path`."""
    view = memoryview(data)
    total = len(view)
    # measured before writing: after a partial write the disk reads as full
    available = free_bytes(os.path.dirname(path))
    try:
        while view:
            written = os.write(fd, view)
            if written == 0:
                raise OSError(errno.ENOSPC, "short write")
            view = view[written:]
    except OSError as e:
        if e.errno in NO_SPACE_ERRNOS:
            raise NoSpace(path, total, available) from e
        raise


def free_bytes(directory: str) -> int | None:
    """Bytes an unprivileged writer may still use in `directory`'s file system."""
    try:
        st = os.statvfs(directory or ".")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def require_space(path: str, needed: int) -> None:
    """Refuse early (NoSpace) when `path`'s file system has less than `needed` bytes free."""
    available = free_bytes(os.path.dirname(path))
    if available is not None and available < needed:
        raise NoSpace(path, needed, available)


def open_folder(path: str, *, follow: bool) -> int:
    """A descriptor of the folder `path`, for work that must stay in that very folder (see
    `NewFile`'s `dir_fd`). With `follow=False` a symbolic link there is refused (UnsafeFile):
    a folder swapped for a link later changes nothing, since the descriptor stays."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        return os.open(path, flags)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFile(path, "is a symbolic link (or no folder), not the store's own "
                             "folder") from e
        raise


def make_private_dir(path: str, *, follow: bool = True) -> None:
    """Create `path` and any missing parents with mode 0700 (whatever the umask).

    An existing directory is left as it is. With `follow=False` an existing symbolic link at
    `path` is refused (UnsafeFile): the store would put files wherever it points.
    """
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700, follow_symlinks=False)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        if not follow:
            raise UnsafeFile(path, "is a symbolic link, not the store's own folder")
        st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFile(path, f"is {describe_kind(st.st_mode)}, not a folder")


def remove_stale_temps(directory: str, prefix: str = "", suffix: str = TEMP_SUFFIX) -> list[str]:
    """Remove temps (`.<prefix>*<suffix>` made by `NewFile`) that no live process holds.

    Only regular files are removed (a link of that name is left alone: `NewFile` never
    reuses a name), and only when their `flock` is free: a writer holds it from creation to
    publication. Returns the removed paths.
    """
    removed: list[str] = []
    start = "." + prefix
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(start) and name.endswith(suffix)):
            continue
        path = os.path.join(directory, name)
        if remove_if_unheld(path):
            removed.append(path)
    if removed:
        fsync_directory(directory)
        log.warning("removed %d temp file(s) a crash left behind: %s", len(removed),
                    ", ".join(removed))
    return removed


def remove_leftovers(session_path: str, archive_dir: str | None = None) -> list[str]:
    """Remove the temps crashes left beside a session (repair, backup, rotation, intent temps,
    all named `.<session name>.*.tmp`) and unheld compression temps in its archive folder.

    The caller holds the session's writer lock, which every writer of those temps holds too;
    compression runs outside it and is told apart by its `flock`.
    """
    directory, name = os.path.split(session_path)
    removed = remove_stale_temps(directory, name + ".")
    # versions before these temps had fresh names wrote them under fixed ones
    legacy = [session_path + ".bak.tmp"]
    if archive_dir is not None and os.path.isdir(archive_dir):
        removed += remove_stale_temps(archive_dir, suffix=f".{COMPRESS_TAG}{TEMP_SUFFIX}")
        legacy += [os.path.join(archive_dir, n) for n in _names(archive_dir)
                   if n.startswith(name) and n.endswith(".gz.tmp")]
    removed += [path for path in legacy if remove_if_unheld(path)]
    return removed


def _names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def remove_if_unheld(path: str) -> bool | None:
    """Unlink the regular file `path` unless a live process holds its `flock` (a temp being
    written, an archive being compressed: see `hold_unless_busy`). True: removed; False:
    held, left as it is; None: not removed for another reason (gone, not a regular file,
    cannot be opened).

    A name that leads to another file once locked (replaced meanwhile: a compression
    publishing under a reused name) is tried again: None never stands for a regular file
    the name led to when it was locked, which a caller may then unlink without asking its
    holder. (A file that cannot be opened, for its permissions say, is None: nobody could
    have opened it to hold it either, but for its owner.)"""
    for _ in range(REMOVE_TRIES):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if not os.path.samestat(os.lstat(path), st):
                continue
            os.unlink(path)
            return True
        except OSError:
            return None
        finally:
            os.close(fd)
    return False  # replaced each time it was locked: somebody is busy with it


def hold_unless_busy(fd: int, name: str, *, dir_fd: int | None = None) -> bool:
    """`flock` the open file `fd` for as long as it stays open, so `remove_if_unheld` leaves
    it alone; False if another process holds it, or if `name` (in `dir_fd`) no longer
    leads to it (removed or replaced between the open and the lock)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return os.path.samestat(os.lstat(name, dir_fd=dir_fd), os.fstat(fd))
    except (BlockingIOError, FileNotFoundError):
        return False


def remove_if_regular(path: str) -> bool:
    """Unlink `path` if it is a regular file (never a link's target); True if removed."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def file_mode(path: str) -> int:
    """The permission bits of `path` (a session's mode, to keep it on what replaces it)."""
    return stat.S_IMODE(os.stat(path).st_mode)
