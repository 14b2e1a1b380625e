"""`journal import` says which lines of the transcript it could not import (not JSON, not
an object, a message of the wrong type): a `Warning:` line each, and `problems` in the
report. They used to be dropped without a word."""

from __future__ import annotations

import orjson

from journal import import_claude
from journal.cli import main


def record(kind: str, uuid: str, parent: str | None, message: object) -> bytes:
    return orjson.dumps({"parentUuid": parent, "isSidechain": False, "cwd": "/w",
                         "sessionId": "s1", "version": "2.0.76", "type": kind,
                         "message": message, "uuid": uuid,
                         "timestamp": "2026-01-15T09:00:01.000Z"}) + b"\n"


def transcript(tmp_path) -> str:
    path = tmp_path / "s1.jsonl"
    path.write_bytes(
        record("user", "u1", None, {"role": "user", "content": "question"})
        + b'"a string, not a record"\n'
        + b"{not json at all\n"
        + record("user", "u2", "u1", "a message that is not an object")
        + record("assistant", "a1", "u1", {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
            "content": [{"type": "text", "text": "answer"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}}))
    return str(path)


def test_the_library_reports_the_lines_it_left_out(tmp_path):
    report = import_claude(transcript(tmp_path), tmp_path / "out")
    assert sorted(d.line for d in report.problems) == [2, 3, 4]
    assert len(report.to_json()["problems"]) == 3


def test_the_command_warns_of_each(tmp_path, capsys):
    source = transcript(tmp_path)
    assert main(["import", source, str(tmp_path / "out"), "--json"]) == 0
    out, err = capsys.readouterr()
    warnings = [line for line in err.splitlines() if line.startswith("Warning: ")]
    assert len(warnings) == 3
    assert all(source in line and "not imported" in line for line in warnings)
    assert len(orjson.loads(out)["problems"]) == 3
