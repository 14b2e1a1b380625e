"""`journal usage` and `journal ls` over sessions that share history: a forked or resumed
Claude Code transcript (its copied records keep `message.id` and `requestId`), a pi fork (its
copied entries keep their ids), and a transcript's subagent files named one by one. Each row
counts its own history; the totals count each API response once; naming a subagent file
gives its transcript's row."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_catalog_claude import records, with_subagents
from test_usage import reply, user
from third_party import claude_path

from journal import Session, load_prices

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("input", "output", "cacheRead", "cacheWrite")


def journal(*argv: str) -> Any:
    """Run `python -m journal.cli ARGV --json` as a user does; its JSON output."""
    proc = subprocess.run([sys.executable, "-m", "journal.cli", *argv, "--json"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def responses(path: Path) -> dict[str, dict[str, Any]]:
    """The API responses of one file, by `message.id`, each with its last line's usage (the
    final counts)."""
    last: dict[str, dict[str, Any]] = {}
    for record in records(path):
        message = record.get("message")
        if record.get("type") == "assistant" and isinstance(message, dict) \
                and isinstance(message.get("usage"), dict):
            last[message["id"]] = message
    return last


def tokens(message: dict[str, Any]) -> tuple[int, int, int, int]:
    u = message["usage"]
    return (u.get("input_tokens", 0), u.get("output_tokens", 0),
            u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0))


def sums(messages: list[dict[str, Any]]) -> dict[str, float]:
    """What usage must say for these responses (Claude Code records no cost: the table's)."""
    table = load_prices()
    out = {"messages": len(messages), **dict.fromkeys(KINDS, 0), "cost": 0.0}
    for message in messages:
        counts = tokens(message)
        for key, n in zip(KINDS, counts, strict=True):
            out[key] += n
        price = table.price_for(message["model"])
        out["cost"] += price.cost(*counts) if price else 0.0
    return out


def oracle(*files: Path) -> dict[str, float]:
    """Each response of the files once, the copy with the most tokens counting."""
    best: dict[str, dict[str, Any]] = {}
    for path in files:
        for key, message in responses(path).items():
            if key not in best or sum(tokens(message)) > sum(tokens(best[key])):
                best[key] = message
    return sums(list(best.values()))


def of(row: dict[str, Any]) -> dict[str, float]:
    return {k: row[k] for k in ("messages", *KINDS, "cost")}


def fork_of(made: Any, folder: Path) -> tuple[Path, int]:
    """A transcript forked from `made` as Claude Code writes one (`--fork-session`, or a
    resume into a new file): its records up to a line inside a response written over several
    lines (so the fork holds that response with its first lines' counts only), under a new
    session id, then a prompt and a response of its own. Returns its path and how many
    responses it copied."""
    lines = Path(made.path).read_bytes().splitlines()
    values = [orjson.loads(line) for line in lines]
    cut = None
    for i in range(len(values) // 2, len(values) - 1):
        this, after = values[i].get("message"), values[i + 1].get("message")
        if values[i].get("type") == values[i + 1].get("type") == "assistant" \
                and this["id"] == after["id"] and sum(tokens(after)) > sum(tokens(this)):
            cut = i + 1  # the fork ends with this response's first line
            break
    assert cut is not None, "the generator wrote no response over several lines"
    old, new = made.session_id, str(uuid.uuid4())
    copied = [line.replace(old.encode(), new.encode()) for line in lines[:cut]]
    parent = values[cut - 1]["uuid"]
    prompt = {**values[0], "type": "user", "parentUuid": parent, "sessionId": new,
              "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "fork here"}}
    prompt.pop("requestId", None)
    answer = {**values[cut - 1], "parentUuid": prompt["uuid"], "sessionId": new,
              "uuid": str(uuid.uuid4()), "requestId": "req_fork",
              "message": {**values[cut - 1]["message"], "id": "msg_fork_own",
                          "content": [{"type": "text", "text": "forked"}],
                          "usage": {"input_tokens": 7, "output_tokens": 11}}}
    path = folder / f"{new}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in [*copied, orjson.dumps(prompt),
                                                            orjson.dumps(answer)]))
    shared = set(responses(Path(made.path))) & set(responses(path))
    return path, len(shared)


def test_a_forked_transcript_counts_in_its_row_and_once_in_the_totals(tmp_path):
    folder = tmp_path / "projects" / "-home-user-project"
    made = with_subagents(folder, 0.4, 4, compactions=1, rewinds=1)
    fork, copied = fork_of(made, folder)
    assert copied > 5
    everything = [Path(made.path), *made.subagents, fork]

    data = journal("usage", str(folder))
    rows = {Path(r["session"]).name: r for r in data["rows"]}
    assert set(rows) == {Path(made.path).name, fork.name}
    assert of(rows[Path(made.path).name]) == pytest.approx(
        oracle(Path(made.path), *made.subagents))
    assert of(rows[fork.name]) == pytest.approx(oracle(fork))  # the fork's own history
    assert of(data["total"]) == pytest.approx(oracle(*everything))  # each response once
    assert data["repeated"]["messages"] == copied
    assert data["total"]["messages"] == sum(r["messages"] for r in rows.values()) - copied

    for by in ("model", "day"):  # their rows add up to the same total
        grouped = journal("usage", str(folder), "--by", by)
        assert of(grouped["total"]) == pytest.approx(of(data["total"]))
        for key in ("messages", *KINDS):
            assert sum(r[key] for r in grouped["rows"]) == data["total"][key], (by, key)

    # the fork named first: the same rows, the same total (the fuller copy counts)
    either = journal("usage", str(fork), str(made.path))
    assert of(either["total"]) == pytest.approx(of(data["total"]))
    for row in either["rows"]:
        assert of(row) == pytest.approx(of(rows[Path(row["session"]).name]))

    listed = {Path(r["path"]).name: r for r in journal("ls", str(folder), "--no-cache")}
    for name, row in rows.items():  # ls: each row its own, as usage's rows
        assert of(listed[name]["usage"]) == pytest.approx(of(row))


def test_a_pi_fork_copies_entries_and_they_count_once_in_the_totals(tmp_path):
    folder = tmp_path / "sessions"
    with Session.create(folder, cwd="/proj") as s:
        for i in range(4):
            s.append_message(user(f"q{i}", 1_779_926_400_000 + i))
            s.append_message(reply("claude-sonnet-4-5", 1000 + i, 10, 7, 3, cost=0.01 * (i + 1),
                                   ts=1_779_926_400_000 + i))
        parent = Path(s.path)
    # pi's fork (SessionManager.createBranchedSession): a new header naming the parent, the
    # branch's entries copied as they are, then the fork goes on
    lines = parent.read_bytes().splitlines()
    header = {**orjson.loads(lines[0]), "id": str(uuid.uuid4()), "parentSession": str(parent)}
    fork = folder / "fork.jsonl"
    fork.write_bytes(b"".join(line + b"\n" for line in [orjson.dumps(header), *lines[1:7]]))
    with Session.open(fork) as s:
        s.append_message(user("forked", 1_779_926_500_000))
        s.append_message(reply("claude-sonnet-4-5", 5, 5, cost=0.5, ts=1_779_926_500_000))

    data = journal("usage", str(folder))
    rows = {Path(r["session"]).name: r for r in data["rows"]}
    assert rows[parent.name]["messages"] == 4 and rows["fork.jsonl"]["messages"] == 4
    assert data["total"]["messages"] == 5
    assert data["total"]["cost"] == pytest.approx(0.01 + 0.02 + 0.03 + 0.04 + 0.5)
    assert data["total"]["input"] == 1000 + 1001 + 1002 + 1003 + 5
    assert data["repeated"]["messages"] == 3  # the fork copied three replies


def test_naming_subagent_files_gives_the_transcripts_rows(tmp_path):
    folder = tmp_path / "projects" / "-home-user-project"
    made = with_subagents(folder, 0.3, 4, compactions=1, rewinds=1)
    assert made.subagents
    every = sorted(str(p) for p in folder.rglob("*.jsonl"))
    assert len(every) == 1 + len(made.subagents)

    whole = journal("usage", str(folder))
    word = "function"  # in the transcript and in its subagent files
    hits = journal("search", word, str(folder), "-n", "100000")["hits"]
    assert hits
    for named in (every, [str(made.subagents[0]), str(made.path)], [str(made.subagents[0])]):
        found = journal("search", word, *named, "-n", "100000")["hits"]
        assert sorted(map(str, found)) == sorted(map(str, hits)), named  # each hit once
        data = journal("usage", *named)
        assert data["sessions"] == 1 and data["files"] == whole["files"], named
        assert data["rows"] == whole["rows"] and data["total"] == whole["total"], named
        listed = journal("ls", *named, "--no-cache")
        assert [r["path"] for r in listed] == [os.path.realpath(made.path)], named
        assert of(listed[0]["usage"]) == pytest.approx(of(whole["rows"][0])), named

    # a subagent file whose transcript is not there is a session of its own
    alone = tmp_path / "copy" / made.session_id / "subagents"
    alone.mkdir(parents=True)
    shutil.copyfile(made.subagents[0], alone / made.subagents[0].name)
    for named in (alone / made.subagents[0].name, tmp_path / "copy"):
        data = journal("usage", str(named))
        assert data["sessions"] == 1 and data["total"]["messages"] == len(
            responses(made.subagents[0])), named


def test_a_resumed_sample_transcript_counts_once_in_the_totals(tmp_path):
    sample = claude_path("representative_messages.jsonl")  # skips when the samples are absent
    folder = tmp_path / "-tmp"
    folder.mkdir()
    shutil.copyfile(sample, folder / "first.jsonl")
    shutil.copyfile(sample, folder / "resumed.jsonl")  # all of its history, copied
    alone = journal("usage", str(folder / "first.jsonl"))
    data = journal("usage", str(folder))
    assert data["sessions"] == 2 and alone["total"]["messages"] > 0
    assert data["total"] == alone["total"]
    assert data["repeated"]["messages"] == alone["total"]["messages"]
