"""Rotation: continue a long session in a short successor file, provably without loss.

After a compaction, everything before the kept boundary only matters to the archive. Rotation
builds a successor from the active branch (current settings, the entries from the compaction's
first kept entry on, ids preserved), proves it projects to the same context, publishes it,
seals the old file with a `journal.successor` marker and moves it into the archive, all under
the old file's writer lock. Compression and retention happen after the lock is released: the
sealed file no longer changes. What keeps them apart from another process's rotation of the
same lineage is the archive's own `flock`: a compression holds it on the plain archive until
the compressed one replaces it, and retention (or a second compression) leaves a held
archive alone.

Every step is recorded in an intent file first, so a crash between two steps is finished or
undone by the next writer (see `lineage.recover_rotation`).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from . import codec, model
from .archivegz import (
    compressed_name,
    compressor,
    is_compressed,
    refuse_writing,
    uncompressed_name,
)
from .boundary import boundary
from .context import Context, branch_context, build_context
from .errors import JournalError, NoSpace, NotASession, UnsafeFile, UnsupportedVersion
from .files import (
    COMPRESS_TAG,
    describe_kind,
    free_bytes,
    hold_unless_busy,
    open_folder,
    open_regular,
    remove_if_regular,
    remove_if_unheld,
    remove_leftovers,
    remove_stale_temps,
)
from .header import read_header
from .identity import file_key, real_path
from .intent import intent_record, temp_name
from .lineage import (
    ARCHIVE_DIR,
    ensure_archive_folder,
    intent_path,
    is_default_archive,
    lineage,
    move_into_archive,
    pending_rotations,
    recover_pending,
    release_after_move,
    remove_intent,
    resolve_live,
    seal_of,
    trace,
    write_intent,
)
from .live import check_single_name, lock_live
from .lock import DEFAULT_LOCK_TIMEOUT, WriterLock
from .model import Entry
from .progress import Meter, MeteredReader, Progress
from .publish import NewFile
from .quarantine import cut_torn_tail
from .seal import make_seal, write_seal
from .snapshot import find_last_of_type, last_newline_end, load, refuse_foreign, resume
from .storage import as_storage
from .tree import Tree

log = logging.getLogger(__name__)

# Test seam: called with each step's name as it completes, so tests can crash a rotation there.
step_hook: Callable[[str], None] | None = None
MIN_GAIN_BYTES = 1024
ROTATE_TAG = "rotate"
PENDING = "an interrupted rotation is pending; the next rotate or open will finish it"
"""Why a dry run does not rotate a session an interrupted rotation concerns."""
STEPS = ("intent", "temp", "verified", "published", "sealed", "archived", "done")


class RotationAborted(JournalError):
    """The successor did not project to the old file's context; nothing was changed."""


class RotationRefused(JournalError):
    """A rotation's destination cannot take what rotation would write (checked before
    anything is written, by `--dry-run` too); nothing was changed."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: cannot rotate: {reason}; nothing was changed")


@dataclass
class RotationResult:
    """What a rotation did (or, with `rotated=False`, why it did nothing)."""

    rotated: bool
    path: str
    reason: str = ""
    successor: str | None = None
    successor_id: str | None = None
    archive: str | None = None
    """The archived old file as it is named when the rotation returns: compressed, plain
    (`--no-compress`, a failed compression, or `compressing_elsewhere`), or None where it
    is not in the archive (a warning says why)."""
    compressing_elsewhere: bool = False
    """Another process (a rotation of the same lineage retrying it) was compressing the
    archive: `archive` names the plain file, which that process replaces with `.gz`."""
    entries_copied: int = 0
    old_size: int = 0
    successor_size: int = 0
    lock_held_ms: float = 0.0
    total_ms: float = 0.0
    removed_archives: list[str] = field(default_factory=list)
    moved_out: dict[str, str] = field(default_factory=dict)
    """Database archives whose lines this rotation moved out: {session URL: .jsonl.gz}."""
    exported: dict[str, str] = field(default_factory=dict)
    """Database archives this rotation exported to its archive folder (the one it sealed,
    and those of the lineage an earlier one left unexported): {session URL: .jsonl.gz}."""
    removed_temps: list[str] = field(default_factory=list)
    """Temps an export stopped by a crash left in the archive folder, removed."""
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    """Interrupted rotations of the lineage finished (or undone) before this one looked at
    it, each `PATH: an interrupted rotation was ...` (`lineage.recover_pending`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rotated": self.rotated, "path": self.path, "reason": self.reason,
            "successor": self.successor, "successorId": self.successor_id,
            "archive": self.archive, "compressingElsewhere": self.compressing_elsewhere,
            "entriesCopied": self.entries_copied,
            "oldSize": self.old_size, "successorSize": self.successor_size,
            "lockHeldMs": round(self.lock_held_ms, 2), "totalMs": round(self.total_ms, 2),
            "removedArchives": self.removed_archives, "movedOut": self.moved_out,
            "exported": self.exported, "removedTemps": self.removed_temps,
            "dryRun": self.dry_run,
            "warnings": self.warnings, "recovered": self.recovered,
        }


@dataclass(frozen=True)
class RotationPolicy:
    """When a writer rotates: after a compaction, once the file has at least `max_bytes`.

    With `max_bytes=None` every compaction rotates. With `after_compaction=False` nothing
    rotates automatically; `Session.maybe_rotate()` still applies `max_bytes` when called.
    """

    max_bytes: int | None = None
    after_compaction: bool = True
    archive_dir: str | None = None
    keep: int | None = None
    compress: bool = True

    def __post_init__(self) -> None:
        check_keep(self.keep)

    def wants(self, size: int) -> bool:
        return self.max_bytes is None or size >= self.max_bytes


def _step(name: str) -> None:
    if step_hook is not None:
        step_hook(name)


@dataclass
class SuccessorPlan:
    """What a successor holds (its header and entries) and the context it must project to."""

    header: Entry
    entries: list[Entry]
    old_context: Context
    leaf_id: str | None

    def projects_alike(self, entries: list[Entry]) -> bool:
        """Whether `entries` (the successor as read back) give the old context, intact."""
        tree = Tree(entries)
        tree.finish_forward_check()
        return not tree.issues and build_context(tree, tree.leaf_id).same_as(self.old_context)


def plan_successor(tree: Tree, header: Entry, archive: str, info: Entry | None
                   ) -> SuccessorPlan | str:
    """The successor's entries, or the reason there is nothing to rotate: the one place
    that says what a successor holds, for every backend. `archive` is what its header's
    `parentSession` names; `info` the latest `session_info` entry, carried over."""
    if tree.leaf is None:
        return "the session has no entries"
    path_ix = tree.path(tree.leaf)
    entries = tree.entries
    branch = [entries[i] for i in path_ix]
    compaction_at, kept_start = boundary(branch)
    if compaction_at is None:
        return "no compaction on the active branch"
    copied = branch[kept_start:]
    copied_ids = {e["id"] for e in copied}
    settings = _settings_before(entries, path_ix[:kept_start], copied, tree)
    if info is not None and info["id"] not in copied_ids:
        settings.append(info)
    labels = _labels_for(entries[path_ix[kept_start]:], copied_ids)
    chain = [*settings, *copied, *labels]
    linked: list[Entry] = []
    parent: str | None = None
    for entry in chain:
        linked.append({**entry, "parentId": parent} if entry.get("parentId") != parent else entry)
        parent = entry["id"]
    new_header = model.make_header(str(header.get("cwd", "")), parent_session=archive)
    old_context = branch_context(branch)
    return SuccessorPlan(new_header, linked, old_context, linked[-1]["id"] if linked else None)


def _last_session_info(path: str, searched_to: int, found: Entry | None
                       ) -> tuple[int, Entry | None]:
    """The latest `session_info` entry, searching only what was not searched before.

    The first search runs before the lock is taken (it may read the whole file); under the
    lock only the bytes appended since are searched, which keeps the lock short.
    """
    with as_storage(path).open_reader() as reader:
        end = last_newline_end(reader.stream, reader.size)
        newer = find_last_of_type(reader.stream, end, "session_info", start_at=searched_to)
    return end, newer or found


def _early_info(path: str) -> tuple[int, Entry | None] | None:
    """The first, unlocked search for `session_info`; None if the file moved on meanwhile
    (the search then happens under the lock, on the file that continues it)."""
    try:
        return _last_session_info(path, 0, None)
    except NotASession:
        if os.path.exists(path):
            raise
        return None


def _settings_before(entries: list[Entry], prefix: list[int], copied: list[Entry],
                     tree: Tree) -> list[Entry]:
    """Latest model and thinking level on the branch before the kept part, as entries; a
    setting the copied entries set again (as `append_compaction` writes them after the
    compaction) is not carried, so the successor does not depend on how much of the session
    before the kept part the planner was given (a whole tree, or a resume's tail)."""
    thinking: Entry | None = None
    model_source: Entry | None = None
    for entry in copied:
        kind = entry.get("type")
        if kind == "thinking_level_change":
            thinking = entry
        elif kind == "model_change" or (
                kind == "message" and entry["message"].get("role") == "assistant"):
            model_source = entry
    thinking_set, model_set = thinking is not None, model_source is not None
    for index in reversed(prefix):
        entry = entries[index]
        kind = entry.get("type")
        if thinking is None and kind == "thinking_level_change":
            thinking = entry
        if model_source is None and (kind == "model_change" or (
                kind == "message" and entry["message"].get("role") == "assistant")):
            model_source = entry
        if thinking is not None and model_source is not None:
            break
    out: list[Entry] = []
    if model_set:
        pass  # the copied part says which model: nothing to carry
    elif model_source is not None and model_source.get("type") == "message":
        message = model_source["message"]
        if "provider" in message and "model" in message:
            out.append(model.model_change_entry(model.new_id(tree.ids), None,
                                                message["provider"], message["model"]))
    elif model_source is not None:
        out.append(model_source)
    if thinking is not None and not thinking_set:
        out.append(thinking)
    return out


def _labels_for(entries: list[Entry], kept: set[str]) -> list[Entry]:
    """The latest label entry of each kept entry, where it is not already copied."""
    latest: dict[str, Entry] = {}
    for entry in entries:
        target = entry.get("targetId")
        if entry.get("type") == "label" and isinstance(target, str) and target in kept:
            latest[target] = entry
    return [e for e in latest.values() if e["id"] not in kept]


def _archive_path(path: str, archive_dir: str | None, compress: bool) -> str:
    """A free name in the archive folder (a link planted there counts as taken)."""
    directory = archive_dir or os.path.join(os.path.dirname(path), ARCHIVE_DIR)
    name = os.path.basename(path)
    candidate = os.path.join(directory, name)
    n = 1
    while os.path.lexists(candidate) or os.path.lexists(compressed_name(candidate)):
        n += 1
        candidate = os.path.join(directory, f"{name}.{n}")
    return compressed_name(candidate) if compress else candidate


def too_little_gained(successor_size: int, old_size: int) -> str | None:
    """Why a successor of `successor_size` bytes is not worth rotating a session of
    `old_size` into (None: it is): it must be at least MIN_GAIN_BYTES shorter."""
    if successor_size + MIN_GAIN_BYTES <= old_size:
        return None
    if successor_size >= old_size:
        return "the successor would be no shorter: nothing lies before the kept entries"
    return (f"the successor would be only {old_size - successor_size:,} bytes shorter (a "
            f"rotation must save {MIN_GAIN_BYTES:,} at least): too little lies before the "
            "kept entries")


def check_destination(path: str, archive_dir: str | None, compress: bool, *,
                      successor: str | None = None, size: int = 0) -> str:
    """Check every place a rotation of `path` writes, before anything is written; return the
    archive's path. Raises `RotationRefused` naming what is wrong.

    One function for the rotation and its `--dry-run`, so a dry run that says "would rotate"
    means the rotation can: the archive folder exists or can be made, is a folder (a file, a
    FIFO or a dangling link there is refused), and can be written; the session's folder can
    be written (successor, intent); the successor, its temp and the archive names are free;
    an archive on another file system has room for a copy of the file.
    """
    archive = _archive_path(path, archive_dir, compress)
    folder, directory = os.path.dirname(path), os.path.dirname(archive)
    _check_folder(path, directory, is_default_archive(path, directory))
    _check_writable(path, folder, f"the session's folder {folder}")
    # the archive's name was just picked free (and is picked again under the lock): looking a
    # second time would only race a writer that archives this file before our lock is taken
    names: list[str] = []
    if successor is not None:  # under the lock, once an earlier intent was dealt with
        names += [intent_path(path), successor,
                  os.path.join(folder, temp_name(os.path.basename(successor)))]
    for name in names:
        if os.path.lexists(name):
            raise RotationRefused(path, f"{name} already exists")
    if os.path.isdir(directory) and os.stat(directory).st_dev != os.stat(folder).st_dev:
        available = free_bytes(directory)
        if available is not None and available < size:
            raise RotationRefused(path, f"the archive folder {directory} is on another file "
                                  f"system with {available:,} bytes free; the file takes "
                                  f"{size:,}")
    return archive


def check_archive_folder(path: str, directory: str) -> None:
    """Refuse (`RotationRefused`) an archive folder chosen for `path` that cannot hold its
    archive, before anything is changed: what `check_destination` checks of it, for a
    backend whose archive is written there after the rotation (a database's export)."""
    _check_folder(path, directory, False)


def _check_folder(path: str, directory: str, default: bool) -> None:
    """The archive folder: an existing folder (through a link only if the caller chose it),
    or a name that can be made in a folder that can be written."""
    try:
        st: os.stat_result | None = os.lstat(directory)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise RotationRefused(path, f"the archive folder {directory}: {e.strerror or e}"
                              ) from e
    if st is not None and stat.S_ISLNK(st.st_mode):
        if default:  # planted: the store's own folder is never a link
            raise UnsafeFile(directory, "is a symbolic link, not the store's own folder; "
                             "nothing was changed")
        try:
            st = os.stat(directory)
        except OSError as e:
            raise RotationRefused(path, f"the archive folder {directory} is a symbolic link to "
                                  f"nothing usable ({e.strerror or e})") from e
    if st is None:
        parent = os.path.dirname(os.path.abspath(directory))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise RotationRefused(path, f"the archive folder {directory} cannot be made: "
                                  f"{parent} is not a folder")
        _check_writable(path, parent, f"{parent} (where the archive folder {directory} would "
                        "be made)")
        return
    if not stat.S_ISDIR(st.st_mode):
        raise RotationRefused(path, f"the archive folder {directory} is "
                              f"{describe_kind(st.st_mode)}, not a folder")
    _check_writable(path, directory, f"the archive folder {directory}")


# the name of the file `_check_writable` makes and removes (`.<name>.<random>.<tag>.tmp`)
WRITE_CHECK, WRITE_CHECK_TAG = "journal-write-check", "check"


def _check_writable(path: str, directory: str, label: str) -> None:
    """Refuse (`RotationRefused`) a folder a rotation is to write into that cannot be
    written: a file is made there and removed at once. Permission bits (`os.access`) do not
    tell: root passes them for /proc, where nothing can be made, and a rotation of a
    database session, whose archive is written only after it committed, would rotate and
    then fail to write it."""
    try:
        readonly = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        readonly = False
    if readonly:
        raise RotationRefused(path, f"{label} cannot be written (read-only file system)")
    try:
        with NewFile(os.path.join(directory, WRITE_CHECK), WRITE_CHECK_TAG):
            pass  # removed on leaving: never published
    except OSError as e:
        why = ("permission denied" if e.errno in (errno.EACCES, errno.EPERM)
               else "read-only file system" if e.errno == errno.EROFS
               else f"no file can be made there: {e.strerror or e}")
        raise RotationRefused(path, f"{label} cannot be written ({why})") from e


@dataclass
class RotationSource:
    """What rotation needs of the file it rotates, given by whoever holds its writer lock.

    `seal` appends the `journal.successor` entry to the old file durably (an open writer
    commits it through its own log; for a file not open here, `seal.write_seal`).
    `keep_successor_lock`: the successor's writer lock is taken before it is published and
    handed over in `Successor.lock`, so an open writer carries on there without a gap.
    `abandon` is called if a step fails after the successor was published: the successor is
    authoritative from then on, so a writer must stop writing to the old file.
    """

    path: str
    tree: Tree
    header: Entry
    session_info: Entry | None
    seal: Callable[[Entry], None]
    keep_successor_lock: bool = False
    abandon: Callable[[], None] | None = None


@dataclass
class Successor:
    """The file a rotation published: where an open writer carries on."""

    path: str
    lock: WriterLock | None
    header: Entry
    entries: list[Entry]


@dataclass
class Rotation:
    """A rotation done under the old file's lock; `finish_rotation` completes it after."""

    result: RotationResult
    successor: Successor | None = None
    compress: tuple[str, str] | None = None
    started: float = field(default_factory=time.perf_counter)


def rotate(
    path: str | os.PathLike[str],
    *,
    archive_dir: str | None = None,
    keep: int | None = None,
    compress: bool = True,
    dry_run: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Progress | None = None,
) -> RotationResult:
    """Rotate the session file at `path` (not open for writing here) into a successor file.

    The writer lock is taken for the duration (an open `Session` rotates with
    `Session.rotate()` instead). The path is resolved to its real file and then to the live
    file of its lineage; if that file is rotated by another writer while this waits for the
    lock, its successor is rotated instead. Returns `rotated=False` with a reason when there
    is no compaction to rotate after. A dry run only reads, as every reader does: it takes no
    lock (and creates no lock file). `progress` is called with (done, total) bytes as the
    archive is compressed (the long part of rotating a large file; see `journal.progress`).
    `keep` deletes the lineage's archives beyond the newest `keep` (`removed_archives`), also
    when nothing rotates, as an archive left uncompressed is compressed then: a rotation
    stopped after its commit (killed while it compressed, say) is finished by running it
    again.

    Example:
        >>> result = rotate("sessions/a.jsonl")  # doctest: +SKIP
        >>> result.successor, result.lock_held_ms
    """
    check_keep(keep)
    started = time.perf_counter()
    path = real_path(os.fspath(path))
    refuse_foreign(path)  # a Claude Code transcript is never rotated
    if os.path.isfile(path):
        check_destination(path, archive_dir, compress)  # before anything is changed
    recovered = [] if dry_run else recover_pending(path, lock_timeout)
    path, _ = resolve_live(path)
    refuse_writing(path)  # a compressed file no live session continues
    searched = file_key(path)
    early_info: tuple[int, Entry | None] | None = _early_info(path)
    lock: WriterLock | None = None
    if not dry_run:  # a dry run changes nothing: it takes no lock and leaves no lock file
        # if the holder rotates it while we wait, the lock is taken on its successor instead
        locked, lock, _ = lock_live(path, lock_timeout)
        if locked != path or file_key(locked) != searched:
            path, early_info = locked, None  # another file now: search it under the lock
    locked_at = time.perf_counter()
    try:
        if not dry_run:
            remove_leftovers(path, os.path.join(os.path.dirname(path), ARCHIVE_DIR))
            check_single_name(path)
            cut_torn_tail(path)
        if dry_run and pending_rotations(path):
            rotation = Rotation(RotationResult(False, path, PENDING, dry_run=True))
        else:
            rotation = rotate_held(_file_source(path, early_info), archive_dir=archive_dir,
                                   compress=compress, dry_run=dry_run)
    finally:
        if lock is not None:
            release_after_move(lock, path)
    rotation.started = started
    rotation.result.recovered = recovered
    rotation.result.lock_held_ms = (time.perf_counter() - locked_at) * 1000
    return finish_rotation(rotation, keep=keep, progress=progress)


def _file_source(path: str, early_info: tuple[int, Entry | None] | None) -> RotationSource:
    """A locked file read from disk, sealed by appending to it."""
    snap = resume(as_storage(path))
    if snap.version != model.CURRENT_VERSION:
        raise UnsupportedVersion(path, snap.version, "only version 3 files rotate; "
                                 f"run 'journal repair --migrate {path}' first")
    searched_to, earlier = early_info or (0, None)
    info = _last_session_info(path, searched_to, earlier)[1]
    return RotationSource(path, Tree(snap.entries, complete=snap.complete), snap.header or {},
                          info, partial(write_seal, path))


def finish_rotation(rotation: Rotation, *, keep: int | None = None,
                    progress: Progress | None = None) -> RotationResult:
    """What follows a rotation once the old file's lock is released: compress the archive
    (it no longer changes), retry an earlier failed compression, apply retention. The last
    two also when nothing rotated: a rotation stopped after its commit (a SIGKILL) left them
    undone, and running it again finishes them (a dry run changes nothing)."""
    result = rotation.result
    if rotation.compress is not None:
        _compress_or_warn(*rotation.compress, result, progress)
    live = result.successor if result.rotated and result.successor else result.path
    if not result.dry_run and not result.warnings:
        _retry_compression(live)
        if result.compressing_elsewhere and rotation.compress is not None:
            stored, final = rotation.compress  # the retry may have compressed it itself
            if not os.path.lexists(stored) and os.path.lexists(final):
                result.archive, result.compressing_elsewhere = final, False
    if keep is not None and not result.dry_run:
        busy: list[str] = []
        result.removed_archives = apply_retention(live, keep, busy=busy)
        result.warnings += [f"{path}: kept for now: another process is compressing it; "
                            "running the same command again removes it" for path in busy]
    result.total_ms = (time.perf_counter() - rotation.started) * 1000
    return result


def rotate_held(source: RotationSource, *, archive_dir: str | None = None,
                compress: bool = True, dry_run: bool = False) -> Rotation:
    """Rotate `source` (its writer lock held by the caller): plan the successor, prove it
    projects to the same context, publish it, seal and archive the old file. Returns the
    result and, when it rotated, the successor to carry on in."""
    path, tree = source.path, source.tree
    old_size = os.path.getsize(path)
    archive = check_destination(path, archive_dir, compress, size=old_size)
    stored_archive = uncompressed_name(archive)
    build = plan_successor(tree, source.header, os.path.relpath(archive, os.path.dirname(path)),
                  source.session_info)
    if isinstance(build, str):
        return Rotation(RotationResult(False, path, build, old_size=old_size,
                                       dry_run=dry_run))
    final = os.path.join(os.path.dirname(path),
                         model.session_file_name(build.header["timestamp"], build.header["id"]))
    data = codec.encode(build.header) + codec.encode_many(build.entries)
    reason = too_little_gained(len(data), old_size)
    if reason is not None:
        return Rotation(RotationResult(False, path, reason, old_size=old_size,
                                       dry_run=dry_run))
    check_destination(path, archive_dir, compress, successor=final, size=old_size)
    result = RotationResult(True, path, successor=final, successor_id=build.header["id"],
                            archive=archive, entries_copied=len(build.entries),
                            old_size=old_size, successor_size=len(data), dry_run=dry_run)
    if dry_run:
        return Rotation(result)
    ensure_archive_folder(path, os.path.dirname(archive))
    temp = os.path.join(os.path.dirname(path), temp_name(os.path.basename(final)))
    write_intent(path, intent_record(path, final, stored_archive, build.header["id"]))
    new: NewFile | None = None
    try:
        _step("intent")
        # the successor's name is new and unguessable: nothing can be planted there
        new = NewFile(final, ROTATE_TAG, name=temp, like=path)  # its mode and owner
        _write_synced(new, data)
        _step("temp")
        _verify(temp, build)
        _step("verified")
    except Exception:
        # nothing was published: put things back as they were (a crash leaves this to
        # recover_rotation, which does the same)
        if new is not None:
            new.discard()
        remove_intent(path)
        raise
    except BaseException:
        if new is not None:
            new.close()
        raise
    new_lock: WriterLock | None = None
    archived = False
    try:
        if source.keep_successor_lock:
            new_lock = WriterLock(final, 0)
            new_lock.acquire()
        new.publish(final)
        _step("published")
        source.seal(make_seal(tree.ids, tree.leaf_id, final, build.header["id"],
                              stored_archive, build.leaf_id))
        _step("sealed")
        archived = _archive_or_warn(path, stored_archive, result)
        _step("archived")
        remove_intent(path)
        _step("done")
    except BaseException as e:
        if new_lock is not None:
            new_lock.release()
        if not new.published and isinstance(e, Exception):
            # not published (the rename or the successor's lock failed): roll back, the old
            # file stays authoritative and writable
            new.discard()
            remove_intent(path)
            raise
        new.close()
        if new.published and source.abandon is not None:
            # The successor is authoritative now; writing on into the old file would lose
            # entries. The next open finishes the rotation (see recover_rotation).
            source.abandon()
        raise
    log.info("%s: rotated into %s; archived as %s", path, final, result.archive)
    return Rotation(result, Successor(final, new_lock, build.header, build.entries),
                    (stored_archive, archive) if compress and archived else None)


def _archive_or_warn(path: str, stored: str, result: RotationResult) -> bool:
    """Move the sealed old file into the archive. The rotation is complete once the file is
    sealed (readers and writers follow the seal), so a failed move is a warning: the sealed
    file stays where it is, lineage finds it there, and nothing is left half done."""
    try:
        move_into_archive(path, stored)
    except (OSError, JournalError) as e:
        reason = str(e) if isinstance(e, JournalError) else f"{stored}: {e.strerror or e}"
        result.warnings.append(f"moving the old file into the archive failed ({reason}); it "
                               f"stays, sealed, at {path}")
        result.archive = None
        log.warning("%s: %s", path, result.warnings[-1])
        return False
    return True


def _write_synced(new: NewFile, data: bytes) -> None:
    """Write the successor's temp whole and sync it (NoSpace on a full disk, naming it)."""
    new.write(data)
    new.sync()


def _verify(temp: str, build: SuccessorPlan) -> None:
    snap = load(temp)
    if snap.diagnostics or not build.projects_alike(snap.entries):
        os.unlink(temp)
        raise RotationAborted(
            f"{temp}: the successor would not give the model the same context "
            "(nothing was changed; please report this with the session file)"
        )


def _compress(stored: str, final: str, progress: Progress | None = None) -> bool:
    """gzip the sealed archive (outside the lock: it no longer changes); False if another
    process is compressing it or it was removed meanwhile (nothing done).

    The plain archive is `flock`ed from its opening until the compressed copy replaced it:
    another rotation of the lineage (its retention, its retry of a compression) leaves it
    alone meanwhile, instead of removing it under us or compressing it twice.

    The compressed copy is written under a fresh temp name (never through a planted link),
    keeps the archive's permissions and gets the name `final` only once it is whole and
    synced, never over a file of that name (an archive folder may be shared); on failure the
    temp is removed and the uncompressed archive stays.
    """
    directory = os.path.dirname(final)
    # the default archive folder is worked in through one descriptor, opened refusing a
    # link: swapping it for a link meanwhile sends nothing out of the sessions folder
    folder = open_folder(directory, follow=os.path.basename(directory) != ARCHIVE_DIR)
    try:
        try:
            src = os.fdopen(open_regular(os.path.basename(stored), dir_fd=folder), "rb")
        except FileNotFoundError:
            return False
        if not hold_unless_busy(src.fileno(), os.path.basename(stored), dir_fd=folder):
            src.close()
            return False
        with src, NewFile(final, COMPRESS_TAG, like=os.fstat(src.fileno()),
                          dir_fd=folder) as new:
            try:
                with new.stream() as raw, compressor(raw) as gz:
                    meter = Meter(progress, os.fstat(src.fileno()).st_size)
                    shutil.copyfileobj(MeteredReader(src, meter), gz, 1 << 20)
                    meter.finish()
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    size = os.fstat(src.fileno()).st_size
                    raise NoSpace(new.path, size, free_bytes(directory)) from e
                raise
            new.publish(replace=False)  # a shared archive folder: never over another's
            try:
                os.unlink(os.path.basename(stored), dir_fd=folder)
            except FileNotFoundError:
                return True
        os.fsync(folder)
    finally:
        os.close(folder)
    return True


def _retry_compression(live: str) -> None:
    try:
        finish_compression(live)
    except (OSError, JournalError) as e:
        log.warning("%s: compressing an earlier archive failed again: %s", live, e)


def _compress_or_warn(stored: str, final: str, result: RotationResult,
                      progress: Progress | None = None) -> None:
    """Compression is not part of the rotation: it already succeeded. A failure is reported
    as a warning; the next rotation of the lineage compresses the archive (see
    `finish_compression`)."""
    try:
        if _compress(stored, final, progress):
            return
    except (OSError, JournalError) as e:
        reason = str(e) if isinstance(e, JournalError) else f"{stored}: {e.strerror or e}"
        result.warnings.append(f"compressing the archive failed ({reason}); it stays "
                               f"uncompressed at {stored} and the next rotation retries")
        result.archive = stored
        log.info("%s", result.warnings[-1])
        return
    _name_archive_left(stored, final, result)


def _name_archive_left(stored: str, final: str, result: RotationResult) -> None:
    """Name in `result` the archive whose compression was left to another process (it held
    the archive's `flock`) or made needless (it removed the archive), as it is now."""
    # the plain file first: a compression publishes the whole `.gz` before removing it, so
    # a plain file gone and no `.gz` means the archive was removed, not compressed
    plain = os.path.lexists(stored)
    if os.path.lexists(final):
        result.archive = final
    elif plain:
        result.archive, result.compressing_elsewhere = stored, True
        log.info("%s: left for another process to compress", stored)
    else:
        result.archive = None
        result.warnings.append(f"the archive {stored} was removed by another process (its "
                               "retention, or a prune) before it could be compressed")
        log.info("%s", result.warnings[-1])


def finish_compression(live: str) -> list[str]:
    """Compress archives of `live`'s lineage that a failed or killed compression left plain.

    A successor's header names its archived parent with `.gz` when rotation meant to compress
    it; a plain file there means compression did not finish. Returns the archives compressed.
    """
    done: list[str] = []
    chain = trace(live).files  # a damaged archive stops it: those before it wait
    live_path = chain[-1]
    for older, newer in zip(chain, chain[1:], strict=False):
        header = read_header(newer)
        parent = header.get("parentSession") if header else None
        if not (isinstance(parent, str) and is_compressed(parent)) or is_compressed(older):
            continue
        # relative to the sessions' folder, where every file of the lineage was live
        named = os.path.normpath(os.path.join(os.path.dirname(live_path), parent))
        if real_path(os.path.dirname(named)) != os.path.dirname(older):
            continue  # never moved into the archive (the move failed): it stays as it is
        final = compressed_name(older)
        directory, name = os.path.split(final)
        remove_stale_temps(directory, name + ".", suffix=f".{COMPRESS_TAG}.tmp")
        if _compress(older, final):
            done.append(final)
    return done


def check_keep(keep: int | None) -> None:
    """ValueError for a number of archives to keep below 0, TypeError for one that is not
    a whole number (None: keep them all)."""
    if keep is None:
        return
    if isinstance(keep, bool) or not isinstance(keep, int):
        raise TypeError(f"keep must be a whole number of archives, not {keep!r}")
    if keep < 0:
        raise ValueError("keep must be 0 or more")


def apply_retention(live: str, keep: int, *, busy: list[str] | None = None) -> list[str]:
    """Delete the oldest archived files of `live`'s lineage beyond the newest `keep`; return
    those deleted. An archive another process is compressing (its `flock` held) is kept and
    added to `busy`: removing it would let the compressed copy appear after its removal."""
    check_keep(keep)
    archives: list[str] = []
    for path in reversed(trace(live).files[:-1]):  # to a damaged archive, which stays
        path = _now_named(path)
        # only files rotation sealed are archives; a fork's parent is a live session
        if not os.path.exists(path) or seal_of(path) is None:
            break
        archives.append(path)
    archives.reverse()
    doomed = archives[: max(0, len(archives) - keep)]
    removed: list[str] = []
    for path in doomed:
        outcome = remove_if_unheld(path)
        if outcome is None and _now_named(path) != path:
            path = _now_named(path)
            outcome = remove_if_unheld(path)
        if outcome is False:
            if busy is not None:
                busy.append(path)
            log.info("%s: kept: another process is compressing it", path)
            continue
        if outcome is None:
            if not os.path.lexists(path):
                continue  # removed meanwhile (another retention)
            os.unlink(path)  # not a file it can lock (no compression can read it either)
        removed.append(path)
        for suffix in (".bak", ".quarantine"):
            remove_if_regular(uncompressed_name(path) + suffix)
    return removed


def _now_named(path: str) -> str:
    """`path`, or its compressed copy where another process compressed it since it was
    found (the plain file gone, the `.gz` in its place)."""
    if is_compressed(path) or os.path.lexists(path):
        return path
    copy = compressed_name(path)
    return copy if os.path.lexists(copy) else path


__all__ = ["Rotation", "RotationAborted", "RotationPolicy", "RotationResult", "RotationSource",
           "Successor", "SuccessorPlan", "apply_retention", "finish_rotation", "lineage",
           "check_archive_folder", "plan_successor", "read_header", "rotate", "rotate_held",
           "too_little_gained"]
