"""Records that repair adds to a Claude Code transcript, written as Claude Code writes them.

Claude Code answers a tool call it could not run (the user pressed Escape, the process died)
with a user record holding one `tool_result` block marked `is_error`, whose content is
`[Request interrupted by user for tool use]`, and a `toolUseResult` of
`Error: [Request interrupted by user for tool use]`. Repair writes exactly that record: the
envelope (`cwd`, `sessionId`, `version`, `gitBranch`, `isSidechain`, `agentId`, `userType`)
comes from the assistant record whose call it answers, the key order from a user record of the
same file (Claude Code's own order when the file has none), the `uuid` is a version 4 UUID in
its usual form, derived from the call it answers (`answer_uuid`: a check and the repair
that follows it name the same record, and a check run twice says the same), and the
`timestamp` is one millisecond after the call's, in JavaScript's `toISOString` form.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

INTERRUPTED = "[Request interrupted by user for tool use]"
INTERRUPTED_RESULT = "Error: " + INTERRUPTED

ENVELOPE = ("parentUuid", "isSidechain", "userType", "cwd", "sessionId", "version",
            "gitBranch", "agentId", "slug", "type", "message", "uuid", "timestamp")
"""Claude Code's key order for a user record's envelope (the fields repair writes)."""
BLOCK_ORDER = ("tool_use_id", "type", "content", "is_error")
"""Claude Code's key order for a `tool_result` block, when the file shows none."""
_COPIED = ("isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch", "agentId",
           "slug")


def new_uuid(taken: set[str]) -> str:
    """A random UUID in Claude Code's form (lower-case, hyphenated), not in `taken`."""
    while True:
        value = str(uuid.uuid4())
        if value not in taken:
            return value


def answer_uuid(call: dict[str, Any], tool_ids: list[str], taken: set[str]) -> str:
    """The uuid of the record answering the calls `tool_ids` of the assistant record `call`:
    a version 4 UUID (Claude Code's form) made from the call's uuid and the tool ids, so the
    same transcript always gives the same one; not in `taken`."""
    seed = "\n".join(["interrupted", str(call.get("uuid")), *tool_ids]).encode()
    for attempt in range(1 << 16):
        digest = hashlib.sha256(seed + b"\n%d" % attempt).digest()
        value = str(uuid.UUID(bytes=digest[:16], version=4))
        if value not in taken:
            return value
    return new_uuid(taken)  # unreachable in practice: 65,536 derived uuids all taken


def later_timestamp(stamp: object, ms: int = 1) -> str:
    """`stamp` (an ISO time) plus `ms` milliseconds, as JavaScript's `toISOString` writes it;
    now if `stamp` is not a time."""
    moment = None
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            moment = None
    if moment is None:
        moment = datetime.now(UTC)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def key_order(template: dict[str, Any] | None) -> list[str]:
    """The envelope keys in the order `template` (a user record of the file) has them; keys it
    lacks keep Claude Code's order, placed after the key they follow there."""
    order = [k for k in (template or {}) if k in ENVELOPE]
    for index, key in enumerate(ENVELOPE):
        if key in order:
            continue
        before = next((k for k in reversed(ENVELOPE[:index]) if k in order), None)
        order.insert(order.index(before) + 1 if before is not None else 0, key)
    return order


def interrupted_result(call: dict[str, Any], parent: str, tool_ids: list[str], *,
                       taken: set[str], template: dict[str, Any] | None = None,
                       block_template: dict[str, Any] | None = None) -> dict[str, Any]:
    """The user record Claude Code writes when the calls `tool_ids` of the assistant record
    `call` were interrupted, as a child of `parent`."""
    block_keys = [k for k in (block_template or {}) if k in BLOCK_ORDER] or list(BLOCK_ORDER)
    for key in BLOCK_ORDER:
        if key not in block_keys:
            block_keys.append(key)
    values = {"type": "tool_result", "content": INTERRUPTED, "is_error": True}
    blocks = [{k: (tool_id if k == "tool_use_id" else values[k]) for k in block_keys}
              for tool_id in tool_ids]
    fields: dict[str, Any] = {k: call[k] for k in _COPIED if k in call}
    fields.update(parentUuid=parent, type="user",
                  message={"role": "user", "content": blocks},
                  uuid=answer_uuid(call, tool_ids, taken),
                  timestamp=later_timestamp(call.get("timestamp")))
    record = {k: fields[k] for k in key_order(template) if k in fields}
    record["toolUseResult"] = INTERRUPTED_RESULT
    return record
