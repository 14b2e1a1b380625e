"""Tail delivery under random interleavings of appends, truncations, replacements and rotations.

The follower is stepped by hand (`Follower.poll()` is one wake-up), so any number of changes can
happen between two wake-ups and every run is deterministic. The changes are real: appends
through `Session`, truncations with `os.truncate`, replacements with `os.replace` (a new inode,
some lines changed, as a repair does), rotations with `journal.rotate` after real compaction
entries (compressed archives or not).

What must be delivered (the definition in `journal.tail.source.Delivered`):
- every entry present in the final lineage (the live file and every archived file it
  continues), except the entries placed before the start, exactly once;
- nothing else but entries that existed at some moment (cut away or replaced later), and
  nothing twice;
- the follow never ends while the chain of successors exists (grace 0 would end it at once).
"""

from __future__ import annotations

import gzip
import os
import random
import tempfile
from typing import Any

import orjson
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from journal import Durability, Session
from journal.lineage import lineage
from journal.rotation import rotate
from journal.tail import ENDED, ENTRY, Follower

NEVER = Durability.never()
# few sizes, so that lines of the same length (ending in the same bytes) are common: a
# truncation followed by an append of the same length must still be noticed
SIZES = (10, 10, 40, 300)


def file_ids(path: str) -> list[str]:
    opener: Any = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        values = [orjson.loads(line) for line in f.read().splitlines() if line.strip()]
    return [v["id"] for v in values if v.get("type") != "session"]


def message(text: str, size: int) -> dict[str, Any]:
    return {"role": "user", "content": text + "." * size, "timestamp": 0}


class World:
    """A session folder changed step by step, remembering every id that ever existed."""

    def __init__(self, folder: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.made = 0
        with Session.create(folder, cwd="/", durability=NEVER) as s:
            self.live = s.path
            for _ in range(4):
                s.append_message(self.message())
        self.ever: set[str] = set()
        self.note()

    def message(self, size: int | None = None) -> dict[str, Any]:
        self.made += 1
        return message(f"m{self.made}", self.rng.choice(SIZES) if size is None else size)

    def lineage_ids(self) -> list[str]:
        return [i for path in lineage(self.live) for i in file_ids(path)]

    def note(self) -> None:
        self.ever.update(self.lineage_ids())

    def append(self, count: int) -> None:
        with Session.open(self.live, durability=NEVER) as s:
            for _ in range(count):
                s.append_message(self.message())

    def truncate(self, count: int) -> None:
        lines = open(self.live, "rb").read().splitlines(keepends=True)
        keep = max(1, len(lines) - count)
        os.truncate(self.live, sum(len(line) for line in lines[:keep]))

    def replace(self, seed: int) -> None:
        """Rewrite the file under a new inode: a line changed (same id), the last lines
        maybe dropped, maybe a new entry added."""
        rng = random.Random(seed)
        lines = open(self.live, "rb").read().splitlines()
        head, body = lines[:1], [orjson.loads(line) for line in lines[1:]]
        if body:
            k = rng.randrange(len(body))
            if body[k].get("type") == "message":
                body[k] = {**body[k], "message": message(f"changed {seed}", 20)}
        del body[len(body) - rng.randint(0, min(2, len(body))):]
        if rng.random() < 0.5:
            self.made += 1
            body.append({"type": "message", "id": f"{self.made:08x}",
                         "parentId": body[-1]["id"] if body else None,
                         "timestamp": "2026-01-01T00:00:00.000Z",
                         "message": message(f"added {seed}", 30)})
        temp = os.path.join(os.path.dirname(self.live), ".replace.tmp")
        with open(temp, "wb") as f:
            f.write(b"".join(line + b"\n" for line in head)
                    + b"".join(orjson.dumps(v) + b"\n" for v in body))
        os.replace(temp, self.live)

    def rotate(self, compress: bool) -> None:
        with Session.open(self.live, durability=NEVER) as s:
            for _ in range(3):
                kept = s.append_message(self.message(700))
            s.append_compaction("what happened so far", kept, 1000)
        result = rotate(self.live, compress=compress, lock_timeout=5)
        assert result.rotated, result.reason
        assert result.successor is not None
        self.live = result.successor


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("truncate"), st.integers(1, 4)),
        st.tuples(st.just("replace"), st.integers(0, 1 << 16)),
        st.tuples(st.just("rotate"), st.booleans()),
        st.tuples(st.just("poll"), st.just(0)),
    ),
    max_size=20,
)


def start_options(start: str) -> dict[str, Any]:
    return {"from_start": {"from_start": True}, "last": {"last": 2}}.get(start, {})


def baseline(world: World, start: str) -> set[str]:
    """The ids the start mode places before the start."""
    present = world.lineage_ids()
    if start == "from_start":
        return set()
    if start == "last":
        return set(present[:-2])
    return set(present)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=OPS, start=st.sampled_from(["end", "last", "from_start"]),
       directory=st.booleans(), seed=st.integers(0, 1 << 16))
def test_tail_delivers_every_entry_of_the_final_lineage_exactly_once(
    ops: list[tuple[str, Any]], start: str, directory: bool, seed: int,
) -> None:
    with tempfile.TemporaryDirectory(prefix="tail-prop-") as folder:
        world = World(folder, seed)
        before = baseline(world, start)
        target = folder if directory else world.live
        follower = Follower(target, grace=0.0, **start_options(start))
        delivered: list[str] = []
        ended: list[str] = []

        def wake_up() -> None:
            for event in follower.poll():
                if event.kind == ENTRY and event.entry is not None:
                    delivered.append(event.entry["id"])
                elif event.kind == ENDED:
                    ended.append(event.detail)

        follower.open()
        try:
            wake_up()
            for op, arg in ops:
                if op == "poll":
                    wake_up()
                    continue
                getattr(world, op)(arg)
                world.note()
            wake_up()
            wake_up()
        finally:
            follower.close()

        final = set(world.lineage_ids()) - before
        event(f"rotations: {min(3, sum(op == 'rotate' for op, _ in ops))}")
        event(f"truncations: {min(3, sum(op == 'truncate' for op, _ in ops))}")
        event(f"replacements: {min(3, sum(op == 'replace' for op, _ in ops))}")
        assert not ended, ended
        assert len(delivered) == len(set(delivered)), "an entry was delivered twice"
        assert final <= set(delivered), f"never delivered: {sorted(final - set(delivered))}"
        assert set(delivered) <= world.ever - before
