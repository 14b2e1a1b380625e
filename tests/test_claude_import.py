"""`journal import` (a Claude Code transcript into a pi session) and `journal export --dialect
claude` (back): the imported session projects exactly as the transcript does, opens and takes
appends; the export projects to the same messages again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from claude_corpus import base, boundary, lines, summary, user
from corruption import _bench_module

import journal
from journal.claude.exporter import export_claude
from journal.claude.importer import IMPORT_MARKER, import_claude
from journal.context import build_context
from journal.errors import NotASession
from journal.validate import pairing_problems

ROOT = Path(__file__).resolve().parents[1]


def projection(path: str | Path) -> list[dict[str, Any]]:
    snap = journal.load(str(path))
    tree = snap.tree()
    return build_context(tree, tree.leaf_id).messages


def generated(folder: Path, seed: int, **kw: Any) -> Path:
    gen = _bench_module("bench_gen_claude", "gen_claude.py")
    gen.generate(folder, mb=kw.pop("mb", 0.15), seed=seed, **kw)
    (main,) = folder.glob("*.jsonl")
    return main


def essentials(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What must survive the round trip to Claude Code and back."""
    keep = ("role", "content", "toolCallId", "isError", "summary")
    return [{k: v for k, v in m.items() if k in keep} for m in messages]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_imported_session_projects_as_the_transcript(tmp_path: Path, seed: int) -> None:
    source = generated(tmp_path / "claude", seed)
    before = source.read_bytes()
    report = import_claude(source, tmp_path / "sessions")
    assert source.read_bytes() == before  # the transcript is only read
    assert journal.load(report.path).dialect == "pi"
    first = orjson.loads(Path(report.path).read_bytes().split(b"\n")[0])
    assert first["type"] == "session" and first["version"] == 3
    assert projection(report.path) == projection(source)
    assert pairing_problems(projection(report.path)) == []
    written = sorted(str(f) for f in source.parent.glob("*/subagents/agent-*.jsonl"))
    assert report.subagent_files == written  # branches of the session


def test_imported_session_opens_and_appends(tmp_path: Path) -> None:
    source = generated(tmp_path / "claude", 3)
    report = import_claude(source, tmp_path / "sessions")
    expected = projection(source)
    with journal.Session.open(report.path) as session:
        session.append_message({"role": "user", "content": "and now?", "timestamp": 1})
    after = projection(report.path)
    assert after[:-1] == expected and after[-1]["content"] == "and now?"


def test_the_leaf_is_pinned_when_it_is_not_the_last_entry(tmp_path: Path) -> None:
    records = base() + [boundary(10, "00000000-0000-4000-8000-000000000009"),
                        summary(11, "00000000-0000-4000-8000-000000000010"),
                        user(12, "00000000-0000-4000-8000-000000000011", "go on")]
    # a rewind: the latest prompt hangs on an earlier turn; hooks after it add no message
    records.append(user(13, "00000000-0000-4000-8000-000000000005", "instead, this"))
    records.append({"parentUuid": "00000000-0000-4000-8000-000000000013",
                    "isSidechain": False, "userType": "external", "cwd": "/x",
                    "sessionId": "s", "version": "2.0.76", "gitBranch": "main",
                    "type": "system", "subtype": "turn_duration", "durationMs": 5,
                    "isMeta": False, "timestamp": "2026-02-03T10:00:14.000Z",
                    "uuid": "00000000-0000-4000-8000-000000000014"})
    source = tmp_path / "s.jsonl"
    source.write_bytes(lines(records))
    report = import_claude(source, tmp_path / "out")
    last = orjson.loads(Path(report.path).read_bytes().split(b"\n")[-2])
    assert last["customType"] == IMPORT_MARKER
    assert last["parentId"] == "00000000-0000-4000-8000-000000000013"
    assert projection(report.path) == projection(source)
    assert projection(report.path)[-1]["content"] == "instead, this"


@pytest.mark.parametrize("seed", [0, 4])
def test_export_goes_back_to_the_same_context(tmp_path: Path, seed: int) -> None:
    source = generated(tmp_path / "claude", seed)
    imported = import_claude(source, tmp_path / "sessions")
    exported = export_claude(imported.path, tmp_path / "back")
    assert journal.load(exported.path).dialect == "claude"
    assert essentials(projection(exported.path)) == essentials(projection(source))
    assert pairing_problems(projection(exported.path)) == []
    # the transcript written is one Claude Code needs no repair of
    from journal.claude.mend import assess_claude

    assert assess_claude(exported.path).problems == []


def test_export_of_a_pi_session(tmp_path: Path) -> None:
    with journal.Session.create(tmp_path / "a.jsonl", cwd="/w") as session:
        session.append_message({"role": "user", "content": "hi", "timestamp": 1})
        session.append_message({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "thinkingSignature": "c2ln"},
            {"type": "toolCall", "id": "toolu_1", "name": "ls", "arguments": {}}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "m",
            "usage": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0,
                      "totalTokens": 3}, "stopReason": "toolUse", "timestamp": 2})
        session.append_message({"role": "toolResult", "toolCallId": "toolu_1",
                                "toolName": "ls", "content": [{"type": "text", "text": "a"}],
                                "isError": False, "timestamp": 3})
        session.append_label_change(str(session.leaf_id), "checkpoint")
    report = export_claude(tmp_path / "a.jsonl", tmp_path / "out")
    assert report.skipped == {"label": 1}
    records = [orjson.loads(x) for x in Path(report.path).read_bytes().splitlines()]
    assert [r["type"] for r in records] == ["user", "assistant", "assistant", "user"]
    assert records[1]["message"]["id"] == records[2]["message"]["id"]
    assert records[2]["parentUuid"] == records[1]["uuid"]
    assert records[3]["message"]["content"][0]["tool_use_id"] == "toolu_1"
    assert essentials(projection(report.path)) == essentials(projection(tmp_path / "a.jsonl"))


def counted(tally: Any) -> tuple[Any, ...]:
    return (tally.messages, tally.input, tally.output, tally.cache_read, tally.cache_write,
            pytest.approx(tally.cost))


def test_usage_counts_an_imported_session_as_its_transcript_once(tmp_path: Path) -> None:
    """The imported session is a copy of the transcript's history: its row counts what the
    transcript's does (a kept segment, written twice, once), and a report reading both
    counts each response once in its total, the other copy under `repeated`."""
    source = generated(tmp_path / "claude", 1, mb=0.3)
    report = import_claude(source, tmp_path / "sessions")
    ids = [orjson.loads(x).get("id") for x in Path(report.path).read_bytes().splitlines()]
    assert any("@" in str(i) for i in ids)  # the import holds a kept segment's copies
    alone = journal.usage([source])
    transcript = alone.total
    assert transcript.messages > 0
    assert counted(journal.usage([report.path]).total) == counted(transcript)
    both = journal.usage([source, report.path])
    rows = [tally for _, tally in both.rows()]
    assert len(rows) == 2 and all(counted(t) == counted(transcript) for t in rows)
    assert counted(both.total) == counted(transcript)
    assert counted(both.repeated) == counted(transcript)
    for by in ("model", "day"):
        assert [(k, counted(t)) for k, t in both.rows(by)] == [
            (k, counted(t)) for k, t in alone.rows(by)]


def test_import_refuses_what_is_not_a_transcript(tmp_path: Path) -> None:
    with journal.Session.create(tmp_path / "p.jsonl", cwd="/w"):
        pass
    with pytest.raises(NotASession):
        import_claude(tmp_path / "p.jsonl", tmp_path)
    source = tmp_path / "c.jsonl"
    source.write_bytes(lines(base()))
    with pytest.raises(NotASession):
        export_claude(source, tmp_path)


def test_cli_import_and_export(tmp_path: Path) -> None:
    source = tmp_path / "c.jsonl"
    source.write_bytes(lines(base()))
    env = {**os.environ, "HOME": str(tmp_path)}
    run = [sys.executable, "-m", "journal.cli"]
    out = subprocess.run([*run, "import", str(source), str(tmp_path / "s"), "--json"],
                         capture_output=True, env=env, cwd=ROOT, check=True)
    report = orjson.loads(out.stdout)
    assert report["messages"] == 8 and Path(report["path"]).exists()
    out = subprocess.run([*run, "export", report["path"], "--dialect", "claude", "-o",
                          str(tmp_path / "back"), "--json"], capture_output=True, env=env,
                         cwd=ROOT, check=True)
    back = orjson.loads(out.stdout)
    assert essentials(projection(back["path"])) == essentials(projection(source))
    bad = subprocess.run([*run, "import", str(tmp_path / "missing.jsonl")],
                         capture_output=True, env=env, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.decode().startswith("Error:")


def test_imported_entries_are_in_pi_key_order(tmp_path: Path) -> None:
    from journal import model

    source = generated(tmp_path / "claude", 5, subagents=False)
    report = import_claude(source, tmp_path / "s")
    made = {"custom": list(model.custom_entry("x", None, "t", {})),
            "message": list(model.message_entry("x", None, {})),
            "compaction": list(model.compaction_entry("x", None, "s", "y", 1))}
    seen = set()
    for line in Path(report.path).read_bytes().splitlines()[1:]:
        entry = orjson.loads(line)
        keys = [k for k in entry if k in made[entry["type"]]]
        order = [k for k in made[entry["type"]] if k in entry]
        assert keys == order, entry["type"]
        seen.add(entry["type"])
    assert seen == {"custom", "message", "compaction"}


@pytest.mark.parametrize("extra", [["--format", "html"], ["--redact"],
                                   ["--format", "md", "--all-branches"]])
def test_export_as_claude_refuses_the_options_it_does_not_take(
        tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--dialect claude` writes the session's records as they are: `--format`,
    `--redact` and `--all-branches` were taken and ignored, so a user who asked for a
    redacted transcript got one with every key in it. They are refused, nothing written."""
    from journal.cli import main

    with journal.Session.create(str(tmp_path / "s"), cwd="/w") as session:
        session.append_message({"role": "user", "content": "sk-secret", "timestamp": 1})
        path = session.path
    out = tmp_path / "out"
    assert main(["export", path, "--dialect", "claude", "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err
    flags = [flag for flag in extra if flag.startswith("--")]
    assert err.startswith(f"Error: {', '.join(flags)}: not with --dialect claude"), err
    assert not out.exists()
    assert main(["export", path, "--dialect", "claude", "-o", str(out)]) == 0
