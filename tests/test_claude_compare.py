"""The projection compared with claude-code-log's own DAG reading of the same files.

claude-code-log (the `[compare]` extra) orders a transcript for display: it walks the
`parentUuid` DAG into one line per session, splicing short abandoned rewind branches and
sidechains into that line and forking only long-lived branches. Its line is therefore a
superset of the branch Claude Code resumes. What must agree:

- every record on our branch (the walk from the leaf, the gathered tool results, the merged
  lines of each response) is in its line for the session, the messages in the same order;
- whatever its line holds beyond our branch is off the branch: a sidechain record, or a
  record that is not an ancestor of the leaf (a rewound attempt), or bookkeeping that sits
  beside the chain (progress, attachments, system notes);
- the leaf: the last main-chain user or assistant record of its line is ours (where the
  file's records are in time order: it orders parallel roots by time, Claude Code's leaf is
  the last record in the file).

Skipped when claude-code-log is not installed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_claude_projection import gc
from third_party import claude_path

from journal.snapshot import load

pytest.importorskip("claude_code_log")
from claude_code_log.converter import load_transcript  # noqa: E402
from claude_code_log.dag import build_dag_from_entries  # noqa: E402


def their_line(path: Path) -> list[str]:
    """claude-code-log's line (uuids in display order) for the transcript's own session."""
    logging.getLogger("claude_code_log").setLevel(logging.ERROR)
    entries = load_transcript(path, silent=True)
    tree = build_dag_from_entries(entries)
    sessions = [s for s in tree.sessions.values()
                if not s.is_branch and not s.is_sidechain and "#agent-" not in s.session_id]
    out: list[str] = []
    for line in sorted(sessions, key=lambda s: s.first_timestamp):
        out.extend(line.uuids)
    return out


def records_of(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_bytes().splitlines():
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("uuid"), str):
            out.setdefault(value["uuid"], value)
    return out


def compare(path: Path) -> None:
    snap = load(path)
    assert snap.claude is not None and snap.leaf_id is not None
    tree = snap.tree()
    raw = snap.claude.translator.raw
    branch_entries = [tree.entries[i]["id"] for i in tree.path(tree.leaf)]
    ours = [r["uuid"] for eid in branch_entries for r in raw.get(eid, [])]
    line = their_line(path)
    where = {u: i for i, u in enumerate(line)}
    records = records_of(path)

    missing = [u for u in ours if u not in where]
    assert not missing, f"on our branch, not in claude-code-log's line: {missing[:5]}"

    # messages in the same order (a response's first line, each prompt); a segment a
    # compaction kept is on our branch after the summary (`<id>@<anchor>` copies), where
    # Claude Code relinks it, and before it in the file
    firsts = [raw[eid][0]["uuid"] for eid in branch_entries
              if eid in raw and raw[eid][0].get("type") in ("user", "assistant")
              and not _is_results(raw[eid][0]) and "@" not in eid]
    positions = [where[u] for u in firsts]
    assert positions == sorted(positions)

    # what their line holds beyond our branch is off the leaf's chain
    ancestors = set()
    cur: str | None = raw[snap.leaf_id][-1]["uuid"]
    while cur is not None and cur in records:
        ancestors.add(cur)
        rec = records[cur]
        cur = rec.get("parentUuid") or rec.get("logicalParentUuid")
    ours_set = set(ours)
    for u in line:
        if u in ours_set or u not in records:
            continue
        rec = records[u]
        assert (rec.get("isSidechain") or u not in ancestors
                or rec.get("type") not in ("user", "assistant")), rec

    # the leaf
    main = [u for u in line if u in records and records[u].get("type") in ("user", "assistant")
            and not records[u].get("isSidechain")]
    leaf_records = {r["uuid"] for r in raw[snap.leaf_id]}
    stamps = [str(records[u].get("timestamp")) for u in records
              if records[u].get("type") in ("user", "assistant")]
    if stamps == sorted(stamps):  # it orders roots by time; the leaf is the last in the file
        assert main and main[-1] in leaf_records


def _is_results(record: dict[str, Any]) -> bool:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and bool(content) and all(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


@pytest.mark.parametrize("seed", [31, 32, 33, 34])
def test_generated_transcripts_agree(tmp_path: Path, seed: int) -> None:
    stats = gc.generate(tmp_path, mb=0.6, seed=seed, compactions=2, rewinds=3)
    compare(stats.path)


@pytest.mark.parametrize("name", ["representative_messages.jsonl", "todowrite_examples.jsonl",
                                  "session_b.jsonl", "edge_cases.jsonl"])
def test_samples_agree(name: str) -> None:
    compare(claude_path(name))
