"""`journal export PATH -o FILE` where FILE is a file the export reads (the session itself,
or an archive of its lineage) is refused: it used to publish the Markdown over the session,
destroying it with no backup."""

from __future__ import annotations

import os

import pytest
from test_rotate import build_session

from journal import Session, lineage, load, rotate
from journal.cli import main


def small_session(folder) -> str:
    with Session.create(str(folder), cwd="/w") as s:
        s.append_message({"role": "user", "content": "keep me", "timestamp": 0})
        path = s.path
    return path


@pytest.mark.parametrize("fmt", ["md", "html", "jsonl"])
def test_export_onto_the_session_itself_is_refused(fmt, tmp_path, capsys):
    path = small_session(tmp_path)
    before = open(path, "rb").read()
    assert main(["export", path, "--format", fmt, "-o", path]) == 2
    err = capsys.readouterr().err
    assert f"Error: {path}: is a file of the session being exported" in err
    assert open(path, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no temp left behind


def test_export_onto_a_link_to_the_session_is_refused(tmp_path, capsys):
    path = small_session(tmp_path)
    link = tmp_path / "link.md"
    link.symlink_to(path)
    before = open(path, "rb").read()
    assert main(["export", path, "-o", str(link)]) == 2
    assert open(path, "rb").read() == before
    assert link.is_symlink()


def test_export_onto_an_archive_of_the_lineage_is_refused(tmp_path, capsys):
    session, _ = build_session(tmp_path)
    session.close()
    result = rotate(session.path, compress=False)
    live, archived = result.successor, result.archive
    assert live and archived and archived in lineage(live)
    before = open(archived, "rb").read()
    assert main(["export", live, "--format", "jsonl", "-o", archived]) == 2
    assert open(archived, "rb").read() == before
    assert load(live).entries

