"""Features the command line was missing: --version, tree --json, dates in tail, append
--parent, and the quarantine command."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from datetime import datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import orjson
import pytest
from test_cli_read import listing, one_error, run

from journal import Session, load
from journal.cli import main
from journal.cli.tail import clock
from journal.tree import Tree

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, function", [
    ("journal", "journal.cli.commands:main"),
    ("journal-repair", "journal.cli.repair:repair_main"),
    ("journal-tail", "journal.cli.tail:tail_main"),
])
def test_version_of_every_entry_point(tmp_path, script, function):
    module, _, name = function.partition(":")
    code = f"import sys; from {module} import {name}; sys.exit({name}(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60,
                          env={"HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"{script} {version('journal')}\n"
    assert list(tmp_path.iterdir()) == []


def test_version_can_be_added_twice(capsys):
    from journal.cli import add_version, entry_parser

    parser = entry_parser("x", "a parser")
    add_version(parser)  # what another entry point may do: no conflict
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"x {version('journal')}\n"


# tree --json


def test_tree_json_has_every_node_in_the_order_and_depth_of_the_text(tmp_path, capsys):
    from corruption import generated_bytes

    path = tmp_path / "gen.jsonl"
    path.write_bytes(generated_bytes(tmp_path, 0, 200_000))
    snap = load(path)
    code, out, err = run(capsys, "tree", str(path), "--json")
    assert code == 0 and err == ""
    data = orjson.loads(out)
    nodes = data["nodes"]
    assert data["leafId"] == Tree(snap.entries).leaf_id
    assert sorted(n["id"] for n in nodes) == sorted(e["id"] for e in snap.entries)
    assert [n["id"] for n in nodes if n["leaf"]] == [data["leafId"]]
    assert all(n["entry"]["id"] == n["id"] for n in nodes)
    code, text, _ = run(capsys, "tree", str(path))
    lines = text.splitlines()
    assert [line.split()[0] for line in lines] == [n["id"] for n in nodes]
    assert [(len(line) - len(line.lstrip())) // 2 for line in lines] == [
        n["depth"] for n in nodes]
    labelled = {n["id"]: n["label"] for n in nodes if n["label"]}
    assert labelled and labelled == Tree(snap.entries).labels


# dates in tail


def test_clock_names_the_date_unless_it_is_today():
    now = datetime.now().astimezone()
    stamp = now.isoformat()
    assert clock(stamp) == now.strftime("%H:%M:%S")
    assert clock(stamp, today=now.date() + timedelta(days=1)) == now.strftime(
        "%Y-%m-%d %H:%M:%S")
    assert clock(int(now.timestamp() * 1000)) == now.strftime("%H:%M:%S")
    assert clock(None) == "--:--:--"


def test_tail_shows_the_date_of_entries_from_another_day(tmp_path, capsys):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "today", "timestamp": 1})
        path = s.path
    old = {"type": "message", "id": "0ld0ld00", "parentId": load(path).entries[-1]["id"],
           "timestamp": "2020-02-03T12:00:00.000Z",
           "message": {"role": "user", "content": "long ago", "timestamp": 1}}
    with open(path, "ab") as f:
        f.write(orjson.dumps(old) + b"\n")
    code, out, _ = run(capsys, "tail", path)
    first, second = out.splitlines()
    assert code == 0
    assert re.match(r"\d\d:\d\d:\d\d user +today$", first)
    day = datetime.fromisoformat("2020-02-03T12:00:00+00:00").astimezone().date()
    assert re.match(rf"{day.isoformat()} \d\d:\d\d:\d\d user +long ago$", second)


# append --parent


def test_append_on_a_chosen_branch(tmp_path, capsys, monkeypatch):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        first = s.append_message({"role": "user", "content": "one", "timestamp": 1})
        s.append_message({"role": "user", "content": "two", "timestamp": 2})
        path = s.path
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b'{"role":"user","content":"other way","timestamp":3}\n')))
    code, out, err = run(capsys, "append", path, "--parent", first)
    assert code == 0, err
    new = load(path).entries[-1]
    assert new["id"] == out.strip() and new["parentId"] == first
    code, out, _ = run(capsys, "context", path, "--json")
    assert [m["content"] for m in orjson.loads(out)["messages"]] == ["one", "other way"]


def test_append_to_an_unknown_parent_writes_nothing(tmp_path, capsys, monkeypatch):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "one", "timestamp": 1})
        path = s.path
    (tmp_path / "s.jsonl.lock").unlink(missing_ok=True)
    before = listing(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b'{"role":"user","content":"x","timestamp":3}\n')))
    code, out, err = run(capsys, "append", path, "--parent", "deadbeef")
    assert code == 2 and out == ""
    one_error(err)
    assert "no entry with id 'deadbeef'" in err and "nothing was appended" in err
    assert listing(tmp_path) == before


@pytest.mark.parametrize("action", [["list"], ["show", "1"]])
def test_quarantine_of_a_folder_is_refused_as_a_folder(repaired, tmp_path, capsys, action):
    """A folder holding a repaired session is not taken for a session whose quarantine file
    is missing: the error says it is a folder."""
    path, _ = repaired
    code, out, err = run(capsys, "quarantine", action[0], str(Path(path).parent),
                         *action[1:])
    assert code == 2 and out == ""
    one_error(err)
    assert "a folder, not a session" in err and "nothing was quarantined" not in err


# quarantine


@pytest.fixture
def repaired(tmp_path, capsys):
    """A session that repair took two byte ranges out of: (path, the two ranges)."""
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "hi", "timestamp": 1})
        path = s.path
    with open(path, "ab") as f:
        f.write(b"garbage\xff\n{\"type\":")
    code, _, err = run(capsys, "repair", path)
    assert code == 0, err
    return path, [b"garbage\xff", b'{"type":']


def test_quarantine_list_show_and_restore(repaired, tmp_path, capsys):
    path, ranges = repaired
    code, out, err = run(capsys, "quarantine", "list", path, "--json")
    assert code == 0 and err == ""
    rows = orjson.loads(out)
    assert [r["line"] for r in rows] == [1, 2]
    assert [r["length"] for r in rows] == [len(b) for b in ranges]
    assert all("bytes" not in r for r in rows)
    code, out, _ = run(capsys, "quarantine", "list", path)
    assert code == 0 and len(out.splitlines()) == 3 and "torn_tail" in out
    code, out, _ = run(capsys, "quarantine", "show", path, "2", "--json")
    shown = orjson.loads(out)  # the record as list gives it, its number included
    assert code == 0 and {k: v for k, v in shown.items() if k not in ("bytes", "text")} == rows[1]

    session = Path(path).read_bytes()
    for number, data in enumerate(ranges, start=1):
        proc = subprocess.run([sys.executable, "-m", "journal.cli", "quarantine", "show",
                               path, str(number)], capture_output=True, timeout=60,
                              env={"HOME": str(tmp_path), "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0 and proc.stdout == data
        target = tmp_path / f"restored-{number}"
        code, out, err = run(capsys, "quarantine", "restore", path, str(number), str(target))
        assert code == 0 and err == "" and target.read_bytes() == data
    assert Path(path).read_bytes() == session  # never written back into the session


@pytest.mark.parametrize("argv", [
    ["restore", "{path}", "1", "{path}"],             # the session itself: refused
    ["restore", "{path}", "1", "{other}"],            # an existing file: refused
    ["restore", "{path}", "7", "{new}"],              # no such record
    ["show", "{path}", "7"],
    ["list", "{missing}"],
])
def test_quarantine_refusals_change_nothing(repaired, tmp_path, capsys, argv):
    path, _ = repaired
    other = tmp_path / "other.txt"
    other.write_bytes(b"mine\n")
    names = {"path": path, "other": str(other), "new": str(tmp_path / "new.bin"),
             "missing": str(tmp_path / "missing.jsonl")}
    before = listing(tmp_path)
    code, out, err = run(capsys, "quarantine", *(a.format(**names) for a in argv))
    assert code == 2 and out == ""
    one_error(err)
    assert listing(tmp_path) == before


# progress for one large file


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _big_damaged_session(tmp_path: Path) -> str:
    """A session of about 1 MB with a torn last line: repair has something to do."""
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_many([{"type": "message", "message": {
            "role": "user", "content": f"message {n} " + "x" * 1000, "timestamp": n}}
            for n in range(1000)])
        path = s.path
    with open(path, "ab") as f:
        f.write(b'{"type":')
    return path


def test_repair_reports_progress_in_bytes_and_writes_the_same_file(tmp_path, monkeypatch):
    import journal.progress
    from journal import repair

    monkeypatch.setattr(journal.progress, "STEP", 64 << 10)
    (tmp_path / "a").mkdir()
    path = _big_damaged_session(tmp_path / "a")
    twin = tmp_path / "b"
    twin.mkdir()
    other = str(twin / "s.jsonl")
    Path(other).write_bytes(Path(path).read_bytes())
    calls: list[tuple[int, int]] = []
    report = repair(path, progress=lambda done, total: calls.append((done, total)))
    assert report.changed and repair(other).changed
    assert Path(path).read_bytes() == Path(other).read_bytes()
    totals = {total for _, total in calls}
    assert len(totals) == 1 and len(calls) > 10
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert calls[-1] == (totals.pop(),) * 2
    assert any(done < calls[-1][0] // 2 for done, _ in calls)  # checking, then writing


def test_rotate_reports_the_compression_in_bytes(tmp_path, monkeypatch):
    import journal.progress
    from journal import rotate

    monkeypatch.setattr(journal.progress, "STEP", 4 << 10)
    path = _big_damaged_session(tmp_path)
    with Session.open(path) as s:  # the torn line is set aside here
        kept = s.entries[-10]["id"]
        s.append_compaction("summary", kept, 1000)
    size = Path(path).stat().st_size
    calls: list[tuple[int, int]] = []
    result = rotate(path, progress=lambda done, total: calls.append((done, total)))
    assert result.rotated and result.archive.endswith(".gz")
    assert calls[-1][1] >= size and calls[-1][0] == calls[-1][1] and len(calls) > 2


def test_one_large_file_draws_a_byte_bar_on_a_terminal_stderr_only(tmp_path, monkeypatch):
    from test_rotate import build_session

    import journal.progress
    from journal.cli import repair_main

    monkeypatch.setattr(journal.progress, "STEP", 64 << 10)
    monkeypatch.setenv("NO_COLOR", "1")
    for stderr in (Terminal(), io.StringIO()):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        path = _big_damaged_session(folder)
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", stderr)
        assert repair_main([path]) == 0
        assert "repairing" not in out.getvalue() and "fixed" in out.getvalue()
        assert ("repairing s.jsonl" in stderr.getvalue()) == isinstance(stderr, Terminal)

        s, _ = build_session(folder / "rot")
        rotating = s.path
        s.close()
        monkeypatch.setattr(journal.progress, "STEP", 1 << 10)
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        assert main(["rotate", rotating]) == 0
        assert "rotated into" in out.getvalue() and "compressing" not in out.getvalue()
        assert ("compressing the archive" in stderr.getvalue()) == isinstance(stderr, Terminal)
        monkeypatch.setattr(journal.progress, "STEP", 64 << 10)


@pytest.mark.parametrize("argv", [["ls"], ["search", "message"], ["usage"]])
def test_a_command_asked_for_json_draws_no_bar_even_on_a_terminal(tmp_path, monkeypatch, argv):
    """docs/cli.md: bars are drawn only on a terminal, and never with `--json` (a script
    reading the JSON may show stderr on its terminal too); without it, they are."""
    import journal.progress

    monkeypatch.setattr(journal.progress, "STEP", 1 << 10)
    monkeypatch.setenv("NO_COLOR", "1")
    _big_damaged_session(tmp_path)
    for json_asked in (True, False):
        stderr, out = Terminal(), io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", stderr)
        no_cache = ["--no-cache"] if argv == ["ls"] else []  # the row cache is in $HOME
        main([*argv, str(tmp_path), *(["--json"] if json_asked else []), *no_cache])
        drawn = stderr.getvalue()
        assert ("sessions" in drawn or "searching" in drawn) != json_asked, drawn
