"""A rotated lineage one of whose `.gz` archives is damaged (cut short): its seal and header
cannot be read, so the lineage cannot be followed through it. Every reader says so, naming
it, and none takes the files on one side of it for the whole lineage, nor the damaged archive
(or the sealed file before it) for the live file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import journal
from journal import DamagedArchive, Session
from journal.cli import main


@dataclass
class Damaged:
    first: Path  # archive/s.jsonl.gz: sealed into the damaged one
    middle: Path  # the damaged archive
    live: Path


def rotated_twice(folder: Path, cut_to: int | None) -> Damaged:
    """s.jsonl rotated twice, then its middle archive cut to `cut_to` bytes (None: left
    whole)."""
    path = str(folder / "s.jsonl")
    with Session.create(path, cwd="/w") as s:
        for i in range(20):
            s.append_message({"role": "user", "content": f"m{i} " + "x" * 300, "timestamp": i})
        s.append_compaction("sum", s.entries[-4]["id"], 100)
    middle = journal.rotate(path).successor
    assert middle is not None
    with Session.open(middle) as s:
        for i in range(20):
            s.append_message({"role": "user", "content": f"n{i} " + "x" * 300, "timestamp": i})
        s.append_compaction("sum2", s.entries[-4]["id"], 100)
    live = journal.rotate(middle).successor
    assert live is not None
    archived = folder / "archive" / (os.path.basename(middle) + ".gz")
    assert archived.is_file() and (folder / "archive" / "s.jsonl.gz").is_file()
    if cut_to is not None:
        os.truncate(archived, cut_to)
    return Damaged(folder / "archive" / "s.jsonl.gz", archived, Path(live))


# 100: nothing of it can be read; 1000: its header can, its seal cannot
@pytest.fixture(params=[100, 1000])
def damaged(tmp_path: Path, request: pytest.FixtureRequest) -> Damaged:
    return rotated_twice(tmp_path / "sessions", request.param)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_lineage_of_the_live_file_says_the_damaged_archive_and_exits_1(damaged, capsys):
    code, out, err = run(capsys, "lineage", str(damaged.live))
    assert code == 1
    assert out.splitlines() == [f"damaged  {damaged.middle}", f"live  {damaged.live}"]
    warnings = [line for line in err.splitlines() if line.startswith("Warning: ")]
    assert len(warnings) == 1, err
    assert str(damaged.middle) in warnings[0]
    assert "not a readable gzip archive" in warnings[0]
    assert "may go on before it" in warnings[0]

    code, out, _ = run(capsys, "lineage", str(damaged.live), "--json")
    assert code == 1
    found = json.loads(out)
    assert found["lineage"] == [str(damaged.middle), str(damaged.live)]
    assert found["live"] == str(damaged.live)
    [entry] = found["damaged"]
    assert entry["path"] == str(damaged.middle) and entry["blocks"] == "before"
    assert entry["reason"].startswith("not a readable gzip archive")


def test_lineage_of_the_archive_before_it_says_its_successor_is_damaged(damaged, capsys):
    code, out, err = run(capsys, "lineage", str(damaged.first))
    assert code == 1
    assert "is sealed too" not in out
    assert out.splitlines()[:2] == [f"archived {damaged.first}", f"damaged  {damaged.middle}"]
    assert f"{damaged.middle} is damaged" in out.splitlines()[2]
    assert err.count("Warning: ") == 1 and str(damaged.middle) in err
    assert "the live one among them" in err

    code, out, _ = run(capsys, "lineage", str(damaged.first), "--json")
    found = json.loads(out)
    assert code == 1 and found["live"] is None
    assert [d["blocks"] for d in found["damaged"]] == ["after"]


def test_the_library_refuses_rather_than_give_a_wrong_live_file(damaged):
    with pytest.raises(DamagedArchive) as raised:
        journal.resolve_live(str(damaged.first))
    assert raised.value.path == str(damaged.middle) and raised.value.after
    with pytest.raises(DamagedArchive):
        journal.resolve_live(str(damaged.middle))
    with pytest.raises(DamagedArchive) as raised:
        journal.lineage(str(damaged.live))
    assert raised.value.path == str(damaged.middle) and not raised.value.after
    # the live file itself is found: its damaged history does not stop a writer
    assert journal.resolve_live(str(damaged.live))[0] == str(damaged.live)


def test_opening_the_first_archive_names_the_damaged_one(damaged):
    with pytest.raises(DamagedArchive, match="put back a good copy"):
        Session.open(str(damaged.first))


def test_export_of_the_live_file_says_once_that_history_before_it_is_missing(damaged, capsys):
    code, out, err = run(capsys, "export", str(damaged.live), "--format", "jsonl")
    assert code == 0
    warnings = [line for line in err.splitlines() if line.startswith("Warning: ")]
    assert len(warnings) == 1 and str(damaged.middle) in warnings[0], err
    assert "may go on before it" in warnings[0]
    assert "n19 " in out and "m3 " not in out


def test_export_of_the_archive_before_it_is_refused(tmp_path, capsys):
    """(Cut to nothing readable: the sealed archive alone was exported as the session.)"""
    damaged = rotated_twice(tmp_path / "sessions", 100)
    code, out, err = run(capsys, "export", str(damaged.first), "--format", "jsonl")
    assert code == 2 and out == ""
    assert err.startswith("Error: ") and str(damaged.middle) in err


def test_ls_and_usage_read_the_damaged_archive_with_its_live_file(damaged, capsys):
    code, out, err = run(capsys, "ls", "--no-cache", "--json", str(damaged.live.parent))
    assert code == 0
    rows = {row["path"]: row for row in json.loads(out)}
    row = rows[str(damaged.live)]
    assert row["files"] == [str(damaged.middle), str(damaged.live)]
    assert row["state"] == "needs-repair"
    assert str(damaged.middle) not in rows  # not a session of its own
    assert str(damaged.middle) in json.dumps(row["problems"])

    code, out, err = run(capsys, "usage", str(damaged.live), "--json")
    assert code == 0
    assert json.loads(out)["files"] == 2
    assert str(damaged.middle) in err


def test_info_names_the_damaged_archive_of_its_lineage(damaged, capsys):
    code, out, _ = run(capsys, "info", str(damaged.live))
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith("damaged:")]
    assert str(damaged.middle) in line and "files before it cannot be found" in line
    code, out, _ = run(capsys, "info", str(damaged.live), "--json")
    [entry] = json.loads(out)["damagedArchives"]
    assert entry["path"] == str(damaged.middle) and entry["blocks"] == "before"
    assert entry["reason"].startswith("not a readable gzip archive")

    code, out, _ = run(capsys, "info", str(damaged.first), "--json")
    found = json.loads(out)
    assert found["sealed"] and found["live"] is None
    assert [d["blocks"] for d in found["damagedArchives"]] == ["after"]


def test_info_of_a_lineage_without_damage_names_none(tmp_path, capsys):
    damaged = rotated_twice(tmp_path / "sessions", None)
    code, out, _ = run(capsys, "info", str(damaged.live), "--json")
    assert code == 0 and json.loads(out)["damagedArchives"] == []
