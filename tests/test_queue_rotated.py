"""Messages queued to a rotated session by the name the user knows reach the agent working
on its live successor, for a session file and a database session alike: queued after the
rotation (`journal-agent queue OLD`), and while an agent rotates its session as it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_runner import Checked, make_runner, scenario
from test_runner_queues import Gate

import journal
from agent.cli import main
from agent.models.scripted import ScriptedModel
from agent.steering import QUEUED_TYPE, STEER, STEER_TYPE, queue_message, read_inbox
from journal import RotationPolicy, Session, load
from journal.pg.url import shown
from tools import Workspace, default_tools

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


def grown_and_rotated(where: str, label: str, queue_first: str | None = None, *,
                      new: bool = False) -> str:
    """`where` (made first if `new`) grown and rotated once (a compaction first), with
    `queue_first` queued to it while it is live, no agent working on it; its successor."""
    with Session.create(where, cwd="/w") if new else Session.open(where) as session:
        work(session, label)
        if queue_first is not None:
            queue_message(where, queue_first)
        session.append_compaction("what happened", session.entries[-6]["id"], 9000)
    result = journal.rotate(where)
    assert result.rotated and result.successor is not None
    return result.successor


def run_on(session: str, tmp_path: Path) -> None:
    assert main(["run", "go", "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--session", session, "--workspace", str(tmp_path / "ws"), "-q"]) == 0


def test_messages_left_in_the_inboxes_of_its_predecessors_reach_an_agent_started_on_the_live_one(
        file_or_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Messages queued to the names of the sessions a live one continues (while each was
    live, by an older version that did not follow a rotated name, or by a queue racing a
    rotation) reach an agent started on the live session: each once, in the order queued,
    and not again when it starts a second time."""
    first = file_or_database
    second = grown_and_rotated(first, "first", "1 queued while the first was live",
                               new=True)
    queue_message(first, "2 queued to the first by an older version", follow=False)
    live = grown_and_rotated(second, "second", "3 queued while the second was live")
    queue_message(live, "4 queued to the live one")
    queue_message(first, "5 queued to the first as it was sealed", follow=False)
    assert [len(read_inbox(p)) for p in (first, second, live)] == [3, 1, 1]
    expected = ["1 queued while the first was live",
                "2 queued to the first by an older version",
                "3 queued while the second was live", "4 queued to the live one",
                "5 queued to the first as it was sealed"]
    run_on(live, tmp_path)
    assert delivered(live) == expected
    assert all(read_inbox(p) == [] for p in (first, second, live))
    run_on(live, tmp_path)  # a second start takes none of them again
    assert delivered(live) == expected
    capsys.readouterr()


def test_a_message_recorded_before_a_crash_left_its_file_in_a_predecessor_inbox_is_taken_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The agent records a message, syncs, then removes its file: a crash between the two
    leaves the file in the predecessor's inbox, and the next start delivers it once."""
    first = str(tmp_path / "s.jsonl")
    live = grown_and_rotated(first, "first", new=True)
    queue_id = queue_message(first, "recorded before the crash", follow=False)
    with Session.open(live) as session:
        session.append_custom_entry(QUEUED_TYPE, {"id": queue_id, "kind": STEER,
                                                  "text": "recorded before the crash"})
    run_on(live, tmp_path)
    assert delivered(live) == ["recorded before the crash"]
    assert read_inbox(first) == []
    capsys.readouterr()


def test_a_message_queued_to_a_predecessor_while_the_agent_runs_is_read_at_its_next_safe_point(
        tmp_path: Path) -> None:
    """While an agent started on the live session runs a tool, an older version queues to
    the name the session had before its rotation: the agent reads it after that tool."""
    first = str(tmp_path / "s.jsonl")
    live = grown_and_rotated(first, "first", new=True)
    workspace = tmp_path / "ws"
    model = Checked(ScriptedModel(scenario(
        {"text": "One step.", "tool_calls": [{"name": "gate", "arguments": {}}]},
        {"text": "Read it."})))
    tools = [*default_tools(workspace),
             Gate(Workspace(workspace),
                  lambda _: queue_message(first, "queued to the old name", follow=False))]
    with Session.open(live) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)
        runner.run("Go.")
    assert delivered(live) == ["queued to the old name"]
    assert "queued to the old name" in texts_of(model.requests[1])
    assert read_inbox(first) == []


def test_a_new_session_at_a_predecessor_name_keeps_its_own_messages(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Once a rotation archived a file, its name is free: a new session made there has the
    inbox of that name, and an agent on the rotated lineage does not take its messages."""
    first = str(tmp_path / "s.jsonl")
    live = grown_and_rotated(first, "first", new=True)
    Session.create(first, cwd="/w").close()
    queue_message(first, "for the new session")
    run_on(live, tmp_path)
    assert delivered(live) == []
    assert [item.text for _, item in read_inbox(first)] == ["for the new session"]
    capsys.readouterr()


def test_a_predecessor_archived_under_a_numbered_name_is_read_by_the_name_it_had_live(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second session made at a freed name and rotated in turn is archived as
    `archive/s.jsonl.2.gz` (the plain name is taken there): a message queued to `s.jsonl`
    while it was live reaches the agent on its successor, not one looked for at
    `s.jsonl.2`."""
    first = str(tmp_path / "s.jsonl")
    grown_and_rotated(first, "first", new=True)
    live = grown_and_rotated(first, "second", new=True)
    archived = sorted(p.name for p in (tmp_path / "archive").iterdir())
    assert "s.jsonl.2.gz" in archived or "s.jsonl.2" in archived, archived
    assert journal.predecessors(live) == [first]
    queue_message(first, "queued to the second while it was live", follow=False)
    run_on(live, tmp_path)
    assert delivered(live) == ["queued to the second while it was live"]
    capsys.readouterr()


def test_a_new_session_made_at_a_predecessor_name_while_the_agent_runs_keeps_its_messages(
        tmp_path: Path) -> None:
    """The agent on the live session reads the inboxes of its predecessors' names, chosen
    when it starts: one a new session takes while the agent runs (a tool call long) is that
    session's, and so is the message queued to it then, which the agent must not take."""
    first = str(tmp_path / "s.jsonl")
    live = grown_and_rotated(first, "first", new=True)
    workspace = tmp_path / "ws"
    model = Checked(ScriptedModel(scenario(
        {"text": "One step.", "tool_calls": [{"name": "gate", "arguments": {}}]},
        {"text": "Done."})))

    def new_session_there(_: Any) -> None:
        Session.create(first, cwd="/w").close()
        queue_message(first, "for the new session")

    tools = [*default_tools(workspace), Gate(Workspace(workspace), new_session_there)]
    with Session.open(live) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)
        runner.run("Go.")
    assert delivered(live) == []
    assert [item.text for _, item in read_inbox(first)] == ["for the new session"]
