"""The record model of Claude Code transcripts: record types, their fields, small predicates.

A record is a plain dict, as orjson gives it; unknown types and fields are kept as they are.
Records with a `uuid` form a tree through `parentUuid` (the conversation, its hooks and
system notes); records without one (`summary`, `file-history-snapshot`, `queue-operation`,
`ai-title`, ...) are metadata about the session.
"""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]

USER = "user"
ASSISTANT = "assistant"
SYSTEM = "system"
SUMMARY = "summary"
ATTACHMENT = "attachment"
FILE_HISTORY_SNAPSHOT = "file-history-snapshot"
QUEUE_OPERATION = "queue-operation"
PROGRESS = "progress"
AI_TITLE = "ai-title"

COMPACT_BOUNDARY = "compact_boundary"

RECORD_TYPES = frozenset({USER, ASSISTANT, SYSTEM, SUMMARY, ATTACHMENT, FILE_HISTORY_SNAPSHOT,
                          QUEUE_OPERATION, PROGRESS, AI_TITLE})
"""The record types the issue names; others Claude Code writes (`custom-title`,
`last-prompt`, ...) are read and kept as unknown records."""

MESSAGE_TYPES = frozenset({USER, ASSISTANT})

METADATA_TYPES = frozenset({SUMMARY, FILE_HISTORY_SNAPSHOT, QUEUE_OPERATION, AI_TITLE})
"""The record types that carry no `uuid`: facts about the session, outside the tree."""

# the fields every record with a uuid carries (Claude Code's own key order)
COMMON_FIELDS = ("parentUuid", "isSidechain", "userType", "cwd", "sessionId", "version",
                 "gitBranch")


def uuid_of(record: Record) -> str | None:
    """The record's `uuid` if it is a string (metadata records have none)."""
    value = record.get("uuid")
    return value if isinstance(value, str) else None


def is_whole_record(value: Any) -> bool:
    """Whether a JSON value is a record of its own, not a piece of one: what repair keeps
    when it finds the value glued after (or before) the cut bytes of a torn line.

    A value that ends a torn line may be a piece of the torn record (a content block, a
    `toolUseResult`) whose braces happen to close there; those carry a `type` but never a
    `uuid` nor a session id. So: an object with a string `type` and a `uuid` (a conversation
    record); or of a metadata type (`summary`, `file-history-snapshot`, `queue-operation`,
    `ai-title`); or of another type with the `sessionId` every record of a session names
    (metadata Claude Code added later: `custom-title`, `last-prompt`, ...).
    """
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return False
    return (uuid_of(value) is not None or value["type"] in METADATA_TYPES
            or isinstance(value.get("sessionId"), str))


def parent_of(record: Record) -> str | None:
    value = record.get("parentUuid")
    return value if isinstance(value, str) else None


def is_sidechain(record: Record) -> bool:
    return record.get("isSidechain") is True


def is_message(record: Record) -> bool:
    """A `user` or `assistant` record with a uuid and a message object."""
    return (record.get("type") in MESSAGE_TYPES and uuid_of(record) is not None
            and isinstance(record.get("message"), dict))


def is_main_message(record: Record) -> bool:
    """A user or assistant record of the main chain (not a sidechain): a leaf candidate."""
    return is_message(record) and not is_sidechain(record)


def is_compact_boundary(record: Record) -> bool:
    return record.get("type") == SYSTEM and record.get("subtype") == COMPACT_BOUNDARY


def is_compact_summary(record: Record) -> bool:
    return record.get("type") == USER and record.get("isCompactSummary") is True


def message_id(record: Record) -> str | None:
    """`message.id` of an assistant record: the API response its line belongs to."""
    message = record.get("message")
    if record.get("type") != ASSISTANT or not isinstance(message, dict):
        return None
    value = message.get("id")
    return value if isinstance(value, str) else None


def content_blocks(record: Record) -> list[Any]:
    """`message.content` as a list of blocks (a string is one text block)."""
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def tool_result_ids(record: Record) -> list[str]:
    """The `tool_use_id` of each tool_result block of a user record."""
    if record.get("type") != USER:
        return []
    return [b["tool_use_id"] for b in content_blocks(record)
            if isinstance(b, dict) and b.get("type") == "tool_result"
            and isinstance(b.get("tool_use_id"), str)]


def is_tool_results(record: Record) -> bool:
    """A user record whose content is only tool results (what answers tool calls)."""
    blocks = content_blocks(record)
    return bool(blocks) and record.get("type") == USER and all(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)
