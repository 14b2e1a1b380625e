"""Entry types of pi session format v3: construction in pi's key order, ids, migration.

Entries are plain dicts, as orjson produces them: the load path is hot, and a dict keeps unknown
types and fields intact through a read-write round trip at no cost.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import time
from collections.abc import Container
from datetime import UTC, datetime, timedelta
from typing import Any

CURRENT_VERSION = 3

Entry = dict[str, Any]
Message = dict[str, Any]
"""A message as pi holds it in a context (`role`, `content`, ...), a plain dict like Entry."""

ENTRY_TYPES = (
    "message",
    "model_change",
    "thinking_level_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
)

# Fields an entry of a known type cannot do without (besides type, id and parentId).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("message",),
    "model_change": ("provider", "modelId"),
    "thinking_level_change": ("thinkingLevel",),
    "compaction": ("summary",),
    "branch_summary": ("fromId", "summary"),
    "custom": ("customType",),
    "custom_message": ("customType", "content"),
    "label": ("targetId",),
    "session_info": (),
}

_STR = (str,)
_NUMBER = (int, float)
_MISSING_ROLE = "message.role"

# The JSON type every field that some code path reads must have, per entry type. A field that
# is absent is only a problem when REQUIRED_FIELDS names it (or, for a message, its role).
FIELD_TYPES: dict[str, tuple[tuple[str, tuple[type, ...], str], ...]] = {
    "message": (("message", (dict,), "an object"),),
    "model_change": (("provider", _STR, "a string"), ("modelId", _STR, "a string")),
    "thinking_level_change": (("thinkingLevel", _STR, "a string"),),
    "compaction": (("summary", _STR, "a string"),
                   ("firstKeptEntryId", (str, type(None)), "a string or null"),
                   ("tokensBefore", _NUMBER, "a number")),
    "branch_summary": (("fromId", _STR, "a string"), ("summary", _STR, "a string")),
    "custom": (("customType", _STR, "a string"),),
    "custom_message": (("customType", _STR, "a string"),
                       ("content", (str, list), "a string or a list"),
                       ("display", (bool,), "true or false")),
    "label": (("targetId", _STR, "a string"), ("label", (str, type(None)), "a string or null")),
    "session_info": (("name", _STR, "a string"),),
}


def bad_fields(entry: Entry) -> list[tuple[str, str]]:
    """The fields of an entry whose JSON type is wrong: (field, what it should be).

    Entries keep such values as they are (pi reads them too); this only names them, so
    readers can report them and repair can fix them. A message without a string role counts.
    """
    kind = entry.get("type")
    if kind == "message":  # the hot case on load: one check, no loop
        message = entry.get("message")
        if isinstance(message, dict) and isinstance(message.get("role"), str):
            return []
    specs = FIELD_TYPES.get(kind, ()) if isinstance(kind, str) else ()
    out: list[tuple[str, str]] = []
    for name, types, expected in specs:
        if name in entry:
            value = entry[name]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                out.append((name, expected))
    message = entry.get("message")
    if kind == "message" and isinstance(message, dict) and not isinstance(message.get("role"), str):
        out.append((_MISSING_ROLE, "a string"))
    return out


_second_cache: list[Any] = [None, ""]


def now_iso() -> str:
    """The current UTC time as pi writes it: ISO 8601 with milliseconds and a Z.

    The date and time up to the second are formatted once per second: appends are hot.
    """
    now = time.time()
    second = int(now)
    if second != _second_cache[0]:
        _second_cache[0] = second
        _second_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_cache[1]}.{int((now - second) * 1000):03d}Z"


def iso_millis(moment: datetime) -> str:
    """`moment` (an aware datetime: a database's timestamptz) as `now_iso` writes times: UTC,
    milliseconds, a Z; so a database's times read as a file's do."""
    utc = moment.astimezone(UTC)
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


def new_id(taken: Container[str]) -> str:
    """A fresh 8-hex-char entry id that is not in `taken`.

    Python reseeds `random` in a forked child, so forked writers do not repeat ids.
    """
    while True:
        candidate = f"{random.getrandbits(32):08x}"
        if candidate not in taken:
            return candidate


class Either:
    """Membership in either of two containers, without building their union (ids taken)."""

    def __init__(self, a: Container[Any], b: Container[Any]) -> None:
        self.a, self.b = a, b

    def __contains__(self, item: object) -> bool:
        return item in self.a or item in self.b


def new_session_id() -> str:
    """A time-ordered UUID (version 7), like pi's session ids."""
    millis = int(datetime.now(UTC).timestamp() * 1000)
    rand = bytearray(os.urandom(10))
    rand[0] = (rand[0] & 0x0F) | 0x70
    rand[2] = (rand[2] & 0x3F) | 0x80
    raw = millis.to_bytes(6, "big") + bytes(rand)
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def holds_in_a_file_name(text: str) -> bool:
    """Whether `text` stands in a file name as it is: letters, digits, `.`, `_` and `-`, not
    empty and not leading with `.` (a hidden file, `..`)."""
    return bool(text) and not text.startswith(".") and _NAME_UNSAFE.search(text) is None


def file_name_part(text: str) -> str:
    """`text` made one that `holds_in_a_file_name` (its other characters as `_`), or "" if
    nothing of it is left."""
    return _NAME_UNSAFE.sub("_", text).strip(".")


def session_file_name(timestamp: str, session_id: str) -> str:
    """pi's file name for a new session: `<timestamp with - for : and .>_<id>.jsonl`."""
    return f"{timestamp.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"


def make_header(
    cwd: str,
    *,
    session_id: str | None = None,
    timestamp: str | None = None,
    parent_session: str | None = None,
) -> Entry:
    header: Entry = {
        "type": "session",
        "version": CURRENT_VERSION,
        "id": session_id or new_session_id(),
        "timestamp": timestamp or now_iso(),
        "cwd": cwd,
    }
    if parent_session is not None:
        header["parentSession"] = parent_session
    return header


def _base(kind: str, entry_id: str, parent_id: str | None) -> Entry:
    return {"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": now_iso()}


def _drop_none(entry: Entry) -> Entry:
    """pi serialises with JSON.stringify, which leaves out undefined fields."""
    return {k: v for k, v in entry.items() if v is not None or k == "parentId"}


def message_entry(entry_id: str, parent_id: str | None, message: dict[str, Any]) -> Entry:
    return {"type": "message", "id": entry_id, "parentId": parent_id, "timestamp": now_iso(),
            "message": message}


def model_change_entry(
    entry_id: str, parent_id: str | None, provider: str, model_id: str
) -> Entry:
    return {**_base("model_change", entry_id, parent_id), "provider": provider, "modelId": model_id}


def thinking_level_entry(entry_id: str, parent_id: str | None, thinking_level: str) -> Entry:
    return {**_base("thinking_level_change", entry_id, parent_id), "thinkingLevel": thinking_level}


def compaction_entry(
    entry_id: str,
    parent_id: str | None,
    summary: str,
    first_kept_entry_id: str | None,
    tokens_before: int,
    details: Any = None,
    from_hook: bool | None = None,
) -> Entry:
    return _drop_none(
        {
            **_base("compaction", entry_id, parent_id),
            "summary": summary,
            "firstKeptEntryId": first_kept_entry_id,
            "tokensBefore": tokens_before,
            "details": details,
            "fromHook": from_hook,
        }
    )


def branch_summary_entry(
    entry_id: str,
    parent_id: str | None,
    from_id: str,
    summary: str,
    details: Any = None,
    from_hook: bool | None = None,
) -> Entry:
    return _drop_none(
        {
            **_base("branch_summary", entry_id, parent_id),
            "fromId": from_id,
            "summary": summary,
            "details": details,
            "fromHook": from_hook,
        }
    )


def custom_entry(entry_id: str, parent_id: str | None, custom_type: str, data: Any = None) -> Entry:
    return _drop_none(
        {
            "type": "custom",
            "customType": custom_type,
            "data": data,
            "id": entry_id,
            "parentId": parent_id,
            "timestamp": now_iso(),
        }
    )


def custom_message_entry(
    entry_id: str,
    parent_id: str | None,
    custom_type: str,
    content: Any,
    display: bool,
    details: Any = None,
) -> Entry:
    return _drop_none(
        {
            "type": "custom_message",
            "customType": custom_type,
            "content": content,
            "display": display,
            "details": details,
            "id": entry_id,
            "parentId": parent_id,
            "timestamp": now_iso(),
        }
    )


def label_entry(
    entry_id: str, parent_id: str | None, target_id: str, label: str | None
) -> Entry:
    return _drop_none(
        {**_base("label", entry_id, parent_id), "targetId": target_id, "label": label or None}
    )


def session_info_entry(entry_id: str, parent_id: str | None, name: str) -> Entry:
    return {**_base("session_info", entry_id, parent_id), "name": name.strip()}


def stamp(entry: Entry, entry_id: str, parent_id: str | None) -> Entry:
    """A copy of `entry` with a fresh id, parent and timestamp, keys in pi's order.

    pi writes `custom` and `custom_message` entries with their own fields first and the
    id, parentId and timestamp last; every other type starts with them.
    """
    kind = entry.get("type")
    rest = {k: v for k, v in entry.items() if k not in ("type", "id", "parentId", "timestamp")}
    ident = {"id": entry_id, "parentId": parent_id, "timestamp": now_iso()}
    if kind in ("custom", "custom_message"):
        return {"type": kind, **rest, **ident}
    return {"type": kind, **ident, **rest}


def header_version(header: Entry | None) -> int:
    """The format version a header declares; version 1 headers have no version field."""
    if header is None:
        return CURRENT_VERSION
    version = header.get("version", 1)
    if isinstance(version, str) and version.strip().isdigit():
        return int(version)  # pi compares with JS's >=, which reads "3" as 3
    if isinstance(version, float) and version.is_integer():
        return int(version)  # JSON's 3.0 is JS's 3
    return version if isinstance(version, int) and not isinstance(version, bool) else 1


def legacy_id(seed: str, index: int, taken: Container[str]) -> str:
    """A deterministic 8-hex id for a version 1 entry, so two reads of one file agree."""
    attempt = 0
    while True:
        raw = f"{seed}:{index}:{attempt}".encode("utf-8", "surrogatepass")  # ids may be lone halves
        digest = hashlib.blake2b(raw, digest_size=4).hexdigest()
        if digest not in taken:
            return digest
        attempt += 1


def derived_id(seed: str, taken: Container[str]) -> str:
    """A deterministic 8-hex id made from `seed`, not in `taken`: the first
    `blake2b("<seed>:<attempt>", 4 bytes)` in hex, for `attempt` = 0, 1, ..., that is not taken.

    Repair makes its ids this way (see `journal.repair`), so that what `journal info` and
    `journal repair --dry-run` say it would write is what it writes, run after run.
    """
    attempt = 0
    while True:
        candidate = _hex8(f"{seed}:{attempt}")
        if candidate not in taken:
            return candidate
        attempt += 1


def _hex8(text: str) -> str:
    # ids may hold lone surrogate halves (JSON allows them), hence surrogatepass
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def derived_session_id(seed: bytes, timestamp: object = None) -> str:
    """A deterministic session id made from `seed`: a UUID version 7, as the store makes them
    (`new_session_id`), whose time is `timestamp` (an ISO 8601 time) and whose other bits are
    those of `blake2b(seed)` (16 bytes); its time is the hash's too when `timestamp` is not a
    time."""
    digest = bytearray(hashlib.blake2b(seed, digest_size=16).digest())
    millis = _millis(timestamp)
    if millis is not None:
        digest[0:6] = millis.to_bytes(6, "big")
    digest[6] = (digest[6] & 0x0F) | 0x70
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _millis(timestamp: object) -> int | None:
    """Milliseconds since 1970 of an ISO 8601 time (UTC without a zone), if it is one that
    fits a UUID's 48 bits of time."""
    if not isinstance(timestamp, str):
        return None
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    millis = (moment - _EPOCH) // timedelta(milliseconds=1)
    return millis if 0 <= millis < 1 << 48 else None


def migrate(
    header: Entry | None, entries: list[Entry], positions: list[int] | None = None
) -> list[Entry]:
    """Bring version 1 and 2 entries to version 3, in memory, as pi does on load.

    Version 1 entries get deterministic ids chained in file order. A compaction's legacy
    `firstKeptEntryIndex` counts the file's parsed JSON objects with the header at 0 (pi's rule);
    `positions` gives that index for each entry when some objects were set aside (a second
    header). As in pi, an index naming a later entry resolves to nothing. Version 2 renames the
    `hookMessage` role to `custom`. Returns new dicts; the inputs are not modified.
    """
    version = header_version(header)
    if version >= CURRENT_VERSION:
        return entries
    out = entries
    if version < 2:
        out = _migrate_v1(header, entries, positions or list(range(1, len(entries) + 1)))
    return [_migrate_v2_entry(e) for e in out]


def _migrate_v1(header: Entry | None, entries: list[Entry], positions: list[int]) -> list[Entry]:
    seed = str(header.get("id", "")) if header else ""
    taken: set[str] = set()
    id_at: dict[int, str] = {}
    migrated: list[Entry] = []
    prev: str | None = None
    for index, (entry, position) in enumerate(zip(entries, positions, strict=True)):
        entry_id = legacy_id(seed, index, taken)
        taken.add(entry_id)
        id_at[position] = entry_id
        fresh: Entry = {"type": entry.get("type"), "id": entry_id, "parentId": prev}
        fresh.update((k, v) for k, v in entry.items() if k not in ("type", "id", "parentId"))
        index_field = fresh.get("firstKeptEntryIndex")
        if fresh["type"] == "compaction" and _is_number(index_field):
            del fresh["firstKeptEntryIndex"]
            if index_field in id_at:
                fresh["firstKeptEntryId"] = id_at[index_field]
        migrated.append(fresh)
        prev = entry_id
    return migrated


def _migrate_v2_entry(entry: Entry) -> Entry:
    message = entry.get("message")
    if entry.get("type") == "message" and isinstance(message, dict):
        if message.get("role") == "hookMessage":
            return {**entry, "message": {**message, "role": "custom"}}
    return entry


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
