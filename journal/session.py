"""The high-level handle on one session file: create, open (resume), append, branch.

A `Session` holds the writer lock from open until close. On open it first makes the file safe
to append to (a torn last line is quarantined and cut away, invariant 2), then reads only the
tail the live context needs; the rest of the tree is read on demand.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any

from . import codec, model
from .archivegz import refuse_writing
from .boundary import is_compaction, orphaned_by_keeping
from .codec import Diagnostic
from .context import (
    Context,
    advance,
    build_context,
    compaction_summary_message,
    entry_message,
    for_model,
)
from .durability import Durability
from .errors import (
    BadKeptEntry,
    JournalError,
    NonFiniteNumber,
    NoSpace,
    NotASession,
    NotJson,
    SessionClosed,
    UnknownEntry,
    UnsupportedVersion,
    WriteFailed,
)
from .files import make_private_dir, remove_leftovers
from .header import stream_first_line
from .identity import real_path
from .idscan import IdScan
from .lineage import ARCHIVE_DIR, parent_of, release_after_move
from .live import check_single_name, lock_live
from .lock import DEFAULT_LOCK_TIMEOUT
from .model import Entry, Message
from .pg.url import is_database_url, names_session, parse_database, parse_url, session_url
from .quarantine import Quarantined, cut_torn_tail
from .repair import migrate_held
from .rotation import (
    RotationPolicy,
    RotationResult,
    RotationSource,
    Successor,
    check_archive_folder,
    check_keep,
    finish_rotation,
    rotate_held,
)
from .seal import commit_seal
from .snapshot import (
    Snapshot,
    find_last_of_type,
    last_newline_end,
    load,
    refuse_foreign,
    resume,
)
from .storage import Appender, Continues, FileStorage, Lock, Storage, as_storage
from .tree import Tree, TreeNode

log = logging.getLogger(__name__)


class Session:
    """A session opened for writing. Use `Session.create` or `Session.open`, and close it.

    `rotation_policy` (None by default) is when it rotates on its own: set it to a
    `RotationPolicy` and `append_compaction` (with `after_compaction`) or `maybe_rotate()`
    rotates it into a short successor once the policy says so; this object carries on
    writing there.

    Example:
        >>> with Session.create("sessions/") as s:  # doctest: +SKIP
        ...     s.rotation_policy = RotationPolicy(max_bytes=50 << 20)
        ...     s.append_message({"role": "user", "content": "hi", "timestamp": 0})
    """

    def __init__(self, storage: Storage, lock: Lock, appender: Appender,
                 snap: Snapshot) -> None:
        self._storage: Storage = storage
        self.path = storage.locator
        self._lock = lock
        self._log = appender
        self.header: Entry = snap.header or {}
        self.diagnostics: list[Diagnostic] = snap.diagnostics
        self.tree = Tree(snap.entries, complete=snap.complete)
        self.recovered: list[Quarantined] = []
        self.followed: list[str] = []
        self.rotation_policy: RotationPolicy | None = None
        self._context: Context | None = None
        self._info: tuple[Entry | None] | None = None
        self._older_ids: IdScan | None = None if snap.complete else IdScan(storage)
        # ids of the file this one continues: a new entry avoids them too, so an id never
        # names two entries across a rotation (a follower tells copied entries by id). Found
        # and scanned in the background once the first entry is made, so opening stays fast.
        self._previous_ids: Container[str] | None = None

    # opening

    @classmethod
    def create(
        cls,
        path_or_dir: str | os.PathLike[str] | Storage,
        *,
        cwd: str | None = None,
        durability: Durability | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        session_id: str | None = None,
        parent_session: str | None = None,
    ) -> Session:
        """Create a new session file (mode 0600) with its header written and synced.

        A path ending in `.jsonl` names the file; anything else is a directory (created if
        needed) in which the file gets a pi-style `<timestamp>_<uuid>.jsonl` name. An existing
        file is never overwritten. A database session URL (or `pg:<id>`) is created as it is
        named, its header's id the URL's where a file name can hold it; a database URL
        without a session (or `pg:`, the default database) is the database's folder: the new
        session in it is named by the header's id. A `journal.storage.Storage` (any backend)
        is created as it is, under its writer lock.
        """
        if session_id is None and is_database_url(path_or_dir) and names_session(path_or_dir):
            session_id = _header_id_of(path_or_dir)
        header = model.make_header(
            cwd if cwd is not None else os.getcwd(),
            session_id=session_id,
            parent_session=parent_session,
        )
        if isinstance(path_or_dir, FileStorage):
            path_or_dir = path_or_dir.path  # named, checked and made as any file session
        if is_database_url(path_or_dir):
            if not names_session(path_or_dir):  # a database: a new session in it
                path_or_dir = session_url(parse_database(path_or_dir), header["id"])
            path_or_dir = as_storage(path_or_dir)
        storage = (_new_file_storage(os.fspath(path_or_dir), header)
                   if isinstance(path_or_dir, (str, os.PathLike)) else path_or_dir)
        lock = storage.lock(lock_timeout)
        try:
            _create(storage, codec.encode(header))
            appender = storage.open_appender(durability)
        except BaseException:
            lock.release()
            raise
        return cls(storage, lock, appender,
                   Snapshot(storage.locator, header, [], size=0, end=0))

    @classmethod
    def open(
        cls,
        target: str | os.PathLike[str] | Storage,
        *,
        durability: Durability | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        migrate: bool = True,
    ) -> Session:
        """Open an existing session to append to it, taking the writer lock.

        `target` is a file path or a `journal.storage.Storage` (any backend). For a file, a
        torn last line is copied to the quarantine side file and cut away first (the result is
        in `recovered`); the path may be a symbolic link: it is resolved once, and the session
        is its real file (`path`), locked as such. A rotated session (a file or a database
        session) is followed to its live successor, also when it rotates while this waits
        for the lock; `followed` lists every sealed one passed on the way, the one named
        first (empty when it was live).

        A version 1 or 2 file is first rewritten as version 3, as pi does when it opens one
        (atomically, under the lock, the original kept as `<file>.bak`, a warning logged),
        and so is a database session (a new generation, under the lease, the original lines
        kept in its quarantine); `migrate=False` refuses it instead (UnsupportedVersion), as
        does any other backend.
        Raises NotASession, UnsupportedVersion, LockTimeout, UnsafeLockFile.
        """
        if is_database_url(target):
            target = as_storage(target)
        else:
            refuse_foreign(target)
        if isinstance(target, (str, os.PathLike, FileStorage)):
            opened = _open_file(target, lock_timeout, migrate)
        else:
            opened = _open_other(target, lock_timeout)
        storage, lock = opened.storage, opened.lock
        try:
            if not isinstance(target, (str, os.PathLike, FileStorage)):
                database = is_database_url(storage.locator)
                if _preflight(storage, migrate=migrate and database) < model.CURRENT_VERSION:
                    _migrate_database(storage, lock)
            snap = resume(storage)
            _check_writable(storage.locator, snap)
            appender = storage.open_appender(durability)
        except BaseException:
            lock.release()
            raise
        session = cls(storage, lock, appender, snap)
        session.recovered = opened.recovered
        session.followed = opened.followed
        if snap.diagnostics:
            log.warning(
                "%s: %d unreadable line(s) kept in place; run 'journal repair %s'",
                storage.locator, len(snap.diagnostics), storage.locator,
            )
        return session

    def rotate(self, *, archive_dir: str | None = None, keep: int | None = None,
               compress: bool = True, dry_run: bool = False) -> RotationResult:
        """Rotate into a successor now (see `journal.rotate`); this session carries on
        writing there (`path` changes), its lock taken before the old one is released."""
        check_keep(keep)
        if self.closed:
            raise SessionClosed(self.path)
        if not isinstance(self._storage, FileStorage):
            if is_database_url(self._storage.locator):
                return self._rotate_database(archive_dir, keep, dry_run)
            raise JournalError(f"{self.path}: rotation works on session files only")
        started = time.perf_counter()
        source = RotationSource(self.path, self.tree, self.header, self.latest_session_info(),
                                self._seal, keep_successor_lock=True, abandon=self._abandon)
        rotation = rotate_held(source, archive_dir=archive_dir, compress=compress,
                               dry_run=dry_run)
        if rotation.successor is not None:
            self._switch_to(rotation.successor)
        rotation.started = started
        rotation.result.lock_held_ms = (time.perf_counter() - started) * 1000
        return finish_rotation(rotation, keep=keep)

    def _rotate_database(self, archive_dir: str | None, keep: int | None,
                         dry_run: bool) -> RotationResult:
        """Rotate a database session (`journal.pg.rotation`) and carry on in its successor;
        then export the sealed one and move archives out (by then writing on: an
        interruption there leaves this session in its successor)."""
        from .pg.lease import Lease
        from .pg.rotation import archive_sealed, rotate_session
        from .pg.storage import PostgresStorage

        storage, lease = self._storage, self._lock
        if not isinstance(storage, PostgresStorage) or not isinstance(lease, Lease):
            raise JournalError(f"{self.path}: not a database session held by this writer")
        if archive_dir is not None:
            check_archive_folder(self.path, archive_dir)
        result, successor, new_lease = rotate_session(storage, lease, dry_run=dry_run,
                                                      tree=self.tree)
        if successor is None or new_lease is None:
            archive_sealed(result, storage, archive_dir, keep)  # a dry run's plan
            return result
        try:
            durability, previous = self._log.durability, self._taken()
            self._log.close()
            # the successor's lease is this session's from here: closing releases that one
            self._storage, self.path, self._lock = successor, successor.locator, new_lease
            lease.release()
            snap = resume(successor)
            self._log = successor.open_appender(durability)
        except BaseException:
            new_lease.release()  # this session is closed: open the successor again
            lease.release()
            self._log.close()
            raise
        self.header = snap.header or {}
        self.tree = Tree(snap.entries, complete=snap.complete)
        self.diagnostics = []
        self._context = None
        self._info = None
        self._older_ids = None
        self._previous_ids = previous
        archive_sealed(result, storage, archive_dir, keep)
        return result

    def _seal(self, seal: Entry) -> None:
        """Commit a rotation's seal, synced whatever the durability policy."""
        commit_seal(self._log.commit, seal)
        self._log.sync()

    def maybe_rotate(self) -> RotationResult | None:
        """Rotate if the rotation policy wants it at the current size; None if not."""
        policy = self.rotation_policy
        if policy is None or not policy.wants(self._log.size()):
            return None
        result = self.rotate(archive_dir=policy.archive_dir, keep=policy.keep,
                             compress=policy.compress)
        return result if result.rotated else None

    def _switch_to(self, successor: Successor) -> None:
        """Carry on in a successor rotation published (holding both files' locks)."""
        path, lock = successor.path, successor.lock
        durability = self._log.durability
        previous = self._taken()
        self._log.close()
        old_lock, old_path = self._lock, self.path
        storage = FileStorage(path)
        self._storage, self.path = storage, path
        self._lock = lock or storage.lock(0)
        self._log = storage.open_appender(durability)
        self.header = successor.header
        self.tree = Tree(successor.entries)
        self.diagnostics = []
        self._context = None
        self._info = None
        self._older_ids = None
        self._previous_ids = previous
        release_after_move(old_lock, old_path)

    def _abandon(self) -> None:
        """Stop writing here after a rotation failed past publishing its successor."""
        try:
            self._log.close()
        finally:
            self._lock.release()

    def close(self) -> None:
        """Sync what the policy left pending, close the file and release the lock."""
        try:
            self._log.close()
        finally:
            self._lock.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._log.closed

    @property
    def session_id(self) -> str:
        return str(self.header.get("id", ""))

    @property
    def durability(self) -> Durability:
        return self._log.durability

    @property
    def size(self) -> int:
        """The session's size in bytes, to the end of its last commit (a file's size, or a
        database session's; for the live session after a rotation)."""
        return self._log.size()

    # reading

    @property
    def leaf_id(self) -> str | None:
        return self.tree.leaf_id

    @property
    def entries(self) -> list[Entry]:
        """Entries read so far, in file order (all of them once `load_all()` has run)."""
        return self.tree.entries

    def get_entry(self, entry_id: str) -> Entry | None:
        entry = self.tree.get(entry_id)
        if entry is None and not self.tree.complete:
            self.load_all()
            entry = self.tree.get(entry_id)
        return entry

    def context(self, leaf_id: str | None = None, *, raw: bool = False) -> Context:
        """What a model is given for the current leaf (or `leaf_id`).

        By default the messages pass the pairing sanitizer (invariant 7) and
        `Context.pairing` says what it changed; `raw=True` gives the projection exactly as the
        file holds it.
        """
        if leaf_id is None:
            context = self._live_context()
        else:
            self._position(leaf_id)  # loads the whole file if the id is not in the tail
            context = build_context(self.tree, leaf_id)
        return context if raw else for_model(context)

    def live_context(self) -> Context:
        """The leaf's raw context itself, shared and kept current by appends: read it, never
        modify it. For loops that ask every turn; `context()` returns a copy."""
        cached = self._context
        if cached is None or cached.leaf_id != self.leaf_id:
            cached = self._context = build_context(self.tree, self.tree.leaf_id)
        return cached

    def _live_context(self) -> Context:
        cached = self.live_context()
        return Context(list(cached.messages), cached.thinking_level, cached.model,
                       cached.leaf_id, cached.compaction_id, entry_ids=list(cached.entry_ids),
                       fresh_from=cached.fresh_from)

    def latest_session_info(self) -> Entry | None:
        """The file's latest `session_info` entry (searched once, then kept current)."""
        if self._info is None:
            with self._storage.open_reader() as reader:
                end = last_newline_end(reader.stream, reader.size)
                self._info = (find_last_of_type(reader.stream, end, "session_info"),)
        return self._info[0]

    def _indexed(self, entry: Entry) -> None:
        if entry["type"] == "session_info" and self._info is not None:
            self._info = (entry,)
        self.tree.add(entry)
        if self._context is not None and not advance(self._context, entry):
            self._context = None

    def get_branch(self, entry_id: str | None = None) -> list[Entry]:
        """Entries from the root down to `entry_id` (default: the leaf)."""
        position = self._position(entry_id)
        path = self.tree.path(position)
        if path and not self.tree.complete and self.tree.entries[path[0]].get("parentId"):
            self.load_all()
            path = self.tree.path(self._position(entry_id))
        return [self.tree.entries[i] for i in path]

    def get_tree(self) -> list[TreeNode]:
        self.load_all()
        return self.tree.nested()

    @property
    def name(self) -> str | None:
        self.load_all()
        return self.tree.name

    def load_all(self) -> None:
        """Read the entries a fast resume skipped; the leaf stays where it is."""
        if self.tree.complete:
            return
        leaf = self.leaf_id
        snap = load(self._storage)
        tree = Tree(snap.entries)
        tree.finish_forward_check()
        tree.leaf = None if leaf is None else tree.index_of(leaf)
        self.tree = tree
        self.diagnostics = snap.diagnostics
        self._context = None

    def _position(self, entry_id: str | None) -> int | None:
        if entry_id is None:
            return self.tree.leaf
        position = self.tree.index_of(entry_id)
        if position is None and not self.tree.complete:
            self.load_all()
            position = self.tree.index_of(entry_id)
        if position is None:
            raise UnknownEntry(entry_id)
        return position

    # navigation

    def branch(self, entry_id: str) -> None:
        """Move the leaf to `entry_id`; the next append starts a new branch there."""
        self.tree.leaf = self._position(entry_id)

    def reset_leaf(self) -> None:
        """Move the leaf before the first entry: the next append is a new root."""
        self.tree.leaf = None

    def branch_with_summary(
        self, from_id: str | None, summary: str, details: Any = None, from_hook: bool | None = None
    ) -> str:
        """Move the leaf to `from_id` and append a `branch_summary` of the abandoned path."""
        if from_id is None:
            self.reset_leaf()
        else:
            self.branch(from_id)
        return self._append(
            lambda i, p: model.branch_summary_entry(i, p, from_id or "root", summary, details,
                                                    from_hook)
        )

    # appending

    def append_message(self, message: dict[str, Any]) -> str:
        entry_id = model.new_id(self._taken())
        entry = self._readable(model.message_entry(entry_id, self.leaf_id, message))
        self._log.commit(self._encoded([entry]))
        self._indexed(entry)
        return entry_id

    def append_thinking_level_change(self, thinking_level: str) -> str:
        return self._append(lambda i, p: model.thinking_level_entry(i, p, thinking_level))

    def append_model_change(self, provider: str, model_id: str) -> str:
        return self._append(lambda i, p: model.model_change_entry(i, p, provider, model_id))

    def append_compaction(
        self,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        details: Any = None,
        from_hook: bool | None = None,
    ) -> str:
        """Append a compaction, then the current model and thinking level right after it.

        Recording the settings after each compaction lets a later open resume this file from
        its tail without searching further back for them. A kept entry that is not on the
        branch, or whose keeping would orphan tool results, raises `BadKeptEntry` (as every
        append of a compaction does) and appends nothing.
        """
        current = self.context()
        parts: list[Entry] = [
            {"type": "compaction", "summary": summary, "firstKeptEntryId": first_kept_entry_id,
             "tokensBefore": tokens_before, "details": details, "fromHook": from_hook}
        ]
        if current.model and "provider" in current.model and "modelId" in current.model:
            parts.append({"type": "model_change", "provider": current.model["provider"],
                          "modelId": current.model["modelId"]})
        parts.append({"type": "thinking_level_change", "thinkingLevel": current.thinking_level})
        parts[0] = {k: v for k, v in parts[0].items() if v is not None or k == "firstKeptEntryId"}
        compaction_id = self.append_many(parts)[0]
        if self.rotation_policy is not None and self.rotation_policy.after_compaction:
            try:
                self.maybe_rotate()
            except (JournalError, OSError) as e:
                if self.closed:
                    raise  # failed after publishing: the session moved on without us
                log.warning("%s: rotation after the compaction failed (%s); the session "
                            "goes on in this file", self.path, e)
        return compaction_id

    def append_custom_entry(self, custom_type: str, data: Any = None) -> str:
        return self._append(lambda i, p: model.custom_entry(i, p, custom_type, data))

    def append_custom_message_entry(
        self, custom_type: str, content: Any, display: bool, details: Any = None
    ) -> str:
        return self._append(
            lambda i, p: model.custom_message_entry(i, p, custom_type, content, display, details)
        )

    def append_label_change(self, target_id: str, label: str | None) -> str:
        """Set (or, with None or empty, clear) the label of an existing entry."""
        if self.get_entry(target_id) is None:
            raise UnknownEntry(target_id)
        return self._append(lambda i, p: model.label_entry(i, p, target_id, label))

    def append_session_info(self, name: str) -> str:
        return self._append(lambda i, p: model.session_info_entry(i, p, name))

    def append_entry(self, entry: Entry) -> str:
        """Append an entry of any type given without id, parentId and timestamp."""
        return self.append_many([entry])[0]

    def append_many(self, entries: list[Entry]) -> list[str]:
        """Commit several entries, chained from the leaf, in one write; return their ids.

        A failure the caller sees (a short write, a full disk, a failed sync) commits none of
        them: the write is rolled back. A process killed in the middle of the write may leave a
        prefix of the group as complete entries; the torn rest is quarantined on the next open.
        """
        if not entries:
            return []
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                raise JournalError("an entry must be an object with a string 'type'")
            if entry["type"] == "session":
                raise JournalError("a session header cannot be appended as an entry")
        taken: set[str] = set()
        stamped: list[Entry] = []
        parent = self.leaf_id
        for entry in entries:
            entry_id = model.new_id(model.Either(self._taken(), taken))
            taken.add(entry_id)
            stamped.append(self._readable(model.stamp(entry, entry_id, parent)))
            parent = entry_id
        self._commit(stamped)
        return [e["id"] for e in stamped]

    def _append(self, build: Callable[[str, str | None], Entry]) -> str:
        """Commit one entry made by a model helper from the caller's values."""
        entry_id = model.new_id(self._taken())
        entry = self._readable(build(entry_id, self.leaf_id))
        self._log.commit(self._encoded([entry]))
        self._indexed(entry)
        return entry_id

    def _readable(self, entry: Entry) -> Entry:
        """`entry`, or JournalError, nothing appended, where a reader would set it aside (a
        message that is not an object, a field its type requires missing): what was
        appended would be missing from every reading, its id returned all the same."""
        problem = codec.unreadable_as_written(entry)
        if problem is not None:
            raise JournalError(f"{self.path}: not appended: the {entry.get('type')} entry "
                               f"would not read back ({problem})")
        return entry

    def _taken(self) -> Container[str]:
        """Ids a new entry must avoid: those read, the whole file's once scanned, and those of
        the file this one continues."""
        taken: Container[str] = self.tree.ids
        older = self._older_ids
        if older is not None and not self.tree.complete:
            taken = model.Either(taken, older)
        if self._previous_ids is None and "parentSession" in self.header:
            storage = self._storage
            if isinstance(storage, FileStorage):
                path, header = self.path, self.header
                self._previous_ids = IdScan(lambda: parent_of(path, header))
            elif isinstance(storage, Continues):
                self._previous_ids = IdScan(storage.predecessor)
        if self._previous_ids is not None:
            taken = model.Either(taken, self._previous_ids)
        return taken

    def _commit(self, entries: list[Entry]) -> None:
        for entry in entries:
            problem = codec.check_entry(entry, model.CURRENT_VERSION)
            if problem is not None:
                raise JournalError(f"refusing to append a {entry.get('type')} entry: {problem}")
        self._check_kept(entries)
        self._log.commit(self._encoded(entries))
        for entry in entries:
            self._indexed(entry)

    def _encoded(self, entries: list[Entry]) -> bytes:
        """The lines to commit; NonFiniteNumber naming this session for a NaN or infinity,
        which the file would hold as null while the caller's entry holds the number; NotJson
        for a value JSON cannot hold at all."""
        try:
            return codec.encode_many(entries)
        except (NonFiniteNumber, NotJson) as e:
            raise e.at(self.path) from None

    def _check_kept(self, entries: list[Entry]) -> None:
        """BadKeptEntry where a compaction among `entries` (stamped, chained from the leaf)
        may not keep what its `firstKeptEntryId` names (`boundary.orphaned_by_keeping`)."""
        if not any(is_compaction(e) and isinstance(e.get("firstKeptEntryId"), str)
                   for e in entries):
            return
        before = list(self.live_context().messages)  # the context each entry is added to
        for position, entry in enumerate(entries):
            kept_id = entry.get("firstKeptEntryId")
            if not is_compaction(entry):
                message = entry_message(entry)
                if message is not None:
                    before.append(message)
                continue
            kept: list[Message] = []
            if isinstance(kept_id, str):
                region = self._kept_region(kept_id, entries[:position])
                if region is None:
                    raise BadKeptEntry(self.path, kept_id, "is not on the branch it is "
                                       "appended to: its context would be the summary alone")
                kept = [m for m in map(entry_message, region) if m is not None]
                orphaned = orphaned_by_keeping(before, kept)
                if orphaned:
                    raise BadKeptEntry(
                        self.path, kept_id, "keeps the result of tool call(s) "
                        f"{', '.join(orphaned)} without the call, which the compaction "
                        "summarises: keep from the assistant message that made the call, or "
                        "from after its results")
            before = [compaction_summary_message(entry), *kept]

    def _kept_region(self, kept_id: str, pending: list[Entry]) -> list[Entry] | None:
        """The entries from `kept_id`, nearest first on the branch of the leaf followed by
        `pending`, to the end of `pending`; None when the branch does not hold it."""
        for i in range(len(pending) - 1, -1, -1):
            if pending[i]["id"] == kept_id:
                return pending[i:]
        while True:
            chain: list[Entry] = []
            for index in self.tree.walk_up(self.tree.leaf):
                chain.append(self.tree.entries[index])
                if chain[-1]["id"] == kept_id:
                    chain.reverse()
                    return chain + pending
            if self.tree.complete or not chain or chain[-1].get("parentId") is None:
                return None
            self.load_all()  # the branch goes on before the tail read

    def sync(self) -> None:
        """Force pending commits to stable storage now, whatever the policy."""
        self._log.sync()


@dataclass
class _Opened:
    """A storage whose writer lock is held, ready to be read and appended to."""

    storage: Storage
    lock: Lock
    recovered: list[Quarantined] = field(default_factory=list)
    followed: list[str] = field(default_factory=list)


def _open_other(storage: Storage, lock_timeout: float) -> _Opened:
    """Another backend's session, locked; a database session sealed by a rotation is
    followed to the live one (`journal.pg.rotation.lock_live`), every sealed session on
    the way in `followed`, as for a file."""
    if is_database_url(storage.locator):
        from .pg.rotation import lock_live
        from .pg.storage import PostgresStorage

        if isinstance(storage, PostgresStorage):
            live, lease, followed = lock_live(storage, lock_timeout)
            if followed:
                _say_followed(storage.locator, live.locator)
            return _Opened(live, lease, followed=followed)
    return _Opened(storage, storage.lock(lock_timeout))


def _say_followed(requested: str, live: str) -> None:
    """A writer opened by a rotated session's name writes elsewhere: said, as a warning."""
    log.warning("%s was rotated; continuing in its successor %s", requested, live)


def _open_file(target: str | os.PathLike[str] | FileStorage, lock_timeout: float,
               migrate: bool) -> _Opened:
    """The file backend's part of `Session.open`: everything about opening that only a file
    has. Take the lock on the live file the path leads to (following links, seals and moves,
    finishing an interrupted rotation: `live.lock_live`), refuse what is not a writable session,
    remove crash leftovers, refuse a second hard link, cut a torn tail into the quarantine, and
    migrate a version 1 or 2 file (`repair.migrate_held`). Other backends need none of this:
    their commits are whole by contract and they have no names, links or side files."""
    requested = real_path(target.path if isinstance(target, FileStorage) else target)
    if not migrate and os.path.isfile(requested):
        # refused before a lock file is made (a rotated file is version 3, so never this one)
        _refuse_legacy(FileStorage(requested))
    path, lock, followed = lock_live(requested, lock_timeout)
    storage = FileStorage(path)
    try:
        version = _preflight(storage, migrate=migrate)
        remove_leftovers(path, os.path.join(os.path.dirname(path), ARCHIVE_DIR))
        check_single_name(path)
        recovered = cut_torn_tail(path)
        if version < model.CURRENT_VERSION:
            report = migrate_held(path)
            log.warning("%s: migrated from session format version %d to %d, as pi does when "
                        "it opens one; the original is kept as %s", path, version,
                        model.CURRENT_VERSION, report.backup)
    except BaseException:
        lock.release()
        raise
    if followed:
        _say_followed(requested, path)
    return _Opened(storage, lock, recovered, followed)


def _migrate_database(storage: Storage, lease: object) -> None:
    """Write a version 1 or 2 database session as version 3 under the lease `Session.open`
    took (`journal.pg.repair.migrate_database_held`), as a file is migrated on open."""
    from .pg.lease import Lease
    from .pg.repair import migrate_database_held
    from .pg.storage import PostgresStorage

    if not isinstance(storage, PostgresStorage) or not isinstance(lease, Lease):
        raise JournalError(f"{storage.locator}: cannot be migrated here; run 'journal repair "
                           f"--migrate {storage.locator}'")
    before = storage.size()
    migrate_database_held(storage, lease)
    log.warning("%s: migrated to session format version %d (%s bytes before), as pi does when "
                "it opens a session; the original lines are kept in its quarantine ('journal "
                "quarantine list %s')", storage.locator, model.CURRENT_VERSION, f"{before:,}",
                storage.locator)


def _header_id_of(url: str) -> str | None:
    """The header id of a database session created under `url`: the URL's own session id,
    so that the session's file (pulled, named by its header's id) is pushed back as the same
    session, when it is a name a file name can hold; None (a new id) for any other."""
    session = parse_url(url).session
    return session if model.holds_in_a_file_name(session) else None


def _new_file_storage(target: str, header: Entry) -> FileStorage:
    """The file a new session gets: `target` itself (a `.jsonl` path) or a pi-style name in the
    folder `target`; its folder is made private, and an existing name is refused."""
    if not target.endswith(".jsonl"):
        make_private_dir(target)
        name = model.session_file_name(header["timestamp"], header["id"])
        target = os.path.join(target, name)
    folder, name = os.path.split(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    # the folder's links are resolved; a link at the name itself is refused as existing
    target = os.path.join(real_path(folder), name)
    if os.path.lexists(target):  # a link here would put the lock beside its target
        raise JournalError(f"{target}: already exists; open it instead of creating it")
    make_private_dir(os.path.dirname(target))
    return FileStorage(target)


def _create(storage: Storage, data: bytes) -> None:
    path = storage.locator
    try:
        storage.create(data)
    except FileExistsError as e:
        raise JournalError(f"{path}: already exists; open it instead of creating it") from e
    except NoSpace:
        raise
    except OSError as e:
        raise WriteFailed(path, 0, f"writing the header failed: {e.strerror or e}") from e


def _check_writable(path: str, snap: Snapshot, *, migrate: bool = False) -> None:
    if snap.header is None and not snap.entries:
        raise NotASession(path, "not a session file (no session header, no entries)")
    if snap.header is None:
        raise NotASession(
            path, f"no session header on line 1; run 'journal repair {path}' to restore one"
        )
    version = snap.version
    if version < model.CURRENT_VERSION and not migrate:
        raise UnsupportedVersion(
            path, version,
            f"appending would mix formats; run 'journal repair --migrate {path}' to write it "
            "as version 3 first (or open it without --no-migrate to migrate it on open)",
        )
    if version > model.CURRENT_VERSION:
        raise UnsupportedVersion(path, version, "written by a newer program; not appending")


def _refuse_legacy(storage: Storage) -> None:
    """Raise UnsupportedVersion if the session's header says version 1 or 2."""
    with storage.open_reader() as reader:
        header = stream_first_line(reader.stream).header
    if header is not None and model.header_version(header) < model.CURRENT_VERSION:
        _check_writable(storage.locator, Snapshot(storage.locator, header, []))


def _preflight(storage: Storage, *, migrate: bool = False) -> int:
    """Refuse what is not a writable session before anything is changed; return its version
    (below 3 only if `migrate` allows it to be migrated)."""
    path = storage.locator
    refuse_writing(path)
    with storage.open_reader() as reader:
        if reader.size == 0:
            raise NotASession(path, "empty file, not a session (no header)")
        header = stream_first_line(reader.stream).header
    if header is None:
        raise NotASession(
            path, "not a session file: no session header on line 1 (if it is a damaged "
            f"session, 'journal repair {path}' restores one)")
    version = model.header_version(header)
    if version != model.CURRENT_VERSION:
        _check_writable(path, Snapshot(path, header, []), migrate=migrate)
    return version
