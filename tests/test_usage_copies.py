"""`journal usage`, `journal ls` and `journal search` over a Claude Code transcript's
subagent files named one by one: naming a subagent file gives its transcript's row."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_catalog_claude import records, with_subagents

from journal import load_prices

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
