"""One enumeration (journal.discovery): `ls`, `search` and `usage` find the same sessions,
with the same files, at any depth, archives included, side files, hidden files and links
left out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from test_ls_cache import small
from test_usage import rotated_lineage

from journal import find_lineages, search, sessions, usage
from journal.discovery import is_session_name


def odd_folder(tmp_path: Path) -> tuple[Path, dict[str, tuple[str, ...]]]:
    """A folder of every shape a session may take, and the lineages in it (live path to its
    files, oldest first)."""
    top = tmp_path / "s"
    a = small(top, "top", 2)
    deep = small(top / "deep" / "deeper", "deep", 2)
    files, _ = rotated_lineage(top / "r")
    # a numbered archive name (rotation's answer to a taken name), a session of its own
    numbered = top / "r" / "archive" / "other.jsonl.2"
    shutil.copyfile(deep, numbered)
    with open(numbered, "r+b") as f:  # another name, so it is no byte copy
        data = f.read()
        f.seek(0)
        f.write(data.replace(b'"name":"deep"', b'"name":"numb"'))
    # what is not a session
    shutil.copyfile(a, top / ".hidden.jsonl")
    shutil.copyfile(a, str(a) + ".bak")
    shutil.copyfile(a, top / "x.jsonl.tmp")
    (top / "notes.txt").write_text("q0\n")
    os.symlink(a, top / "link.jsonl")
    real = os.path.realpath
    expected = {real(a): (real(a),), real(deep): (real(deep),),
                real(files[-1]): tuple(real(f) for f in files),
                real(numbered): (real(numbered),)}
    return top, expected


def test_ls_search_and_usage_find_the_same_sessions_and_files(tmp_path):
    top, expected = odd_folder(tmp_path)
    assert {f[-1]: tuple(f) for f in find_lineages([top])} == expected
    listed = {r.path: r.files for r in sessions([str(top)])}
    assert listed == expected
    counted = {s.path: tuple(s.files) for s in usage([top]).sessions}
    assert counted == expected
    found = search("q0", [top])
    assert found.sessions == len(expected) and found.files == sum(map(len, expected.values()))
    by_session: dict[str, set[str]] = {}
    for hit in found.hits:
        by_session.setdefault(hit.session, set()).add(hit.file)
    assert {k: tuple(sorted(v, key=expected[k].index)) for k, v in by_session.items()} == \
        expected
    assert not found.problems


def test_a_file_named_is_taken_with_its_lineage_by_all_three(tmp_path):
    top, expected = odd_folder(tmp_path)
    [rotated] = [files for files in expected.values() if len(files) > 1]
    for named in (rotated[0], rotated[-1]):
        assert [r.files for r in sessions([named])] == [rotated]
        assert [tuple(s.files) for s in usage([named]).sessions] == [rotated]
        assert {h.file for h in search("q0", [named]).hits} == set(rotated)


def test_the_names_that_are_sessions():
    assert is_session_name("a.jsonl") and is_session_name("a.jsonl.gz")
    assert is_session_name("a.jsonl.3.gz", in_archive=True)
    assert not is_session_name("a.jsonl.3.gz") and not is_session_name(".a.jsonl")
    for side in ("a.jsonl.bak", "a.jsonl.quarantine", "a.jsonl.lock", "a.jsonl.rotating",
                 "a.jsonl~", "a.jsonl.tmp", ".jsonl"):
        assert not is_session_name(side) and not is_session_name(side, in_archive=True), side
