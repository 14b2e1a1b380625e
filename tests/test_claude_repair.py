"""`journal repair` on Claude Code transcripts: the corpus of reported failure shapes, each
with its exact fix and the four guarantees (one `.bak`, every removed or rewritten byte in the
quarantine, an atomic swap, idempotence)."""

from __future__ import annotations

import base64
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from claude_corpus import CASES, Case, Records

from journal.claude.mend import assess_claude, repair_claude
from journal.quarantine import read_quarantine

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
STAMP_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def records_of(data: bytes) -> Records:
    out = []
    for line in data.split(b"\n"):
        try:
            value = orjson.loads(line.decode("utf-8", "replace"))
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def quarantined(path: Path) -> dict[int, bytes]:
    """The quarantined byte ranges of `path`, by offset."""
    side = Path(str(path) + ".quarantine")
    if not side.exists():
        return {}
    return {r["offset"]: base64.b64decode(r["bytes"]) for r in read_quarantine(str(side))}


def check_guarantees(path: Path, before: bytes) -> None:
    after = path.read_bytes()
    # 1. one backup, the original bytes
    assert Path(str(path) + ".bak").read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name)) == [
        path.name, path.name + ".bak", path.name + ".quarantine"] or not quarantined(path)
    # 2. every original line is in the new file as it was, or in the quarantine (a line
    # taken apart: each byte range either quarantined at its offset or a line of the new file)
    kept = set(after.split(b"\n"))
    saved = quarantined(path)
    at = 0
    for line in before.split(b"\n"):
        start, at = at, at + len(line) + 1
        if not line or line in kept:
            continue
        if line in saved.values():
            continue
        covered = sorted((o - start, o - start + len(b)) for o, b in saved.items()
                         if start <= o < start + len(line))
        pos, rest = 0, []
        for lo, hi in covered:
            rest.append(line[pos:lo])
            pos = max(pos, hi)
        rest.append(line[pos:])
        assert all(not part.strip() or part in kept for part in rest), line[:80]
    # 3. the swap left no temp behind, and every line of the new file is whole JSON
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert after.endswith(b"\n")
    for line in after.split(b"\n")[:-1]:
        assert isinstance(orjson.loads(line), dict)
    # 4. idempotent
    again = repair_claude(path)
    assert not again.changed and again.problems == []
    assert path.read_bytes() == after


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_is_fixed_exactly(tmp_path: Path, case: Case) -> None:
    path = tmp_path / "4f0c2a9e-7b1d-4c3e-9a55-0d6b2e81c7f4.jsonl"
    path.write_bytes(case.data)
    inode = path.stat().st_ino
    checked = assess_claude(path)
    assert checked.counts == case.kinds and checked.dry_run
    assert path.read_bytes() == case.data  # a dry run writes nothing
    report = repair_claude(path)
    assert report.changed and report.counts == case.kinds
    assert report.dialect == "claude" and report.backup == str(path) + ".bak"
    assert path.stat().st_ino != inode  # a new file was swapped in
    after = path.read_bytes()
    assert not after.startswith(b'{"type":"session"')  # never a pi header
    case.check(records_of(case.data), records_of(after))
    check_guarantees(path, case.data)
    report_json = report.to_json()
    assert report_json["dialect"] == "claude"
    assert [p["kind"] for p in report_json["problems"]].count(next(iter(case.kinds))) >= 1


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_added_records_are_what_claude_code_writes(tmp_path: Path, case: Case) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(case.data)
    repair_claude(path)
    template = next(r for r in records_of(case.data) if r.get("type") == "user")
    for record in records_of(path.read_bytes()):
        if record["uuid"].encode() in case.data:
            continue
        assert UUID_RE.match(record["uuid"]) and STAMP_RE.match(record["timestamp"])
        envelope = [k for k in template if k not in ("toolUseResult",)]
        assert [k for k in record if k != "toolUseResult"] == envelope
        assert record["sessionId"] == template["sessionId"]


def test_clean_transcripts_are_left_alone(tmp_path: Path) -> None:
    from claude_corpus import base, lines

    path = tmp_path / "s.jsonl"
    path.write_bytes(lines(base()))
    report = repair_claude(path)
    assert not report.changed and report.problems == []
    assert not os.path.exists(str(path) + ".bak")
    assert not os.path.exists(str(path) + ".quarantine")


def test_journal_repair_detects_a_transcript_and_keeps_its_format(tmp_path: Path) -> None:
    """The library's and the command's `repair` take the Claude Code path by themselves
    (before, they prepended a pi header and reported `missing_header`)."""
    import subprocess
    import sys

    from journal.repair import assess, repair

    case = next(c for c in CASES if c.name == "unpaired_tool_use_mid")
    path = tmp_path / "s.jsonl"
    path.write_bytes(case.data)
    assert assess(str(path)).counts == case.kinds
    env = {**os.environ, "HOME": str(tmp_path)}
    run = [sys.executable, "-m", "journal.cli", "repair"]
    check = subprocess.run([*run, "--check", str(path)], capture_output=True, env=env)
    assert check.returncode == 1 and b"unpaired_tool_use 1" in check.stdout
    out = subprocess.run([*run, "--json", str(path)], capture_output=True, env=env, check=True)
    report = orjson.loads(out.stdout)
    assert report["dialect"] == "claude" and report["counts"] == case.kinds
    assert report["version"] is None
    assert "missing_header" not in out.stdout.decode()
    assert path.read_bytes().startswith(b'{"parentUuid":null')
    assert subprocess.run([*run, "--check", str(path)], env=env,
                          capture_output=True).returncode == 0
    assert not repair(str(path)).changed


def test_a_folder_run_repairs_subagent_files_too(tmp_path: Path) -> None:
    import subprocess
    import sys

    from claude_corpus import base, lines

    session = tmp_path / "4f0c2a9e-7b1d-4c3e-9a55-0d6b2e81c7f4.jsonl"
    session.write_bytes(lines(base()))
    agent = tmp_path / session.stem / "subagents" / "agent-a1b2c3d4.jsonl"
    agent.parent.mkdir(parents=True)
    side = [dict(r, isSidechain=True, agentId="a1b2c3d4") for r in base()[:7]]
    agent.write_bytes(lines(side))  # the subagent was killed while its call ran
    out = subprocess.run([sys.executable, "-m", "journal.cli", "repair", "--json",
                          str(tmp_path)], capture_output=True,
                         env={**os.environ, "HOME": str(tmp_path)}, check=True)
    reports = {Path(r["path"]).name: r for r in map(orjson.loads, out.stdout.splitlines())}
    assert reports[session.name]["changed"] is False
    assert reports[agent.name]["counts"] == {"unpaired_tool_use": 1}
    added = orjson.loads(agent.read_bytes().splitlines()[-1])
    assert added["isSidechain"] is True and added["agentId"] == "a1b2c3d4"


@pytest.mark.parametrize("case", CASES[:6], ids=[c.name for c in CASES[:6]])
def test_info_counts_what_repair_fixes(tmp_path: Path, case: Case) -> None:
    import journal

    path = tmp_path / "s.jsonl"
    path.write_bytes(case.data)
    info = journal.inspect(str(path))
    assert info.dialect == "claude"
    assert dict(Counter(p.kind for p in info.problems)) == case.kinds
    repair_claude(path)
    assert journal.inspect(str(path)).problems == []


def test_written_lines_are_what_json_stringify_writes(tmp_path: Path) -> None:
    """Every line repair adds or rewrites is byte for byte what Claude Code's
    `JSON.stringify` writes for the same value (checked with node; skipped without it)."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    written: list[bytes] = []
    for case in CASES:
        path = tmp_path / f"{case.name}.jsonl"
        path.write_bytes(case.data)
        repair_claude(path)
        original = set(case.data.split(b"\n"))
        written += [line for line in path.read_bytes().split(b"\n")[:-1]
                    if line not in original]
    assert len(written) >= len(CASES) - 6  # most cases add or rewrite a line
    script = ("const lines = require('fs').readFileSync(0, 'utf8').split('\\n');"
              "process.stdout.write(lines.filter(l => l).map(l => "
              "JSON.stringify(JSON.parse(l))).join('\\n') + '\\n');")
    out = subprocess.run([node, "-e", script], input=b"\n".join(written) + b"\n",
                         capture_output=True, check=True)
    assert out.stdout.split(b"\n")[:-1] == written


def test_a_transcript_that_grows_meanwhile_is_left_as_it_is(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    """Claude Code takes no lock: lines it appends while repair works must not be lost."""
    import journal.claude.mend as mend
    from journal.errors import JournalError

    case = next(c for c in CASES if c.name == "unpaired_tool_use_mid")
    path = tmp_path / "s.jsonl"
    path.write_bytes(case.data)
    planned = mend.plan_claude
    late = b'{"type":"queue-operation","operation":"enqueue","sessionId":"s"}\n'

    def plan_then_append(*args: Any, **kw: Any) -> Any:
        found = planned(*args, **kw)
        with open(path, "ab") as f:
            f.write(late)
        return found

    monkeypatch.setattr(mend, "plan_claude", plan_then_append)
    with pytest.raises(JournalError, match="changed while it was repaired"):
        repair_claude(path)
    assert path.read_bytes() == case.data + late
    assert not os.path.exists(str(path) + ".bak")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


SAMPLES = {  # claude-code-log's samples: what repair finds in each (they end with no newline)
    "representative_messages.jsonl": {"missing_newline": 1},
    "session_b.jsonl": {"missing_newline": 1},
    "todowrite_examples.jsonl": {"missing_newline": 1},
    # bare values that are not records, a record whose parent is in no line, a user record
    # whose message is a string (no reader can use it: it goes, and the valid record written
    # after it under the same uuid stays), and a uuid used twice by different records (the
    # later one goes: it was the result of a call, which the projection never saw, so the
    # call gets the interrupted-tool record)
    "edge_cases.jsonl": {"not_a_record": 4, "missing_newline": 1, "missing_parent": 1,
                         "no_message": 1, "duplicate_uuid": 1, "unpaired_tool_use": 1},
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_shared_samples_repair_in_place(tmp_path: Path, name: str) -> None:
    from third_party import claude_path

    import journal
    from journal.context import build_context
    from journal.validate import pairing_problems

    source = claude_path(name).read_bytes()
    path = tmp_path / name
    path.write_bytes(source)
    report = journal.repair(str(path))
    assert report.dialect == "claude" and report.counts == SAMPLES[name]
    check_guarantees(path, source)
    snap = journal.load(str(path))
    tree = snap.tree()
    # (edge_cases.jsonl's last prompt holds a bare string where a block belongs: content
    # repair leaves alone; its tool pairing must be valid)
    problems = pairing_problems(build_context(tree, tree.leaf_id).messages)
    assert [p for p in problems if "tool" in p] == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_repaired_corpus_projects_to_a_valid_context(tmp_path: Path, case: Case) -> None:
    """What the store's readers see of the repaired file is what repair read: every call
    answered right after its message, no result without its call."""
    import journal
    from journal.context import build_context
    from journal.validate import pairing_problems

    path = tmp_path / "4f0c2a9e-7b1d-4c3e-9a55-0d6b2e81c7f4.jsonl"
    path.write_bytes(case.data)
    repair_claude(path)
    tree = journal.load(str(path)).tree()
    messages = build_context(tree, tree.leaf_id).messages
    assert messages and pairing_problems(messages) == []


def test_a_metadata_record_glued_after_a_cut_line_is_kept(tmp_path: Path) -> None:
    """A whole record without a uuid (`file-history-snapshot`, `ai-title`, ...) glued after a
    cut line is kept on its own line, as a conversation record is; a piece of the cut record
    that happens to close there (a content block) is not a record and goes with it."""
    from test_claude_projection import gc

    import journal

    stats = gc.generate(tmp_path / "gen", mb=0.1, seed=25, compactions=0, rewinds=0,
                        subagents=False)
    lines = stats.path.read_bytes().splitlines()
    kinds = [orjson.loads(line)["type"] for line in lines]
    queued = kinds.index("queue-operation")
    snapshot = kinds.index("file-history-snapshot")
    title = b'{"type":"ai-title","sessionId":"%s","aiTitle":"Glued on"}' % (
        stats.session_id.encode())
    call = next(i for i, line in enumerate(lines)
                if kinds[i] == "assistant" and b'"content":[{"type":"tool_use"' in line)
    block_end = lines[call].index(b"}]", lines[call].index(b'"input":')) + 1
    damaged = list(lines)
    # a cut queue-operation with the next snapshot glued on; a cut snapshot with a title
    damaged[queued] = lines[queued][:40] + lines[snapshot]
    damaged[snapshot] = lines[snapshot][:30] + title
    # an assistant line cut just after its tool_use block closes: a block, not a record
    damaged[call] = lines[call][:block_end]
    path = tmp_path / stats.path.name
    data = b"\n".join(damaged) + b"\n"
    path.write_bytes(data)

    report = repair_claude(path)
    assert report.counts["glued_record"] == 2
    assert report.counts["invalid_json"] == 1
    after = path.read_bytes().splitlines()
    assert lines[snapshot] in after  # the copy glued on (its own line was cut)
    assert title in after
    assert lines[call][:block_end] not in after
    assert not any(line.startswith(b'{"type":"tool_use"') for line in after)
    assert journal.load(str(path)).claude.title == "Glued on"
    check_guarantees(path, data)


def test_a_check_names_the_record_the_repair_adds(tmp_path: Path, capsys: Any) -> None:
    """The interrupted-tool record's uuid comes from the call it answers: `info` and
    `repair --check` say the same each time they are run, and the repair adds that record."""
    import journal
    from journal.cli import main

    case = next(c for c in CASES if c.name == "unpaired_tool_use_mid")
    path = tmp_path / "s.jsonl"
    path.write_bytes(case.data)

    def added() -> list[str]:
        return [p.action for p in journal.inspect(str(path)).problems
                if p.kind == "unpaired_tool_use"]

    first = added()
    assert first and first == added() == [p.action for p in assess_claude(path).problems
                                          if p.kind == "unpaired_tool_use"]
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "(nothing was changed; each says what 'journal repair' would do)" in out
    assert first[0] in out
    assert path.read_bytes() == case.data
    report = repair_claude(path)
    [action] = [p.action for p in report.problems if p.kind == "unpaired_tool_use"]
    assert action == first[0]
    uuid = action.rsplit(" ", 1)[-1]
    assert UUID_RE.match(uuid)
    assert any(r.get("uuid") == uuid and r["toolUseResult"] == "Error: [Request interrupted "
               "by user for tool use]" for r in records_of(path.read_bytes())
               if "toolUseResult" in r)
