"""`journal-agent run / chat / demo`, in process through `agent.cli.main` (the demo also runs a
real agent child process). No network, no key: scripted models only."""

from __future__ import annotations

import gzip
import io
import json
import shlex
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic_mock import MockAPI, end, start, stream_response, text_block

import journal
from agent.cli import build_runner, main, make_model, workspace_folder
from agent.compaction.summarize import ExtractiveSummarizer
from agent.settings import DEFAULT_SETTINGS
from journal import Session, load
from journal.validate import pairing_problems

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "agent" / "scenarios"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Default sessions go to a temporary folder; no key, so nothing can reach Anthropic. The
    workspace the tests name, `ws`, exists (journal-agent never creates one)."""
    root = tmp_path / "default-sessions"
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(root))
    monkeypatch.delenv("JOURNAL_AGENT_SESSIONS", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # never the user's, whatever happens
    (tmp_path / "ws").mkdir()
    return root


def sessions_in(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


def messages(path: str | Path) -> list[dict[str, Any]]:
    return [e["message"] for e in load(path).entries if e["type"] == "message"]


def read_entries(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def assert_session_ok(path: str | Path) -> None:
    """Readable without diagnostics, every call answered once, the raw projection valid."""
    assert load(path).diagnostics == []
    msgs = messages(path)
    calls = [b["id"] for m in msgs if m["role"] == "assistant" for b in m["content"]
             if b["type"] == "toolCall"]
    assert sorted(calls) == sorted(m["toolCallId"] for m in msgs if m["role"] == "toolResult")
    with Session.open(path) as session:
        assert pairing_problems(session.context(raw=True).messages) == []


# --- run


def test_run_creates_a_session_and_runs(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    workspace, sessions = tmp_path / "ws", tmp_path / "sessions"
    code = main(["run", "Write hello.py that prints a greeting, and run it.",
                 "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--workspace", str(workspace), "--sessions-dir", str(sessions)])
    out = capsys.readouterr().out

    assert code == 0
    [path] = sessions_in(sessions)
    assert f"session {path}" in out
    assert "turn 4: assistant (stop)" in out
    assert "→ write hello.py" in out and "← bash ok" in out
    assert "stop: 4 turns, 0 compactions" in out
    assert (workspace / "hello.py").exists()
    assert [m["role"] for m in messages(path)] == [
        "user", "assistant", "toolResult", "assistant", "toolResult", "assistant",
        "toolResult", "assistant"]
    assert load(path).header["cwd"] == str(workspace)
    assert_session_ok(path)


def test_run_with_sandbox_runs_the_shell_in_it(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import sandbox_available

    if not sandbox_available():
        pytest.skip("bubblewrap cannot run here")
    monkeypatch.setenv("SECRET_FOR_THE_TEST", "leaked")
    workspace, sessions = tmp_path / "ws", tmp_path / "sessions"
    code = main(["run", "Write hello.py that prints a greeting, and run it.",
                 "--model", f"scripted:{SCENARIOS / 'short.json'}", "--sandbox",
                 "--workspace", str(workspace), "--sessions-dir", str(sessions)])
    assert code == 0, capsys.readouterr()
    [path] = sessions_in(sessions)
    assert (workspace / "hello.py").exists()
    assert_session_ok(path)
    results = [m for m in messages(path) if m["role"] == "toolResult"]
    assert results and not any(m.get("isError") for m in results)


def test_run_with_sandbox_where_it_cannot_run_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import sandbox_available

    empty = tmp_path / "no-tools"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    sandbox_available.cache_clear()
    try:
        workspace, sessions = tmp_path / "ws", tmp_path / "sessions"
        code = main(["run", "anything", "--model", f"scripted:{SCENARIOS / 'short.json'}",
                     "--sandbox", "--workspace", str(workspace),
                     "--sessions-dir", str(sessions)])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("Error:") and "bubblewrap" in err
        assert len(err.strip().splitlines()) == 1
        assert list(workspace.iterdir()) == [] and not sessions.exists()
    finally:
        monkeypatch.undo()
        sandbox_available.cache_clear()


def test_run_without_sessions_dir_uses_the_configured_root(
    tmp_path: Path, _env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "ws"
    code = main(["run", "Make a todo list.", "--model", "scripted:test_two_part.json",
                 "--workspace", str(workspace), "-q"])

    assert code == 0
    assert capsys.readouterr().out == ""  # --quiet
    [path] = sessions_in(_env / workspace_folder(str(workspace)))
    assert messages(path)[-1]["content"][0]["text"] == "The list has one item."
    assert not (tmp_path / "home").exists()


def test_run_with_session_continues_it(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    workspace, sessions = tmp_path / "ws", tmp_path / "sessions"
    spec = f"scripted:{SCENARIOS / 'test_two_part.json'}"
    common = ["--model", spec, "--workspace", str(workspace)]
    assert main(["run", "Make a todo list.", *common, "--sessions-dir", str(sessions)]) == 0
    [path] = sessions_in(sessions)
    capsys.readouterr()

    code = main(["run", "Add 'call mum'.", "--session", str(path), *common])
    out = capsys.readouterr().out

    assert code == 0
    assert sessions_in(sessions) == [path]  # no new file
    assert "The list has two items now." in out
    assert (workspace / "todo.txt").read_text() == "- buy milk\n- call mum\n"
    msgs = messages(path)
    assert [m["role"] for m in msgs] == ["user", "assistant", "toolResult", "assistant",
                                         "user", "assistant", "toolResult", "assistant"]
    assert msgs[4]["content"][0]["text"] == "Add 'call mum'."
    # the second run played the scenario's turns 2 and 3: ids follow on, none repeated
    calls = [b["id"] for m in msgs if m["role"] == "assistant" for b in m["content"]
             if b["type"] == "toolCall"]
    assert calls == ["call_0_0", "call_2_0"]
    assert_session_ok(path)


def test_run_without_a_model_or_key_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "hello", "--workspace", str(tmp_path / "ws"),
                 "--sessions-dir", str(tmp_path / "sessions")])
    err = capsys.readouterr().err

    assert code == 2
    assert err.startswith("Error: no model")
    assert "ANTHROPIC_API_KEY" in err and "scripted:FILE" in err
    assert not (tmp_path / "sessions").exists()


@pytest.mark.parametrize(("spec", "says"), [
    ("gpt:4", "unknown model 'gpt:4'"),
    ("nonsense", "unknown model 'nonsense'"),
    ("scripted:no-such-scenario.json", "scenario file not found"),
])
def test_run_with_a_bad_model_spec_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, says: str
) -> None:
    code = main(["run", "hello", "--model", spec, "--workspace", str(tmp_path / "ws"),
                 "--sessions-dir", str(tmp_path / "sessions")])
    err = capsys.readouterr().err

    assert code == 2
    assert err.startswith("Error: ") and says in err
    assert not (tmp_path / "sessions").exists()


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "not valid JSON"), ('{"turns": 5}', "'turns' must be a list")])
def test_run_with_a_broken_scenario_file_is_an_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    scenario = tmp_path / "broken.json"
    scenario.write_text(text)
    code = main(["run", "hello", "--model", f"scripted:{scenario}", "--workspace",
                 str(tmp_path / "ws"), "--sessions-dir", str(tmp_path / "sessions")])
    err = capsys.readouterr().err

    assert code == 2
    assert err.startswith(f"Error: {scenario}: {says}") and err.count("\n") == 1
    assert not (tmp_path / "sessions").exists()


def test_run_with_a_workspace_that_cannot_be_made_is_an_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OSError (here ENOTDIR) is one `Error:` line and exit 2, as in the other commands."""
    (tmp_path / "plain.txt").write_text("a file, not a folder\n")
    workspace = tmp_path / "plain.txt" / "ws"
    code = main(["run", "hello", "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--workspace", str(workspace), "--sessions-dir", str(tmp_path / "sessions")])
    captured = capsys.readouterr()

    assert code == 2
    assert (captured.out, captured.err) == ("", f"Error: {workspace}: Not a directory\n")
    assert not (tmp_path / "sessions").exists()


def test_scripted_runs_summarize_offline_even_with_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-never-sent")
    model = make_model(f"scripted:{SCENARIOS / 'short.json'}", None)
    with Session.create(str(tmp_path / "sessions"), cwd=str(tmp_path)) as session:
        runner = build_runner(session, model, str(tmp_path), DEFAULT_SETTINGS, quiet=True)
        assert isinstance(runner.summarizer, ExtractiveSummarizer)


# --- chat


def test_chat_runs_commands_and_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    workspace, sessions = tmp_path / "ws", tmp_path / "sessions"
    lines = ["hello", "count to 4000", "/status", "/compact", "/status", "", "/bogus",
             "/quit", "never read"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    code = main(["chat", "--model", f"scripted:{SCENARIOS / 'test_chat.json'}",
                 "--workspace", str(workspace), "--sessions-dir", str(sessions),
                 "--window", "16000"])
    out = capsys.readouterr().out

    assert code == 0
    [path] = sessions_in(sessions)
    assert out.startswith(f"session {path}\ncommands: /compact")
    assert "Hello again: records.txt holds 60 records." in out
    assert "Counted to 4000." in out
    assert out.count("stop: 2 turns, 0 compactions") == 2
    assert (workspace / "records.txt").exists()
    statuses = [line for line in out.splitlines() if "tokens (" in line]
    assert len(statuses) == 2
    assert "of 16,000 tokens" in statuses[0] and "0 compactions" in statuses[0]
    assert "1 compaction;" in statuses[1]
    used = [int(s.partition(" of ")[0].lstrip("> ").replace(",", "")) for s in statuses]
    assert used[1] < used[0]  # the manual compaction made the context smaller
    assert "⟳ compacted (manual): " in out
    assert "unknown command /bogus: /help lists the commands" in out
    entries = load(path).entries
    compaction = [e for e in entries if e["type"] == "compaction"]
    assert len(compaction) == 1 and compaction[0]["details"]["reason"] == "manual"
    assert_session_ok(path)


# --- demo


def test_demo_runs_end_to_end_and_again(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "demo dir"  # a space: the commands it prints are quoted
    for attempt in range(2):  # a second run in the same folder starts afresh
        assert main(["demo", "--dir", str(directory)]) == 0
        out = capsys.readouterr().out
        assert "killed agent pid" in out and "fixed missing_result" in out
        assert "done in" in out
        lines = [line.strip() for line in out.splitlines()]
        assert "check: needs repair (missing_result 1)" in lines  # as `repair --check` says
        [rotated] = [line for line in lines if line.startswith("rotated ")]
        live_then, _, first = rotated.partition(" is now ")[2].partition(
            ", the first file is archived as ")
        assert live_then != first and first.endswith(".jsonl.gz")
        [tail] = [shlex.split(line) for line in lines if line.startswith("journal tail -n")]
        assert tail[:4] == ["journal", "tail", "-n", "8"] and len(tail) == 5
        [follow] = [line for line in lines if line.startswith("follow it: ")]
        assert shlex.split(follow.removeprefix("follow it: "))[:3] == ["journal", "tail", "-f"]

        workspace, sessions = directory / "workspace", directory / "sessions"
        assert (workspace / "inventory").is_dir() and (workspace / "tests").is_dir()
        [live] = sessions_in(sessions)
        assert Path(tail[4]).resolve() == live.resolve()
        assert shlex.split(follow.removeprefix("follow it: "))[3] == str(live)
        chain = journal.lineage(str(live))
        assert len(chain) >= 2 and chain[-1] == str(live)
        compactions = sum(e.get("type") == "compaction" for path in chain
                          for e in read_entries(path))
        assert compactions >= 2, attempt
        # repaired and resumed: clean, every call answered, the raw history valid
        assert journal.repair(str(live), dry_run=True).changed is False
        assert_session_ok(live)
        msgs = messages(live)
        synthetic = [m for m in msgs if m["role"] == "toolResult"
                     and (m.get("details") or {}).get("synthetic")]
        assert len(synthetic) == 1
        assert msgs[-1]["role"] == "assistant" and msgs[-1]["stopReason"] == "stop"


def test_demo_refuses_a_folder_it_did_not_make(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "mine"
    directory.mkdir()
    (directory / "thesis.tex").write_text("precious\n")

    assert main(["demo", "--dir", str(directory)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "was not made by this demo" in err
    assert sorted(p.name for p in directory.iterdir()) == ["thesis.tex"]


# --- the Anthropic model, through the real SDK over a mock transport


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("variable", ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"])
def test_run_with_a_key_reaches_the_anthropic_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], variable: str) -> None:
    """The key check lets either of the SDK's variables through; the run is recorded."""
    api = MockAPI().queue(stream_response([start(), *text_block(0, "Hello from Claude."),
                                           *end()]))
    real = anthropic.Anthropic

    def client(**options: Any) -> anthropic.Anthropic:
        return real(http_client=httpx2.Client(transport=httpx2.MockTransport(api.handler)),
                    **options)

    monkeypatch.setattr(anthropic, "Anthropic", client)
    monkeypatch.setenv(variable, "sk-test-never-sent")
    sessions = tmp_path / "sessions"
    code = main(["run", "hello", "--model", "anthropic:claude-sonnet-4-6",
                 "--workspace", str(tmp_path / "ws"), "--sessions-dir", str(sessions)])
    out = capsys.readouterr().out

    assert code == 0, out
    assert "Hello from Claude." in out and "stop: 1 turn, 0 compactions" in out
    assert len(api.bodies) == 1 and api.replies == []
    [path] = sessions_in(sessions)
    assert [m["role"] for m in messages(path)] == ["user", "assistant"]


def test_run_waits_as_long_as_lock_timeout_says_for_a_session_held_elsewhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The lock error's advice, a longer lock timeout, is an option of `run` and `chat`."""
    import time

    path = str(tmp_path / "held.jsonl")
    with Session.create(path, cwd=str(tmp_path)):
        started = time.monotonic()
        code = main(["run", "hi", "--model", f"scripted:{SCENARIOS / 'short.json'}",
                     "--workspace", str(tmp_path / "ws"), "--session", path,
                     "--lock-timeout", "0.5"])
        waited = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and "locked by" in err and "waited 0.5s" in err, err
    assert 0.5 <= waited < 5


def test_a_turn_the_store_cannot_keep_ends_the_run_saying_how_to_go_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit that fails (a database that went away, a full disk) ends the run with one
    error line that says the stored turns are kept and how to go on: it said only what a
    library caller does about an unknown outcome."""
    from journal.errors import WriteFailed

    path = str(tmp_path / "s.jsonl")
    Session.create(path, cwd=str(tmp_path)).close()
    real = Session.append_message
    calls = {"n": 0}

    def failing(self: Session, message: dict[str, Any]) -> str:
        calls["n"] += 1
        if calls["n"] == 3:
            raise WriteFailed(self.path, -1, "the server went away", "its outcome is unknown")
        return real(self, message)

    monkeypatch.setattr(Session, "append_message", failing)
    code = main(["run", "Write hello.py that prints a greeting, and run it.",
                 "--model", f"scripted:{SCENARIOS / 'short.json'}",
                 "--workspace", str(tmp_path / "ws"), "--session", path])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the server went away" in err and f"run again with --session {path}" in err
