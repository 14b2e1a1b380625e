"""What `journal repair` says it rewrote agrees with what it put in the quarantine.

Every line repair writes anew has its original bytes kept as one quarantine record: the lines
with a problem and the lines it touched only as a consequence of fixing one (a reference
following a renamed id, say). The report says how many of each; the consequences are the
rewritten lines at whose offset no problem was found, whatever the reason they were
rewritten for (a renamed duplicate is rewritten for `duplicate_id`, and so is a line whose
reference follows it: the first is a problem line, the second a consequence).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from corruption import (
    Session,
    edit_entry,
    generated_bytes,
    glue_torn,
    insert_lines,
    line_offset,
    read_records,
    split_lines,
    text,
)

import journal
from journal.cli import main

REWRITTEN = "original bytes of a line the repair rewrote"


def reused_and_orphaned() -> bytes:
    """Line 5 reuses the id e02 (a problem), line 6 names a parent that is nowhere (a
    problem), line 7 is a label of the second e02 (rewritten to follow its rename)."""
    s = Session()
    s.user("one")
    s.assistant(text("first e02"))
    s.user("two")
    s.assistant(text("second, reusing e02"))
    s.entries[-1]["id"] = "e02"
    s.leaf = "e02"
    s.user("three", parent="gone0001")
    s.add("label", targetId="e02", label="the second")
    s.assistant(text("end"))
    return s.bytes()


def said(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return [line.strip() for line in out.splitlines() if "line(s)" in line]


def test_the_count_of_lines_rewritten_as_a_consequence_leaves_out_the_problem_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = reused_and_orphaned()
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    how = "3 line(s): 2 with a problem, 1 more as a consequence (duplicate_id)"
    assert said(capsys, "repair", str(path), "--dry-run") == [
        f"would rewrite {how}; the quarantine would keep each one's original bytes "
        "(see --json 'rewritten')"]
    report = journal.repair(str(path))
    assert [r.offset for r in report.rewritten_as_consequence] == [line_offset(data, 6)]
    records = read_records(path)
    assert [r["offset"] for r in records if r["detail"] == REWRITTEN] == [
        line_offset(data, n) for n in (4, 5, 6)]
    assert len(records) == 3  # nothing else: no line was dropped


def test_a_repair_that_rewrites_only_problem_lines_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = Session()
    s.turn("a")
    s.user("b", parent="gone0001")
    path = tmp_path / "s.jsonl"
    path.write_bytes(s.bytes())
    assert said(capsys, "repair", str(path)) == [
        "rewrote 1 line(s), each with a problem; the quarantine keeps each one's original "
        "bytes (see --json 'rewritten')"]
    assert [r["detail"] for r in read_records(path)] == [REWRITTEN]


def damaged(tmp_path: Path) -> bytes:
    """tests/test_pg_repair.py's damaged session: a line written twice, a parent that is
    nowhere, and a line torn with the next one glued on (the newcomer's run was on it)."""
    data = generated_bytes(tmp_path, seed=7, size=120_000)
    data = insert_lines(data, 12, split_lines(data)[11])

    def orphan(entry: dict[str, Any]) -> None:
        entry["parentId"] = "ffffffff"

    return glue_torn(edit_entry(data, 25, orphan), 40, 30)


DAMAGED_SAYS = ("rewrote 4 line(s): 3 with a problem, 1 more as a consequence (duplicate_id); "
                "the quarantine keeps each one's original bytes (see --json 'rewritten')")


def test_the_counts_add_up_to_the_quarantine_of_a_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(damaged(tmp_path))
    assert said(capsys, "repair", str(path)) == [DAMAGED_SAYS]
    details = [r["detail"] for r in read_records(path)]
    assert details.count(REWRITTEN) == 4 and len(details) == 5  # and the torn record


def test_the_counts_add_up_to_the_quarantine_of_a_database_session(
        pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg", reason="the PostgreSQL extra is not installed")
    from journal.pg.repair import quarantined
    from journal.pg.url import session_url
    from journal.storage import as_storage

    url = session_url(pg_url, str(uuid.uuid4()))
    as_storage(url).create(damaged(tmp_path))
    assert said(capsys, "repair", url) == [DAMAGED_SAYS]
    details = [r["detail"] for r in quarantined(url)]
    assert details.count(REWRITTEN) == 4 and len(details) == 5
