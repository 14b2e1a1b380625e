"""Cross-process races: an appender, two rotators, a repairer and a reader on one session.

Every participant is a real process running tests/race_worker.py against the public API, for a
bounded time (JOURNAL_RACE_SECONDS, default 12 s for the race and 10 s for the chaos run), after
which each stops by itself. The appender reports each id after its append returned (an
acknowledged id); rotators loop `journal.rotate`, the repairer loops `journal.repair` on the live
file, and the reader loops `load`, `View` and `lineage`, checking every snapshot: no diagnostic
except a torn last line that a writer is still writing, no tree issue, a valid pairing in the
model's context, a lineage that never loses a file. The only exceptions a participant may see are
listed in `ALLOWED`. In the chaos run a supervisor also SIGKILLs a random appender, rotator or
repairer every so often and starts a new one in its place.

What must hold at the end, after every process stopped and one final `Session.open`:

- The lineage-wide active branch holds every acknowledged id exactly once, in the order the
  ids were acknowledged. Its definition: let F_1 .. F_n be `journal.lineage(live)` (F_n the
  live file, archives read through gzip). The branch of a file is the path from its last
  entry up to its root, without the `journal.successor` seal. Rotation copies the kept part
  of F_i's branch into F_{i+1} with the same ids, so F_i contributes only the entries of its
  branch whose ids F_{i+1} does not hold; F_n contributes its whole branch. The lineage-wide
  branch is the concatenation F_1's part, ..., F_{n-1}'s part, F_n's branch.
- The live context is valid for a model (`journal.validate.pairing_problems` finds nothing),
  and shows exactly the acknowledged messages from the latest compaction's first kept entry
  on. Without kills, the raw projection is valid as it is (the sanitizer changes nothing) and
  no repair ever found anything to change.
- Every session file in the folder (archive included) belongs to the lineage, and no temp
  file (`*.tmp`) or rotation intent (`*.rotating`) is left.

A failure lists every finding, grouped by kind: each acknowledged id missing, repeated or out
of order (its position in the acknowledgement order, and which files hold it), unexpected
exceptions (with the line of journal's code that raised), inconsistent snapshots, leftovers;
all of them also go to `findings.txt` in the test's tmp_path. Set JOURNAL_RACE_SEED to replay
the random choices (process timing still varies). The appender compacts about every 0.4 s,
which keeps a default run well under the 64 files `journal.lineage` follows back on main; a
long soak goes past that and reports it as "the lineage does not reach the first file".
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from journal import Entry, Session, Tree, lineage, load, resolve_live, rotation
from journal.validate import pairing_problems

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "race_worker.py"
SEAL_TYPE = "journal.successor"
ROLES = ("appender", "rotator", "rotator", "repairer", "reader")
KILLABLE = ("appender", "rotator", "repairer")
STOP_GRACE = 30.0

# The exceptions each role may meet: a lock held for longer than the worker waits, and a file
# reported missing (`NotASession`) only when it really was moved away (":gone") meanwhile.
ALLOWED = {
    "appender": {"LockTimeout"},
    "rotator": {"LockTimeout"},
    "repairer": {"LockTimeout", "NotASession:gone"},
    "reader": {"NotASession:gone"},
}


def race_seconds(default: float) -> float:
    return float(os.environ.get("JOURNAL_RACE_SECONDS", default))


def race_seed() -> int:
    return int(os.environ.get("JOURNAL_RACE_SEED", time.time_ns() % 1_000_000_007))


@dataclass
class Worker:
    role: str
    generation: int
    events: Path
    proc: subprocess.Popen[bytes]
    killed: bool = False


class Findings:
    """Everything wrong, grouped by kind, so that one failure shows every distinct problem."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder) + os.sep
        self.kinds: dict[str, list[str]] = {}

    def add(self, kind: str, detail: str) -> None:
        self.kinds.setdefault(kind, []).append(detail.replace(self.folder, ""))

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def render(self, examples: int | None = 3) -> str:
        """Each kind with its count and a few examples; every acknowledged id that is missing,
        repeated or out of order is always listed."""
        lines = []
        for kind, details in self.kinds.items():
            shown = details if examples is None or kind.startswith("acked id") else (
                details[:examples])
            lines.append(f"- {kind}: {len(details)} time(s)")
            lines += [f"    {d[:1500]}" for d in shown]
        return "\n".join(lines)


@dataclass
class Race:
    """The session folder, the participants and what they reported."""

    root: Path
    seed: int
    deadline: float
    chaos: bool
    rnd: random.Random = field(init=False)
    folder: Path = field(init=False)
    start_path: str = field(init=False)
    first_id: str = field(init=False)
    workers: list[Worker] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rnd = random.Random(self.seed)
        self.folder = self.root / "sessions"
        (self.root / "events").mkdir()
        with Session.create(self.folder, cwd=str(self.root)) as s:
            self.start_path = s.path
            self.first_id = s.session_id

    def start(self, role: str, path: str) -> Worker:
        generation = sum(1 for w in self.workers if w.role == role)
        events = self.root / "events" / f"{len(self.workers):03d}-{role}-{generation}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        with open(events, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), role, path, repr(self.deadline),
                 str(self.rnd.getrandbits(32)), str(generation), "1" if self.chaos else "0"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=str(self.root),
            )
        worker = Worker(role, generation, events, proc)
        self.workers.append(worker)
        return worker

    def latest_path(self) -> str:
        """The newest session path any participant reported (a start for followers)."""
        newest = self.start_path
        for worker in self.workers:
            for words in events_of(worker):
                if words[0] == "path":
                    newest = words[1]
                elif words[0] == "rot":
                    newest = words[2]
        return newest

    def wait_all(self, findings: Findings) -> None:
        """Wait for every participant to stop by itself; kill and name those that do not."""
        for worker in self.workers:
            left = max(0.1, self.deadline + STOP_GRACE - time.time())
            try:
                worker.proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
                findings.add("did not stop by itself", f"{worker.role} #{worker.generation}")
                continue
            suicide = events_of(worker)[-1:] == [["suicide"]]
            if not (worker.killed or suicide) and worker.proc.returncode != 0:
                findings.add("exited with an error", f"{worker.role} #{worker.generation}: "
                             f"{worker.proc.returncode}: {worker.events.read_text()[-2000:]}")

    def stop_everything(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait()


def events_of(worker: Worker) -> list[list[str]]:
    """The complete event lines a worker wrote, split into words (the JSON tail kept whole)."""
    out = []
    for line in worker.events.read_bytes().split(b"\n")[:-1]:
        text = line.decode(errors="replace")
        kind = text.split(" ", 1)[0]
        parts = {"exc": 3, "repair": 4, "bad": 3}.get(kind)
        out.append(text.split(" ", parts - 1) if parts else text.split(" "))
    return out


def read_header(path: str) -> dict[str, object] | None:
    """The session header on a file's first line (through gzip for an archive), or None."""
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            value = orjson.loads(f.readline(1 << 20))
    except (OSError, EOFError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) and value.get("type") == "session" else None


def read_session(path: str, scratch: Path) -> tuple[list[Entry], list[str]]:
    """A lineage file's entries and diagnostics; an archive is decompressed into `scratch`."""
    if path.endswith(".gz"):
        scratch.mkdir(exist_ok=True)
        plain = scratch / f"{len(list(scratch.iterdir()))}-{os.path.basename(path)[:-3]}"
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path = str(plain)
    snap = load(path)
    return snap.entries, [d.describe() for d in snap.diagnostics]


def branch_of(entries: list[Entry]) -> list[Entry]:
    """The path from a file's last entry up to its root, in file order, without the seal."""
    tree = Tree(entries)
    branch = [tree.entries[i] for i in tree.path(tree.leaf)]
    return [e for e in branch if not (e.get("type") == "custom"
                                      and e.get("customType") == SEAL_TYPE)]


def lineage_branch(contents: list[list[Entry]]) -> list[Entry]:
    """The lineage-wide active branch (see the module docstring for the definition)."""
    out: list[Entry] = []
    for i, entries in enumerate(contents):
        branch = branch_of(entries)
        if i + 1 < len(contents):
            forward = {e["id"] for e in contents[i + 1]}
            branch = [e for e in branch if e["id"] not in forward]
        out += branch
    return out


def session_files(folder: Path) -> list[Path]:
    """Files in the folder (archive included) that start with a session header, but not
    the backups repair keeps and not temps."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and not is_leftover(p)
                  and ".bak" not in p.name and read_header(str(p)) is not None)


def is_leftover(path: Path) -> bool:
    return ".tmp" in path.name or path.name.endswith(".rotating")


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if is_leftover(p))


@dataclass
class Tally:
    """What the participants reported, gathered from their event files."""

    acked: list[str] = field(default_factory=list)
    rotations: int = 0
    repairs: int = 0
    changed_repairs: list[str] = field(default_factory=list)
    snapshots: int = 0
    exceptions: Counter[str] = field(default_factory=Counter)


def where_raised(trace: str) -> str:
    """The innermost line of journal's own code in a traceback (else the innermost line)."""
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    ours = [f for f in frames if f"{os.sep}journal{os.sep}" in f]
    return (ours or frames or ["?"])[-1]


def tally(race: Race, findings: Findings) -> Tally:
    t = Tally()
    appenders = sorted((w for w in race.workers if w.role == "appender"),
                       key=lambda w: w.generation)
    others = [w for w in race.workers if w.role != "appender"]
    for worker in [*appenders, *others]:
        for words in events_of(worker):
            kind = words[0]
            if kind == "ack":
                t.acked += words[1:]
            elif kind == "rot":
                t.rotations += 1
            elif kind == "repair":
                t.repairs += 1
                if words[2] == "1":
                    t.changed_repairs.append(f"{words[1]}: {words[3]}")
            elif kind == "snap":
                t.snapshots += int(words[1])
            elif kind == "bad":
                findings.add(f"reader: inconsistent snapshot ({words[1]})", json.loads(words[2]))
            elif kind == "exc":
                t.exceptions[f"{worker.role}: {words[1]}"] += 1
                if words[1] not in ALLOWED[worker.role]:
                    trace = json.loads(words[2])
                    findings.add(f"{worker.role} raised {words[1]} at {where_raised(trace)}",
                                 trace.strip().splitlines()[-1])
    return t


def check_outcome(race: Race, t: Tally, findings: Findings, *, killed: bool) -> None:
    """Every end-state check of the module docstring."""
    with Session.open(resolve_live(race.latest_path())[0], lock_timeout=10) as s:
        live = s.path
        model_context = s.context()
        raw = s.context(raw=True)
    for problem in pairing_problems(model_context.messages):
        findings.add("final context: invalid pairing", problem)
    if not killed:
        for problem in pairing_problems(raw.messages):
            findings.add("final raw context: invalid pairing", problem)
        if model_context.pairing is not None and model_context.pairing.changed:
            findings.add("final context needed the sanitizer", str(model_context.pairing))
        for change in t.changed_repairs:
            findings.add("a repair changed a session nothing damaged", change)
    for name in leftovers(race.folder):
        findings.add("left behind after the final open", name)

    files = lineage(live)
    contents = []
    for path in files:
        entries, diagnostics = read_session(path, race.root / "scratch")
        contents.append(entries)
        for d in diagnostics:
            findings.add("diagnostic in a lineage file", f"{path}: {d}")
    if (read_header(files[0]) or {}).get("id") != race.first_id:
        findings.add("the lineage does not reach the first file",
                     f"{len(files)} files from {files[0]} after {t.rotations} rotations "
                     "(journal.lineage on main follows at most 64 files back)")
    in_lineage = {f.removesuffix(".gz") for f in files}
    for p in session_files(race.folder):
        if str(p).removesuffix(".gz") not in in_lineage:
            findings.add("a session file outside the lineage", f"{p} (live: {live})")

    branch = lineage_branch(contents)
    holders = id_holders(race.folder, race.root / "scratch")
    acked_once_in_order(t.acked, branch, holders, findings)
    by_id = {e["id"]: e for file_entries in contents for e in file_entries}
    context_shows_acked(raw.entry_ids, [e["id"] for e in branch], by_id, t.acked, findings)


def same_entry(a: Entry, b: Entry) -> bool:
    """Equal apart from `parentId`, which rotation and repair may relink."""
    return {k: v for k, v in a.items() if k != "parentId"} == {
        k: v for k, v in b.items() if k != "parentId"}


def acked_once_in_order(acked: list[str], branch: list[Entry],
                        holders: dict[str, list[str]], findings: Findings) -> None:
    """Each acknowledged id once on the lineage-wide branch, in acknowledgement order."""
    positions: dict[str, list[int]] = {}
    for k, entry in enumerate(branch):
        positions.setdefault(entry["id"], []).append(k)
    for entry_id, n in Counter(acked).items():
        if n > 1:
            findings.add("an id acknowledged twice", entry_id)
    last = -1
    for k, entry_id in enumerate(acked):
        found = positions.get(entry_id, [])
        where = ", ".join(holders.get(entry_id, [])) or "no file"
        if not found:
            findings.add("acked id missing from the lineage-wide branch",
                         f"#{k} of {len(acked)}: {entry_id}, held by {where}")
            continue
        if len(found) > 1:
            first = branch[found[0]]
            if all(same_entry(first, branch[i]) for i in found[1:]):
                findings.add("acked id repeated on the lineage-wide branch",
                             f"#{k} of {len(acked)}: {entry_id} at branch positions {found}, "
                             f"held by {where}")
            else:
                # Ids are unique per file only: a new entry drew the id of an archived one.
                findings.add("an id reused by a different entry across the lineage",
                             f"#{k} of {len(acked)}: {entry_id} at branch positions {found}, "
                             f"held by {where}")
            continue
        if found[0] < last:
            findings.add("acked id out of acknowledgement order",
                         f"#{k} of {len(acked)}: {entry_id} at branch position {found[0]}, "
                         f"the previous acked id at {last}")
        last = max(last, found[0])


def context_shows_acked(entry_ids: list[str | None], branch: list[str],
                        entries: dict[str, Entry], acked: list[str],
                        findings: Findings) -> None:
    """The live context shows the acknowledged messages from the latest compaction's kept
    entry on (the whole branch without a compaction), in branch order."""
    acked_set = set(acked)
    start = 0
    compactions = [k for k, i in enumerate(branch) if entries[i].get("type") == "compaction"]
    if compactions:
        kept = entries[branch[compactions[-1]]].get("firstKeptEntryId")
        start = branch.index(kept) if kept in branch else compactions[-1]
    expected = [i for i in branch[start:]
                if i in acked_set and entries[i].get("type") == "message"]
    shown = [i for i in entry_ids if i in acked_set]
    if shown != expected:
        missing = [i for i in expected if i not in shown]
        extra = [i for i in shown if i not in expected]
        findings.add("the live context does not show the acknowledged messages",
                     f"{len(shown)} shown, {len(expected)} expected: missing {missing[:10]}, "
                     f"unexpected {extra[:10]}")


def id_holders(folder: Path, scratch: Path) -> dict[str, list[str]]:
    """For every entry id in any session file of the folder, the files that hold it."""
    out: dict[str, list[str]] = {}
    for path in session_files(folder):
        entries, _ = read_session(str(path), scratch)
        for entry in entries:
            out.setdefault(entry["id"], []).append(str(path.relative_to(folder)))
    return out


def supervise(race: Race, kills: Counter[str]) -> None:
    """SIGKILL a random appender, rotator or repairer every so often and start a new one in
    its place; also replace the workers that killed themselves at a crash point."""
    next_kill = time.time() + race.rnd.uniform(0.2, 0.7)
    while time.time() < race.deadline - 0.5:
        time.sleep(0.02)
        for worker in list(race.workers):
            if worker.role in KILLABLE and not worker.killed and worker.proc.poll() is not None:
                worker.killed = True
                kills[f"{worker.role} (itself)"] += 1
                race.start(worker.role, race.latest_path())
        if time.time() < next_kill:
            continue
        next_kill = time.time() + race.rnd.uniform(0.2, 0.7)
        role = race.rnd.choices(KILLABLE, weights=(4, 4, 2))[0]
        alive = [w for w in race.workers if w.role == role and not w.killed
                 and w.proc.poll() is None and w.events.stat().st_size > 0]
        if not alive:
            continue
        victim = race.rnd.choice(alive)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        victim.killed = True
        kills[victim.role] += 1
        race.start(victim.role, race.latest_path())


def run_race(tmp_path: Path, seconds: float, *, chaos: bool) -> None:
    seed = race_seed()
    race = Race(tmp_path, seed, time.time() + seconds + 1.0, chaos)
    kills: Counter[str] = Counter()
    findings = Findings(race.folder)
    try:
        for role in ROLES:
            race.start(role, race.start_path)
        if chaos:
            supervise(race, kills)
        race.wait_all(findings)
    finally:
        race.stop_everything()
    t = tally(race, findings)
    try:
        check_outcome(race, t, findings, killed=chaos)
    except Exception as e:  # still show what the participants found
        findings.add("the final checks raised", "".join(traceback.format_exception(e)))
    summary = (f"seed {seed}, {seconds:g}s: {len(t.acked)} acked ids, {t.rotations} rotations, "
               f"{t.repairs} repairs ({len(t.changed_repairs)} changed the file), "
               f"{t.snapshots} reader snapshots, kills {dict(kills)}, "
               f"exceptions {dict(t.exceptions)}")
    print("\n" + summary)
    if len(t.acked) < 20 or t.rotations < 2 or t.snapshots < 10:
        findings.add("the race did too little to show anything", summary)
    if chaos and sum(kills.values()) < 3:
        findings.add("the supervisor killed too few processes", str(dict(kills)))
    if findings:
        report = race.root / "findings.txt"
        report.write_text(summary + "\n" + findings.render(examples=None) + "\n")
        raise AssertionError(f"{summary}\n{findings.render()}\n(every finding: {report})")


@pytest.mark.slow
def test_appender_rotators_repairer_reader_race(tmp_path: Path) -> None:
    run_race(tmp_path, race_seconds(12), chaos=False)


@pytest.mark.slow
def test_race_with_sigkill_chaos(tmp_path: Path) -> None:
    run_race(tmp_path, race_seconds(10), chaos=True)


def test_lineage_is_whole_at_every_step_of_a_rotation(tmp_path: Path) -> None:
    """What the race's reader saw, step by step: from the moment a rotation publishes its
    successor, readers follow it (`resolve_live`), so `lineage` must also reach the old file,
    whether it is still beside the successor or already in the archive."""
    with Session.create(tmp_path / "s.jsonl", cwd=str(tmp_path)) as s:
        ids = [s.append_message({"role": "user", "content": "x" * 3000, "timestamp": 0})
               for _ in range(4)]
        s.append_compaction("summary", ids[-1], 100)
        path, first_id = s.path, s.session_id
    seen: dict[str, tuple[str, list[str], object]] = {}

    def look(step: str) -> None:
        files = lineage(path)
        seen[step] = (resolve_live(path)[0], files, (read_header(files[0]) or {}).get("id"))

    previous = rotation.step_hook
    rotation.step_hook = look
    try:
        result = rotation.rotate(path)
    finally:
        rotation.step_hook = previous
    assert result.rotated and seen.keys() == set(rotation.STEPS)
    for step, (live, files, root_id) in seen.items():
        assert root_id == first_id and files[-1] == live, (
            f"at step {step!r}: lineage gives {[os.path.relpath(f, tmp_path) for f in files]} "
            f"while readers follow {os.path.relpath(live, tmp_path)}")


def test_lineage_is_whole_when_a_file_moves_on_while_it_is_read(tmp_path: Path) -> None:
    """The other half of what the race's reader saw: `lineage` found a file of the chain, and
    a rotation moved it into the archive before `lineage` read its header to go on to its
    parent, so the chain stopped there. Here the move happens right after `lineage` first sees
    that file exist (between publishing the successor and archiving the old file, as in a real
    rotation); the lineage must still reach the first file, two rotations back."""

    def compacted(s: Session) -> None:
        ids = [s.append_message({"role": "user", "content": "x" * 3000, "timestamp": 0})
               for _ in range(4)]
        s.append_compaction("summary", ids[-1], 100)

    with Session.create(tmp_path / "s.jsonl", cwd=str(tmp_path)) as s:
        compacted(s)
        first, first_id = s.path, s.session_id
    middle = rotation.rotate(first).successor
    assert middle is not None
    with Session.open(middle) as s:
        compacted(s)
    archived = os.path.join(tmp_path, "archive", os.path.basename(middle))
    seen: list[list[str]] = []
    real_exists, real_isfile = os.path.exists, os.path.isfile

    def moving(real: Callable[[str], bool]) -> Callable[[str], bool]:
        def check(path: str) -> bool:
            found = real(path)
            if found and os.path.abspath(path) == middle and not real_exists(archived):
                os.rename(middle, archived)  # what move_into_archive does meanwhile
            return found

        return check

    def look(step: str) -> None:
        if step != "sealed":
            return
        live = resolve_live(middle)[0]
        os.path.exists, os.path.isfile = moving(real_exists), moving(real_isfile)  # type: ignore[assignment]
        try:
            files = lineage(live)
        finally:
            os.path.exists, os.path.isfile = real_exists, real_isfile  # type: ignore[assignment]
        if real_exists(archived):
            os.rename(archived, middle)  # put it back for the rotation to archive it itself
        seen.append([os.path.relpath(f, tmp_path) for f in files])
        seen.append([str((read_header(f) or {}).get("id")) for f in files[:1]])

    previous = rotation.step_hook
    rotation.step_hook = look
    try:
        assert rotation.rotate(middle).rotated
    finally:
        rotation.step_hook = previous
    assert seen, "the rotation never reached its 'sealed' step"
    files, (root_id,) = seen
    assert len(files) == 3 and root_id == first_id, (
        f"lineage gave {files}; it must start at {os.path.relpath(first, tmp_path)} "
        "(now archived) and hold the three files")
