"""Paths may come after options: `journal search QUERY -i DIR`, `journal ls D1 --json D2`,
`journal repair --check A --json B`. argparse filled the list positional with the paths
before the first option and refused the rest ("unrecognized arguments")."""

from __future__ import annotations

import orjson

from journal import Session
from journal.cli import main, repair_main


def session(folder, text: str) -> str:
    folder.mkdir(exist_ok=True)
    with Session.create(str(folder), cwd="/w") as s:
        s.append_message({"role": "user", "content": text, "timestamp": 0})
        return s.path


def test_search_takes_folders_after_options(tmp_path, capsys):
    one = session(tmp_path / "one", "Hello there")
    two = session(tmp_path / "two", "hello again")
    assert main(["search", "HELLO", "-i", str(tmp_path / "one"), "--json",
                 str(tmp_path / "two")]) == 0
    hits = orjson.loads(capsys.readouterr().out)["hits"]
    assert sorted(hit["session"] for hit in hits) == sorted([one, two])


def test_ls_takes_folders_after_options(tmp_path, capsys):
    one = session(tmp_path / "one", "a")
    two = session(tmp_path / "two", "b")
    assert main(["ls", str(tmp_path / "one"), "--no-cache", "--json",
                 str(tmp_path / "two")]) == 0
    rows = orjson.loads(capsys.readouterr().out)
    assert sorted(row["path"] for row in rows) == sorted([one, two])


def test_repair_takes_files_after_options(tmp_path, capsys):
    one = session(tmp_path / "one", "a")
    two = session(tmp_path / "two", "b")
    assert repair_main(["--check", one, "--json", two]) == 0
    out = capsys.readouterr().out
    assert one in out and two in out

