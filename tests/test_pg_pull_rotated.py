"""`journal pull` again into a folder an earlier pull wrote, after the database rotated a
session: the earlier copy at the session's live name (a beginning of what is now its
archive) is removed, as file rotation moves the file it seals into the archive, so the
folder ends as a pull into an empty folder gives it; a copy written to here is refused; a
pull killed at any step is finished by running it again."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")

ROOT = Path(__file__).resolve().parents[1]


def journal(*args: str, env: dict[str, str], stdin: bytes = b"",
            ok: bool = True) -> subprocess.CompletedProcess[str]:
    """`journal ARGS` run here, as a user runs it but without a new interpreter each time
    (the steps a test kills run in a child: `STEP_CHILD`), under `env`'s database and HOME."""
    from journal.cli.commands import main

    out, err = io.StringIO(), io.StringIO()
    saved = {key: os.environ.get(key) for key in ("JOURNAL_DATABASE_URL", "HOME")}
    os.environ.update({key: env[key] for key in saved})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                _stdin(stdin):
            code = main(list(args))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    done = subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())
    if ok:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


@contextlib.contextmanager
def _stdin(data: bytes) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    try:
        yield
    finally:
        sys.stdin = saved


@pytest.fixture
def env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
            "JOURNAL_DATABASE_URL": pg_url}


def messages(n: int, tag: str) -> bytes:
    return b"".join(json.dumps({"role": "user", "content": f"{tag} {i} " + "y" * 200,
                                "timestamp": 1}).encode() + b"\n" for i in range(n))


def grow_and_compact(session: str, env: dict[str, str], tag: str) -> None:
    """30 messages on `session`, then a compaction keeping the last three (so it rotates)."""
    ids = json.loads(journal("append", session, "--json", env=env,
                             stdin=messages(30, tag)).stdout)["ids"]
    compaction = {"type": "compaction", "summary": f"summary {tag}",
                  "firstKeptEntryId": ids[-3], "tokensBefore": 9000}
    journal("append", session, env=env, stdin=json.dumps(compaction).encode() + b"\n")


def rotate(session: str, env: dict[str, str], *options: str) -> str:
    """Rotate the database session; its successor's `pg:` name."""
    done = json.loads(journal("rotate", session, "--json", *options, env=env).stdout)
    assert done["rotated"], done
    return f"pg:{done['successorId']}"


def everything(folder: Path) -> dict[str, bytes | None]:
    """Every name under `folder` (temps and lock files included), with a file's bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def pulled_clean(session: str, env: dict[str, str], tmp_path: Path) -> dict[str, bytes | None]:
    """What a pull of `session`'s lineage into an empty folder gives."""
    clean = tmp_path / f"clean-{len(list(tmp_path.glob('clean-*')))}"
    journal("pull", session, str(clean), env=env)
    return everything(clean)


def new_session(env: dict[str, str]) -> str:
    return f"pg:{json.loads(journal('new', 'pg:', '--json', env=env).stdout)['id']}"


def live_copy(folder: Path) -> Path:
    (only,) = [p for p in folder.glob("*.jsonl")]
    return only


def test_a_pull_after_a_rotation_removes_the_earlier_copy_and_the_folder_is_one_lineage(
        env: dict[str, str], tmp_path: Path) -> None:
    """The newcomer's run: a 30-line session pulled, compacted, rotated in the database and
    pulled again. The second pull once left the first one's copy beside the archive: `ls`
    listed the session three times, `lineage` took the copy for the archive, `push` refused
    the lineage. Now the copy goes, the folder is what a pull into an empty folder gives,
    and it is one lineage that pushes back as it is."""
    session = new_session(env)
    journal("append", session, env=env, stdin=messages(30, "one"))
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    copy = live_copy(rp)
    first = copy.read_bytes()
    grow_and_compact(session, env, "two")
    successor = rotate(session, env)

    again = journal("pull", session, str(rp), "--json", env=env)
    report = json.loads(again.stdout)
    archive = rp / "archive" / copy.name
    assert everything(rp) == pulled_clean(successor, env, tmp_path)
    assert not copy.exists() and archive.read_bytes().startswith(first)

    rows = json.loads(journal("ls", str(rp), "--json", env=env).stdout)
    live = live_copy(rp)
    assert [(row["files"], row["state"]) for row in rows] == [
        ([str(rp / "archive" / copy.name), str(live)], "live")]
    chain = json.loads(journal("lineage", str(live), "--json", env=env).stdout)
    assert [Path(p).relative_to(rp).as_posix() for p in chain["lineage"]] == [
        f"archive/{copy.name}", live.name]
    pushed = journal("push", str(rp), env=env)
    assert "nothing to push: the database is up to date (2 session(s) unchanged)" in \
        pushed.stdout
    assert report["archived"] == [{"session": report["files"][0]["session"],
                                   "file": str(copy), "archive": str(archive),
                                   "bytes": len(first)}]
    text = journal("pull", session, str(rp), env=env).stdout  # and once more: all there
    assert text.splitlines()[-1] == "0 file(s) written, 2 already there"


def test_a_lineage_rotated_twice_and_again_leaves_no_earlier_copy(
        env: dict[str, str], tmp_path: Path) -> None:
    """Pulled live, rotated twice, pulled (the first copy goes; the second session, never
    pulled live, has none), rotated again and pulled (the live copy of the second pull
    goes): each time the folder is what a pull into an empty folder gives."""
    session = new_session(env)
    grow_and_compact(session, env, "a")
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    firsts = [live_copy(rp)]
    second = rotate(session, env)
    grow_and_compact(second, env, "b")
    third = rotate(second, env)
    report = json.loads(journal("pull", session, str(rp), "--json", env=env).stdout)
    assert everything(rp) == pulled_clean(third, env, tmp_path)
    assert [row["file"] for row in report["archived"]] == [str(firsts[0])]
    firsts.append(live_copy(rp))
    grow_and_compact(third, env, "c")
    fourth = rotate(third, env)
    report = json.loads(journal("pull", fourth, str(rp), "--json", env=env).stdout)
    assert everything(rp) == pulled_clean(fourth, env, tmp_path)
    assert [row["file"] for row in report["archived"]] == [str(firsts[1])]
    assert len(list((rp / "archive").iterdir())) == 3


def test_an_archive_exported_out_of_the_database_ends_the_same(
        env: dict[str, str], tmp_path: Path) -> None:
    """Rotated with `--archive-dir X --keep 0`: the sealed session's lines leave the
    database for X's `.gz`, which the pull reads. The earlier copy goes as before. With X's
    file gone, a pull into another earlier folder is refused and changes nothing, and
    `--skip-elsewhere` leaves the copy (the only copy there of those bytes) where it is, as
    it leaves the archive out."""
    session = new_session(env)
    grow_and_compact(session, env, "a")
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    spare = tmp_path / "spare"
    journal("pull", session, str(spare), env=env)
    spare_copy = live_copy(spare)
    spare_bytes = spare_copy.read_bytes()
    exported = tmp_path / "exported"
    successor = rotate(session, env, "--archive-dir", str(exported), "--keep", "0")
    (gz,) = exported.iterdir()
    report = json.loads(journal("pull", session, str(rp), "--json", env=env).stdout)
    assert everything(rp) == pulled_clean(successor, env, tmp_path)
    assert len(report["archived"]) == 1

    moved = tmp_path / "moved-away"
    gz.rename(moved)
    before = everything(spare)
    refused = journal("pull", session, str(spare), env=env, ok=False)
    assert refused.returncode == 2 and str(gz) in refused.stderr, refused.stderr
    assert everything(spare) == before
    skipped = json.loads(journal("pull", session, str(spare), "--skip-elsewhere", "--json",
                                 env=env).stdout)
    assert skipped["archived"] == [] and len(skipped["skipped"]) == 1
    assert spare_copy.read_bytes() == spare_bytes  # the copy stays, as the archive does


@pytest.mark.parametrize("how", ["appended", "edited"])
def test_a_copy_changed_here_since_it_was_pulled_is_refused_and_nothing_changes(
        env: dict[str, str], tmp_path: Path, how: str) -> None:
    """The earlier copy, written to by a local writer (`journal append`) or edited by hand,
    holds bytes the database does not: the pull is refused (exit 2) before anything is
    written, naming the file and saying to move it out; the folder stays as it was, byte
    for byte. Moved out, the pull goes through."""
    session = new_session(env)
    journal("append", session, env=env, stdin=messages(30, "one"))
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    copy = live_copy(rp)
    if how == "appended":
        journal("append", str(copy), env=env, stdin=messages(1, "local"))
    else:
        data = copy.read_bytes()
        copy.write_bytes(data.replace(b"one 7 ", b"ONE 7 ", 1))
    grow_and_compact(session, env, "two")
    successor = rotate(session, env)
    before = everything(rp)

    refused = journal("pull", session, str(rp), env=env, ok=False)
    said = refused.stderr.splitlines()[-1]
    assert refused.returncode == 2, refused.stderr
    assert said.startswith(f"Error: {copy}: a copy of ") and "nothing was written" in said
    assert "move the file out of the folder" in said
    assert everything(rp) == before

    kept = tmp_path / "kept.jsonl"
    copy.rename(kept)
    journal("pull", session, str(rp), env=env)
    assert everything(rp) == pulled_clean(successor, env, tmp_path)


STEP_CHILD = """
import os, signal, sys
from journal.pg import earlier_copies

def hook(name):
    if name == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)

earlier_copies.step_hook = hook
from journal.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("step", ["checked", "written", "moved", "removed"])
def test_a_pull_killed_at_each_step_is_finished_by_running_it_again(
        env: dict[str, str], tmp_path: Path, step: str) -> None:
    """A real `journal pull` process killed with SIGKILL at each step of the way (the copy
    checked and locked; the archive and successor published; the copy's quarantine moved
    into the archive folder; the copy removed, its lock file not yet): the bytes of the
    copy are still in the folder, whole, and the same pull run again ends with what a pull
    into an empty folder gives, the quarantine in the archive folder; a lock file the kill
    left is a stray one, which `journal prune` removes."""
    from journal.pg import earlier_copies

    assert step in earlier_copies.STEPS
    session = new_session(env)
    journal("append", session, env=env, stdin=messages(30, "one"))
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    copy = live_copy(rp)
    first = copy.read_bytes()
    quarantined = b'{"key":"0","note":"a torn line cut on open"}\n'
    Path(f"{copy}.quarantine").write_bytes(quarantined)
    grow_and_compact(session, env, "two")
    successor = rotate(session, env)

    child = subprocess.run([sys.executable, "-c", STEP_CHILD, step, "pull", session,
                            str(rp)], env=env, capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    archive = rp / "archive" / copy.name
    holders = [p.read_bytes() for p in (copy, archive) if p.exists()]
    assert any(data.startswith(first) for data in holders)  # nothing of it lost

    journal("pull", session, str(rp), env=env)
    stray = f"{copy.name}.lock"
    assert (stray in everything(rp)) == (step == "removed")
    journal("prune", str(rp), "--older-than", "1000d", env=env)
    after = everything(rp)
    assert after.pop(f"archive/{copy.name}.quarantine") == quarantined
    assert after == pulled_clean(successor, env, tmp_path)


def test_a_pull_killed_while_it_publishes_is_finished_by_running_it_again(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed with the archive published and the successor not yet: the copy is still
    there (nothing is removed before every file is written), and the rerun finishes."""
    from paused_cli import start

    session = new_session(env)
    journal("append", session, env=env, stdin=messages(30, "one"))
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    copy = live_copy(rp)
    grow_and_compact(session, env, "two")
    successor = rotate(session, env)
    monkeypatch.setenv("JOURNAL_DATABASE_URL", env["JOURNAL_DATABASE_URL"])
    child, _ = start(["pull", session, str(rp)], pause_at=2)
    child.kill()
    child.wait()
    assert copy.exists() and (rp / "archive" / copy.name).exists()
    journal("pull", session, str(rp), env=env)
    assert everything(rp) == pulled_clean(successor, env, tmp_path)


def test_a_file_of_another_session_at_the_name_is_left_as_it_is(
        env: dict[str, str], tmp_path: Path) -> None:
    """A file at the rotated session's old name whose header is another session's is no
    copy of it: the pull writes the lineage and leaves that file alone, as it always did."""
    session = new_session(env)
    grow_and_compact(session, env, "a")
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    copy = live_copy(rp)
    other = new_session(env)
    journal("append", other, env=env, stdin=messages(2, "other"))
    elsewhere = tmp_path / "other"
    journal("pull", other, str(elsewhere), env=env)
    theirs = live_copy(elsewhere).read_bytes()
    copy.write_bytes(theirs)
    successor = rotate(session, env)
    report = json.loads(journal("pull", session, str(rp), "--json", env=env).stdout)
    after = everything(rp)
    assert after.pop(copy.name) == theirs
    assert after == pulled_clean(successor, env, tmp_path)
    assert report["archived"] == []


@pytest.mark.parametrize("kind", ["another program's lock", "a link"])
def test_a_lock_file_alone_at_the_old_name_is_left_to_prune(
        env: dict[str, str], tmp_path: Path, kind: str) -> None:
    """The copy moved away by hand, a `<name>.lock` left at its name: the pull writes the
    lineage and leaves that file as it is (removing stray locks is prune's, by its rule:
    another program's lock, a link are never removed), and says nothing went wrong."""
    session = new_session(env)
    grow_and_compact(session, env, "a")
    rp = tmp_path / "rp"
    journal("pull", session, str(rp), env=env)
    copy = live_copy(rp)
    copy.rename(tmp_path / "moved-away.jsonl")
    lock = rp / f"{copy.name}.lock"
    if kind == "a link":
        lock.symlink_to(tmp_path / "moved-away.jsonl")
    else:
        lock.write_bytes(b"12345\n")
    successor = rotate(session, env)
    report = json.loads(journal("pull", session, str(rp), "--json", env=env).stdout)
    assert report["archived"] == []
    after = everything(rp)
    if kind == "a link":
        assert lock.is_symlink()
        after.pop(lock.name, None)
    else:
        assert after.pop(lock.name) == b"12345\n"
    assert after == pulled_clean(successor, env, tmp_path)


def pushed_as_session_jsonl(folder: Path, env: dict[str, str]) -> str:
    """A file session named `session.jsonl` in `folder`, pushed: its `pg:` name."""
    folder.mkdir()
    made = json.loads(journal("new", str(folder), "--json", env=env).stdout)
    Path(made["path"]).rename(folder / "session.jsonl")
    journal("push", str(folder), env=env)
    return f"pg:{made['id']}"


def test_a_lineage_in_a_folder_of_its_own_keeps_its_folder_across_rotations(
        env: dict[str, str], tmp_path: Path) -> None:
    """Two sessions pushed as `session.jsonl` from two folders: a pull of the database puts
    the second lineage in a folder of its own. Once it was named by the lineage's live
    session, so after a rotation the next pull wrote the lineage into a new folder and
    left the first pull's copy behind, a second live file of the session. The folder is
    named by the lineage's first session now, and a pull after each rotation (of either
    lineage) ends as a pull into an empty folder does."""
    first = pushed_as_session_jsonl(tmp_path / "a", env)
    second = pushed_as_session_jsonl(tmp_path / "b", env)
    out = tmp_path / "out"
    journal("pull", "pg:", str(out), env=env)
    folder = second.removeprefix("pg:")
    assert set(everything(out)) == {"session.jsonl", folder, f"{folder}/session.jsonl"}

    grow_and_compact(second, env, "b")
    rotate(second, env)
    report = json.loads(journal("pull", "pg:", str(out), "--json", env=env).stdout)
    assert everything(out) == pulled_clean("pg:", env, tmp_path)
    assert [row["file"] for row in report["archived"]] == [str(out / folder / "session.jsonl")]
    assert (out / folder / "archive" / "session.jsonl").is_file()

    grow_and_compact(first, env, "a")
    rotate(first, env)
    journal("pull", "pg:", str(out), env=env)
    assert everything(out) == pulled_clean("pg:", env, tmp_path)
    assert sorted(p.name for p in out.glob("*/archive/*")) == ["session.jsonl"]
    assert (out / "archive" / "session.jsonl").is_file()
