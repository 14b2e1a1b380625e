"""Messages queued to a rotated session by the name the user knows reach the agent working
on its live successor, for a session file and a database session alike: queued after the
rotation (`journal-agent queue OLD`), and while an agent rotates its session as it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_runner import Checked, make_runner, scenario

import journal
from agent.cli import main
from agent.models.scripted import ScriptedModel
from agent.steering import STEER_TYPE, queue_message, read_inbox
from journal import RotationPolicy, Session, load
from journal.pg.url import shown

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "agent" / "scenarios"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))  # database inboxes
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "ws").mkdir()


def work(session: Session, label: str, turns: int = 30) -> None:
    """A long stretch of turns, enough for a compaction to cut."""
    for k in range(turns):
        session.append_message({"role": "user", "content": [{"type": "text", "text":
                                f"{label} {k} " + "x" * 400}], "timestamp": k})
        session.append_message({"role": "assistant", "content": [{"type": "text",
                                "text": "ok"}], "stopReason": "stop", "timestamp": k,
                                "api": "scripted", "provider": "scripted",
                                "model": "scripted-1"})


def delivered(where: str) -> list[str]:
    return [e["content"] for e in load(where).entries if e.get("type") == "custom_message"
            and e.get("customType") == STEER_TYPE]


def rotated(where: str) -> str:
    """`where` made and rotated once (a compaction first); its successor."""
    with Session.create(where, cwd="/w") as session:
        work(session, "old")
        kept = session.entries[-6]["id"]
        session.append_compaction("what happened", kept, 9000)
    result = journal.rotate(where)
    assert result.rotated and result.successor is not None
    return result.successor


def test_queue_to_a_rotated_name_reaches_the_agent_on_its_live_session(
        file_or_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = file_or_database
    live = rotated(old)
    assert main(["queue", old, "please steer", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)  # where it went (it once named `old` only)
    assert said["session"] == old and said["queuedTo"] == shown(live), said
    assert read_inbox(old) == [] and len(read_inbox(live)) == 1
    assert main(["run", "go", "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--session", live, "--workspace", str(tmp_path / "ws"), "-q"]) == 0
    assert delivered(live) == ["please steer"]
    assert read_inbox(live) == [] and read_inbox(old) == []
    capsys.readouterr()


def test_a_message_queued_between_two_rotations_of_a_running_agent_reaches_it(
        file_or_database: str, tmp_path: Path) -> None:
    """The agent rotates its session at each compaction; a message queued to the name it
    started on, after the first rotation and before the second, is delivered by its next
    turn (it went to the successor live when it was queued)."""
    name = file_or_database
    model = Checked(ScriptedModel(scenario({"text": "First."}, {"text": "Read it."})))
    with Session.create(name, cwd="/w") as session:
        session.rotation_policy = RotationPolicy()  # every compaction rotates
        runner, _ = make_runner(session, model, tmp_path / "ws")
        runner.run("Go.")
        paths = [session.path]
        for label in ("before", "between"):
            work(session, label)
            assert runner.compact_now() is not None
            paths.append(session.path)
            if label == "before":
                queue_message(name, "queued between the rotations")
        assert len(set(paths)) == 3, "the session rotated twice"
        runner.run("More.")
        live = session.path
    assert delivered(live) == ["queued between the rotations"]
    assert "queued between the rotations" in texts_of(model.requests[-1])
    assert all(read_inbox(path) == [] for path in paths)


def texts_of(request: Any) -> str:
    return repr(journal.to_model_messages(request.messages))
