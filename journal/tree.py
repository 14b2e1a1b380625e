"""The entry tree: id index, parents, children, leaf, branch walks, labels and name.

Entries are kept in file order and a node is its position in that order. A parent must come
earlier in the file than its child, so every walk towards the root visits strictly smaller
positions and terminates on any input (invariant 5). A `parentId` that is missing, or that is
defined only later, makes the entry a root; a duplicated id resolves, for the entries after it,
to its nearest earlier definition. Each of these is recorded as a `TreeIssue`.

pi differs on damaged files: it resolves every id to its last definition and follows parents
forward in the file, so a duplicate id that points back into its own chain makes pi loop
forever. On well-formed files (unique ids, parents first) both rules give the same tree.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .model import Entry

ORPHAN = "missing_parent"
FORWARD = "parent_after_child"
SELF = "self_parent"
DUPLICATE = "duplicate_id"
_METADATA_TYPES = frozenset({"label", "session_info"})


@dataclass(frozen=True)
class TreeIssue:
    """A structural problem in the tree (not a byte-level one)."""

    kind: str
    entry_id: str
    index: int
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "entryId": self.entry_id, "index": self.index,
                "detail": self.detail}


@dataclass
class TreeNode:
    """One node of `Tree.nested()`: the entry, its label, and its children by timestamp."""

    entry: Entry
    label: str | None = None
    children: list[TreeNode] = field(default_factory=list)


class Tree:
    """An index over entries in file order, extended in place as entries are appended.

    `complete=False` marks a tree that holds only a suffix of the file (a fast resume): a
    parent outside it is simply not loaded, not an error.
    """

    def __init__(self, entries: Iterable[Entry] = (), *, complete: bool = True) -> None:
        self.complete = complete
        self.entries: list[Entry] = []
        self.parents: list[int | None] = []
        self.issues: list[TreeIssue] = []
        self._latest: dict[str, int] = {}
        self._labels: dict[str, str] = {}
        self._name: str | None = None
        self.leaf: int | None = None
        for entry in entries:
            self.add(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._latest

    def add(self, entry: Entry) -> int:
        """Index one entry (the next in file order), make it the leaf, return its position."""
        index = len(self.entries)
        entry_id = entry["id"]
        latest = self._latest
        parent_id = entry.get("parentId")
        parent = None if parent_id is None else latest.get(parent_id)
        if parent is None and parent_id is not None and self.complete:
            kind = SELF if parent_id == entry_id else ORPHAN
            self.issues.append(TreeIssue(kind, entry_id, index, f"parentId {parent_id}"))
        if entry_id in latest:
            self.issues.append(TreeIssue(DUPLICATE, entry_id, index, f"also at {latest[entry_id]}"))
        self.entries.append(entry)
        self.parents.append(parent)
        latest[entry_id] = index
        self.leaf = index
        if entry["type"] in _METADATA_TYPES:
            self._note_metadata(entry)
        return index

    def _note_metadata(self, entry: Entry) -> None:
        kind = entry.get("type")
        if kind == "label":
            target, label = entry.get("targetId"), entry.get("label")
            if not isinstance(target, str):
                return  # pi keys its labels by the value: a non-string matches no entry
            if isinstance(label, str) and label:
                self._labels[target] = label
            elif not label:
                self._labels.pop(target, None)
        elif kind == "session_info":
            name = entry.get("name")
            self._name = name.strip() or None if isinstance(name, str) else None

    def finish_forward_check(self) -> None:
        """Tell apart parents defined later in the file from parents that never appear.

        One pass over the entries for all orphans together: the time stays linear however
        many entries lost their parent.
        """
        orphans = [issue for issue in self.issues if issue.kind == ORPHAN]
        if not orphans:
            return
        wanted = {self.entries[issue.index].get("parentId") for issue in orphans}
        definitions: dict[str, list[int]] = {}
        for j, entry in enumerate(self.entries):
            entry_id = entry["id"]
            if entry_id in wanted:
                definitions.setdefault(entry_id, []).append(j)
        fixed = []
        for issue in self.issues:
            if issue.kind == ORPHAN:
                pid = self.entries[issue.index].get("parentId")
                positions = definitions.get(pid, []) if isinstance(pid, str) else []
                k = bisect_right(positions, issue.index)
                if k < len(positions):
                    issue = TreeIssue(FORWARD, issue.entry_id, issue.index,
                                      f"parentId {pid} is defined later, at {positions[k]}")
            fixed.append(issue)
        self.issues = fixed

    # lookups

    def index_of(self, entry_id: str) -> int | None:
        """The position of an id's latest definition (what a lookup by id finds)."""
        return self._latest.get(entry_id)

    def get(self, entry_id: str) -> Entry | None:
        index = self._latest.get(entry_id)
        return None if index is None else self.entries[index]

    @property
    def leaf_id(self) -> str | None:
        return None if self.leaf is None else self.entries[self.leaf]["id"]

    @property
    def ids(self) -> set[str] | dict[str, int]:
        return self._latest

    def parent_index(self, index: int) -> int | None:
        return self.parents[index]

    def walk_up(self, index: int | None) -> Iterator[int]:
        """Positions from `index` up to its root (leaf first)."""
        while index is not None:
            yield index
            index = self.parents[index]

    def path(self, index: int | None) -> list[int]:
        """Positions from the root down to `index`."""
        out = list(self.walk_up(index))
        out.reverse()
        return out

    def children_of(self, index: int | None) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == index]

    def roots(self) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p is None]

    def label(self, entry_id: str) -> str | None:
        return self._labels.get(entry_id)

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    @property
    def name(self) -> str | None:
        return self._name

    def nested(self) -> list[TreeNode]:
        """The whole tree as nested nodes, children ordered by timestamp (stable), as pi does."""
        nodes = [TreeNode(e, self._labels.get(e["id"])) for e in self.entries]
        roots: list[TreeNode] = []
        for index, parent in enumerate(self.parents):
            (roots if parent is None else nodes[parent].children).append(nodes[index])
        for node in nodes:
            node.children.sort(key=lambda n: str(n.entry.get("timestamp", "")))
        return roots
