"""`journal tail -n N` (and `follow(last=N)`) on a Claude Code transcript gives its last N
entries even when the last records give none: a record repeating an earlier uuid (kept
once, the first), a `summary` or `ai-title` record (no uuid). The count used to be of
records with a uuid, read backward, so `-n 1` printed nothing on such a file."""

from __future__ import annotations

import orjson
import pytest

from journal.cli import main


def record(kind: str, uuid: str, parent: str | None, second: int, message: dict) -> dict:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/w",
            "sessionId": "s1", "version": "2.0.76", "type": kind, "message": message,
            "uuid": uuid, "timestamp": f"2026-01-15T09:00:{second:02d}.000Z"}


def user(uuid: str, parent: str | None, second: int, text: str) -> dict:
    return record("user", uuid, parent, second, {"role": "user", "content": text})


def assistant(uuid: str, parent: str, second: int, text: str) -> dict:
    return record("assistant", uuid, parent, second, {
        "id": f"msg_{uuid}", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 5}})


def transcript(tmp_path) -> str:
    records = [
        user("u1", None, 1, "first question"),
        assistant("a1", "u1", 2, "first answer"),
        user("u2", "a1", 3, "second question"),
        assistant("a2", "u2", 4, "second answer"),
        user("u2", "a1", 5, "second question, written again"),  # a repeated uuid: no entry
        {"type": "summary", "summary": "two questions", "leafUuid": "a2"},
        {"type": "ai-title", "aiTitle": "Questions", "sessionId": "s1"},
    ]
    path = tmp_path / "s1.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


@pytest.mark.parametrize(("count", "ids"), [
    (1, ["a2"]), (2, ["u2", "a2"]), (3, ["a1", "u2", "a2"]),
])
def test_tail_gives_the_last_entries_of_a_transcript(count, ids, tmp_path, capsys):
    path = transcript(tmp_path)
    assert main(["tail", path, "-n", str(count), "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line)["id"] for line in lines] == ids
