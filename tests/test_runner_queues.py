"""Steering and follow-up queues, tool calls of replies that did not stop for tools, and
rotation by default: through the real run loop with the scripted model, the real tools and a
real journal (issue 17)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_runner import (
    ROOT,
    Checked,
    assert_journal_ok,
    call,
    make_runner,
    messages_of,
    roles,
    scenario,
)

import journal
from agent.chat import Chat
from agent.models.scripted import ScriptedModel
from agent.runner import SKIPPED_FOR_STEERING, Runner
from agent.steering import (
    FOLLOW_UP,
    FOLLOW_UP_TYPE,
    QUEUED_TYPE,
    STEER,
    STEER_TYPE,
    MessageQueues,
    queue_message,
    read_inbox,
    remove_inbox,
)
from journal import Session, inbox_path, load
from tools import Tool, ToolResult, Workspace, default_tools


@pytest.fixture(autouse=True)
def _no_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


class Gate(Tool):
    """While it runs, calls `during()` (from the tool, i.e. while the agent works)."""

    name = "gate"
    description = "Waits at a gate."
    input_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, workspace: Workspace, during: Any) -> None:
        super().__init__(workspace)
        self.during = during
        self.runs = 0

    def execute(self, args: dict[str, Any]) -> ToolResult:
        self.runs += 1
        self.during(self.runs)
        return ToolResult(f"gate passed ({self.runs})")


def delivered(entries: list[dict[str, Any]], kind: str) -> list[str]:
    return [e["content"] for e in entries if e.get("type") == "custom_message"
            and e.get("customType") == kind]


def texts_sent(request: Any) -> list[str]:
    """The text of every user-role message of a request, as the model gets it."""
    out = []
    for m in journal.to_model_messages(request.messages):
        if m["role"] == "user":
            content = m["content"]
            out.append(content if isinstance(content, str) else "".join(
                b.get("text", "") for b in content if isinstance(b, dict)))
    return out


# --- tool calls only on stopReason toolUse


@pytest.mark.parametrize("stop", ["length", "stop"])
def test_complete_call_in_a_reply_that_stopped_otherwise_is_not_run(
        tmp_path: Path, workspace: Path, stop: str) -> None:
    model = Checked(ScriptedModel(scenario(
        {"text": "Writing the file.", "stop": stop,
         "tool_calls": [call("write", path="made.txt", content="x")]},
        {"text": "I will not write it then."},
    )))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace)
        result = runner.run("Write made.txt.")
        entries = assert_journal_ok(session)
    assert not (workspace / "made.txt").exists()
    assert watch.kinds("tool_start") == []
    assert (result.stop_reason, result.final_text) == ("stop", "I will not write it then.")
    answer = messages_of(entries)[2]
    assert answer["role"] == "toolResult" and answer["isError"]
    assert answer["details"] == {"notRun": stop}
    assert "not executed" in answer["content"][0]["text"]
    assert len(model.requests) == 2  # the model saw the answer and replied again


# --- steering


def test_steering_from_another_thread_skips_the_rest_of_the_turn(
        tmp_path: Path, workspace: Path) -> None:
    model = Checked(ScriptedModel(scenario(
        {"text": "Three steps.", "tool_calls": [call("gate"), call("write", path="b.txt",
                                                                    content="b"), call("ls")]},
        {"text": "Changing course as asked."},
    )))
    holder: dict[str, Runner] = {}

    def during(_: int) -> None:  # another thread queues while the tool runs
        t = threading.Thread(target=holder["runner"].steer, args=("use c.txt instead",))
        t.start()
        t.join()

    tools = [*default_tools(workspace), Gate(Workspace(workspace), during)]
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace, tools=tools)
        holder["runner"] = runner
        result = runner.run("Do three steps.")
        entries = assert_journal_ok(session)
        assert read_inbox(session.path) == []
    assert result.stop_reason == "stop"
    assert not (workspace / "b.txt").exists()
    assert [d["name"] for d in watch.kinds("tool_start")] == ["gate"]
    results = [m for m in messages_of(entries) if m["role"] == "toolResult"]
    assert [r["details"] for r in results[1:]] == [{"notRun": "steering"}] * 2
    assert results[1]["content"][0]["text"] == SKIPPED_FOR_STEERING
    assert delivered(entries, STEER_TYPE) == ["use c.txt instead"]
    # recorded as queued before it was delivered, after the tool results
    kinds = [e.get("customType") or e.get("message", {}).get("role") for e in entries]
    assert kinds.index(QUEUED_TYPE) < kinds.index(STEER_TYPE)
    assert kinds[kinds.index(STEER_TYPE) - 1] == "toolResult"
    assert texts_sent(model.requests[1])[-1] == "use c.txt instead"
    assert all("use c.txt instead" not in texts_sent(r) for r in model.requests[:1])


def test_follow_up_is_delivered_when_the_run_would_end(tmp_path: Path,
                                                        workspace: Path) -> None:
    model = Checked(ScriptedModel(scenario(
        {"text": "Step one.", "tool_calls": [call("gate")]},
        {"text": "Step one done."},
        {"text": "Now the follow-up.", "tool_calls": [call("ls")]},
        {"text": "Follow-up done."},
    )))
    holder: dict[str, Runner] = {}
    tools = [*default_tools(workspace),
             Gate(Workspace(workspace), lambda _: holder["runner"].follow_up("then tidy up"))]
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, watch = make_runner(session, model, workspace, tools=tools)
        holder["runner"] = runner
        result = runner.run("Step one.")
        entries = assert_journal_ok(session)
        again = runner.run("Anything else?")
        entries_after = assert_journal_ok(session)
    assert (result.stop_reason, result.final_text) == ("stop", "Follow-up done.")
    assert delivered(entries, FOLLOW_UP_TYPE) == ["then tidy up"]
    # the follow-up came after the reply that would have ended the run, not before
    assert texts_sent(model.requests[1])[-1] != "then tidy up"
    assert texts_sent(model.requests[2])[-1] == "then tidy up"
    assert again.stop_reason == "stop"
    assert delivered(entries_after, FOLLOW_UP_TYPE) == ["then tidy up"]  # once, not twice
    assert [d["queue"] for d in watch.kinds("queued_delivered")] == [FOLLOW_UP]


def test_message_queued_by_another_process_is_delivered_once(tmp_path: Path,
                                                              workspace: Path) -> None:
    model = Checked(ScriptedModel(scenario(
        {"text": "Working.", "tool_calls": [call("gate")]},
        {"text": "Read your note."},
    )))

    def during(_: int) -> None:
        code = ("import sys; from agent.steering import queue_message; "
                "queue_message(sys.argv[1], 'a note from outside')")
        subprocess.run([sys.executable, "-c", code, session.path], check=True, cwd=ROOT,
                       env={**os.environ, "HOME": str(tmp_path)})

    tools = [*default_tools(workspace), Gate(Workspace(workspace), during)]
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)
        runner.run("Go.")
        entries = assert_journal_ok(session)
        assert not os.path.exists(inbox_path(session.path)), "emptied, the inbox goes"
    assert delivered(entries, STEER_TYPE) == ["a note from outside"]
    assert texts_sent(model.requests[1])[-1] == "a note from outside"


QUEUER = """
import sys
from agent.steering import queue_message
path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(count):
    print(queue_message(path, f"{tag} {i}", follow=False), flush=True)
"""


def test_no_message_is_lost_while_the_agent_removes_the_emptied_inbox(tmp_path: Path) -> None:
    """Queuers in other processes write while the agent's side takes the messages out and
    removes the emptied folder as fast as it can: every message is recorded once, and the
    folder is gone at the end."""
    writers, each = 4, 150
    with Session.create(str(tmp_path / "s"), cwd="/") as session:
        queues = MessageQueues()
        folder = inbox_path(session.path)
        procs = [subprocess.Popen([sys.executable, "-c", QUEUER, session.path, f"w{n}",
                                   str(each)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "HOME": str(tmp_path)})
                 for n in range(writers)]
        removed = 0
        while any(p.poll() is None for p in procs):
            queues.ingest(session, [session.path])
            removed += not os.path.exists(folder)
        outputs = [p.communicate(timeout=60)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * writers
        queues.ingest(session, [session.path])
        queued = {line for out in outputs for line in out.split()}
        recorded = [e["data"]["id"] for e in load(session.path).entries
                    if e.get("customType") == QUEUED_TYPE]
        assert len(queued) == writers * each
        assert sorted(recorded) == sorted(queued), "every message once"
        assert not os.path.exists(folder)
        assert removed > 0, "the folder was removed while the queuers wrote"


def test_an_agent_emptying_its_inbox_in_a_tight_loop_holds_no_queuer_off(
        tmp_path: Path) -> None:
    """The agent's side at its most hostile: a loop that takes every message out and removes
    the emptied folder, with nothing else to do (no session to write). Every queuer's
    message still gets in, each once: a queuer never loses to the removal of an empty
    folder (a folder it made, then found gone before its file was in it, 100 times over,
    was an error)."""
    writers, each = 4, 200
    session = str(tmp_path / "s.jsonl")
    Path(session).write_bytes(b"")
    folder = inbox_path(session)
    procs = [subprocess.Popen([sys.executable, "-c", QUEUER, session, f"w{n}", str(each)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "HOME": str(tmp_path)})
             for n in range(writers)]
    taken: list[str] = []
    while any(p.poll() is None for p in procs):
        for path, item in read_inbox(session):
            os.unlink(path)
            taken.append(item.id)
        remove_inbox(session)
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * writers, [err for _, err in outputs]
    taken += [item.id for _, item in read_inbox(session)]
    queued = [line for out, _ in outputs for line in out.split()]
    assert len(queued) == writers * each
    assert sorted(taken) == sorted(queued), "every message once"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")], "no staging left"
    remove_inbox(session)
    assert not os.path.exists(folder)


def test_a_message_queued_through_a_symlinked_inbox_lands_where_the_link_leads(
        tmp_path: Path) -> None:
    """An inbox that is a link to a folder elsewhere (a user's own layout): the staging
    folder's rename onto the link failed (ENOTDIR: a link is not a folder), so nothing could
    be queued there any more. The message goes into the folder the link leads to, the link
    stays a link, and no staging folder is left beside it."""
    session = str(tmp_path / "s.jsonl")
    Path(session).write_bytes(b"")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, inbox_path(session))
    first = queue_message(session, "one", follow=False)  # into an empty folder
    second = queue_message(session, "two", follow=False)  # into one holding a message
    assert [item.id for _, item in read_inbox(session)] == [first, second]
    assert sorted(os.listdir(elsewhere)) == [f"{first}.json", f"{second}.json"]
    assert os.path.islink(inbox_path(session))
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "s.jsonl", "s.jsonl.inbox"]
    assert not remove_inbox(session) and os.path.islink(inbox_path(session))


def test_a_message_queued_to_a_session_in_a_folder_not_made_yet_makes_it(
        tmp_path: Path) -> None:
    """The library queues to a session whose folder does not exist yet (a run about to
    create it there) as it did before staging: the folder is made, as `makedirs` of the
    inbox made it; staging beside the inbox failed with FileNotFoundError instead."""
    session = str(tmp_path / "new" / "deeper" / "s.jsonl")
    message_id = queue_message(session, "hello", follow=False)
    assert [item.id for _, item in read_inbox(session)] == [message_id]
    assert os.listdir(tmp_path / "new" / "deeper") == ["s.jsonl.inbox"]


def test_a_message_queued_to_a_session_named_relative_to_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare file name (the session in the working folder): the inbox's folder is `.`."""
    monkeypatch.chdir(tmp_path)
    Path("s.jsonl").write_bytes(b"")
    message_id = queue_message("s.jsonl", "hello", follow=False)
    assert [item.id for _, item in read_inbox("s.jsonl")] == [message_id]
    assert sorted(os.listdir(tmp_path)) == ["s.jsonl", "s.jsonl.inbox"]


def test_queued_entry_left_by_a_crash_is_delivered_once_on_resume(tmp_path: Path,
                                                                  workspace: Path) -> None:
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        session.append_message({"role": "user", "content": [{"type": "text", "text": "Go."}],
                                "timestamp": 1})
        session.append_custom_entry(QUEUED_TYPE, {"id": "q1", "kind": STEER,
                                                  "text": "recorded, never delivered"})
        path = session.path
    # and one whose inbox file outlived its recording (a crash between the two steps)
    queue_message(path, "left in the inbox")
    os.makedirs(inbox_path(path), exist_ok=True)
    Path(inbox_path(path), "00000000000000000001-q1.json").write_text(json.dumps(
        {"id": "q1", "kind": STEER, "text": "recorded, never delivered"}))
    model = Checked(ScriptedModel(scenario({"text": "Both read."}, {"text": "Nothing new."})))
    with Session.open(path) as session:
        runner, _ = make_runner(session, model, workspace)
        runner.run(None)
        runner.run("More?")
        entries = assert_journal_ok(session)
    assert delivered(entries, STEER_TYPE) == ["recorded, never delivered", "left in the inbox"]
    assert texts_sent(model.requests[0])[-2:] == ["recorded, never delivered",
                                                 "left in the inbox"]
    assert read_inbox(path) == []


def test_message_queued_to_a_killed_agent_is_delivered_by_the_resumed_run(
        tmp_path: Path, workspace: Path) -> None:
    scenario_file = tmp_path / "slow.json"
    scenario_file.write_text(json.dumps(scenario(
        {"text": "Starting.", "tool_calls": [call("bash", command="echo $$ > slow.pid; exec "
                                                   "sleep 60", timeout=120)]},
        {"text": "Saw the note."},
        prompt="Run it.",
    )))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        path = session.path
    env = {**os.environ, "HOME": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", "Run it.", "--session", path, "--model",
         f"scripted:{scenario_file}", "--workspace", str(workspace), "--quiet"],
        env=env, cwd=str(tmp_path), start_new_session=True)
    pid_file = workspace / "slow.pid"
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        queue_message(path, "while you were sleeping")
        queue_message(path, "and afterwards", FOLLOW_UP)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    assert len(read_inbox(path)) == 2
    journal.repair(path, strict=True)  # answers the call the kill left open
    model = Checked(ScriptedModel.from_file(scenario_file))
    model.inner.turn = 1
    with Session.open(path) as session:
        runner, _ = make_runner(session, model, workspace)
        first = runner.run(None)
        runner.run(None)
        entries = assert_journal_ok(session)
    assert first.stop_reason == "stop"
    assert delivered(entries, STEER_TYPE) == ["while you were sleeping"]
    assert delivered(entries, FOLLOW_UP_TYPE) == ["and afterwards"]
    assert read_inbox(path) == []


def test_pending_message_survives_a_compaction_and_a_resume(tmp_path: Path,
                                                            workspace: Path) -> None:
    """A follow-up queued long before a compaction (its entry now before the kept part) is
    recorded again after it, so a session resumed from its tail still holds it."""
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, Checked(ScriptedModel(scenario({"text": "-"}))),
                                workspace)
        runner.queues.queue(session, "do this next", FOLLOW_UP)
        for k in range(30):  # then a long stretch of work to compact
            session.append_message({"role": "user", "content": [{"type": "text",
                                    "text": f"old note {k} " + "x" * 400}], "timestamp": k})
            session.append_message({"role": "assistant", "content": [{"type": "text",
                                    "text": "ok"}], "stopReason": "stop", "timestamp": k,
                                    "api": "scripted", "provider": "scripted",
                                    "model": "scripted-1"})
        assert runner.compact_now() is not None
        path = session.path
    with Session.open(path) as session:
        assert not session.tree.complete  # resumed from the tail
        model = Checked(ScriptedModel(scenario({"text": "Doing it."})))
        runner, _ = make_runner(session, model, workspace)
        runner.run(None)
        entries = load(path).entries
    assert delivered(entries, FOLLOW_UP_TYPE) == ["do this next"]
    assert "do this next" in texts_sent(model.requests[-1])


# --- chat: typing while the agent works steers it


def test_chat_line_typed_while_the_agent_works_steers_it(tmp_path: Path,
                                                         workspace: Path) -> None:
    in_tool, steered, finished = threading.Event(), threading.Event(), threading.Event()

    def during(_: int) -> None:
        in_tool.set()
        assert steered.wait(10)  # the tool runs until chat has queued the line

    model = Checked(ScriptedModel(scenario(
        {"text": "Working.", "tool_calls": [call("gate"), call("ls")]},
        {"text": "Noted your correction."},
    )))
    tools = [*default_tools(workspace), Gate(Workspace(workspace), during)]
    lines = iter(["do the work", "STEER: only the docs", None])

    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)
        original = runner.steer

        def steer(text: str) -> str:
            queue_id = original(text)
            steered.set()
            return queue_id

        runner.steer = steer  # type: ignore[method-assign]

        def read(prompt: str) -> str:
            line = next(lines)
            if line is None:
                finished.set()
                raise EOFError
            if line.startswith("STEER"):
                assert in_tool.wait(10)
            return line

        chat = Chat(runner, lambda: runner, read=read, background=True)
        chat.loop()
        entries = assert_journal_ok(session)
    assert finished.is_set() and not chat.working
    assert delivered(entries, STEER_TYPE) == ["STEER: only the docs"]
    assert [r.get("details") for r in messages_of(entries) if r["role"] == "toolResult"][1] == {
        "notRun": "steering"}
    assert roles(entries)[-1] == "assistant"


def test_chat_ended_by_sigterm_while_the_agent_works_stops_the_agent(
        tmp_path: Path, workspace: Path) -> None:
    """SIGTERM (journal.interrupt: SystemExit in the main thread, which reads the next line)
    stops the agent as Ctrl-C does, after the tool running now: chat does not wait for the
    whole task to run its course before it exits."""
    in_tool = threading.Event()

    def during(_: int) -> None:
        in_tool.set()
        time.sleep(0.3)  # the SIGTERM comes while the tool runs

    model = Checked(ScriptedModel(scenario(
        {"text": "Working.", "tool_calls": [call("gate"), call("ls")]},
        {"text": "All done."},
    )))
    tools = [*default_tools(workspace), Gate(Workspace(workspace), during)]
    lines = iter(["do the work"])

    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, model, workspace, tools=tools)

        def read(prompt: str) -> str:
            line = next(lines, None)
            if line is None:
                assert in_tool.wait(10)
                raise SystemExit(143)  # what journal.interrupt's handler raises
            return line

        chat = Chat(runner, lambda: runner, read=read, background=True)
        with pytest.raises(SystemExit):
            chat.loop()
        entries = assert_journal_ok(session)
    assert not chat.working
    results = [r for r in messages_of(entries) if r["role"] == "toolResult"]
    assert "Not run: the user interrupted the agent." in str(results[-1]["content"])
    assert "All done." not in str(messages_of(entries))


# --- rotation by default


def test_journal_agent_rotates_by_default_and_not_with_no_rotate(tmp_path: Path,
                                                                 workspace: Path) -> None:
    from agent.cli import main

    sessions = tmp_path / "sessions"
    turns = [{"text": f"Step {k}: " + "w" * 2400, "tool_calls": [call("ls")]} for k in range(40)]
    scenario_file = tmp_path / "long.json"
    scenario_file.write_text(json.dumps(scenario(*turns, {"text": "Done."})))
    common = ["--model", f"scripted:{scenario_file}", "--workspace", str(workspace),
              "--window", "16000", "--sessions-dir", str(sessions), "--quiet"]
    assert main(["run", "Work.", *common, "--rotate-bytes", "0"]) == 0
    rotated = sorted(p.name for p in sessions.rglob("*.jsonl*"))
    assert any("archive" in str(p) for p in sessions.rglob("*.jsonl*")), rotated
    plain = tmp_path / "plain"
    assert main(["run", "Work.", *[a if a != str(sessions) else str(plain) for a in common],
                 "--no-rotate"]) == 0
    files = list(plain.rglob("*.jsonl*"))
    assert len(files) == 1 and not any("archive" in str(p) for p in files)
    assert any(e.get("type") == "compaction" for e in load(str(files[0])).entries)


def test_journal_agent_queue_command_reaches_a_running_agent(tmp_path: Path,
                                                             workspace: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             ) -> None:
    from agent.cli import main

    model = Checked(ScriptedModel(scenario(
        {"text": "Working.", "tool_calls": [call("gate")]},
        {"text": "Read it."},
        {"text": "And the follow-up."},
    )))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        path = session.path

        def during(_: int) -> None:  # the command, as from another terminal
            assert main(["queue", path, "look at b.py too"]) == 0
            assert main(["queue", path, "then stop", "--follow-up", "--json"]) == 0

        tools = [*default_tools(workspace), Gate(Workspace(workspace), during)]
        runner, _ = make_runner(session, model, workspace, tools=tools)
        runner.run("Go.")
        entries = assert_journal_ok(session)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("queued a steering message (")
    assert json.loads(out[1])["kind"] == FOLLOW_UP
    assert delivered(entries, STEER_TYPE) == ["look at b.py too"]
    assert delivered(entries, FOLLOW_UP_TYPE) == ["then stop"]
    assert main(["queue", path, "  "]) == 2
    assert main(["queue", str(tmp_path / "missing.jsonl"), "hi"]) == 2
    assert "Error: " in capsys.readouterr().err


def test_journal_agent_sessions_get_a_rotation_policy_by_default(tmp_path: Path,
                                                                 workspace: Path) -> None:
    from agent.cli import build_parser, build_runner, check_arguments

    scenario_file = tmp_path / "one.json"
    scenario_file.write_text(json.dumps(scenario({"text": "hi"})))
    base = ["run", "t", "--model", f"scripted:{scenario_file}", "--workspace", str(workspace)]
    policies = []
    for extra in ([], ["--rotate-bytes", "1000"], ["--no-rotate"]):
        plan = check_arguments(build_parser().parse_args([*base, *extra]))
        with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
            build_runner(session, plan.model, plan.workspace, plan.settings, quiet=True)
            policies.append(session.rotation_policy)
    assert policies == [journal.RotationPolicy(max_bytes=8 * 1024 * 1024),
                        journal.RotationPolicy(max_bytes=1000), None]


def test_queue_message_refuses_what_it_cannot_deliver(tmp_path: Path) -> None:
    path = str(tmp_path / "a.jsonl")
    with pytest.raises(ValueError, match="kind"):
        queue_message(path, "hi", "later")
    with pytest.raises(ValueError, match="text"):
        queue_message(path, " \n")
    assert not os.path.exists(inbox_path(path))
    Path(inbox_path(path)).mkdir()
    Path(inbox_path(path), "stray.txt").write_text("not a message")
    Path(inbox_path(path), ".partial.tmp").write_text("{")
    Path(inbox_path(path), "bad.json").write_text(json.dumps({"id": "x", "kind": "steer"}))
    assert read_inbox(path) == []


def test_console_shows_model_changes_and_deliveries() -> None:
    import io

    from agent.console import print_event
    from agent.runner import RunnerEvent

    out = io.StringIO()
    print_event(RunnerEvent("model_change", {"previous": "a", "model": "b",
                                             "reason": "overloaded: busy"}), stream=out)
    print_event(RunnerEvent("queued_delivered", {"queue": STEER, "text": "look here\nmore"}),
                stream=out)
    print_event(RunnerEvent("queued_delivered", {"queue": FOLLOW_UP, "text": "next"}),
                stream=out)
    assert out.getvalue().splitlines() == [
        "  ⇄ model a → b (overloaded: busy)",
        "  ✉ steering message delivered: look here",
        "  ✉ follow-up delivered: next",
    ]
