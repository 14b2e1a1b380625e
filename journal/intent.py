"""What a rotation intent file (`<session>.rotating`) says, and which intents may be acted on.

The intent lets the next writer finish or undo a rotation that a crash interrupted, and that
writer deletes a temp file, seals the session and moves it into the archive on the intent's
word. Anyone who can write the sessions folder can plant an intent, so an intent is only
believed when every path in it is one this session's own rotation could have written: the
successor and the temp file sit beside the session under their fixed names, and the archive
is the session's own name, and a published successor must name that archive as its parent and
hold entries of this session (see `lineage.read_intent`); a recovery archives only inside the
session's folder. Paths are stored relative to the session's
folder, so a copied or moved folder keeps working; absolute paths written by older versions
are accepted when they name the same places.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import orjson

from .identity import plain_name, real_path

MAX_INTENT_BYTES = 1 << 16


class BadIntent(ValueError):
    """An intent file that does not describe a rotation of this session (the reason)."""


@dataclass(frozen=True)
class Intent:
    """A validated intent, with absolute paths."""

    successor: str
    temp: str | None
    archive: str | None
    session_id: str


def temp_name(successor_name: str) -> str:
    return f".{successor_name}.rotate.tmp"


def intent_record(session: str, successor: str, archive: str, session_id: str) -> dict[str, Any]:
    """The intent a rotation of `session` writes, with paths relative to its folder."""
    folder = os.path.dirname(session)
    name = os.path.basename(successor)
    return {"successor": name, "temp": temp_name(name),
            "archive": os.path.relpath(archive, folder), "sessionId": session_id}


def parse_intent(session: str, data: bytes) -> Intent:
    """Check an intent's paths against `session` (a real path); raise `BadIntent` if any is
    not one its own rotation could have written. The successor's header is checked by the
    caller (`lineage.read_intent`), which can read it."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadIntent("not valid JSON (a crash while it was written?)") from e
    if not isinstance(value, dict):
        raise BadIntent("not a JSON object")
    folder, own_name = os.path.split(session)
    name = _name_in(folder, value.get("successor"))
    if name is None or not name.endswith(".jsonl") or name.startswith(".") or name == own_name:
        raise BadIntent(f"successor {value.get('successor')!r} is not a session file beside it")
    temp = value.get("temp")
    if temp is not None and _name_in(folder, temp) != temp_name(name):
        raise BadIntent(f"temp {temp!r} is not the successor's temp file")
    session_id = value.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        raise BadIntent("no successor session id")
    archive = _archive_of(session, value.get("archive"))
    return Intent(os.path.join(folder, name),
                  None if temp is None else os.path.join(folder, temp_name(name)),
                  archive, session_id)


def _name_in(folder: str, value: object) -> str | None:
    """The file name `value` gives in `folder`: a bare name, or an absolute path into it."""
    if isinstance(value, str) and os.path.isabs(value) and "\0" not in value:
        directory, name = os.path.split(os.path.normpath(value))
        # older versions wrote the path as given, which may run through a linked folder
        return plain_name(name) if real_path(directory) == folder else None
    return plain_name(value)


def _archive_of(session: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise BadIntent(f"archive {value!r} is not a path")
    folder, own_name = os.path.split(session)
    archive = os.path.normpath(value if os.path.isabs(value) else os.path.join(folder, value))
    if not re.fullmatch(re.escape(own_name) + r"(\.[0-9]+)?", os.path.basename(archive)):
        raise BadIntent(f"archive {value!r} does not carry the session's own name")
    archive = os.path.join(real_path(os.path.dirname(archive)), os.path.basename(archive))
    if archive == session:
        raise BadIntent("the archive is the session itself")
    return archive
