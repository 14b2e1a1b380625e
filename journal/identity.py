"""Which file a path names: a session is identified by its real path, not by the name given.

Every entry point (open, create, rotate, repair, view, lineage, tail) resolves symbolic links
once, here, and works on the real path from then on: the writer lock, the side files and the
rotated successor all sit beside the real file, so two names of one file share one lock and a
link in the sessions folder keeps pointing at the live file after repair or rotation.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator


def real_path(path: str | os.PathLike[str]) -> str:
    """The absolute path with every symbolic link resolved (the file need not exist yet)."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def file_key(path: str) -> tuple[int, int] | None:
    """(device, inode) of the regular file at `path` itself (a link is not followed), or None
    if nothing regular is there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def first_names(paths: Iterable[str]) -> Iterator[str]:
    """`paths`, each regular file once: a name of a file given already under an earlier
    name (a hard link, or a symbolic link to it) is left out. A name of nothing regular
    (missing, a FIFO) passes as it is, for its reader to say what is there."""
    seen: set[tuple[int, int]] = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            yield path
            continue
        if stat.S_ISREG(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
        yield path


def same_file(a: str, b: str) -> bool:
    """Whether two paths name the same existing file (after following links)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def inside(path: str, folder: str) -> bool:
    """Whether `path` lies in `folder` or below it, comparing real paths."""
    real, root = real_path(path), real_path(folder)
    return os.path.commonpath([real, root]) == root


def plain_name(value: object) -> str | None:
    """`value` if it is a bare file name (no folder part, not `.` or `..`), else None."""
    if not isinstance(value, str) or not value or value in (".", ".."):
        return None
    if os.sep in value or (os.altsep and os.altsep in value) or "\0" in value:
        return None
    return value


def other_names(path: str) -> int:
    """How many names the session file at `path` has besides its own and its `.bak` (which a
    repair makes a second name of the file until the swap, or for good if it crashed)."""
    try:
        links = os.stat(path).st_nlink
    except OSError:
        return 0
    if links > 1 and same_file(path + ".bak", path):
        links -= 1
    return links - 1
