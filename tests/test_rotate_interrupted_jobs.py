"""A rotation SIGKILLed half way, as the nightly jobs meet it: `repair --check`, `ls` and
`prune` agree that it is pending (a finding, `needs-repair`, kept whole: the old file, a
successor already published, the intent), and `journal rotate DIR` or `journal repair DIR`
finishes it, after which the session is clean and prunes whole, leaving no side file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from test_rotate_crash import crash_by_sigkill, make_session

from journal.lineage import INTENT_SUFFIX, resolve_live

ROOT = Path(__file__).resolve().parents[1]
PENDING = "an interrupted rotation is pending: run journal repair or journal rotate first"


def journal(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=120)


def everything(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


# the steps after which a killed rotation leaves an intent: not yet published, published
# (the old file not sealed), sealed (not archived), archived (the intent not yet removed)
STEPS = ["intent", "published", "sealed", "archived"]


def killed(folder: Path, step: str) -> str:
    """A session whose rotation was SIGKILLed just after `step`: its old file's path."""
    old = make_session(folder)
    crash_by_sigkill(old, step)
    assert os.path.lexists(old + INTENT_SUFFIX)
    return old


def rows_of(folder: Path) -> list[dict]:
    return orjson.loads(journal("ls", str(folder), "--json", "--no-cache").stdout)


@pytest.mark.parametrize("step", STEPS)
def test_repair_check_reports_a_pending_rotation_that_repair_finishes(
        tmp_path: Path, step: str) -> None:
    old = killed(tmp_path, step)
    check = journal("repair", str(tmp_path), "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "needs repair (pending_rotation 1)" in check.stdout
    shown = journal("repair", str(tmp_path), "--check", "--json")
    problems = [p for line in shown.stdout.splitlines()
                for p in orjson.loads(line)["problems"]]
    assert problems and all(p["kind"] == "pending_rotation" for p in problems)
    assert "'journal repair' or 'journal rotate' finishes it" in problems[0]["action"]

    done = journal("repair", str(tmp_path), "--json")  # what a job runs when --check exits 1
    assert done.returncode == 0, done.stdout + done.stderr
    assert "an interrupted rotation was" in done.stderr
    # and in its report, as the finding --check gave
    finished = [p for line in done.stdout.splitlines()
                for p in orjson.loads(line)["problems"]]
    assert [p["kind"] for p in finished] == ["pending_rotation"], done.stdout
    assert "an interrupted rotation was " + ("undone" if step == "intent" else "finished") in (
        finished[0]["action"])
    assert not list(tmp_path.glob("*" + INTENT_SUFFIX)) and not list(tmp_path.glob(".*.tmp"))
    assert os.path.exists(resolve_live(old)[0])
    again = journal("repair", str(tmp_path), "--check")
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.parametrize("step", STEPS)
def test_prune_keeps_the_whole_lineage_until_the_rotation_is_finished(
        tmp_path: Path, step: str) -> None:
    killed(tmp_path, step)
    before = everything(tmp_path)
    rows = rows_of(tmp_path)
    assert rows and {row["state"] for row in rows} == {"needs-repair"}, rows
    pruned = journal("prune", str(tmp_path), "--older-than", "0s", "--json")
    assert pruned.returncode == 0, pruned.stderr
    items = orjson.loads(pruned.stdout)["items"]
    assert items and all(i["action"] == "skip" and i["reason"] == PENDING for i in items)
    assert everything(tmp_path) == before  # nothing of the lineage went, side files included

    assert journal("repair", str(tmp_path)).returncode == 0
    assert [row["state"] for row in rows_of(tmp_path)] == ["live"]
    gone = journal("prune", str(tmp_path), "--older-than", "0s")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert everything(tmp_path) == [], everything(tmp_path)  # no .lock, no .rotating left


@pytest.mark.parametrize("step", STEPS)
def test_rotate_dir_finishes_an_interrupted_rotation(tmp_path: Path, step: str) -> None:
    old = killed(tmp_path, step)
    dry = journal("rotate", str(tmp_path), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert os.path.lexists(old + INTENT_SUFFIX)  # a dry run changes nothing
    done = journal("rotate", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    assert "Error:" not in done.stderr
    report = orjson.loads(done.stdout)
    assert report["counts"]["failed"] == 0
    recovered = [r for row in report["sessions"] if row["result"]
                 for r in row["result"]["recovered"]]
    assert len(recovered) == 1 and "an interrupted rotation was" in recovered[0]
    assert not list(tmp_path.glob("*" + INTENT_SUFFIX)) and not list(tmp_path.glob(".*.tmp"))
    assert os.path.exists(resolve_live(old)[0])
    assert journal("repair", str(tmp_path), "--check").returncode == 0
    again = journal("rotate", str(tmp_path), "--json")  # nothing left to do
    assert again.returncode == 0 and not any(
        row["result"] and row["result"]["recovered"]
        for row in orjson.loads(again.stdout)["sessions"])


def test_a_fork_is_not_held_by_its_parents_interrupted_rotation(tmp_path: Path) -> None:
    """A fork names its parent as the successor of a rotation does: the parent's pending
    rotation made the fork needs-repair, kept by prune, and a repair of it finished the
    parent's rotation."""
    from journal import Session

    old = make_session(str(tmp_path))
    with Session.create(str(tmp_path), cwd="/w", parent_session=old) as fork:
        fork.append_message({"role": "user", "content": "a fork of it", "timestamp": 1})
        forked = fork.path
    crash_by_sigkill(old, "intent")
    assert os.path.lexists(old + INTENT_SUFFIX)
    check = journal("repair", forked, "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    rows = {row["path"]: row["state"] for row in rows_of(tmp_path)}
    assert rows[forked] == "live", rows
    assert os.path.lexists(old + INTENT_SUFFIX)  # the parent's, left for its own repair


def test_info_of_the_successor_a_killed_rotation_published_says_the_rotation_is_pending(
        tmp_path: Path) -> None:
    """`info` of either file, the old one (the intent beside it) or the successor it already
    published, says what `repair --check` and `ls` say of the lineage: a rotation is pending
    (the successor's own `info` said nothing)."""
    folder = tmp_path / "s"
    old = killed(folder, "published")
    [successor] = [str(p) for p in folder.glob("*.jsonl") if str(p) != old]
    for path in (old, successor):
        info = orjson.loads(journal("info", path, "--json").stdout)
        assert "an interrupted rotation is pending" in (info["pendingRotation"] or ""), path
        assert old + INTENT_SUFFIX in info["pendingRotation"]


def test_ls_shows_a_rotation_killed_after_publishing_its_successor_as_one_session(
        tmp_path: Path) -> None:
    """Killed after publishing its successor, before sealing the old file: the old file and
    the successor were two rows (each `needs-repair`, the copied entries counted in both),
    though the intent beside the old file says the successor continues it."""
    folder = tmp_path / "s"
    old = killed(folder, "published")
    [successor] = [str(p) for p in folder.glob("*.jsonl") if str(p) != old]
    ids = {orjson.loads(line).get("id") for f in (old, successor)
           for line in Path(f).read_bytes().splitlines()[1:]}
    [row] = rows_of(folder)
    assert row["path"] == successor and row["files"] == [old, successor], row
    assert row["state"] == "needs-repair" and row["entries"] == len(ids), row
    assert "an interrupted rotation is pending" in row["problems"]
    assert journal("repair", str(folder)).returncode == 0
    [row] = rows_of(folder)
    assert row["state"] == "live" and row["entries"] == len(ids) + 1, row  # and the seal


def test_a_cached_listing_of_the_old_file_gives_way_to_its_interrupted_rotation(
        tmp_path: Path) -> None:
    """`ls` with its row cache (the default): the old file, listed and cached before a
    rotation was killed after publishing its successor, is unchanged by it (the seal is not
    written yet), but its cached one-file lineage is not used while the intent beside it
    is there: one row, as without the cache."""
    folder = tmp_path / "s"
    folder.mkdir()
    old = make_session(folder)
    past = os.stat(old).st_mtime - 60  # older than the cache's racy window
    os.utime(old, (past, past))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def listed() -> list[dict]:
        result = subprocess.run([sys.executable, "-m", "journal.cli", "ls", str(folder),
                                 "--json"], capture_output=True, text=True, env=env,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        return orjson.loads(result.stdout)

    [before] = listed()
    assert (tmp_path / "cache" / "journal" / "catalog.json").exists()
    crash_by_sigkill(old, "published")
    assert os.stat(old).st_mtime == past  # the old file as it was cached
    [row] = listed()
    assert row["files"][0] == old and len(row["files"]) == 2, row
    assert row["state"] == "needs-repair" and row["entries"] >= before["entries"], row

