"""The journal's error tree: one root, a subclass per failure a caller may want to handle."""

from __future__ import annotations

import os
from typing import Any


class JournalError(Exception):
    """Root of every error the journal raises on purpose."""


class NotASession(JournalError):
    """The path is missing, a directory, or a file that is not a session log."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ForeignSession(NotASession):
    """A session another program owns and writes (a Claude Code transcript): it is read in
    place, never appended to."""

    def __init__(self, path: str, dialect: str) -> None:
        self.dialect = dialect
        super().__init__(path, f"a {dialect} transcript: it is read in place and never "
                               "appended to (show, context, tail read it; 'journal import' "
                               "makes a pi session of it)")


class LockTimeout(JournalError):
    """Another writer held the session's lock for longer than the caller would wait."""

    def __init__(self, path: str, timeout: float, holder: dict[str, Any] | None) -> None:
        self.path = path
        self.timeout = timeout
        self.holder = holder
        who = describe_holder(holder)
        super().__init__(
            f"{path}: locked by {who}; waited {timeout:g}s. "
            "Close the other writer, or retry with a longer lock timeout."
        )


class LeaseLost(JournalError):
    """Another writer took the session's lease over (a newer fencing epoch): this writer's
    appends are refused. Open the session again to write. `outcome` says what became of
    the batch refused, where that is not "nothing was appended" (an earlier attempt of it
    lost its connection, and may have been committed before the takeover)."""

    def __init__(self, locator: str, epoch: int, detail: str = "",
                 outcome: str | None = None) -> None:
        self.locator = locator
        self.epoch = epoch
        self.detail = detail
        self.outcome = outcome
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{locator}: another writer took the session over; this writer's "
                         f"lease (epoch {epoch}) is no longer valid, "
                         f"{outcome or 'nothing was appended'}{extra}. Open the session "
                         "again to write")


class SessionChanged(JournalError):
    """The session grew while it was being replaced or rotated from what was read of it (a
    writer without the session's lease appended meanwhile): nothing was changed; do it
    again, from the session as it is now."""

    def __init__(self, locator: str, work: str, read: int, now: int, tries: int = 1) -> None:
        self.locator = locator
        self.work = work
        self.read = read
        self.now = now
        self.tries = tries
        times = f", each of the {tries} times it was read" if tries > 1 else ""
        super().__init__(f"{locator}: the session changed while it was being {work} ({read:,} "
                         f"bytes were read, it holds {now:,} now: another writer appended "
                         f"meanwhile{times}); nothing was changed: run it again")


class SessionSealed(JournalError):
    """The session was sealed by a rotation and takes no more lines: write to the session
    it continues in (`Session.open` follows a sealed session to the live one)."""

    def __init__(self, locator: str, successor: str, note: str | None = None) -> None:
        self.locator = locator
        self.successor = successor
        extra = f" ({note})" if note else ""
        super().__init__(f"{locator}: sealed by a rotation, it takes no more lines; nothing "
                         f"was appended{extra}. It continues in {successor}: write there "
                         "(opening the session follows it to the live one)")


class BrokenLineage(JournalError):
    """A rotation sealed `sealed` into the session `missing`, which is not there any more
    (its row deleted out of band): nothing continues the lineage, so there is no live
    session to write to or follow into. `sealed` itself can still be read."""

    def __init__(self, sealed: str, missing: str, missing_id: str) -> None:
        self.sealed = sealed
        self.missing = missing
        self.missing_id = missing_id
        super().__init__(f"{sealed}: the lineage is broken: a rotation sealed this session "
                         f"into session {missing_id}, which is not in the database (deleted?), "
                         "so no live session continues it; the sealed sessions can still be "
                         "read, one by one")


class DamagedArchive(JournalError):
    """A compressed archive on the way through a lineage cannot be read (cut short, bytes
    flipped): its seal and its header are in it, so where the lineage goes after it (toward
    the live file) or before it (toward older archives) cannot be told. Rather than take the
    files on one side of it for the whole lineage, or the archive for the live file, the
    lineage is refused, naming it. `journal repair` does not rewrite archives: put back a
    good copy. `after` says which way was blocked: True when the files after it (the live
    one among them) are not found."""

    def __init__(self, path: str, reason: str, *, after: bool) -> None:
        self.path = path
        self.reason = reason
        self.after = after
        side = ("the lineage cannot be followed through it to the files after it, the "
                "live one among them" if after
                else "not read: the lineage may go on before it, but its files there cannot "
                "be found")
        super().__init__(f"{path}: a damaged archive ({reason}): {side}; put back a good "
                         "copy of it")


class UnsafeLockFile(JournalError):
    """The lock file beside a session is not a regular file of its own (a planted link,
    FIFO or hard link); nothing was written through it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path}: {reason}; the writer lock must be a regular file with one name. "
            "Remove it (a lock file holds no session data) and retry."
        )


class WriteFailed(JournalError):
    """A commit did not reach the file whole; the file was rolled back to before it (unless
    `outcome` says otherwise: a database commit whose acknowledgement was lost)."""

    def __init__(self, path: str, offset: int, reason: str, outcome: str | None = None) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        if outcome is not None:
            pass
        elif "cut" in reason:
            outcome = "nothing more will be appended until the file can be truncated"
        else:
            outcome = "the file was rolled back to its last complete entry and stays usable"
        where = f"at byte {offset:,} " if offset >= 0 else ""
        super().__init__(f"{path}: commit {where}failed ({reason}); {outcome}")


class UnsafeFile(JournalError):
    """A side file the store would create or write is not a plain file of its own (a symbolic
    link, a FIFO, a device, a file with other hard links): nothing was written through it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path}: {reason}; nothing was written through it. Remove it (it was not made "
            "by journal) and retry"
        )


class NoSpace(JournalError):
    """The disk is full: a file could not be written whole. It was removed again."""

    def __init__(self, path: str, needed: int, available: int | None) -> None:
        self.path = path
        self.needed = needed
        self.available = available
        free = f"{available:,} bytes free" if available is not None else "free space unknown"
        why = ""
        if available is not None and available >= needed:
            why = " (files take whole blocks, and the rest of the operation needs room too)"
        super().__init__(
            f"{path}: no space left on the device: needs {needed:,} bytes, {free} in "
            f"{os.path.dirname(path) or '.'}{why}; nothing was changed. Free some space and "
            "retry"
        )


class UnsupportedVersion(JournalError):
    """The session's format version cannot be written (or read) by this library."""

    def __init__(self, path: str, version: int, hint: str) -> None:
        self.path = path
        self.version = version
        super().__init__(f"{path}: session format version {version}: {hint}")


class SessionClosed(JournalError):
    """The session was closed (or abandoned after a failed rotation); open it again."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: the session is closed; open it again to write")


class ArchiveElsewhere(JournalError):
    """An archive moved out of the database (`journal rotate --keep`) to a file that is not
    on this machine (or was moved or deleted since): read it where it is."""

    def __init__(self, locator: str, path: str) -> None:
        self.locator = locator
        self.path = path
        super().__init__(f"{locator}: an archive moved out of the database to {path}, which "
                         "is not here (on another machine, or moved or deleted since): read "
                         "it where it is, or put it back there")


class CommitsLost(JournalError):
    """A database server stopped before it had written out commits it acknowledged (under a
    `batch` or `never` policy, which do not wait for that), and came back without them: the
    session ends before them. This writer's view of the session is wrong from there, so it
    writes no more: open the session again (it holds what the server kept) and write what
    was lost again."""

    def __init__(self, locator: str, ends_at: int, acknowledged_to: int) -> None:
        self.locator = locator
        self.ends_at = ends_at
        self.acknowledged_to = acknowledged_to
        super().__init__(f"{locator}: the server lost commits it had acknowledged (it stopped "
                         "before writing them out): the session ends at byte "
                         f"{ends_at:,}, this writer's commits reached {acknowledged_to:,}; "
                         "nothing more was written: open the session again")


class Unreachable(JournalError):
    """The store a session is kept in could not be reached (a database server down or
    restarting, the network between): nothing was read or changed; the same call may work
    once it is back. A live tail waits for it."""


class GenerationGone(JournalError):
    """The generation of a database session a reader was reading was replaced (a repair)
    and its rows are gone since (the session replaced again, or moved out of the
    database): read the session again."""

    def __init__(self, locator: str, moved_out: bool) -> None:
        self.locator = locator
        self.why = ("replaced, then moved out of the database" if moved_out
                    else "replaced, and replaced again since")
        super().__init__(f"{locator}: the generation this reader read was {self.why}: "
                         "read it again")


class UnknownEntry(JournalError):
    """An entry id that the session does not contain."""

    def __init__(self, entry_id: str) -> None:
        self.entry_id = entry_id
        super().__init__(f"no entry with id {entry_id!r} in this session")


class NonFiniteNumber(JournalError):
    """An entry holding NaN or an infinity, which JSON cannot hold: written, it would read
    back as null (orjson writes them so, as JSON.stringify does), unlike what the writer
    kept. Nothing is appended. `where` is the field, as `message.usage.cost.total`."""

    def __init__(self, where: str, value: float, locator: str | None = None) -> None:
        self.where = where
        self.value = value
        self.locator = locator
        at = f"{locator}: " if locator else ""
        super().__init__(f"{at}not appended: {where} is {value!r}, which JSON cannot hold (it "
                         "would read back as null); give a finite number, or null")

    def at(self, locator: str) -> NonFiniteNumber:
        """The same error, naming the session it was refused for."""
        return NonFiniteNumber(self.where, self.value, locator)


class NotJson(JournalError):
    """An entry holding a value JSON cannot hold (an integer beyond 64 bits, a set, an
    object of a class of its own): nothing is appended. `reason` is the encoder's."""

    def __init__(self, reason: str, locator: str | None = None) -> None:
        self.reason = reason
        self.locator = locator
        at = f"{locator}: " if locator else ""
        super().__init__(f"{at}not appended: the entry cannot be written as JSON ({reason}); "
                         "give JSON values only: strings, numbers within 64 bits, true, "
                         "false, null, lists and objects")

    def at(self, locator: str) -> NotJson:
        """The same error, naming the session it was refused for."""
        return NotJson(self.reason, locator)


class BadKeptEntry(UnknownEntry):
    """A compaction that may not keep from its `firstKeptEntryId`: the entry is not on the
    branch the compaction is appended to (its context would be the summary alone), or
    keeping from it keeps tool results whose calls the compaction summarises away. Nothing
    is appended. An `UnknownEntry`, as an id missing from the session was before."""

    def __init__(self, locator: str, entry_id: str, reason: str) -> None:
        self.locator = locator
        self.reason = reason
        self.entry_id = entry_id
        JournalError.__init__(self, f"{locator}: not appended: the compaction's "
                                    f"firstKeptEntryId {entry_id!r} {reason}")


def describe_holder(holder: dict[str, Any] | None) -> str:
    """Render lock-holder diagnostics such as 'pid 42 on host-a since 2026-...'."""
    if not holder:
        return "another process (no holder details recorded)"
    parts = [f"pid {holder.get('pid', '?')}"]
    if holder.get("host"):
        parts.append(f"on {holder['host']}")
    if holder.get("since"):
        parts.append(f"since {holder['since']}")
    return " ".join(parts)


def describe_os_error(e: OSError) -> str:
    """An OS error as one line naming its file: `path: reason`."""
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}"
