"""The catalog commands on Claude Code transcripts, detected by themselves: `ls`, `search`,
`usage` and `export` on a `~/.claude/projects`-shaped folder (generated transcripts with
subagent files, and the shared samples), each API response's usage counted once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from test_claude_projection import gc
from third_party import claude_path

from journal import RowCache, export, load, load_prices, prune, search, sessions, usage
from journal.catalog import parse_age

OLD = time.time() - 30 * 86400
SAMPLES = ("representative_messages.jsonl", "edge_cases.jsonl", "todowrite_examples.jsonl",
           "session_b.jsonl")


def with_subagents(folder: Path, mb: float, first_seed: int, **options: int):
    """A generated transcript in `folder` that has subagent files: the first seed from
    `first_seed` whose transcript has some (the generator draws them at random)."""
    for seed in range(first_seed, first_seed + 40):
        made = gc.generate(folder, mb=mb, seed=seed, **options)
        if made.subagents:
            return made
        shutil.rmtree(folder)
    raise AssertionError("the generator wrote no subagent file for 40 seeds")


def projects(tmp_path: Path) -> tuple[Path, list]:
    """`<home>/.claude/projects` with two generated projects (one transcript each, with
    subagent files) and nothing else."""
    root = tmp_path / "home" / ".claude" / "projects"
    made = [with_subagents(root / "-home-user-project", 0.6, 4, compactions=2, rewinds=2),
            with_subagents(root / "-home-user-other", 0.3, 5, compactions=1, rewinds=1)]
    return root, made


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_bytes().splitlines():
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def oracle(made) -> dict[str, float]:
    """Tokens of a transcript and its subagent files read from the raw records: one API
    response (one `message.id`) counts once, with the counts of its last line."""
    last: dict[str, dict] = {}
    for path in [made.path, *made.subagents]:
        for record in records(Path(path)):
            message = record.get("message")
            if record.get("type") != "assistant" or not isinstance(message, dict):
                continue
            if isinstance(message.get("usage"), dict):
                last[message["id"]] = message
    table = load_prices()
    sums = {"messages": len(last), "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
            "cost": 0.0}
    for message in last.values():
        u = message["usage"]
        counts = (u.get("input_tokens", 0), u.get("output_tokens", 0),
                  u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0))
        for key, n in zip(("input", "output", "cacheRead", "cacheWrite"), counts, strict=True):
            sums[key] += n
        price = table.price_for(message["model"])
        sums["cost"] += price.cost(*counts) if price else 0.0
    lines = sum(1 for p in [made.path, *made.subagents] for r in records(Path(p))
                if r.get("type") == "assistant")
    assert lines > len(last)  # responses written over several lines: a naive sum is wrong
    return sums


def test_ls_and_usage_count_each_api_response_once(tmp_path):
    root, made = projects(tmp_path)
    rows = {r.path: r for r in sessions([str(root)], prices=load_prices())}
    assert set(rows) == {os.path.realpath(m.path) for m in made}  # subagent files: no rows
    report = usage([root])
    by_path = {s.path: s for s in report.sessions}
    for m in made:
        expected = oracle(m)
        row = rows[os.path.realpath(m.path)]
        assert row.dialect == "claude" and row.state == "live"
        assert row.session_id == m.session_id
        assert row.cwd == gc.CWD
        assert row.entries == len(load(m.path).entries)
        assert row.size == sum(os.path.getsize(p) for p in [m.path, *m.subagents])
        assert set(row.models) <= {*gc.MODELS, gc.SUBAGENT_MODEL} and row.models
        tally = by_path[os.path.realpath(m.path)].total
        got = {"messages": tally.messages, "input": tally.input, "output": tally.output,
               "cacheRead": tally.cache_read, "cacheWrite": tally.cache_write,
               "cost": tally.cost}
        assert got == pytest.approx(expected)
        assert row.usage is not None and row.usage.total_tokens == tally.total_tokens
        assert row.cost == pytest.approx(expected["cost"])
        assert tally.cost_source == "computed"  # Claude Code records no cost
        assert by_path[os.path.realpath(m.path)].session_id == m.session_id


def test_usage_progress_counts_the_subagent_files_it_reads(tmp_path):
    """The progress total is every byte `usage` reads, each transcript with its subagent
    files: called after each file read, it grows to that total and ends there."""
    root, made = projects(tmp_path)
    calls: list[tuple[int, int]] = []
    usage([root], progress=lambda done, total: calls.append((done, total)))
    read = sum(os.path.getsize(p) for m in made for p in [m.path, *m.subagents])
    assert {total for _, total in calls} == {read}
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == read
    assert len(calls) == sum(1 + len(m.subagents) for m in made)


def test_ls_progress_counts_the_subagent_files_it_reads(tmp_path):
    """`sessions` (`journal ls`) reads each transcript with its subagent files, as `usage`
    does: its progress total holds their bytes, and each row's step adds them."""
    root, made = projects(tmp_path)
    calls: list[tuple[int, int]] = []
    sessions([root], progress=lambda done, total: calls.append((done, total)))
    read = sum(os.path.getsize(p) for m in made for p in [m.path, *m.subagents])
    assert {total for _, total in calls} == {read}
    done = [d for d, _ in calls]
    assert len(calls) == len(made) + 1 and done == sorted(done)
    assert done[-2] == read  # the last row's step, not only the closing call, reaches it


def test_search_and_export_read_transcripts_and_their_subagents(tmp_path):
    root, made = projects(tmp_path)
    m = made[0]
    sub = records(m.subagents[0])
    prompt = next(r for r in sub if r.get("type") == "user")["message"]["content"]
    words = (prompt if isinstance(prompt, str) else prompt[0]["text"]).split()[:4]
    found = search(" ".join(words), [root])
    assert found.hits and {h.session for h in found.hits} == {os.path.realpath(m.path)}
    assert found.sessions == 2 and not found.problems
    for fmt in ("md", "html", "jsonl"):
        text = export(m.path, fmt)
        assert m.session_id in text
    snap = load(m.path)
    every = export(m.path, "jsonl", all_branches=True).splitlines()
    assert len(every) - 1 == len(snap.entries)
    tree = snap.tree()  # the branch Claude Code resumes: its leaf is the transcript's own
    branch = [orjson.loads(line)["id"] for line in export(m.path, "jsonl").splitlines()[1:]]
    assert branch == [tree.entries[i]["id"] for i in tree.path(tree.leaf)]
    md = export(m.path, "md")
    assert md.count("\n## Turn ") >= 2 and "session: \"" + m.session_id in md


def test_a_hit_names_the_file_it_is_in(tmp_path):
    """A hit in a subagent file names the transcript as its session (docs/cli.md) and the
    subagent file as the file it was read from (`Hit.file`), with --json too; a hit in the
    transcript names the transcript as both."""
    root, made = projects(tmp_path)
    m = made[0]
    transcript, sub = os.path.realpath(m.path), os.path.realpath(m.subagents[0])
    in_sub = {r["uuid"] for r in records(Path(sub)) if "uuid" in r}
    prompt = next(r for r in records(Path(sub)) if r.get("type") == "user")["message"]["content"]
    words = " ".join((prompt if isinstance(prompt, str) else prompt[0]["text"]).split()[:4])
    found = search(words, [root])
    files = {h.file for h in found.hits}
    assert files == {transcript, sub}  # the Task call's prompt, and the subagent's own
    for hit in found.hits:
        assert hit.session == transcript
        assert hit.file == (sub if hit.entry_id in in_sub else transcript), hit
    out = subprocess.run([sys.executable, "-m", "journal.cli", "search", words, str(root),
                          "--json"], capture_output=True, check=True)
    assert {h["file"] for h in json.loads(out.stdout)["hits"]} == {transcript, sub}


def test_the_cache_sees_a_subagent_file_change(tmp_path, monkeypatch):
    root, made = projects(tmp_path)
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (OLD, OLD))
    cache_file = tmp_path / "catalog.json"

    def listed() -> dict[str, object]:
        cache = RowCache(str(cache_file))
        rows = sessions([str(root)], prices=load_prices(), cache=cache)
        cache.save()
        listed.hits = cache.hits  # type: ignore[attr-defined]
        return {r.path: r for r in rows}

    first = listed()
    second = listed()
    assert listed.hits == 2 and second.keys() == first.keys()  # type: ignore[attr-defined]
    target = made[0].subagents[0]
    extra = next(r for r in records(target) if r.get("type") == "assistant")
    extra = {**extra, "uuid": "0000-added", "message": {**extra["message"], "id": "msg_added",
             "usage": {"input_tokens": 1000, "output_tokens": 1}}}
    with open(target, "ab") as f:
        f.write(orjson.dumps(extra) + b"\n")
    third = listed()
    assert listed.hits == 1  # type: ignore[attr-defined]
    live = os.path.realpath(made[0].path)
    assert third[live].usage.input == first[live].usage.input + 1000
    # a new subagent file is seen too
    copy = Path(target).with_name("agent-added.jsonl")
    shutil.copyfile(made[0].subagents[-1], copy)
    os.utime(copy, (OLD, OLD))
    listed()
    assert listed.hits == 1  # type: ignore[attr-defined]


def test_prune_never_touches_a_claude_transcript(tmp_path):
    root, made = projects(tmp_path)
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (OLD, OLD))
    report = prune([str(root)], parse_age("1d"))
    assert {i.action for i in report.items} == {"skip"}
    assert all("Claude Code" in (i.reason or "") for i in report.items)
    assert all(Path(m.path).exists() for m in made)


def test_the_commands_on_the_shared_samples_in_a_projects_folder(tmp_path):
    folder = tmp_path / "home" / ".claude" / "projects" / "-tmp"
    folder.mkdir(parents=True)
    for name in SAMPLES:
        shutil.copyfile(claude_path(name), folder / name)  # skips when the samples are absent
    env = {**os.environ, "HOME": str(tmp_path / "home"), "NO_COLOR": "1"}

    def journal(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "journal.cli", *argv], capture_output=True,
                              text=True, env=env, timeout=120)

    proc = journal("ls", str(tmp_path / "home" / ".claude" / "projects"), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {Path(r["path"]).name: r for r in json.loads(proc.stdout)}
    assert set(rows) == set(SAMPLES)
    for name, row in rows.items():
        snap = load(folder / name)
        assert row["dialect"] == "claude" and row["entries"] == len(snap.entries), name
        assert row["id"] == snap.claude.first("sessionId")
    assert rows["edge_cases.jsonl"]["problems"]  # its non-record lines are said
    proc = journal("usage", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["sessions"] == len(SAMPLES) and data["total"]["messages"] > 0
    proc = journal("search", "different session file", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr
    assert {Path(h["session"]).name for h in json.loads(proc.stdout)["hits"]} == {
        "session_b.jsonl"}
    out = tmp_path / "page.html"
    proc = journal("export", str(folder / "representative_messages.jsonl"), "--format", "html",
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 10_000
