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
twice. The emptied folder is removed too (``rmdir``, which only removes an empty folder: a
message being written is in it, under its temporary name, from before it is complete, and a
writer that finds the folder gone makes it again). A message queued while no runner is
working waits in the inbox for the next run on that session. The runner also reads the
inboxes of the sessions its session continues (`journal.predecessors`), where a message
queued to a rotated name may wait, and records what it finds in all of them in the order it
was queued.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from journal import Session, inbox_path, live_session

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
    fd, temp = _temp_in(folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.rename(temp, os.path.join(folder, message_id + ".json"))
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _sync_dir(folder)
    return message_id


def _temp_in(folder: str) -> tuple[int, str]:
    """A new temp file in the inbox `folder`, made if needed. The agent removes the folder
    once it took the messages out (`remove_inbox`), which it can do only while the folder is
    empty: from the temp's creation on, the folder holds this message, so the agent cannot
    remove it; before, a folder removed between its making and the temp's is made again,
    after a short random pause that grows with each try (an agent emptying its inbox in a
    tight loop must not win the same race every time)."""
    for attempt in range(_INBOX_ATTEMPTS):
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            return tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
        except (FileNotFoundError, FileExistsError):
            # the agent removed it, emptied, just now (FileExistsError: makedirs found it
            # made by another queuer, and then no longer there)
            time.sleep(random.uniform(0, _INBOX_PAUSE * attempt))
    raise OSError(f"{folder}: the inbox folder was removed {_INBOX_ATTEMPTS} times while a "
                  "message was queued into it; nothing was queued")


_INBOX_ATTEMPTS = 100
_INBOX_PAUSE = 0.0005  # seconds: the n-th retry waits up to n times this (2.5 s in all at most)


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
