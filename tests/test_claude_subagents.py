"""A Claude Code transcript's subagent files are part of its session for every command that
names the transcript: their damage is said as the transcript's own (`info`, `show`, `ls`,
`usage`, `search`, `export`), `repair` of the transcript repairs them, and the file and byte
counts include them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_catalog_claude import with_subagents


def journal(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=120)


def damage(made: Any) -> None:
    """Cut the tail of the first subagent file, put NULs and junk in the middle of line 3 of
    the last (as the newcomer did)."""
    first, last = made.subagents[0], made.subagents[-1]
    first.write_bytes(first.read_bytes()[:-40])
    lines = last.read_bytes().split(b"\n")
    lines[2] = lines[2][:50] + b"\x00" * 20 + b"junk"
    last.write_bytes(b"\n".join(lines))


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Any, dict[str, str]]:
    made = with_subagents(tmp_path / "p", 0.2, 25, compactions=1, rewinds=1)  # two of them
    env = {**os.environ, "HOME": str(tmp_path), "NO_COLOR": "1"}
    return made, env


def test_every_reader_says_a_subagent_files_damage(damaged: tuple[Any, dict[str, str]]) -> None:
    made, env = damaged
    assert len(made.subagents) >= 2
    damage(made)
    first, last = map(str, (made.subagents[0], made.subagents[-1]))
    path = str(made.path)

    folder = journal(env, "repair", "--check", "--json", str(made.path.parent))
    assert folder.returncode == 1
    by_file = {r["path"]: r for r in map(json.loads, folder.stdout.splitlines())}
    expected = sorted((f, k) for f, r in by_file.items() for p in r["problems"]
                      for k in [p["kind"]])
    assert {f for f, _ in expected} == {first, last}

    proc = journal(env, "info", path, "--json")
    info = json.loads(proc.stdout)
    assert sorted((p["file"], p["kind"]) for p in info["problems"]) == expected
    assert {(d["file"], d["reason"]) for d in info["diagnostics"]} == {
        (first, "torn_tail"), (last, "nul_run")}
    text = journal(env, "info", path).stdout
    assert f"problems:  {len(expected)} " in text and f"!! {last}, line 3: nul_run" in text

    proc = journal(env, "show", path)
    shown = [line for line in proc.stdout.splitlines() if "!!" in line]
    assert len(shown) == 2 and all(first in s or last in s for s in shown)
    rows = [json.loads(line) for line in journal(env, "show", path, "--json").stdout.splitlines()]
    said = [r["diagnostic"] for r in rows if "diagnostic" in r]
    assert {(d["file"], d["line"]) for d in said} >= {(last, 3)}

    proc = journal(env, "ls", path, "--json")
    [row] = json.loads(proc.stdout)
    assert row["state"] == "live" and len(row["problems"]) == 2
    assert any(first in p for p in row["problems"]) and any(last in p for p in row["problems"])

    proc = journal(env, "usage", path, "--json")
    assert "2 unreadable line(s) not counted" in proc.stderr

    proc = journal(env, "search", "the", path, "--json")
    [problem] = json.loads(proc.stdout)["problems"]
    assert "2 damaged line(s) not searched" in problem["message"] and last in problem["message"]

    out = str(Path(path).parent.parent / "page.md")
    proc = journal(env, "export", path, "-o", out, "--json")
    warnings = json.loads(proc.stdout)["warnings"]
    assert len(warnings) == 2 and {w.split(":")[0] for w in warnings} == {first, last}

    proc = journal(env, "repair", "--check", path)
    assert proc.returncode == 1
    assert f"{first}: needs repair" in proc.stdout and f"{last}: needs repair" in proc.stdout


def test_repairing_a_transcript_repairs_its_subagent_files(
        damaged: tuple[Any, dict[str, str]]) -> None:
    made, env = damaged
    damage(made)
    first, last = map(str, (made.subagents[0], made.subagents[-1]))
    before = made.path.read_bytes()

    proc = journal(env, "repair", "--json", str(made.path))
    assert proc.returncode == 0, proc.stderr
    reports = {r["path"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert list(reports) == [str(made.path), *sorted(map(str, made.subagents))]
    assert reports[str(made.path)]["changed"] is False and made.path.read_bytes() == before
    assert reports[first]["counts"]["torn_tail"] == 1
    assert reports[last]["counts"]["nul_run"] == 1
    assert os.path.exists(last + ".bak") and os.path.exists(last + ".quarantine")

    assert journal(env, "repair", "--check", str(made.path)).returncode == 0
    assert json.loads(journal(env, "info", str(made.path), "--json").stdout)["problems"] == []
    # named with its subagent files, or with its folder, each file is repaired once
    proc = journal(env, "repair", "--check", "--json", str(made.path), last,
                   str(made.path.parent))
    assert proc.returncode == 0
    named = [json.loads(line)["path"] for line in proc.stdout.splitlines()]
    assert len(named) == len(set(named))


def test_repair_of_a_folder_takes_a_subagent_file_under_two_names_once(
        damaged: tuple[Any, dict[str, str]]) -> None:
    """A subagent file with a second name in `subagents/` (a hard link) is one file for
    `repair DIR` as for `repair TRANSCRIPT`: checked once, and tried once (and refused,
    as a file with two names is), under the name `subagent_files` keeps; the other files
    are repaired."""
    made, env = damaged
    damage(made)
    first, last = made.subagents[0], made.subagents[-1]
    hard = first.parent / "agent-0000.jsonl"  # sorts first: the name kept for `first`
    os.link(first, hard)
    expected = [str(made.path), *sorted([str(hard), *(str(s) for s in made.subagents
                                                      if s != first)])]
    for named in (str(made.path), str(made.path.parent)):
        proc = journal(env, "repair", "--check", "--json", named)
        assert proc.returncode == 1, proc.stderr
        assert [json.loads(line)["path"] for line in proc.stdout.splitlines()] == expected

    proc = journal(env, "repair", "--json", str(made.path.parent))
    assert proc.returncode == 2
    refused = [line for line in proc.stderr.splitlines() if "other name(s)" in line]
    assert len(refused) == 1 and refused[0].startswith(f"Error: {hard}:"), proc.stderr
    repaired = [json.loads(line)["path"] for line in proc.stdout.splitlines()]
    assert repaired == [p for p in expected if p != str(hard)]
    assert os.path.exists(str(last) + ".bak")


def test_file_and_byte_counts_include_subagent_files(
        damaged: tuple[Any, dict[str, str]]) -> None:
    made, env = damaged
    path = str(made.path)
    files = [path, *sorted(map(str, made.subagents))]
    size = sum(os.path.getsize(f) for f in files)

    for named in (path, str(made.path.parent)):
        [row] = json.loads(journal(env, "ls", named, "--json", "--no-cache").stdout)
        assert row["path"] == path and row["files"] == files and row["size"] == size
    table = journal(env, "ls", path, "--no-cache").stdout.splitlines()
    heading, line = (text.split("\t") for text in table)
    assert line[heading.index("files")] == str(len(files))

    data = json.loads(journal(env, "usage", path, "--json").stdout)
    assert data["files"] == len(files) and data["rows"][0]["files"] == files
    assert f"1 session(s) in {len(files)} file(s)" in journal(env, "usage", path).stderr

    proc = journal(env, "search", "the", path, "--json")
    data = json.loads(proc.stdout)
    assert (data["files"], data["bytes"]) == (len(files), size)
    assert f"{len(files)} file(s), {size:,} bytes" in journal(env, "search", "the", path).stderr

    out = str(made.path.parent.parent / "page.md")
    proc = journal(env, "export", path, "-o", out, "--json")
    assert json.loads(proc.stdout)["files"] == files
    # a subagent file is a file of the session: the export will not write over it
    proc = journal(env, "export", path, "-o", files[-1])
    assert proc.returncode == 2 and "is a file of the session" in proc.stderr


def test_a_subagent_file_torn_in_its_first_record_is_repaired_with_its_transcript(
        damaged: tuple[Any, dict[str, str]]) -> None:
    """A subagent file killed in its first write holds no whole record: its bytes told no
    dialect, so repair took it for a pi file and failed ("not a session file") where `info`
    said `journal repair` of the transcript would fix it."""
    made, env = damaged
    sub = made.subagents[0]
    first = sub.read_bytes().split(b"\n")[0]
    torn = first[: len(first) // 2] + b"\n" + first[:40]  # a cut line, then a torn tail
    sub.write_bytes(torn)
    path = str(made.path)
    info = journal(env, "info", "--json", path)
    problems = [p for p in json.loads(info.stdout)["problems"] if p.get("file") == str(sub)]
    assert {p["kind"] for p in problems} >= {"torn_tail"}, info.stdout
    done = journal(env, "repair", path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sub.read_bytes() == b""
    from journal import read_quarantine

    kept = b"".join(q["data"] for q in read_quarantine(str(sub) + ".quarantine"))
    assert first[:40] in kept and first[: len(first) // 2] in kept
    assert journal(env, "repair", "--check", path).returncode == 0
    again = json.loads(journal(env, "info", "--json", path).stdout)
    assert again["problems"] == []


def test_a_subagent_file_under_two_names_counts_once(
        damaged: tuple[Any, dict[str, str]]) -> None:
    """A subagent file reachable under a second name in `subagents/` (a symbolic link, a
    hard link) is one file: listed, counted and its damage said once, under the first of its
    names in sorted order (`journal.claude.subagent_files` knows a file by device and inode)."""
    made, env = damaged
    damage(made)
    path = str(made.path)
    before = json.loads(journal(env, "info", path, "--json").stdout)["problems"]
    [row] = json.loads(journal(env, "ls", path, "--json", "--no-cache").stdout)
    said = len(row["problems"])
    first, last = made.subagents[0], made.subagents[-1]
    folder = first.parent
    hard = folder / "agent-0000.jsonl"  # sorts first: the name kept for `first`
    os.link(first, hard)
    (folder / "agent-zzzz.jsonl").symlink_to(last.name)  # sorts last: not read again
    subs = sorted([str(hard), *(str(s) for s in made.subagents if s != first)])
    size = sum(os.path.getsize(f) for f in [path, *subs])

    info = json.loads(journal(env, "info", path, "--json").stdout)
    assert info["subagentFiles"] == subs
    renamed = [{**p, "file": str(hard) if p.get("file") == str(first) else p.get("file")}
               for p in before]
    assert len(info["problems"]) == len(before) and all(p in info["problems"] for p in renamed)

    [row] = json.loads(journal(env, "ls", path, "--json", "--no-cache").stdout)
    assert row["files"] == [path, *subs] and row["size"] == size
    assert len(row["problems"]) == said

    data = json.loads(journal(env, "usage", path, "--json").stdout)
    assert data["files"] == 1 + len(subs) and data["rows"][0]["files"] == [path, *subs]

    out = made.path.parent.parent / "imported.jsonl"
    proc = journal(env, "import", path, str(out), "--json")
    report = json.loads(proc.stdout)
    assert report["subagentFiles"] == subs and len(report["problems"]) == said
    assert proc.stderr.count("Warning:") == said
