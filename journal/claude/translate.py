"""Claude Code records, in file order, into entries of the store's own model.

Each record with a `uuid` becomes the entries the rest of the library already reads, so the
tree, the projection (`build_context`), the renderer, `View` and the tail work unchanged:

- a `user` record: a `message` entry with the record's uuid as id (a `toolResult` message per
  tool_result block, then a `user` message for the rest; a record that yields several
  messages gets ids `<uuid>`, `<uuid>:1`, ... chained one under the other);
- the lines of one API response (`assistant` records chained one under the other, directly or
  through `progress` records, with the same `message.id`): ONE `message` entry, the id of its
  first line, its message growing as lines arrive (Claude Code writes one block per line);
- a `system` record with subtype `compact_boundary`: a `compaction` entry whose parent is the
  `logicalParentUuid` (so the tree keeps the history before it) and whose `summary` is the text
  of the `isCompactSummary` user record under it; that record becomes a
  `custom` entry (`claude.compact_summary`) so nothing is counted twice; the segment a
  compaction kept (`preservedSegment`) is copied under its anchor (see `_preserve`);
- any other record with a uuid (`system`, `attachment`, `progress`, unknown types): a `custom`
  entry, `customType` `claude.<type>` (`claude.system.<subtype>`), the record as its `data`.

Tool results that answer one response are chained one under the other below it, in the order
they were written, and whatever hangs on any of them hangs on the last: Claude Code hangs each
result on the line of its own `tool_use`, so with parallel calls all but the last result sit
beside the chain, and a plain walk up from the leaf would lose them (the "tool_use ids were
found without tool_result blocks" reports). Records without a uuid (`summary`, `ai-title`,
`file-history-snapshot`, `queue-operation`, ...) are metadata: kept, not entries.

`Translator(merge=False)` translates each record on its own (no merging, no re-parenting):
what the live tail delivers, one entry per line as it is written.
"""

from __future__ import annotations

from typing import Any

from ..model import Entry
from . import messages
from .records import (
    ASSISTANT,
    MESSAGE_TYPES,
    PROGRESS,
    SUMMARY,
    SYSTEM,
    USER,
    Record,
    is_compact_boundary,
    is_compact_summary,
    is_sidechain,
    is_tool_results,
    message_id,
)

CUSTOM_PREFIX = "claude."
COMPACT_SUMMARY = "claude.compact_summary"
_COPY_MARK = "@"


def kept_copy_of(entry_id: str) -> str | None:
    """The entry that `entry_id` copies when it names a copy of a kept segment's entry
    (`<id>@<anchor>`, format.md § 12.4; `journal import` writes them as they are), else
    None. The copy shows the same message again: it is not another one."""
    original, mark, anchor = entry_id.partition(_COPY_MARK)
    return original if mark and original and anchor else None


def custom_type(record: Record) -> str:
    kind = record.get("type")
    name = kind if isinstance(kind, str) else "unknown"
    subtype = record.get("subtype")
    if kind == SYSTEM and isinstance(subtype, str):
        return f"{CUSTOM_PREFIX}{name}.{subtype}"
    return CUSTOM_PREFIX + name


class Translator:
    """Turns records, fed in file order, into entries; remembers what later records need.

    Attributes:
        leaf: the entry of the last main-chain user or assistant record (None before one).
        fallback_leaf: the same for any chain (a subagent file has only sidechain records).
        summary_leaf: the entry named by the latest `summary` record's `leafUuid`.
        metadata: the records without a uuid, in file order.
        duplicates: records whose uuid was already seen (the first is kept).
        invalid: `user` or `assistant` records without a message object (unusable: no
            entry, and their uuid stays free for a valid record).
        raw: entry id -> the records it was made from.
    """

    def __init__(self, *, merge: bool = True) -> None:
        self.merge = merge
        self.leaf: str | None = None
        self.fallback_leaf: str | None = None
        self.summary_leaf: str | None = None
        self.metadata: list[Record] = []
        self.duplicates = 0
        self.invalid: list[Record] = []
        self.raw: dict[str, list[Record]] = {}
        self._alias: dict[str, str] = {}        # record uuid -> the entry its children hang on
        self._groups: dict[str, tuple[str, Entry]] = {}  # entry id -> (message.id, entry)
        self._via: dict[str, str] = {}          # progress entry -> the entry it hangs on
        self._run_tail: dict[str, str] = {}     # response entry -> last result below it
        self._run_of: dict[str, str] = {}       # result entry -> its response entry
        self._pending: dict[str, Entry] = {}    # compaction entries awaiting their summary
        self._tool_names: dict[str, str] = {}
        self._by_mid: dict[str, str] = {}       # message.id -> its response entry
        self._group_base: dict[str, str | None] = {}  # response entry -> where it hangs
        self._entries: dict[str, Entry] = {}    # every entry made, by id
        self._relinks: dict[str, tuple[str, str]] = {}  # anchor uuid -> (head, tail)

    @property
    def leaf_id(self) -> str | None:
        """The leaf a resume continues from: see `journal.claude` for the rule."""
        return self.leaf or self.fallback_leaf or self.summary_leaf

    def feed(self, record: Record) -> list[Entry]:
        """The new entries one record adds (none for metadata, duplicates and merged lines)."""
        uid = record.get("uuid")
        if not isinstance(uid, str):
            self._note_metadata(record)
            return []
        kind = record.get("type")
        is_msg = kind in MESSAGE_TYPES
        if is_msg and not isinstance(record.get("message"), dict):
            self.invalid.append(record)
            return []
        if uid in self._alias:
            # the first record with a uuid is its entry; a repeat still marks where the
            # conversation got to
            self.duplicates += 1
            if is_msg:
                self._note_leaf(record, self._alias[uid])
            return []
        parent_uuid = record.get("parentUuid")
        if not isinstance(parent_uuid, str):
            parent_uuid = None
            if kind == SYSTEM and is_compact_boundary(record):
                logical = record.get("logicalParentUuid")
                parent_uuid = logical if isinstance(logical, str) else None
        base = self._alias.get(parent_uuid, parent_uuid) if parent_uuid is not None else None
        if kind == ASSISTANT:
            self._note_calls(record)
            if self.merge and self._merged(record, uid, base):
                return []
        parent = self._hang(base)
        if kind == ASSISTANT:
            entries = [self._entry(uid, parent, record,
                                   message=messages.assistant_message(record))]
            if self.merge:
                mid = message_id(record)
                if mid is not None:
                    self._groups[uid] = (mid, entries[0])
                    self._by_mid.setdefault(mid, uid)
                    self._group_base[uid] = base
                self._run_tail[uid] = uid
        elif kind == USER:
            entries = self._user(uid, parent, base, record)
        elif kind == SYSTEM and is_compact_boundary(record):
            entries = [self._compaction(uid, parent, record)]
        else:
            entries = [self._custom(uid, parent, record)]
            if kind == PROGRESS and base is not None:
                self._via[uid] = base
        self._alias[uid] = entries[-1]["id"]
        self.raw[entries[0]["id"]] = [record]
        for entry in entries:
            self._entries[entry["id"]] = entry
        if is_msg:
            self._note_leaf(record, entries[-1]["id"])
        if uid in self._relinks:
            entries.extend(self._preserve(uid, *self._relinks.pop(uid)))
        return entries

    # -- the parts of feed

    def _note_metadata(self, record: Record) -> None:
        self.metadata.append(record)
        if record.get("type") == SUMMARY:
            leaf = record.get("leafUuid")
            if isinstance(leaf, str) and leaf in self._alias:
                self.summary_leaf = self._alias[leaf]

    def _note_calls(self, record: Record) -> None:
        content = record["message"].get("content")
        if type(content) is not list:
            return
        for block in content:
            if type(block) is dict and block.get("type") == "tool_use":
                call_id, name = block.get("id"), block.get("name")
                if isinstance(call_id, str) and isinstance(name, str):
                    self._tool_names[call_id] = name

    def _note_leaf(self, record: Record, entry_id: str) -> None:
        self.fallback_leaf = entry_id
        if not is_sidechain(record):
            self.leaf = entry_id

    def _merged(self, record: Record, uid: str, base: str | None) -> bool:
        """Add a line to the response it continues, if it continues one."""
        mid = message_id(record)
        if mid is None:
            return False
        hop = base
        while hop is not None and hop in self._via:
            hop = self._via[hop]
        group = self._groups.get(hop) if hop is not None else None
        if group is None or group[0] != mid:
            # parallel calls may also be written as siblings: each line of the response
            # hangs where its first line does
            hop = self._by_mid.get(mid)
            if hop is None or self._group_base.get(hop) != base:
                return False
            group = self._groups[hop]
        assert hop is not None
        messages.merge_assistant(group[1]["message"], record)
        self._alias[uid] = hop
        self.raw[hop].append(record)
        self._note_leaf(record, hop)
        return True

    def _hang(self, base: str | None) -> str | None:
        """Where a record whose parent is `base` hangs: below the last result of a response,
        also when `base` is a hook's `progress` record hanging on that response (newer
        versions go on from one, written before the last result came)."""
        if base is None or not self.merge:
            return base
        hop = base
        while hop in self._via:
            hop = self._via[hop]
        group = self._run_of.get(hop, hop)
        tail = self._run_tail.get(group)
        return tail if tail is not None else base

    def _user(self, uid: str, parent: str | None, base: str | None,
              record: Record) -> list[Entry]:
        pending = self._pending.pop(base, None) if base is not None else None
        if is_compact_summary(record) and pending is not None:
            text = record["message"].get("content")
            if isinstance(text, list):
                text = "\n".join(b.get("text", "") for b in text
                                 if isinstance(b, dict) and isinstance(b.get("text"), str))
            pending["summary"] = text if isinstance(text, str) else ""
            entry = self._entry(uid, parent, record, custom=COMPACT_SUMMARY)
            return [entry]
        found = messages.user_messages(record, self._tool_names)
        entries: list[Entry] = []
        at = parent
        for n, message in enumerate(found):
            entry_id = uid if n == 0 else f"{uid}:{n}"
            entries.append(self._entry(entry_id, at, record, message=message))
            at = entry_id
        if self.merge and base is not None and is_tool_results(record):
            group = self._run_of.get(base, base)
            if group in self._run_tail:
                self._run_tail[group] = entries[-1]["id"]
                for entry in entries:
                    self._run_of[entry["id"]] = group
        return entries

    def _compaction(self, uid: str, parent: str | None, record: Record) -> Entry:
        meta = record.get("compactMetadata")
        tokens = meta.get("preTokens") if isinstance(meta, dict) else None
        entry: Entry = {"type": "compaction", "id": uid, "parentId": parent,
                        "timestamp": record.get("timestamp"), "summary": "",
                        "firstKeptEntryId": None,
                        "tokensBefore": tokens if isinstance(tokens, int) else 0}
        self._pending[uid] = entry
        segment = meta.get("preservedSegment") if isinstance(meta, dict) else None
        if self.merge and isinstance(segment, dict):
            head, tail = segment.get("headUuid"), segment.get("tailUuid")
            anchor = segment.get("anchorUuid")
            if isinstance(head, str) and isinstance(tail, str) and isinstance(anchor, str):
                self._relinks[anchor] = (head, tail)
        return entry

    def _preserve(self, anchor: str, head: str, tail: str) -> list[Entry]:
        """The segment a compaction kept (`compactMetadata.preservedSegment`), again under its
        anchor: Claude Code relinks the segment's head to the anchor when it loads the file,
        and what comes after the compaction hangs on the segment's tail. The entries from the
        head to the tail are copied under the anchor (ids `<id>@<anchor>`, usage zeroed, as
        Claude Code zeroes it), and the records of the segment now lead to the copies."""
        top = head if head in self._entries else self._alias.get(head)
        at = self._alias.get(tail)
        path: list[str] = []
        while at is not None and at in self._entries:
            path.append(at)
            if at == top:
                break
            at = self._entries[at].get("parentId")
        if not path or path[-1] != top:
            return []  # not a chain of this file: nothing to relink
        path.reverse()
        copies: list[Entry] = []
        mapping: dict[str, str] = {}
        parent = self._alias[anchor]
        for entry_id in path:
            copy = dict(self._entries[entry_id])
            copy["id"] = f"{entry_id}{_COPY_MARK}{anchor}"
            copy["parentId"] = parent
            message = copy.get("message")
            if isinstance(message, dict):
                copy["message"] = dict(message)
                if isinstance(message.get("content"), list):
                    copy["message"]["content"] = list(message["content"])
                if "usage" in message:
                    copy["message"]["usage"] = messages.usage({})
            mapping[entry_id] = parent = copy["id"]
            self._entries[copy["id"]] = copy
            if entry_id in self.raw:
                self.raw[copy["id"]] = self.raw[entry_id]
            copies.append(copy)
        for entry_id in path:
            for record in self.raw.get(entry_id, []):
                uid = record.get("uuid")
                if isinstance(uid, str) and self._alias.get(uid) in mapping:
                    self._alias[uid] = mapping[self._alias[uid]]
            if entry_id in self._run_tail:
                self._run_tail[mapping[entry_id]] = mapping.get(self._run_tail[entry_id],
                                                                self._run_tail[entry_id])
            if entry_id in self._run_of:
                self._run_of[mapping[entry_id]] = mapping.get(self._run_of[entry_id],
                                                              self._run_of[entry_id])
        if self.leaf == self._alias[anchor] or self.leaf in mapping:
            self.leaf = mapping.get(self.leaf or "", mapping[path[-1]])
        return copies

    def _custom(self, uid: str, parent: str | None, record: Record) -> Entry:
        return self._entry(uid, parent, record, custom=custom_type(record))

    @staticmethod
    def _entry(entry_id: str, parent: str | None, record: Record, *,
               message: dict[str, Any] | None = None, custom: str | None = None) -> Entry:
        stamp = record.get("timestamp")
        if message is not None:
            return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp,
                    "message": message}
        return {"type": "custom", "customType": custom, "data": record, "id": entry_id,
                "parentId": parent, "timestamp": stamp}
