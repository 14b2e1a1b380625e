"""Steering and follow-up messages: queued while the agent works, persisted in the session.

A user (or another program) may add to a task while the runner works on it, as pi and
OpenClaw allow. Two kinds:

- **steer** (:data:`STEER`): delivered as soon as the tool call running now finishes; the
  remaining calls of that assistant turn are answered with a result saying they were skipped
  (so every call keeps its result), and the model sees the message before its next reply.
  Messages queued while the model is replying are delivered before the next request.
- **follow-up** (:data:`FOLLOW_UP`): delivered when the run would otherwise end (the model
  stopped calling tools), so the agent carries on with it.

Every queued message is recorded in the session before anything else happens to it, so a
crash loses none, and its delivery is one entry, so a resumed run delivers it exactly once:

- queued: a ``custom`` entry, ``customType`` :data:`QUEUED_TYPE`, data
  ``{"id", "kind": "steer" | "followUp", "text"}`` (pi ignores custom entries);
- delivered: a ``custom_message`` entry, ``customType`` :data:`STEER_TYPE` or
  :data:`FOLLOW_UP_TYPE`, ``content`` the text, ``display`` true, ``details``
  ``{"queueId": id}``. The projection turns it into a user message, in pi as here.

A message is pending while its ``queued`` entry has no delivery. After a compaction the
runner records its pending messages again (same ids), so the tail a resume reads always holds
them.

From another thread or process, :func:`queue_message` writes the message into the session's
inbox (a folder beside the file, ``<session>.inbox/``, one JSON file per message, created
atomically; a database session's is a folder on this machine, see
:func:`journal.inbox_path`, so only an agent on this machine reads it), so it needs no lock:
the runner records it as a ``queued`` entry at its next safe point (after each tool call,
before each request, when a run starts or ends) and then removes the file; a file whose id
is already recorded is just removed, so a crash between the two steps delivers nothing
twice. The emptied folder is removed too (``rmdir``, which only removes an empty folder); a
writer stages its message in a folder of its own beside the inbox and renames that folder
into place where there is no inbox or an empty one, else the message into the inbox, so an
agent removing its emptied inbox never holds a queuer off (see ``_place``). A message
queued while no runner is working waits in the inbox for the next run on that session.
The runner also reads the inboxes of the sessions its session continues
(`journal.predecessors`), where a message queued to a rotated name may wait, and records
what it finds in all of them in the order it was queued.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from journal import JournalError, Session, inbox_path, live_session
from journal.pg.url import is_database_url

STEER = "steer"
FOLLOW_UP = "followUp"
KINDS = (STEER, FOLLOW_UP)
QUEUED_TYPE = "journal.queued"
STEER_TYPE = "journal.steer"
FOLLOW_UP_TYPE = "journal.follow_up"
DELIVERED_TYPES = {STEER: STEER_TYPE, FOLLOW_UP: FOLLOW_UP_TYPE}
@dataclass(frozen=True)
class Queued:
    """One queued message: its id (unique in the session), kind and text."""

    id: str
    kind: str
    text: str


def queue_message(session_path: str, text: str, kind: str = STEER, *,
                  follow: bool = True) -> str:
    """Queue `text` for the agent working (or next working) on the session at `session_path`.

    Safe from any thread or process, with or without a runner holding the session: the
    message goes into the session's inbox (written to a temporary name, synced, then renamed
    into place). A rotated session (a file, or a database session a rotation sealed) is
    followed to its live one, where the agent working on it reads, unless `follow` is
    False. Returns the message id.

    Example:
        >>> queue_message("sessions/a.jsonl", "use the v2 API instead")  # doctest: +SKIP
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if not text.strip():
        raise ValueError("a queued message needs some text")
    target = live_session(session_path) if follow else session_path
    folder = inbox_path(target)
    message_id = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"
    body = json.dumps({"id": message_id, "kind": kind, "text": text}).encode()
    _place(folder, message_id + ".json", body)
    return message_id


def _place(folder: str, name: str, body: bytes) -> None:
    """Put the message file `name` holding `body` into the inbox `folder`, whole or not at
    all.

    It is written and synced in a hidden staging folder beside the inbox first. Where there
    is no inbox, or an empty one, the staging folder becomes the inbox (a rename: atomic, and
    it replaces an empty folder); else the file is renamed into the inbox. The agent removes
    an emptied inbox (`remove_inbox`) at any time: a rename into one it removed just now
    fails, and the staging folder's rename is tried again. So each try a queuer loses
    follows the agent's taking out every message of the inbox. (Making the folder, then a
    file in it, lost to an agent that removed the empty folder between the two, and one
    emptying its inbox in a tight loop could do that every time.)

    An inbox that is a link to a folder (`_place_through_link`) is never removed, and a
    session's folder not made yet is made, as before staging."""
    if os.path.islink(folder):
        _place_through_link(folder, name, body)
        return
    parent = os.path.dirname(folder) or os.curdir
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="." + os.path.basename(folder) + ".", suffix=".tmp",
                               dir=parent)
    staged = os.path.join(staging, name)
    try:
        with open(staged, "xb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        _sync_dir(staging)
        for _ in range(_INBOX_ATTEMPTS):
            try:
                os.rename(staging, folder)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise  # (an inbox that is not a folder, say)
            else:
                _sync_dir(parent)
                return
            try:
                os.rename(staged, os.path.join(folder, name))
            except FileNotFoundError:
                continue  # the inbox was emptied and removed just now
            _sync_dir(folder)
            return
        raise OSError(f"{folder}: the inbox folder was removed {_INBOX_ATTEMPTS} times while a "
                      "message was queued into it; nothing was queued")
    finally:
        for leftover, remove in ((staged, os.unlink), (staging, os.rmdir)):
            try:
                remove(leftover)
            except FileNotFoundError:
                pass  # renamed into place


def _place_through_link(folder: str, name: str, body: bytes) -> None:
    """Put the message into the folder the inbox link `folder` leads to: a link is not a
    folder a rename can replace, nor one the agent's `rmdir` removes, and the folder it
    leads to may be on another file system than the staging folder would be. So the file is
    written under a hidden temporary name in that folder itself, synced and renamed there."""
    fd, temp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.rename(temp, os.path.join(folder, name))
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _sync_dir(folder)


_INBOX_ATTEMPTS = 100


def read_inbox(session_path: str) -> list[tuple[str, Queued]]:
    """(file, message) for each message waiting in the inbox, oldest first. Files that are
    not queued messages (a temporary file being written, a stray file) are left alone."""
    folder = inbox_path(session_path)
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read())
        except (OSError, ValueError):
            continue
        item = _queued(data)
        if item is not None:
            out.append((path, item))
    return out


def inbox_is_for(path: str, live: str) -> bool:
    """Whether messages in the inbox of `path` are for the agent writing the session `live`,
    which reads the inboxes of the names its session had and was opened through: `path` is
    `live`, a database session (its id names it for good), a name no file holds now (one a
    rotation freed), or one that still leads to `live`. A session made at a name a rotation
    freed, while the agent runs too, owns that name's inbox and what is queued there."""
    if path == live or is_database_url(path) or not os.path.lexists(path):
        return True
    try:
        return os.path.realpath(live_session(path)) == os.path.realpath(live)
    except (JournalError, OSError):
        return False  # cannot tell: its messages stay where they are


def remove_inbox(session_path: str) -> bool:
    """Remove the inbox folder of `session_path` if it is there and empty; True if it was."""
    try:
        os.rmdir(inbox_path(session_path))
    except OSError:
        return False
    return True


class MessageQueues:
    """The pending steering and follow-up messages of one session, and what was delivered.

    Used by the thread that writes the session (the runner's); other threads and processes
    queue through the inbox (:func:`queue_message`).
    """

    def __init__(self) -> None:
        self._pending: dict[str, Queued] = {}
        self._delivered: set[str] = set()

    def load(self, entries: Iterable[dict[str, Any]]) -> None:
        """Learn what the session already holds: queued messages and deliveries."""
        for entry in entries:
            kind = entry.get("type")
            if kind == "custom" and entry.get("customType") == QUEUED_TYPE:
                item = _queued(entry.get("data"))
                if item is not None and item.id not in self._delivered:
                    self._pending.setdefault(item.id, item)
            elif kind == "custom_message" and entry.get("customType") in (
                    STEER_TYPE, FOLLOW_UP_TYPE):
                details = entry.get("details")
                queue_id = details.get("queueId") if isinstance(details, dict) else None
                if isinstance(queue_id, str):
                    self._delivered.add(queue_id)
                    self._pending.pop(queue_id, None)

    def record(self, session: Session, item: Queued) -> bool:
        """Record `item` as a queued entry unless its id is known; True if it was new."""
        if item.id in self._pending or item.id in self._delivered:
            return False
        session.append_custom_entry(QUEUED_TYPE, _data(item))
        self._pending[item.id] = item
        return True

    def queue(self, session: Session, text: str, kind: str = STEER) -> Queued:
        """Queue a message from the session's writing thread: recorded in the session now."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        item = Queued(f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}", kind, text)
        self.record(session, item)
        return item

    def ingest(self, session: Session, paths: Iterable[str]) -> int:
        """Record the messages waiting in the inboxes of `paths`, in the order they were
        queued whichever inbox holds them, then remove their files, and each inbox folder
        left empty (`remove_inbox`). Returns how many were new."""
        inboxes = list(dict.fromkeys(paths))
        found = [entry for path in inboxes for entry in read_inbox(path)]
        found.sort(key=_queued_order)  # across inboxes too: an id starts with its time
        new = sum(self.record(session, item) for _, item in found)
        if new:
            session.sync()  # the entries are durable before the files that held them go
        for file, _ in found:
            try:
                os.unlink(file)
            except FileNotFoundError:
                pass
        for path in inboxes:
            remove_inbox(path)
        return new

    def pending(self, kind: str) -> list[Queued]:
        """The messages of `kind` not delivered yet, oldest first."""
        return [item for item in self._pending.values() if item.kind == kind]

    def deliver(self, session: Session, item: Queued) -> str:
        """Append `item` as the message the model sees (one entry) and mark it delivered."""
        entry_id = session.append_custom_message_entry(
            DELIVERED_TYPES[item.kind], item.text, True, {"queueId": item.id})
        self._pending.pop(item.id, None)
        self._delivered.add(item.id)
        return entry_id

    def carry(self, session: Session) -> None:
        """Record every pending message again after the latest compaction, so a resume,
        which reads the session from its tail, still finds it (ids make it the same one)."""
        items = list(self._pending.values())
        if items:
            session.append_many([{"type": "custom", "customType": QUEUED_TYPE,
                                  "data": _data(item)} for item in items])


def _queued_order(found: tuple[str, Queued]) -> str:
    """The order messages were queued in: their file names (`<id>.json`), as `read_inbox`
    sorts one inbox."""
    return os.path.basename(found[0])


def _data(item: Queued) -> dict[str, str]:
    return {"id": item.id, "kind": item.kind, "text": item.text}


def _queued(data: Any) -> Queued | None:
    if not isinstance(data, dict):
        return None
    queue_id, kind, text = data.get("id"), data.get("kind"), data.get("text")
    if isinstance(queue_id, str) and kind in KINDS and isinstance(text, str) and text.strip():
        return Queued(queue_id, kind, text)
    return None


def _sync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
