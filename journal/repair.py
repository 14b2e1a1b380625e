"""File-level repair: a new, valid file from a damaged one, without losing a byte.

The plan is computed in memory from the damaged file (salvage each line, restore the header,
make ids unique and parents precede children, then make the active branch's pairing of tool
calls and results valid by moving, adding and re-parenting entries). Every byte range that is
dropped, and the original bytes of every line that is rewritten, go to the quarantine side file
first. The result is written to a temp file, verified, and swapped in atomically under the
writer lock, with one backup of the original kept next to it.

What counts as damage has one owner: `plan`. Its `problems` are damage (what breaks loading,
or a request even after the file's own client has handled it); its `notes` are pairing states
pi writes and handles itself when it sends a request (`journal.pairing.classify`). Notes stay
in the file as they are unless `strict`, also when pairing damage on the same branch is
repaired: the branch is rebuilt from `pairing.sanitize(..., damage_only=True)`, which fixes the
damage only, so an aborted turn's calls, a missing result or an empty message are still there
as they were (a line is rewritten only for the damage: a note's line only when its parent left
the branch). `journal info` and `journal repair --check` both count `plan`'s problems.

One problem per damaged range: what repair changes only because a range was dropped (the
child of an entry whose line was lost, now re-parented; a tool result whose call's line was
lost, now left off the branch) is listed as a `consequence` of it, not as another problem. A
lost line is recognised by the ids its dropped bytes still hold.

Nothing repair makes up is drawn at random: the ids it gives (a duplicate's new id, a
synthetic result's, the leaf marker's) and the session id of a header it restores without a
pi-style name are derived from the session (`model.derived_id`; docs/format.md § 5), so that
`journal info`, a dry run and the repair itself name the same ones, look after look.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import archivegz, codec, model
from .archivegz import is_compressed
from .boundary import boundary
from .claude.detect import CLAUDE, PI
from .claude.mend import assess_claude, repair_claude
from .codec import Line
from .context import build_context, compaction_summary_message, entry_message
from .errors import JournalError, NotASession, UnsupportedVersion
from .fieldfix import repair_fields
from .files import remove_leftovers, require_space
from .header import is_header
from .identity import real_path
from .lineage import (
    MAX_HOPS,
    intent_path,
    pending_note,
    pending_rotations,
    recover_pending,
    recover_rotation,
    resolve_live,
)
from .live import check_single_name, lock_live
from .lock import DEFAULT_LOCK_TIMEOUT
from .model import Entry
from .pairing import ORPHAN_RESULT, Fix, classify, sanitize, synthetic_result
from .progress import Meter, Progress
from .publish import link_as
from .quarantine import Quarantined, quarantine, quarantine_path_for
from .repair_report import BACKUP_SUFFIX, NOTE_LEFT, Problem, RepairReport
from .salvage import Dropped, Piece, SalvagedLine, salvage_line
from .snapshot import dialect_of_storage, refuse_misread
from .storage import Storage, as_storage
from .tree import Tree

log = logging.getLogger(__name__)

REPAIR_TAG = "repair"
REPAIR_MARKER = "journal.repair"
SOURCE_KEY = "__journal_repair_source"
_REFERENCES = ("parentId", "targetId", "firstKeptEntryId", "fromId")
"""The fields of an entry that name another entry (they follow a renamed duplicate)."""
_ID_RE = re.compile(rb'"id"\s*:\s*"([^"\\\x00]{1,256})"')
NAME_RE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d)-(\d\d)-(\d\d)-(\d{3})Z_([0-9a-fA-F-]{36})\.jsonl$"
)


@dataclass(slots=True)
class _Item:
    """One entry of the file being rebuilt; `raw` is its original line while it is unchanged."""

    entry: Entry
    raw: bytes | None
    line: int | None
    offset: int | None
    original: bytes | None = None
    edit_reason: str = ""

    def edit(self, reason: str) -> Entry:
        if self.raw is not None:
            self.original, self.raw = bytes(self.raw), None
            self.entry = dict(self.entry)
            self.edit_reason = reason
        return self.entry


@dataclass
class _Plan:
    path: str
    version: int
    header: _Item
    items: list[_Item]
    problems: list[Problem] = field(default_factory=list)
    dropped: list[Quarantined] = field(default_factory=list)
    migrate: bool = False
    taken: set[str] | None = None
    strict: bool = False
    notes: list[Problem] = field(default_factory=list)
    consequences: list[Problem] = field(default_factory=list)
    _lost: set[str] | None = None
    meter: Meter = field(default_factory=lambda: Meter(None, 0))
    read: int = -1  # the bytes of the session read (as stored: compressed, for an archive)

    def problem(self, kind: str, action: str, item: _Item | None = None, *, note: bool = False,
                consequence: bool = False, **kw: Any) -> None:
        if item is not None:
            kw.setdefault("line", item.line)
            kw.setdefault("offset", item.offset)
            kw.setdefault("entry_id", item.entry.get("id") if self.version >= 2 else None)
        found = Problem(kind, action, **kw)
        if note:
            self.notes.append(found)
        elif consequence:
            self.consequences.append(found)
        else:
            self.problems.append(found)

    def lost(self, an_id: object) -> bool:
        """True when `an_id` was defined (as an entry's or a tool call's id) in dropped bytes."""
        return isinstance(an_id, str) and an_id in self.lost_ids()

    def lost_ids(self) -> set[str]:
        if self._lost is None:
            self._lost = {m.group(1).decode("utf-8", "replace")
                          for q in self.dropped for m in _ID_RE.finditer(q.data)}
        return self._lost

    def in_use(self) -> set[str]:
        """The ids an id repair makes must avoid (it adds each one it makes): every entry id
        of the session, every id its entries name (`_fix_structure` collects those before it
        changes any), and the ids in the bytes it drops."""
        if self.taken is None:
            self.taken = {it.entry["id"] for it in self.items} | self.lost_ids()
        return self.taken

    def make_id(self, seed: str) -> str:
        """A new entry id derived from `seed` (`model.derived_id`), unique in the session."""
        made = model.derived_id(seed, self.in_use())
        self.in_use().add(made)
        return made


# planning


def plan(path: str, *, migrate: bool = False, strict: bool = False,
         progress: Progress | None = None) -> _Plan:
    """Work out what repair would do, without writing anything (`_render` gives the bytes).

    `strict` settles the notes too (see the module docstring); without it they stay as they are.
    `progress` is told of the bytes checked; they count for half of the work (publishing the
    new file, the other half).
    """
    with as_storage(path).open_reader() as reader:
        original = reader.stream.read()
    read = len(original)
    if is_compressed(path):
        original = archivegz.decompress(original, path)
    meter = Meter(progress, 2 * len(original))
    with codec.bulk_parsing():
        p = _salvage(path, original, meter)
    p.meter = meter
    p.read = read
    p.migrate = migrate
    p.strict = strict
    if migrate and p.version == 2:  # version 1 entries were migrated (both steps) on reading
        for item, entry in zip(p.items, model.migrate(
                {"type": "session", "version": 2}, [it.entry for it in p.items]), strict=True):
            item.entry = entry
    _fix_fields(p)
    if p.version >= 2:
        _fix_structure(p)
    _fix_pairing(p)
    if p.version < 2:
        _renumber_first_kept(p)
    if migrate and p.version < model.CURRENT_VERSION:
        p.problem("migrated", f"written as version {model.CURRENT_VERSION}",
                  detail=f"was version {p.version}")
    return p


def _lines(data: bytes, meter: Meter,
           ) -> Iterator[SalvagedLine | tuple[Any, int, memoryview, int]]:
    """Each line of the file: clean ones parsed directly, damaged ones through salvage."""
    pos, number, size = 0, 1, len(data)
    loads = orjson.loads
    view = memoryview(data)
    while pos < size:
        if pos >= meter.next:
            meter.advance_to(pos)
        nl = data.find(b"\n", pos)
        if nl < 0:
            tail = data[pos:]
            out = SalvagedLine(number, pos)
            out.dropped.append(Dropped(pos, tail, codec.TORN_TAIL, "no newline at end of file"))
            yield out
            return
        raw = view[pos:nl]
        try:
            if pos == 0 and data.startswith(codec.BOM):
                raise orjson.JSONDecodeError("BOM", "", 0)
            value = loads(raw)
        except orjson.JSONDecodeError:
            yield salvage_line(Line(pos, number, bytes(raw)))
        else:
            yield (value, pos, raw, number)  # a clean line: no salvage objects needed
        pos = nl + 1
        number += 1


def _salvage(path: str, data: bytes, meter: Meter) -> _Plan:
    pieces: list[tuple[Piece, int]] = []
    dropped: list[Quarantined] = []
    problems: list[Problem] = []
    for salvaged in _lines(data, meter):
        if type(salvaged) is tuple:
            value, offset, raw, number = salvaged
            pieces.append((Piece(value, offset, raw), number))  # type: ignore[arg-type]
            continue
        assert isinstance(salvaged, SalvagedLine)
        for d in salvaged.dropped:
            dropped.append(Quarantined(path, d.offset, d.data, d.reason, d.detail))
            problems.append(Problem(d.reason, "quarantined", salvaged.line, d.offset,
                                    detail=d.detail))
        for kind, action in salvaged.notes:
            problems.append(Problem(kind, action, salvaged.line, salvaged.offset))
        for piece in salvaged.pieces:
            pieces.append((piece, salvaged.line))
            if not piece.exact:
                problems.append(Problem(codec.INVALID_UTF8, "replaced invalid bytes",
                                        salvaged.line, piece.offset, detail=piece.note))
    header_at = next((i for i, (pc, _) in enumerate(pieces) if is_header(pc.value)), None)
    header_item: _Item | None = None
    if header_at is not None:
        pc, line = pieces[header_at]
        header_item = _Item(pc.value, pc.raw if pc.exact else None, line, pc.offset)
        if not pc.exact:
            header_item.original, header_item.edit_reason = bytes(pc.raw), codec.INVALID_UTF8
    version = model.header_version(header_item.entry if header_item else None)
    restored_version = False
    if header_item is not None and "version" not in header_item.entry and _has_tree_ids(pieces):
        # Version 1 entries never carry ids: a header without a version over entries that all
        # have id and parentId lost its version field (a damaged byte); v1 would flatten them.
        version, restored_version = model.CURRENT_VERSION, True
        fixed = {"type": "session", "version": model.CURRENT_VERSION,
                 **{k: v for k, v in header_item.entry.items() if k != "type"}}
        if header_item.raw is not None:
            header_item.edit("header_version")
        header_item.entry = fixed
    if header_item is None:
        version = model.CURRENT_VERSION if any(
            isinstance(pc.value, dict) and "id" in pc.value for pc, _ in pieces
        ) else 1
    plan_ = _Plan(path, version, header_item or _synthesize_header(path, data, pieces, version),
                  [], problems, dropped)
    if restored_version:
        plan_.problem("header_version", f"restored version {model.CURRENT_VERSION}",
                      header_item, detail="the header had no version; its entries have ids")
    if header_item is None:
        plan_.problem(codec.MISSING_HEADER, "synthesized a header", line=1, offset=0,
                      detail=f"session id {plan_.header.entry['id']}")
    elif header_at != 0:
        plan_.problem("header_not_first", "moved the header to line 1", header_item)
    raw_entries: list[Entry] = []
    positions: list[int] = []
    after_extra_header = False
    for index, (pc, line) in enumerate(pieces):
        if index == header_at:
            continue
        if is_header(pc.value):
            plan_.dropped.append(Quarantined(path, pc.offset, bytes(pc.raw), codec.EXTRA_HEADER))
            plan_.problem(codec.EXTRA_HEADER, "quarantined; its entries join this session",
                          line=line, offset=pc.offset)
            after_extra_header = True
            continue
        problem = codec.check_entry(pc.value, version)
        if problem is not None:
            reason = problem.split(":")[0]
            plan_.dropped.append(Quarantined(path, pc.offset, bytes(pc.raw), reason, problem))
            plan_.problem(reason, "quarantined", line=line, offset=pc.offset, detail=problem)
            continue
        item = _Item(pc.value, pc.raw if pc.exact else None, line, pc.offset)
        if not pc.exact:
            item.original, item.edit_reason = pc.raw, codec.INVALID_UTF8
        if after_extra_header and version >= 2 and pc.value.get("parentId") is None:
            item.edit_reason = "concatenated_root"
        plan_.items.append(item)
        raw_entries.append(pc.value)
        positions.append(index if header_at in (None, 0) else index + 1)
    if version < 2:
        for item, migrated in zip(plan_.items, model.migrate(
            {"type": "session", "id": plan_.header.entry.get("id")}, raw_entries, positions
        ), strict=True):
            item.entry = migrated
    return plan_


def _has_tree_ids(pieces: list[tuple[Piece, int]]) -> bool:
    entries = [pc.value for pc, _ in pieces if isinstance(pc.value, dict)
               and pc.value.get("type") != "session"]
    return bool(entries) and all(
        isinstance(e.get("id"), str) and "parentId" in e for e in entries)


def _synthesize_header(path: str, data: bytes, pieces: list[tuple[Piece, int]],
                       version: int) -> _Item:
    match = NAME_RE.match(os.path.basename(path))
    if match:
        date, mm, ss, ms, session_id = match.groups()
        timestamp = f"{date}:{mm}:{ss}.{ms}Z"
    else:
        stamps = [pc.value.get("timestamp") for pc, _ in pieces if isinstance(pc.value, dict)]
        found = next((s for s in stamps if isinstance(s, str)), None)
        timestamp = found or model.now_iso()
        # made from the first line, so that every look at the session names the same id
        first = data.find(b"\n")
        session_id = model.derived_session_id(
            b"missing_header:" + os.fsencode(os.path.basename(path)) + b":"
            + (data if first < 0 else data[:first]), found)
    header = model.make_header("", session_id=session_id, timestamp=timestamp)
    if version < 2:
        del header["version"]
    return _Item(header, None, None, None)


def _fix_fields(p: _Plan) -> None:
    """Wrongly typed fields (see `journal.fieldfix`): fix the field or drop the entry.

    A dropped entry's children take its parent, resolved like any parent lookup: to the
    nearest earlier definition of the id, so a later entry reusing the id is not affected.
    """
    replaced: dict[str, str | None] = {}  # id of a dropped entry -> the parent that stands in
    kept: list[_Item] = []
    dropped_ids: list[str] = []
    all_items = p.items
    for item in p.items:
        parent = item.entry.get("parentId")
        if isinstance(parent, str) and parent in replaced:
            if p.version >= 2:
                item.edit(item.edit_reason or codec.BAD_FIELD)["parentId"] = replaced[parent]
            else:  # version 1 lines carry no parent: only the migrated entry changes
                item.entry = {**item.entry, "parentId": replaced[parent]}
        fix = repair_fields(item.entry)
        entry_id = item.entry.get("id")
        if fix is not None and fix.entry is None:
            original = item.raw if item.raw is not None else item.original
            p.dropped.append(Quarantined(p.path, item.offset or 0, bytes(original or b""),
                                         codec.BAD_FIELD, fix.actions[0]))
            p.problem(codec.BAD_FIELD, "quarantined; its children now hang from its parent",
                      item, detail=fix.actions[0])
            if isinstance(entry_id, str):
                replaced[entry_id] = item.entry.get("parentId")
                dropped_ids.append(entry_id)
            continue
        if fix is not None and fix.entry is not None:
            item.edit(codec.BAD_FIELD)
            item.entry = fix.entry
            for action in fix.actions:
                p.problem(codec.BAD_FIELD, action, item)
        if isinstance(entry_id, str):
            replaced.pop(entry_id, None)
        kept.append(item)
    p.items = kept
    if p.version < 2 and dropped_ids:
        _follow_dropped_first_kept(p, set(dropped_ids), all_items)


def _follow_dropped_first_kept(p: _Plan, dropped: set[str], all_items: list[_Item]) -> None:
    """A version 1 compaction that kept from a dropped entry keeps from the entry after it.

    Its index counts lines, so left alone it would name whatever line moves into the gap.
    """
    following: dict[str, str] = {}
    waiting: list[str] = []
    for item in all_items:
        entry_id = item.entry.get("id")
        if entry_id in dropped:
            waiting.append(entry_id)
        elif isinstance(entry_id, str):
            following.update((w, entry_id) for w in waiting)
            waiting = []
    for item in p.items:
        first_kept = item.entry.get("firstKeptEntryId")
        if item.entry.get("type") == "compaction" and first_kept in following:
            item.entry = {**item.entry, "firstKeptEntryId": following[first_kept]}


def _fix_structure(p: _Plan) -> None:
    """Unique ids, and parents that exist and come before their children (invariant 5).

    A later duplicate is renamed to an id derived from its line (`_line_seed`), so that
    `journal info`, `repair --dry-run` and the repair name the same one.
    """
    all_ids = {it.entry["id"] for it in p.items}
    named = {value for it in p.items for key in _REFERENCES
             if isinstance(value := it.entry.get(key), str)}
    p.taken = all_ids | named | p.lost_ids()  # taken before anything here changes
    seen: set[str] = set()
    alias: dict[str, str] = {}
    prev: str | None = None
    for item in p.items:
        entry = item.entry
        for key in _REFERENCES:
            value = entry.get(key)
            if isinstance(value, str) and value in alias and alias[value] != value:
                item.edit("duplicate_id")[key] = alias[value]
        entry = item.entry
        if entry["id"] in seen:
            fresh = p.make_id(_line_seed(tree_kind := "duplicate_id", item))
            p.problem(tree_kind, f"renamed to {fresh}", item,
                      detail="later references follow the rename")
            alias[entry["id"]] = fresh
            item.edit(tree_kind)["id"] = fresh
            all_ids.add(fresh)
        entry = item.entry
        parent = entry.get("parentId")
        if item.edit_reason == "concatenated_root" and prev is not None and parent is None:
            item.edit("concatenated_root")["parentId"] = prev
            p.problem("concatenated_root", f"attached to the previous entry {prev}", item)
        elif parent is not None and parent not in seen:
            kind = ("self_parent" if parent == entry["id"]
                    else "parent_after_child" if parent in all_ids else "missing_parent")
            action = f"attached to the previous entry {prev}" if prev else "made a root"
            p.problem(kind, action, item, detail=f"parentId was {parent}",
                      consequence=kind == "missing_parent" and p.lost(parent))
            item.edit(kind)["parentId"] = prev
        seen.add(item.entry["id"])
        prev = item.entry["id"]


def _line_seed(kind: str, item: _Item) -> str:
    """What the id repair gives `item` for `kind` derives from: the line's byte offset and
    its original bytes (a hash of them), so two copies of one line get different ids and
    nothing appended after the line changes its id."""
    data = item.raw if item.raw is not None else item.original or b""
    return f"{kind}:{item.offset}:{hashlib.blake2b(data, digest_size=16).hexdigest()}"


# pairing on the active branch


def _fix_pairing(p: _Plan) -> None:
    if not p.items:
        return
    tree = Tree(it.entry for it in p.items)
    path = tree.path(tree.leaf)
    compaction_at, region_start = boundary([p.items[index].entry for index in path])
    compaction = None if compaction_at is None else p.items[path[compaction_at]]
    region = path[region_start:]
    messages: list[dict[str, Any]] = []
    owners: list[int | None] = []
    anchors: list[tuple[int, int]] = []  # (item index, index of preceding message)
    if compaction is not None:
        messages.append(compaction_summary_message(compaction.entry))
        owners.append(None)
    for index in region:
        message = entry_message(p.items[index].entry)
        if message is None:
            anchors.append((index, len(messages) - 1))
            continue
        messages.append({**message, SOURCE_KEY: len(messages)})
        owners.append(index)
    fixed, report = sanitize(messages)
    if not report.changed:
        return
    notes, damage = classify(messages, report)
    if not p.strict:
        # the notes stay as they are, damage or not: only the damage is written anew
        for fix in notes:
            _record_fix(p, fix, owners, note=True, action=NOTE_LEFT)
        if not damage:
            return
        fixed, report = sanitize(messages, damage_only=True)
        notes, damage = [], report.fixes
    _record_fixes(p, notes, damage, owners)
    order = _new_order(p, messages, owners, anchors, fixed)
    start_item = p.items[order[0]] if order else None
    _relink(p, path, region_start, order)
    if compaction is not None and start_item is not None:
        start_id = start_item.entry["id"]
        first_kept = compaction.entry.get("firstKeptEntryId")
        if start_id != first_kept and start_item is not compaction:
            compaction.edit("compaction_boundary")["firstKeptEntryId"] = start_id
            p.problem("compaction_boundary", f"firstKeptEntryId now {start_id}", compaction,
                      detail=f"was {first_kept}, which left the active branch")


def _record_fixes(p: _Plan, notes: list[Fix], damage: list[Fix],
                  owners: list[int | None]) -> None:
    is_note = {id(f) for f in notes}
    for fix in sorted([*notes, *damage], key=lambda f: f.index):
        _record_fix(p, fix, owners, note=id(fix) in is_note, action=_pairing_action(fix.rule))


def _record_fix(p: _Plan, fix: Fix, owners: list[int | None], *, note: bool,
                action: str) -> None:
    owner = owners[fix.index] if fix.index < len(owners) else None
    item = p.items[owner] if owner is not None else None
    p.problem(fix.rule, action, item, note=note, detail=fix.detail,
              consequence=fix.rule == ORPHAN_RESULT and p.lost(fix.call_id))


def _new_order(p: _Plan, messages: list[dict[str, Any]], owners: list[int | None],
               anchors: list[tuple[int, int]], fixed: list[dict[str, Any]]) -> list[int]:
    """The region's entries in their repaired path order (item indices; new items appended)."""
    placed_at: dict[int, int] = {}  # message index -> position in `order`
    order: list[int] = []
    for message in fixed:
        source = message.get(SOURCE_KEY)
        clean = {k: v for k, v in message.items() if k != SOURCE_KEY}
        if source is None:
            if owners and not order and messages and owners[0] is None and clean.get(
                "role"
            ) == "compactionSummary":
                continue
            after = p.items[order[-1]].entry["id"] if order else ""
            order.append(_new_message_item(p, clean, after))
            continue
        owner = owners[source]
        if owner is None:
            continue
        item = p.items[owner]
        original = {k: v for k, v in messages[source].items() if k != SOURCE_KEY}
        if clean != original:
            if item.entry.get("type") == "message":
                item.edit("pairing")["message"] = clean
            else:
                log.warning("pairing changed a %s entry; kept as is", item.entry.get("type"))
        placed_at[source] = len(order)
        order.append(owner)
    dropped = [owner for i, owner in enumerate(owners)
               if owner is not None and i not in placed_at]
    if p.version < 2:
        for owner in dropped:
            item = p.items[owner]
            p.dropped.append(Quarantined(p.path, item.offset or 0,
                                         bytes(item.raw or item.original or b""), "pairing",
                                         "message left the history"))
    return _insert_anchored(order, anchors, placed_at)


def _insert_anchored(order: list[int], anchors: list[tuple[int, int]],
                     placed_at: dict[int, int]) -> list[int]:
    after: dict[int, list[int]] = {}
    for index, message_index in anchors:
        position = -1
        for m in range(message_index, -1, -1):
            if m in placed_at:
                position = placed_at[m]
                break
        after.setdefault(position, []).append(index)
    result = list(after.get(-1, []))
    for position, item_index in enumerate(order):
        result.append(item_index)
        result.extend(after.get(position, []))
    return result


def _new_message_item(p: _Plan, message: dict[str, Any], after: str) -> int:
    """A new entry for `message` (a synthetic result), placed after the entry `after`; its id
    derives from that entry's id and the tool call it answers."""
    seed = f"synthetic_result:{after}:{message.get('toolCallId')}"
    entry = model.message_entry(p.make_id(seed), None, message)
    p.items.append(_Item(entry, None, None, None, edit_reason="synthetic"))
    return len(p.items) - 1


def _pairing_action(rule: str) -> str:
    return {
        "missing_result": "added a synthetic error result",
        "moved_result": "moved the result back after its call",
    }.get(rule, "fixed on the active branch")


def _relink(p: _Plan, path: list[int], region_start: int, order: list[int]) -> None:
    """Chain the region's entries in `order`, re-parenting what moved; pin the leaf."""
    parent = p.items[path[region_start - 1]].entry["id"] if region_start > 0 else None
    for index in order:
        item = p.items[index]
        if item.entry.get("parentId") != parent:
            item.edit(item.edit_reason or "reparented")["parentId"] = parent
        parent = item.entry["id"]
    region_parent = p.items[path[region_start - 1]].entry["id"] if region_start > 0 else None
    p.items = _physical_order(p, order, set(path[region_start:]), region_parent)


def _physical_order(p: _Plan, order: list[int], region: set[int],
                    region_parent: str | None) -> list[_Item]:
    """Items in an order where every parent precedes its children and the leaf comes last.

    In a version 1 file (a single chain, no ids on disk) a region entry that left the path
    cannot stay as a side branch; it was quarantined and is left out here.
    """
    in_order = set(order)
    emitted: set[str] = set()
    waiting: dict[str, list[int]] = {}
    out: list[int] = []
    next_in_order = 0

    def emit(index: int) -> None:
        stack = [index]
        while stack:
            i = stack.pop()
            out.append(i)
            entry_id = p.items[i].entry["id"]
            emitted.add(entry_id)
            stack.extend(reversed(waiting.pop(entry_id, [])))

    def emit_order_through(index: int) -> None:
        nonlocal next_in_order
        while next_in_order < len(order):
            i = order[next_in_order]
            next_in_order += 1
            if p.items[i].entry["id"] not in emitted:
                emit(i)
            if i == index:
                return

    original_count = sum(1 for it in p.items if it.edit_reason != "synthetic")
    for i in range(original_count):
        if i in in_order:
            if p.items[i].entry["id"] not in emitted:
                emit_order_through(i)
            continue
        parent = p.items[i].entry.get("parentId")
        if p.version < 2 and i in region:
            continue
        if parent is None or parent in emitted:
            emit(i)
        else:
            waiting.setdefault(parent, []).append(i)
    emit_order_through(-1)
    for pending in list(waiting.values()):
        for i in pending:
            emit(i)
    items = [p.items[i] for i in out]
    leaf = p.items[order[-1]] if order else None
    leaf_id = leaf.entry["id"] if leaf is not None else region_parent
    if p.version >= 2 and items and (leaf is None or items[-1] is not leaf):
        # pi takes the last line as the leaf: a marker under the real leaf keeps it there
        marker = model.custom_entry(
            p.make_id(f"leaf_pinned:{leaf_id}"), leaf_id, REPAIR_MARKER,
            {"leaf": leaf_id, "reason": "entries left off the active branch follow it"},
        )
        items.append(_Item(marker, None, None, None, edit_reason="synthetic"))
        p.problem("leaf_pinned", "appended a journal.repair marker under the leaf",
                  entry_id=leaf_id)
    return items


def _renumber_first_kept(p: _Plan) -> None:
    """Version 1 compactions point at a line index; recompute it for the new layout."""
    position = {it.entry["id"]: n for n, it in enumerate(p.items, start=1)}
    for item in p.items:
        entry = item.entry
        if entry.get("type") != "compaction":
            continue
        if "firstKeptEntryId" not in entry:
            # It kept nothing (its index named no entry); if the new layout would make that
            # index name one, drop the index so it still keeps nothing, as pi would read it.
            raw_index = _original_first_kept_index(item)
            if isinstance(raw_index, int) and 1 <= raw_index <= len(p.items) and (
                    item.raw is not None):
                item.edit("renumbered")
                p.problem("renumbered", "dropped a firstKeptEntryIndex that named no entry",
                          item, detail=f"was {raw_index}")
            continue
        index = position.get(entry["firstKeptEntryId"])
        raw_index = _original_first_kept_index(item)
        if index is not None and index != raw_index:
            item.edit(item.edit_reason or "renumbered")
            if item.edit_reason == "renumbered":
                p.problem("renumbered", f"firstKeptEntryIndex now {index}", item,
                          detail=f"was {raw_index}")


def _original_first_kept_index(item: _Item) -> object:
    original = bytes(item.raw if item.raw is not None else item.original or b"{}")
    try:
        value = orjson.loads(original.decode("utf-8", errors="replace").encode())
    except orjson.JSONDecodeError:
        return None
    return value.get("firstKeptEntryIndex") if isinstance(value, dict) else None


# output


def _render(p: _Plan) -> bytes:
    """The new file's bytes; kept lines are slices of the original, copied once here."""
    parts: list[bytes | memoryview] = []
    for item in [p.header, *p.items]:
        if item.raw is not None and not (p.migrate and p.version < model.CURRENT_VERSION):
            parts.append(item.raw)
            parts.append(b"\n")
        else:
            parts.append(_line(p, item, header=item is p.header))
    return b"".join(parts)


def _line(p: _Plan, item: _Item, header: bool = False) -> bytes:
    if p.migrate and p.version < model.CURRENT_VERSION:
        entry = dict(item.entry)
        if header:
            entry = {"type": "session", "version": model.CURRENT_VERSION,
                     **{k: v for k, v in entry.items() if k not in ("type", "version")}}
        return codec.encode(entry)
    if item.raw is not None:
        return bytes(item.raw) + b"\n"
    entry = item.entry
    if p.version < 2 and not header:
        entry = _to_v1(entry, p)
    return codec.encode(entry)


def _to_v1(entry: Entry, p: _Plan) -> Entry:
    out = {k: v for k, v in entry.items() if k not in ("id", "parentId")}
    if out.get("type") == "compaction" and "firstKeptEntryId" in out:
        position = {it.entry["id"]: n for n, it in enumerate(p.items, start=1)}
        target = out.pop("firstKeptEntryId")
        if target in position:
            out["firstKeptEntryIndex"] = position[target]
    return out


def _rewritten(p: _Plan) -> list[Quarantined]:
    out = []
    for item in [p.header, *p.items]:
        if item.original is not None:
            out.append(Quarantined(p.path, item.offset or 0, item.original,
                                   item.edit_reason or "rewritten",
                                   "original bytes of a line the repair rewrote"))
    return out


# applying


def repair(
    path: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    migrate: bool = False,
    strict: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Progress | None = None,
    dialect: str | None = None,
) -> RepairReport:
    """Repair one session file in place (atomically), or report what would change.

    A Claude Code transcript (detected from its records, or `dialect="claude"`) is repaired
    in its own format by `journal.claude.repair_claude` (no pi header, no record of ours).

    Damage is always repaired; notes (states pi handles itself when it sends a request, listed
    in `report.notes`) are left in the file unless `strict`.

    Takes the writer lock (raising LockTimeout if a live writer keeps it); keeps one backup
    at `<path>.bak`; appends every dropped or rewritten byte range to `<path>.quarantine`.
    `progress` is called with (done, total) as the file is checked and written (see
    `journal.progress`).

    Example:
        >>> report = repair("sessions/a.jsonl")  # doctest: +SKIP
        >>> report.changed, report.counts
    """
    # the real file is repaired (a link to it stays a link), under the real file's lock
    path = real_path(path)
    if os.path.isdir(path):
        raise NotASession(path, "is a directory; pass the session files it holds")
    path = _readable(path)
    if dialect_of_storage(as_storage(path), dialect) == CLAUDE:
        return repair_claude(path, dry_run=dry_run, lock_timeout=lock_timeout,
                             progress=progress)
    refuse_misread(path, PI)  # a Claude Code transcript forced as pi is not repaired as one
    if dry_run:
        report = assess(path, migrate=migrate, strict=strict, progress=progress, dialect="pi")
        pending = pending_note(path)
        if pending is not None:  # what `repair` does first: a finding of --check too
            report.problems.append(Problem("pending_rotation", pending))
            report.changed = True
        return report
    if is_compressed(path):
        raise NotASession(path, "a compressed archive is read-only; repair its live successor "
                          "(or check this one with --check)")
    finished: list[str] = []  # the interrupted rotations finished first: findings too
    if pending_rotations(path):  # its own interrupted rotation, or the file's it continues
        finished = recover_pending(path, lock_timeout)
        if not os.path.exists(path):  # finished: the file is archived; its successor is live
            path = resolve_live(path)[0]
    path, lock, _ = lock_live(path, lock_timeout, recover=False, follow_seals=False)
    try:
        if os.path.lexists(intent_path(path)):  # a left-over rotation: finish or clear it
            action = recover_rotation(path)
            if not os.path.exists(path):
                raise NotASession(path, "an interrupted rotation was finished and this file "
                                  "archived; repair its live successor instead")
            if action is not None:
                finished.append(f"{path}: an interrupted rotation was {action}")
        remove_leftovers(path)
        check_single_name(path)
        report = _apply(plan(path, migrate=migrate, strict=strict, progress=progress), path)
    finally:
        lock.release()
    if finished:
        report.problems[:0] = [Problem("pending_rotation", done) for done in finished]
        report.changed = True
    return report


def _apply(p: _Plan, path: str) -> RepairReport:
    """Publish the plan's file (if it changes anything) under the lock the caller holds."""
    report = _report(p, path, dry_run=False)
    if not report.changed:
        p.meter.finish()
        return report
    quarantined = _publish(p, _render(p), path)
    p.meter.finish()
    report.backup = path + BACKUP_SUFFIX
    if quarantined:
        report.quarantine = quarantine_path_for(path)
    return report


def repair_held(storage: Storage, keep: Callable[[list[Quarantined]], None], *,
                migrate: bool = False, strict: bool = False,
                progress: Progress | None = None) -> RepairReport:
    """Repair a session of any backend whose writer lock the caller holds: the same plan and
    verification as a file's repair (`migrate`: a version 1 or 2 session written as version
    3 too), published through `storage.publish`; `keep` is given every dropped or rewritten
    byte range before the swap (a database keeps them in its quarantine table). Nothing is
    published if `keep` raises."""
    p = plan(storage.locator, migrate=migrate, strict=strict, progress=progress)
    return _publish_held(p, storage, keep)


def _publish_held(p: _Plan, storage: Storage,
                  keep: Callable[[list[Quarantined]], None]) -> RepairReport:
    report = _report(p, storage.locator, dry_run=False)
    if report.changed:
        _verify(p)
        items = p.dropped + _rewritten(p)
        storage.publish(_render(p), REPAIR_TAG, lambda: keep(items), based_on=p.read)
        report.quarantine = storage.locator if items else None
    p.meter.finish()
    return report


def migrate_held_in(storage: Storage,
                    keep: Callable[[list[Quarantined]], None]) -> RepairReport:
    """`migrate_held` for a session of any backend whose writer lock the caller holds (a
    database session, under its lease): the version 1 or 2 session written as version 3
    through `storage.publish`, `keep` given the original bytes of every line rewritten.
    A damaged one raises UnsupportedVersion, as `migrate_held` does."""
    p = plan(storage.locator, migrate=True)
    _refuse_damage(p, storage.locator)
    return _publish_held(p, storage, keep)


def migrate_held(path: str) -> RepairReport:
    """Rewrite a version 1 or 2 session file as version 3, as pi does when it opens one; the
    caller holds the file's writer lock (`Session.open` does this when it opens one).

    The same path as `repair(path, migrate=True)`: the entries migrated in memory
    (`model.migrate`), written to a temp file, verified, the original kept as `<path>.bak`, and
    swapped in atomically, so a crash leaves the original or the migrated file. Unlike pi, which
    drops unreadable lines when it rewrites, this migrates only a file with no damage: every
    entry is kept and the file projects as before. A damaged one raises UnsupportedVersion
    naming `journal repair --migrate` (which repairs and migrates, and says what it changed).
    """
    p = plan(path, migrate=True)
    _refuse_damage(p, path)
    return _apply(p, path)


def _refuse_damage(p: _Plan, path: str) -> None:
    """UnsupportedVersion if migrating on open would have to repair too (it only migrates)."""
    damage = [problem for problem in p.problems if problem.kind != "migrated"]
    if damage or p.dropped:
        kinds = ", ".join(sorted({problem.kind for problem in damage})) or "unreadable bytes"
        raise UnsupportedVersion(
            path, p.version,
            f"not migrated on open: it needs repair too ({kinds}); run 'journal repair "
            f"--migrate {path}' to repair it and write it as version {model.CURRENT_VERSION}")


def assess(path: str, *, migrate: bool = False, strict: bool = False,
           progress: Progress | None = None, dialect: str | None = None) -> RepairReport:
    """What `repair` would find and do in `path`, without a lock and without writing.

    The one count of damage and notes: `repair --check`, `--dry-run` and `journal info` all
    take theirs from here, so they agree. A Claude Code transcript is assessed in its own
    format (`journal.claude.assess_claude`).
    """
    if dialect_of_storage(as_storage(path), dialect) == CLAUDE:
        return assess_claude(path, progress=progress)
    p = plan(path, migrate=migrate, strict=strict, progress=progress)
    p.meter.finish()
    return _report(p, path, dry_run=True)


def _readable(path: str) -> str:
    """`path`, or the file that continues it if it was rotated away; a missing or unreadable
    file is reported before anything (a lock file included) is created."""
    for _ in range(MAX_HOPS):
        try:
            as_storage(path).open_reader().close()
            return path
        except NotASession:
            live = resolve_live(path)[0]
            if os.path.lexists(path) or live == path:
                raise
            path = live
    raise NotASession(path, "kept moving on while it was opened; try again")


def _report(p: _Plan, path: str, *, dry_run: bool) -> RepairReport:
    # Every change repair makes is recorded as a problem (or, when strict, a note), and lines
    # without one are written back byte for byte: none means the same bytes.
    changed = bool(p.problems) or (p.strict and bool(p.notes))
    if not p.items and p.header.raw is None:
        raise NotASession(path, "not a session file: nothing in it looks like a session entry")
    rewritten = [
        Problem(item.edit_reason or "rewritten", "rewritten; original bytes quarantined",
                item.line, item.offset,
                item.entry.get("id") if p.version >= 2 and item is not p.header else None)
        for item in [p.header, *p.items] if item.original is not None
    ]
    return RepairReport(path, changed, p.problems, p.version, dry_run=dry_run,
                        rewritten=rewritten, notes=p.notes, consequences=p.consequences,
                        strict=p.strict)


def _publish(p: _Plan, data: bytes, path: str) -> int:
    """Write the new file beside the old one, quarantine, keep a backup, swap (invariant 6).

    The old file stays authoritative until the swap: a failure (a full disk) or a crash
    before it leaves the old file as it was and appendable; the temp is removed here, or by
    the next open after a crash. The new file keeps the old one's permissions.
    """
    _verify(p)
    quarantine_items = p.dropped + _rewritten(p)
    # the temp, plus the quarantine records (base64 and a text copy: about twice the bytes)
    require_space(path, len(data) + sum(2 * len(q.data) + 256 for q in quarantine_items))

    def before_swap() -> None:
        quarantine(path, quarantine_items)
        _keep_backup(path)

    as_storage(path).publish(data, REPAIR_TAG, before_swap)
    return len(quarantine_items)


def _keep_backup(path: str) -> None:
    """Make `<path>.bak` a second name of the current file (no copy, so no space needed)."""
    link_as(path, path + BACKUP_SUFFIX)


def _verify(p: _Plan) -> None:
    """The plan must give a readable file and a model a valid history, or nothing is written.

    Lines kept byte for byte were parsed when they were read; only rewritten lines are
    parsed again here. The tree and the projection are checked on the planned entries.
    """
    for item in [p.header, *p.items]:
        if item.raw is not None:
            continue
        line = _line(p, item, header=item is p.header)
        try:
            value = codec.loads(line)
        except orjson.JSONDecodeError as e:
            raise JournalError(f"repair produced an unreadable line ({e}); nothing changed") from e
        if item is not p.header and not p.migrate:
            problem = codec.check_entry(value, p.version)
            if problem is not None:
                raise JournalError(f"repair produced a bad entry ({problem}); nothing changed")
    tree = Tree(it.entry for it in p.items)
    tree.finish_forward_check()
    if tree.issues:
        raise JournalError(f"repair left a broken tree ({tree.issues[0]}); nothing changed")
    messages = build_context(tree, tree.leaf_id).messages
    report = sanitize(messages)[1]
    if (p.strict and report.changed) or classify(messages, report)[1]:
        raise JournalError("repair left invalid tool pairing; nothing was changed")


def session_files(directory: str) -> Iterator[str]:
    """Session files under a directory (recursively), skipping side files.

    Symbolic links are skipped: a link planted in the folder would otherwise lead a
    directory run to a file outside it (name a link on the command line to repair its file).
    """
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.endswith(".jsonl") and not name.startswith(".") and not os.path.islink(path):
                yield path


__all__ = ["Problem", "RepairReport", "assess", "migrate_held", "plan", "repair", "repair_held",
           "session_files", "synthetic_result"]
