"""Rotation: successor content, same context, sealing, archive, following, lineage."""

from __future__ import annotations

import fcntl
import gzip
import os

import orjson
import pytest

from journal import Session, files, load
from journal.context import build_context
from journal.idscan import IdScan
from journal.lineage import lineage, resolve_live, seal_of
from journal.rotation import RotationPolicy, rotate
from journal.tree import Tree


def context_of(path):
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as f:
            data = f.read()
        plain = str(path)[:-3] + ".plain"
        with open(plain, "wb") as out:
            out.write(data)
        path = plain
    snap = load(path)
    tree = Tree(snap.entries)
    return build_context(tree, tree.leaf_id)


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def assistant(text, model="m1"):
    return {"role": "assistant", "content": [{"type": "text", "text": text}],
            "provider": "anthropic", "model": model, "stopReason": "stop", "timestamp": 2}


def build_session(directory, *, compactions=2, branch=True, labels=True):
    """A session with several compactions, a branch, a branch summary, labels and a name."""
    s = Session.create(directory, cwd="/proj")
    s.append_session_info("rotation test")
    s.append_thinking_level_change("medium")
    first = s.append_message(user("start " + "x" * 2000))
    s.append_message(assistant("ok " + "y" * 2000))
    kept = None
    for round_ in range(compactions):
        ids = [s.append_message(user(f"r{round_} q{i} " + "z" * 3000)) for i in range(6)]
        s.append_message(assistant(f"r{round_} answer"))
        kept = ids[3]
        if labels:
            s.append_label_change(kept, f"kept-{round_}")
        s.append_compaction(f"summary {round_}", kept, 1000 * (round_ + 1))
    if branch:
        fork = s.append_message(user("side question"))
        s.append_message(assistant("side answer"))
        s.branch_with_summary(fork, "tried a side path")
    s.append_message(user("after everything"))
    s.append_message(assistant("final", model="m2"))
    if labels:
        s.append_label_change(first, "very first")
    return s, kept


def test_rotate_path_keeps_context_and_archives(tmp_path):
    s, kept = build_session(tmp_path / "sessions")
    path = s.path
    s.close()
    before = context_of(path)
    old_bytes = open(path, "rb").read()
    result = rotate(path, compress=False)
    assert result.rotated and result.successor and os.path.exists(result.successor)
    assert not os.path.exists(path), "the old file moved to the archive"
    assert result.archive == os.path.join(str(tmp_path / "sessions"), "archive",
                                          os.path.basename(path))
    assert context_of(result.successor).same_as(before)
    archived = context_of(result.archive)
    assert archived.same_as(before), "the sealed archive still projects the same context"
    assert open(result.archive, "rb").read().startswith(old_bytes)
    # pointers are relative to the session's folder (see tests/test_identity.py)
    name = os.path.basename(result.successor)
    seal = seal_of(result.archive)
    assert seal["successor"] == name and seal["fromArchive"] == os.path.join("..", name)
    header = orjson.loads(open(result.successor, "rb").readline())
    assert header["parentSession"] == os.path.relpath(result.archive, str(tmp_path / "sessions"))
    assert header["cwd"] == "/proj"
    new = load(result.successor)
    assert not new.diagnostics
    ids = [e["id"] for e in new.entries]
    assert kept in ids, "entry ids are preserved"
    assert new.entries[0]["parentId"] is None
    assert all(b["parentId"] == a["id"] for a, b in zip(new.entries, new.entries[1:],
                                                         strict=False))
    names = [e for e in new.entries if e["type"] == "session_info"]
    assert names and names[0]["name"] == "rotation test"
    tree = Tree(new.entries)
    assert tree.label(kept) == "kept-1"
    assert result.successor_size < len(old_bytes) / 2


def test_no_compaction_means_nothing_to_rotate(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message(user("hi"))
        path = s.path
    before = open(path, "rb").read()
    result = rotate(path)
    assert not result.rotated and "no compaction" in result.reason
    assert open(path, "rb").read() == before


def test_dry_run_changes_nothing(tmp_path):
    s, _ = build_session(tmp_path)
    path = s.path
    s.close()
    before = sorted(os.listdir(tmp_path))
    result = rotate(path, dry_run=True)
    assert result.rotated and result.dry_run and result.successor
    assert sorted(os.listdir(tmp_path)) == before


def test_compressed_archive_and_lineage_of_three(tmp_path):
    s, _ = build_session(tmp_path)
    first = s.path
    expected = s.context()
    s.close()
    r1 = rotate(first)
    assert r1.archive.endswith(".gz") and os.path.exists(r1.archive)
    assert context_of(r1.archive).same_as(expected)
    with Session.open(r1.successor) as s2:
        for i in range(8):
            s2.append_message(user(f"more {i} " + "w" * 3000))
        s2.append_compaction("third", s2.entries[-2]["id"], 9999)
        s2.append_message(user("tail"))
        expected = s2.context()
    r2 = rotate(r1.successor)
    assert r2.rotated
    assert context_of(r2.successor).same_as(expected)
    chain = lineage(first)
    assert chain == [r1.archive, r2.archive, r2.successor]
    assert resolve_live(first)[0] == r2.successor


def test_opening_an_old_path_follows_to_the_live_successor(tmp_path):
    s, _ = build_session(tmp_path)
    path = s.path
    s.close()
    result = rotate(path, compress=False)
    with Session.open(path) as live:
        assert live.path == result.successor
        assert live.followed == [path]
        new_id = live.append_message(user("continues"))
    assert load(result.successor).entries[-1]["id"] == new_id
    with Session.open(result.archive) as live:
        assert live.path == result.successor


def test_session_rotates_itself_and_keeps_writing(tmp_path):
    s, _ = build_session(tmp_path)
    old = s.path
    before = s.context()
    result = s.rotate(compress=False)
    assert s.path == result.successor != old
    assert s.context().same_as(before)
    new_id = s.append_message(user("next"))
    s.close()
    assert load(result.successor).entries[-1]["id"] == new_id
    assert not load(result.archive).entries[-1]["id"] == new_id


def test_rotation_policy_applies_after_compaction(tmp_path):
    s, kept = build_session(tmp_path, compactions=1)
    s.rotation_policy = RotationPolicy(max_bytes=1, compress=False)
    old = s.path
    for i in range(4):
        s.append_message(user(f"p{i} " + "v" * 3000))
    s.append_compaction("policy", s.entries[-2]["id"], 5)
    assert s.path != old and os.path.exists(s.path)
    s.close()
    s, _ = build_session(tmp_path / "big", compactions=1)
    s.rotation_policy = RotationPolicy(max_bytes=10**9)
    old = s.path
    s.append_compaction("too small to rotate", s.entries[-1]["id"], 5)
    assert s.path == old
    s.close()


def test_retention_keeps_newest_archives(tmp_path):
    s, _ = build_session(tmp_path)
    results = []
    for round_ in range(3):
        for i in range(6):
            s.append_message(user(f"k{round_}{i} " + "u" * 3000))
        s.append_compaction(f"c{round_}", s.entries[-2]["id"], 1)
        results.append(s.rotate(keep=2))
    s.close()
    archives = sorted(os.listdir(tmp_path / "archive"))
    assert len(archives) == 2
    assert results[-1].removed_archives


def test_a_writer_waiting_for_the_lock_ends_up_on_the_successor(tmp_path):
    import threading

    s, _ = build_session(tmp_path)
    old = s.path
    opened = {}

    def waiter():
        with Session.open(old, lock_timeout=10) as w:
            opened["path"] = w.path
            w.append_message(user("from the waiter"))

    thread = threading.Thread(target=waiter)
    thread.start()
    result = s.rotate(compress=False)
    s.close()
    thread.join(15)
    assert opened["path"] == result.successor
    assert load(result.successor).entries[-1]["message"]["content"][0]["text"] == (
        "from the waiter")


@pytest.mark.parametrize("compress", [False, True])
def test_cli_rotate_and_lineage(tmp_path, capsys, compress):
    from journal.cli import main

    s, _ = build_session(tmp_path)
    path = s.path
    s.close()
    args = ["rotate", path, "--json"] + ([] if compress else ["--no-compress"])
    assert main(args) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["rotated"] and data["lockHeldMs"] > 0
    assert main(["lineage", path, "--json"]) == 0
    chain = orjson.loads(capsys.readouterr().out)
    assert chain["live"] == data["successor"]
    assert main(["rotate", data["successor"], "--json"]) == 0
    again = orjson.loads(capsys.readouterr().out)
    assert not again["rotated"] and again["reason"]
    assert main(["rotate", path, "--keep", "-1"]) == 2


def test_lineage_and_resolve_live_have_no_hop_limit(tmp_path):
    """A long-running session rotates hundreds of times: the whole chain is still one
    lineage, and the first file still leads to the live one (no fixed cap on hops)."""
    rotations = 70
    with Session.create(tmp_path, cwd=str(tmp_path)) as s:
        first = s.path
        for i in range(rotations):
            ids = [s.append_message({"role": "user", "content": f"{i} " + "x" * 1500,
                                     "timestamp": 0}) for _ in range(2)]
            s.append_compaction(f"summary {i}", ids[-1], 100)
            assert s.rotate(compress=False).rotated
        live = s.path
    chain = lineage(live)
    assert len(chain) == rotations + 1
    assert os.path.basename(chain[0]) == os.path.basename(first)
    assert resolve_live(first)[0] == live


def test_an_unsealed_copy_at_the_old_name_is_not_taken_for_the_archive(tmp_path, capsys):
    """A copy of the session as it was before its rotation, left at the old name beside the
    successor (copied back by hand, restored from a backup): the successor's predecessor is
    still the sealed archive, for `lineage` and `ls` alike. An unsealed file alone there is
    still taken, as a fork's parent is."""
    from journal.cli import main

    with Session.create(tmp_path, cwd=str(tmp_path)) as s:
        old = s.path
        s.append_message({"role": "user", "content": "early " + "x" * 3000, "timestamp": 0})
        kept = s.append_message({"role": "user", "content": "kept", "timestamp": 0})
        s.append_compaction("summary", kept, 100)
        before = open(old, "rb").read()
        assert s.rotate(compress=False).rotated
        live = s.path
    archived = lineage(live)[0]
    assert os.path.dirname(archived) == str(tmp_path / "archive")
    with open(old, "wb") as f:
        f.write(before)
    assert lineage(live) == [archived, live]
    assert main(["ls", str(tmp_path), "--json", "--no-cache"]) == 0
    rows = orjson.loads(capsys.readouterr().out)
    assert [sorted(row["files"]) for row in rows if live in row["files"]] == [
        sorted([archived, live])], rows
    os.unlink(archived)
    assert lineage(live) == [old, live]


def _rotated_pair(tmp_path):
    """A session rotated once (by itself): (an id left behind in the archive, the session)."""
    s = Session.create(tmp_path, cwd=str(tmp_path))
    early = s.append_message({"role": "user", "content": "early " + "x" * 3000, "timestamp": 0})
    kept = s.append_message({"role": "user", "content": "kept", "timestamp": 0})
    s.append_compaction("summary", kept, 100)
    assert s.rotate().rotated and early not in s.tree.ids
    return early, s


def test_after_rotating_itself_a_session_never_reuses_an_archived_id(tmp_path, monkeypatch):
    """Ids are unique per file in the format; across a rotation they must be too, or a
    follower that skips the entries rotation copied (same id) would skip a new entry."""
    early, s = _rotated_pair(tmp_path)
    with s:
        draws = iter([int(early, 16), 0xABCDEF12])
        monkeypatch.setattr("journal.model.random.getrandbits", lambda n: next(draws))
        assert s.append_message({"role": "user", "content": "new"}) == "abcdef12"


def test_a_session_opened_on_a_successor_never_reuses_an_archived_id(tmp_path, monkeypatch):
    early, s = _rotated_pair(tmp_path)
    s.close()
    with Session.open(s.path) as again:
        again.append_message({"role": "user", "content": "first"})  # starts the scan
        assert isinstance(again._previous_ids, IdScan)
        assert again._previous_ids.wait(10)  # the archive is read in the background
        draws = iter([int(early, 16), 0xABCDEF12])
        monkeypatch.setattr("journal.model.random.getrandbits", lambda n: next(draws))
        assert again.append_message({"role": "user", "content": "new"}) == "abcdef12"


def _rotatable_successor(tmp_path):
    """The live successor of a rotated lineage, with a compaction: it can rotate again."""
    _, s = _rotated_pair(tmp_path)
    with s:
        s.append_message({"role": "user", "content": "more " + "y" * 3000, "timestamp": 0})
        kept = s.append_message({"role": "user", "content": "kept again", "timestamp": 0})
        s.append_compaction("again", kept, 100)
    return s.path


def test_a_file_rotated_away_while_rotate_checks_its_dialect_is_followed(tmp_path, monkeypatch):
    """rotate() first checks that the file is no Claude Code transcript; another writer may
    rotate it between that check's look and its read. The file moved on, so rotate follows it
    to the live one instead of failing with 'no such file' (seen in tests/test_races.py)."""
    from journal import snapshot

    live = _rotatable_successor(tmp_path)
    real = snapshot.dialect_of_storage

    def rotated_meanwhile(*args, **kwargs):
        monkeypatch.setattr(snapshot, "dialect_of_storage", real)
        assert rotate(live).rotated  # the other writer
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot, "dialect_of_storage", rotated_meanwhile)
    result = rotate(live)
    assert not os.path.exists(live)
    assert result.path == resolve_live(live)[0]  # the successor, looked at instead


def test_a_file_archived_while_rotate_checks_its_destination_is_followed(tmp_path, monkeypatch):
    """rotate() checks the destination before it waits for the lock: it picks a free archive
    name, then checks the folders. Another writer may archive the file in between, under that
    very name. The name is picked again under the lock, so rotate follows the file to its live
    successor instead of refusing with 'already exists' (seen in tests/test_races.py)."""
    from journal import rotation

    live = _rotatable_successor(tmp_path)
    real = rotation.is_default_archive
    archived: list[str] = []

    def archived_meanwhile(*args, **kwargs):
        monkeypatch.setattr(rotation, "is_default_archive", real)
        other = rotate(live)  # the other writer takes the name just picked
        archived.append(other.archive or "")
        return real(*args, **kwargs)

    monkeypatch.setattr(rotation, "is_default_archive", archived_meanwhile)
    result = rotate(live)
    assert archived and os.path.exists(archived[0])
    assert result.path == resolve_live(live)[0]


def test_a_compressed_session_that_nothing_continues_is_refused_untouched(tmp_path):
    """A session compressed by hand (no live successor to follow to) is an archive: rotation
    refuses it, with or without a dry run, and its bytes stay as they were (cutting back a
    torn tail would have treated the gzip bytes as lines)."""
    from journal.errors import NotASession

    s, _ = build_session(str(tmp_path))
    s.close()
    packed = tmp_path / "by-hand.jsonl.gz"
    packed.write_bytes(gzip.compress(open(s.path, "rb").read()))
    os.unlink(s.path)
    before = packed.read_bytes()
    for dry_run in (False, True):
        with pytest.raises(NotASession, match="compressed archive is read-only"):
            rotate(str(packed), dry_run=dry_run)
    assert packed.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["by-hand.jsonl.gz"]


@pytest.mark.parametrize("compress", [True, False])
def test_an_old_path_is_followed_through_rotations_into_an_archive_folder_elsewhere(
        tmp_path, compress):
    """Three rotations into an archive folder elsewhere: nothing beside the first file
    names its archive any more (its successor was rotated away too); the chain of
    `parentSession` pointers of the live file leads back to it, and every hop is named."""
    folder, elsewhere = tmp_path / "sessions", tmp_path / "elsewhere"
    with Session.create(folder, cwd="/proj") as s:
        first = s.path
        names = [first]
        for n in range(3):
            s.append_message(user(f"long {n} " + "x" * 3000))
            kept = s.append_message(user(f"kept {n}"))
            s.append_compaction(f"summary {n}", kept, 1000)
            assert s.rotate(archive_dir=str(elsewhere), compress=compress).rotated
            names.append(s.path)
    live = names[-1]
    assert sorted(os.listdir(folder)) == [os.path.basename(live)]
    assert resolve_live(first) == (live, names[:-1])
    assert resolve_live(names[1]) == (live, names[1:-1])
    with Session.open(first) as opened:
        assert opened.path == live and opened.followed == names[:-1]
    assert len(lineage(first)) == 4


def test_a_path_nothing_continues_is_looked_up_from_headers_not_archives(tmp_path,
                                                                          monkeypatch):
    """`resolve_live` of a name that never existed (a typo given to `show`, say) in a folder
    of rotated sessions reads their headers only: the walk down each chain once read every
    archive's seal, decompressing each `.gz` whole."""
    import importlib

    lineage_module = importlib.import_module("journal.lineage")  # (journal.lineage: a function)
    folder = tmp_path / "sessions"
    for name in ("a", "b", "c"):
        with Session.create(folder / f"{name}.jsonl", cwd="/proj") as s:
            for n in range(2):
                s.append_message(user(f"long {n} " + "x" * 3000))
                kept = s.append_message(user(f"kept {n}"))
                s.append_compaction(f"summary {n}", kept, 1000)
                assert s.rotate().rotated
    seals_read = []
    real = lineage_module.seal_of
    monkeypatch.setattr(lineage_module, "seal_of",
                        lambda path: seals_read.append(path) or real(path))
    typo = str(folder / "typo.jsonl")
    assert resolve_live(typo) == (os.path.realpath(typo), [])
    assert seals_read == []


def test_every_archive_in_a_folder_elsewhere_leads_to_the_live_file(tmp_path):
    """Rotations into an archive folder elsewhere, compressed: each archive there names its
    successor (compressed beside it, once rotated in turn) and leads to the live file, so
    opening one writes on in the live file. An archive's successor archived in turn was
    not found: the archive was taken for the live session, written to after its seal, and
    rotated into a second live head."""
    from journal.info import inspect

    folder, elsewhere = tmp_path / "sessions", tmp_path / "elsewhere"
    with Session.create(folder, cwd="/proj") as s:
        for n in range(3):
            s.append_message(user(f"long {n} " + "x" * 3000))
            kept = s.append_message(user(f"kept {n}"))
            s.append_compaction(f"summary {n}", kept, 1000)
            assert s.rotate(archive_dir=str(elsewhere)).rotated
        live = s.path
    archives = sorted(str(p) for p in elsewhere.iterdir())
    assert len(archives) == 3 and all(a.endswith(".jsonl.gz") for a in archives)
    for index, archive in enumerate(archives):
        assert resolve_live(archive)[0] == live
        info = inspect(archive)
        assert info.sealed and info.live == live
        assert info.successor == (archives[index + 1] if index < 2 else live)
    with Session.open(archives[1]) as opened:
        assert opened.path == live
        opened.append_message(user("on in the live file"))
    assert load(live).entries[-1]["message"] == user("on in the live file")
    assert sorted(os.listdir(folder)) == [os.path.basename(live)]


@pytest.mark.parametrize("elsewhere", [False, True])
def test_a_first_name_whose_archive_retention_removed_still_leads_to_the_live_file(
        tmp_path, elsewhere):
    """`rotate --keep 2` after three rotations removed the first file's archive: its name
    (what agents are started again with) led nowhere ("no such file"). The archive whose
    header names the removed one as its parent continues it, and the name leads on to the
    live file. (Once that archive is removed too, nothing on disk links the name to the
    lineage any more.)"""
    folder = tmp_path / "sessions"
    archive_dir = str(tmp_path / "elsewhere") if elsewhere else None
    with Session.create(folder, cwd="/proj") as s:
        first = s.path
        for n in range(3):
            s.append_message(user(f"long {n} " + "x" * 3000))
            kept = s.append_message(user(f"kept {n}"))
            s.append_compaction(f"summary {n}", kept, 1000)
            assert s.rotate(archive_dir=archive_dir, keep=2).rotated
        live = s.path
    archives = tmp_path / "elsewhere" if elsewhere else folder / "archive"
    assert len(list(archives.iterdir())) == 2
    assert resolve_live(first)[0] == live
    with Session.open(first) as opened:
        assert opened.path == live


def test_a_fork_of_an_archive_elsewhere_is_not_taken_for_its_successor(tmp_path):
    """A pi-style fork of an archive in a folder elsewhere (its header names the archive by
    its absolute path), rotated in turn: the first name still leads to the main lineage's
    live file, not into the fork's (the lookup for an archive retention removed took the
    fork's archive, whose pointer names the first file's archive, for the successor)."""
    folder, elsewhere = tmp_path / "sessions", str(tmp_path / "elsewhere")

    def grow_and_rotate(s: Session) -> str | None:
        s.append_message(user("long " + "x" * 3000))
        kept = s.append_message(user("kept"))
        s.append_compaction("summary", kept, 1000)
        result = s.rotate(archive_dir=elsewhere, compress=False)
        assert result.rotated
        return result.archive

    with Session.create(folder, cwd="/proj") as main:
        first = main.path
        archive = grow_and_rotate(main)
        with Session.create(folder, cwd="/proj", parent_session=archive) as fork:
            fork.append_message(user("fork work"))
            grow_and_rotate(fork)
            fork_live = fork.path
        grow_and_rotate(main)
        live = main.path
    assert resolve_live(first)[0] == live != fork_live


def rotation_paused_compressing(folder):
    """A session in `folder` whose `journal rotate` (a child process) is held still while it
    compresses its archive, its writer lock let go: (the session's path, the child, the
    plain archive it compresses); `paused_cli.resume(child)` lets it finish."""
    from paused_cli import start

    s, _ = build_session(folder)
    path = s.path
    s.close()
    # the 4th file rotate publishes (intent, successor, its sync, compressed archive)
    first, temp = start(["rotate", path, "--json"], pause_at=4, resumable=True)
    assert temp.endswith(".compress.tmp"), temp
    return path, first, os.path.join(folder, "archive", os.path.basename(path))


def test_a_name_replaced_while_it_is_locked_is_not_taken_for_a_file_it_cannot_lock(
        tmp_path, monkeypatch):
    """`remove_if_unheld` locks the file a name leads to, then checks the name still leads
    there. A file put in its place meanwhile (published under the name, and held by the
    process that is busy with it) is neither removed nor reported as "not a file it can
    lock" (None), which retention and prune answer by unlinking the name unasked."""
    name, newer = tmp_path / "s.jsonl.gz", tmp_path / "newer"
    name.write_bytes(b"old")
    newer.write_bytes(b"new")
    held = os.open(newer, os.O_RDONLY)  # its own open file: a lock of it conflicts
    real_flock = fcntl.flock
    swapped: list[bool] = []

    def flock_then_replace(fd: int, op: int) -> None:
        real_flock(fd, op)
        if not swapped:  # between the open and the look at the name, as a race would
            swapped.append(True)
            os.replace(newer, name)

    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        monkeypatch.setattr(files.fcntl, "flock", flock_then_replace)
        assert files.remove_if_unheld(str(name)) is False
        monkeypatch.undo()
        assert name.read_bytes() == b"new"
    finally:
        os.close(held)
    assert files.remove_if_unheld(str(name)) is True and not name.exists()


def test_retention_leaves_an_archive_another_rotation_is_compressing(tmp_path):
    """Two processes: one `journal rotate` paused while it compresses its archive (its writer
    lock already let go), another `rotate --keep 0` of the same lineage meanwhile. The second
    must neither remove the archive under the first (which would then publish a `.gz` of an
    archive said removed) nor compress it twice; running it again once the first is done
    removes it."""
    import subprocess
    import sys

    from paused_cli import resume

    path, first, plain = rotation_paused_compressing(tmp_path)
    try:
        assert os.path.exists(plain)
        second = subprocess.run([sys.executable, "-m", "journal.cli", "rotate", path,
                                 "--keep", "0", "--json"], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 0, second.stderr
        said = orjson.loads(second.stdout)
        assert said["removedArchives"] == []
        assert any("another process is compressing it" in w for w in said["warnings"])
        assert os.path.exists(plain)
    finally:
        status, out, err = resume(first)
    assert status == 0, err
    archive = orjson.loads(out)["archive"]
    assert archive == plain + ".gz" and not os.path.exists(plain)
    with gzip.open(archive) as f:
        assert f.read().startswith(b'{"type":"session"')
    again = subprocess.run([sys.executable, "-m", "journal.cli", "rotate", path, "--keep", "0",
                            "--json"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert orjson.loads(again.stdout)["removedArchives"] == [archive]
    assert os.listdir(tmp_path / "archive") == []


def closed_with_archive_name(folder) -> tuple[str, str]:
    """A closed session ready to rotate, and the name its plain archive will have."""
    s, _ = build_session(folder)
    s.close()
    return s.path, os.path.join(folder, "archive", os.path.basename(s.path))


def test_a_rotation_whose_retry_compressed_the_archive_left_to_another_names_the_gz(
        tmp_path, monkeypatch):
    """The archive's `flock` held when the rotation came to compress it, and let go before
    the rotation retried earlier compressions: the retry compresses it, and the result names
    the `.gz` (not the plain file, which is gone), compressed here after all."""
    import journal.rotation as rotation_module

    path, plain = closed_with_archive_name(tmp_path)
    held: list[int] = []

    def hold_the_archive(step: str) -> None:
        if step == "done":  # as another process's probe of it would
            held.append(os.open(plain, os.O_RDONLY))
            fcntl.flock(held[-1], fcntl.LOCK_EX)

    real_finish = rotation_module.finish_compression

    def let_go_then_finish(live: str) -> list[str]:
        for fd in held:
            os.close(fd)
        held.clear()
        return real_finish(live)

    monkeypatch.setattr(rotation_module, "step_hook", hold_the_archive)
    monkeypatch.setattr(rotation_module, "finish_compression", let_go_then_finish)
    result = rotate(path)
    assert result.rotated and result.archive == plain + ".gz", result
    assert not result.compressing_elsewhere and not result.warnings, result
    assert os.path.exists(plain + ".gz") and not os.path.exists(plain)


def test_a_rotation_whose_archive_another_process_compresses_names_the_plain_file(
        tmp_path, monkeypatch):
    """A rotation let go of the lock and found its archive's `flock` held by another process
    (a `journal rotate` of the successor, retrying the compression it takes for failed): it
    left the compression to it, and its result named a `.gz` that did not exist yet."""
    from paused_cli import resume, start

    import journal.rotation as rotation_module

    path, plain = closed_with_archive_name(tmp_path)
    other = []

    def another_process_compresses(step: str) -> None:
        if step == "done":  # the successor and the plain archive are in place
            [successor] = [p for p in os.listdir(tmp_path)
                           if p.endswith(".jsonl") and p != os.path.basename(path)]
            other.append(start(["rotate", os.path.join(tmp_path, successor), "--json"],
                               resumable=True))

    monkeypatch.setattr(rotation_module, "step_hook", another_process_compresses)
    try:
        result = rotate(path)
        [(child, temp)] = other
        assert temp.endswith(".compress.tmp"), temp
        assert result.rotated and result.archive == plain, result
        assert os.path.exists(result.archive) and not os.path.exists(plain + ".gz")
        assert result.compressing_elsewhere and not result.warnings, result
        said = result.to_json()
        assert said["archive"] == plain and said["compressingElsewhere"] is True
    finally:
        for child, _ in other:
            status, out, err = resume(child)
    assert status == 0, err
    assert os.path.exists(plain + ".gz") and not os.path.exists(plain)
    assert seal_of(plain + ".gz") is not None  # the sealed old file, compressed whole
    assert orjson.loads(out)["rotated"] is False


def test_a_rotation_whose_archive_another_process_removed_names_none(tmp_path, monkeypatch):
    """Another process's `rotate --keep 0` removed the archive between this rotation's letting
    go of the lock and its compression: the result named a `.gz` that never came to be."""
    import subprocess
    import sys

    import journal.rotation as rotation_module

    path, plain = closed_with_archive_name(tmp_path)
    other = []

    def another_process_removes(step: str) -> None:
        if step == "done":
            [successor] = [p for p in os.listdir(tmp_path)
                           if p.endswith(".jsonl") and p != os.path.basename(path)]
            other.append(subprocess.run(
                [sys.executable, "-m", "journal.cli", "rotate",
                 os.path.join(tmp_path, successor), "--keep", "0", "--json"],
                capture_output=True, text=True, timeout=60))

    monkeypatch.setattr(rotation_module, "step_hook", another_process_removes)
    result = rotate(path)
    [done] = other
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["removedArchives"] == [plain + ".gz"]
    assert result.rotated and result.archive is None and not result.compressing_elsewhere
    assert any(f"the archive {plain} was removed by another process" in w
               for w in result.warnings), result.warnings
    assert os.listdir(tmp_path / "archive") == []


def test_retention_removes_the_copy_of_an_archive_compressed_since_it_was_listed(
        tmp_path, monkeypatch):
    """Another process finished compressing an archive between retention's listing of the
    lineage and its removal: the plain file was gone, and retention took it for removed by
    someone else, leaving the `.gz` (not removed, not said busy)."""
    import journal.rotation as rotation_module
    from journal.lineage import Traced

    s, _ = build_session(tmp_path)
    path = s.path
    s.close()
    result = rotate(path, compress=False)
    assert result.rotated and result.archive and not result.archive.endswith(".gz")
    plain = result.archive
    listed = rotation_module.trace

    def listed_then_compressed(live: str) -> Traced:
        found = listed(live)
        if os.path.exists(plain):  # the other process's compression ends now
            with open(plain, "rb") as f, gzip.open(plain + ".gz", "wb") as out:
                out.write(f.read())
            os.unlink(plain)
        return found

    monkeypatch.setattr(rotation_module, "trace", listed_then_compressed)
    busy: list[str] = []
    removed = rotation_module.apply_retention(path, 0, busy=busy)
    assert removed == [plain + ".gz"] and busy == []
    assert not os.path.exists(plain + ".gz") and os.listdir(tmp_path / "archive") == []


@pytest.mark.parametrize("archive_to", [False, True], ids=["remove", "archive-to"])
def test_prune_leaves_an_archive_a_rotation_is_compressing(tmp_path, archive_to):
    """`journal prune --older-than 0s` while a rotation compresses its archive (the writer
    lock already let go) removed the archive under it: the compression then published a `.gz`
    of an archive said pruned."""
    import subprocess
    import sys

    from paused_cli import resume

    folder = tmp_path / "s"
    folder.mkdir()
    path, first, plain = rotation_paused_compressing(folder)
    try:
        moved = ["--archive-to", str(tmp_path / "old")] if archive_to else []
        pruned = subprocess.run([sys.executable, "-m", "journal.cli", "prune", str(folder),
                                 "--older-than", "0s", "--json", *moved],
                                capture_output=True, text=True, timeout=60)
        assert pruned.returncode == 0, pruned.stdout + pruned.stderr
        [item] = orjson.loads(pruned.stdout)["items"]
        assert item["action"] == "skip" and "a rotation is compressing it" in item["reason"]
        assert os.path.exists(plain) and os.path.exists(item["path"])  # kept whole
    finally:
        status, out, err = resume(first)
    assert status == 0, err
    assert orjson.loads(out)["archive"] == plain + ".gz" and os.path.exists(plain + ".gz")


def test_prune_keeps_the_whole_lineage_while_a_later_archive_is_being_compressed(tmp_path):
    """The oldest archive was removed first, then prune stopped at the one a rotation held:
    a lineage half removed."""
    import fcntl
    import subprocess
    import sys

    folder = tmp_path / "s"
    folder.mkdir()
    s, _ = build_session(folder)
    first = s.path
    s.close()
    assert rotate(first, compress=False).rotated
    live = resolve_live(first)[0]
    with Session.open(live) as session:
        ids = [session.append_message(user(f"again {i} " + "z" * 3000)) for i in range(6)]
        session.append_message(assistant("a"))
        session.append_compaction("again", ids[3], 5000)
    assert rotate(live, compress=False).rotated
    chain = lineage(resolve_live(live)[0])
    assert len(chain) == 3
    fd = os.open(chain[-2], os.O_RDONLY)  # the newest archive, as its compression holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        pruned = subprocess.run([sys.executable, "-m", "journal.cli", "prune", str(folder),
                                 "--older-than", "0s", "--json"], capture_output=True,
                                text=True, timeout=60)
    finally:
        os.close(fd)
    assert pruned.returncode == 0, pruned.stderr
    [item] = orjson.loads(pruned.stdout)["items"]
    assert item["action"] == "skip" and "a rotation is compressing it" in item["reason"]
    assert all(os.path.exists(p) for p in chain)
