"""`journal-agent` run as a user runs it (a subprocess), on bad input and on its environment.

Every refused command: exit 2, exactly one `Error:` line on stderr, nothing on stdout, no
traceback, and nothing created, changed or left behind (a listing with hashes of the whole
temporary folder, HOME and the sessions folder included, before and after). HOME and
JOURNAL_SESSIONS_DIR point into the temporary folder; no Anthropic key is set; the scripted
model is used wherever a model runs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHORT = str(ROOT / "agent" / "scenarios" / "short.json")
CHAT = str(ROOT / "agent" / "scenarios" / "test_chat.json")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The temporary folder, with a HOME and an (empty) workspace `ws` in it."""
    (tmp_path / "home").mkdir()
    (tmp_path / "ws").mkdir()
    return tmp_path


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    drop = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "JOURNAL_AGENT_SESSIONS",
            "JOURNAL_SESSIONS_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HOME=str(tmp_path / "home"), JOURNAL_SESSIONS_DIR=str(tmp_path / "sessions"),
               PYTHONPATH=str(ROOT), NO_COLOR="1")
    env.update(extra)
    return env


ENTRY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][
    "journal-agent"]


def agent(tmp_path: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None,
          ) -> subprocess.CompletedProcess[str]:
    """`journal-agent ARGS` in `tmp_path`, as the installed script runs it."""
    module, _, function = ENTRY.partition(":")
    code = f"import sys; from {module} import {function}; sys.exit({function}(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path,
                          env=env if env is not None else environment(tmp_path),
                          input=stdin, capture_output=True, text=True, timeout=60)


def listing(root: Path) -> dict[str, str]:
    """Every path under `root` with a hash of its bytes (folders as `dir`)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_dir() and not path.is_symlink():
            out[key] = "dir"
        else:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "?"
    return out


def assert_refused(done: subprocess.CompletedProcess[str], says: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert says in lines[0]


def refuses(tmp_path: Path, args: list[str], says: str, stdin: str = "") -> None:
    """Both `run` and `chat` refuse `args` with one Error line and leave everything as it was."""
    before = listing(tmp_path)
    for command in (["run", "a task", *args], ["chat", *args]):
        assert_refused(agent(tmp_path, *command, stdin=stdin), says)
        assert listing(tmp_path) == before, command


# --- scenario files


BAD_SCENARIOS: list[tuple[bytes, str]] = [
    (b"{bad", "not valid JSON"),
    (b"", "not valid JSON"),
    (b'{"turns":"x"}', "'turns' must be a list"),
    (b"[]", "a scenario is a JSON object"),
    (b"null", "a scenario is a JSON object"),
    (b'"turns"', "a scenario is a JSON object"),
    (b'{"turns":[1]}', "turns[0] must be an object"),
    (b'{"turns":[{"text":"x"}],"model":5}', "'model' must be a string"),
    (b'{"turns":[{"text":"x"}],"provider":["x"]}', "'provider' must be a string"),
    (b'{"turns":[{"text":"x"}],"prompt":{}}', "'prompt' must be a string"),
    (b'{"turns":[{"text":"x"}],"context_window":true}', "'context_window' must be a positive"),
    (b'{"turns":[{"text":"x"}],"context_window":5}', "window of 5 tokens is below the minimum"),
    (b'{"turns":[{"text":"x"}]}\xff', "not UTF-8 text (byte 24)"),
    (b"[" * 100_000, "not valid JSON"),
]


@pytest.mark.parametrize(("content", "says"), BAD_SCENARIOS,
                         ids=[repr(c[:30]) for c, _ in BAD_SCENARIOS])
def test_a_malformed_scenario_file_is_refused_before_anything_is_created(
        home: Path, content: bytes, says: str) -> None:
    scenario = home / "bad scenario.json"
    scenario.write_bytes(content)
    refuses(home, ["--model", f"scripted:{scenario}", "--workspace", "ws"], says)


@pytest.mark.parametrize("spec", ["scripted:", "scripted:nope.json", "scripted:ws"])
def test_a_missing_scenario_file_is_refused(home: Path, spec: str) -> None:
    refuses(home, ["--model", spec, "--workspace", "ws"], "scenario file not found")


# --- arguments


@pytest.mark.parametrize("window", ["-5", "0", "5", "15999"])
def test_a_window_below_the_minimum_is_refused_before_the_session_is_created(
        home: Path, window: str) -> None:
    refuses(home, ["--model", f"scripted:{SHORT}", "--workspace", "ws", "--window", window],
            f"--window {window}: a context window must be at least 16,000 tokens")


def test_a_workspace_that_is_a_file_is_refused(home: Path) -> None:
    (home / "notes.txt").write_text("a file\n")
    refuses(home, ["--model", f"scripted:{SHORT}", "--workspace", "notes.txt"],
            f"{home / 'notes.txt'}: Not a directory")


@pytest.mark.parametrize("name", ["missing", "two words/and ünïcode"])
def test_a_missing_workspace_is_refused_with_the_command_that_makes_it(
        home: Path, name: str) -> None:
    """Never created: a typo would start the agent in an empty folder."""
    path = home / name
    refuses(home, ["--model", f"scripted:{SHORT}", "--workspace", str(path)],
            f"--workspace {path}: no such directory; create it first "
            f"(mkdir -p {shlex.quote(str(path))})")


@pytest.mark.parametrize("task", ["", "   ", "\n"])
def test_an_empty_task_is_refused(home: Path, task: str) -> None:
    before = listing(home)
    done = agent(home, "run", task, "--model", f"scripted:{SHORT}", "--workspace", "ws")
    assert_refused(done, "the task is empty")
    assert listing(home) == before


@pytest.mark.parametrize("spec", ["anthropic:claude-sonnet-4-6", "anthropic:"])
def test_an_anthropic_model_without_a_key_is_refused_before_anything_is_created(
        home: Path, spec: str) -> None:
    refuses(home, ["--model", spec, "--workspace", "ws"], f"--model {spec} needs "
            "ANTHROPIC_API_KEY")


def test_no_model_and_no_key_is_refused(home: Path) -> None:
    refuses(home, ["--workspace", "ws"], "no model: set ANTHROPIC_API_KEY")


@pytest.mark.parametrize("target", ["missing.jsonl", "ws"])
def test_a_session_that_is_not_a_file_is_refused(home: Path, target: str) -> None:
    refuses(home, ["--model", f"scripted:{SHORT}", "--workspace", "ws", "--session",
                   str(home / target)], str(home / target))


@pytest.mark.parametrize("flag", ["--session", "--workspace", "--sessions-dir"])
def test_an_empty_path_is_refused_not_taken_for_the_default(home: Path, flag: str) -> None:
    """`--session "$UNSET"` would otherwise start a new session, `--workspace ""` run in ."""
    refuses(home, ["--model", f"scripted:{SHORT}", flag, ""], f"{flag} is empty: name a ")


# --- what works


def test_the_smallest_window_is_accepted(home: Path) -> None:
    done = agent(home, "run", "Write hello.py that prints a greeting, and run it.", "--model",
                 f"scripted:{SHORT}", "--workspace", "ws", "--window", "16000")
    assert done.returncode == 0, done.stderr
    assert "stop: 4 turns, 0 compactions" in done.stdout
    assert (home / "ws" / "hello.py").exists()


def test_version_is_the_package_version(home: Path) -> None:
    done = agent(home, "--version")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"journal-agent {importlib.metadata.version('journal')}\n"


# --- where sessions go


def only_session(folder: Path) -> Path:
    [path] = list(folder.rglob("*.jsonl"))
    return path


def run_short(home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = agent(home, "run", "hello", "--model", f"scripted:{SHORT}", "--workspace", "ws",
                 "-q", env=env)
    assert done.returncode == 0, done.stderr
    return done


def test_sessions_go_under_journal_sessions_dir(home: Path) -> None:
    done = run_short(home, environment(home))
    assert done.stderr == ""
    path = only_session(home / "sessions")
    assert path.parent.name == f"--{str(home / 'ws').lstrip('/').replace('/', '-')}--"


def test_the_old_variable_still_works_with_a_notice(home: Path) -> None:
    env = environment(home, JOURNAL_AGENT_SESSIONS=str(home / "old"))
    del env["JOURNAL_SESSIONS_DIR"]
    done = run_short(home, env)
    assert done.stderr == ("Warning: JOURNAL_AGENT_SESSIONS is deprecated: set "
                           "JOURNAL_SESSIONS_DIR instead (same meaning)\n")
    only_session(home / "old")
    assert not (home / "home" / ".journal-agent").exists()


def test_the_new_variable_wins_over_the_old_one(home: Path) -> None:
    done = run_short(home, environment(home, JOURNAL_AGENT_SESSIONS=str(home / "old")))
    assert done.stderr == ("Warning: JOURNAL_AGENT_SESSIONS is deprecated and ignored: "
                           "JOURNAL_SESSIONS_DIR is set\n")
    only_session(home / "sessions")
    assert not (home / "old").exists()


def test_without_either_variable_sessions_go_under_home(home: Path) -> None:
    env = environment(home)
    del env["JOURNAL_SESSIONS_DIR"]
    run_short(home, env)
    only_session(home / "home" / ".journal-agent" / "sessions")


# --- chat


def chat(home: Path, *lines: str, window: str = "16000") -> subprocess.CompletedProcess[str]:
    done = agent(home, "chat", "--model", f"scripted:{CHAT}", "--workspace", "ws",
                 "--window", window, stdin="".join(f"{line}\n" for line in lines))
    assert done.returncode == 0, done.stderr
    return done


def test_chat_answers_an_unknown_command_and_sends_it_nowhere(home: Path) -> None:
    done = chat(home, "/xyz", "/help")
    assert "unknown command /xyz: /help lists the commands" in done.stdout
    assert "/retry" in done.stdout and "/resume is its old name" in done.stdout
    session = only_session(home / "sessions")
    assert "/xyz" not in session.read_text()


def test_chat_compact_with_nothing_to_compact_says_so_once(home: Path) -> None:
    done = chat(home, "hello", "/compact")
    lines = [line.removeprefix("> ").strip() for line in done.stdout.splitlines()]
    said = [line for line in lines if "⟳" in line or line in ("compacted", "nothing to compact")]
    assert len(said) == 1, said
    assert re.fullmatch(r"⟳ nothing to compact \(manual\): [\d,]+ tokens", said[0])


def test_chat_warns_about_a_small_window_once(home: Path) -> None:
    """The warning came at the start and again at every compaction."""
    done = chat(home, "hello", "count to 4000", "/compact", "/compact")
    assert "⟳ compacted (manual)" in done.stdout
    assert done.stderr.count("context window of 16,000 tokens is small") == 1


def test_chat_counts_in_the_singular(home: Path) -> None:
    done = chat(home, "hello", "count to 4000", "/compact", "/status")
    status = [line for line in done.stdout.splitlines() if "of 16,000 tokens" in line]
    assert len(status) == 1 and "1 compaction;" in status[0]


def test_chat_retry_and_its_old_name_run_the_model_again(home: Path) -> None:
    done = chat(home, "hello", "/retry", "/resume")
    # the scenario's next turns are played without a new user message
    assert done.stdout.count("stop: 2 turns") == 2 and "stop: 1 turn," in done.stdout
    entries = [json.loads(line) for line in only_session(home / "sessions").read_text()
               .splitlines()[1:]]
    users = [e for e in entries if e.get("type") == "message"
             and e["message"]["role"] == "user"]
    assert len(users) == 1
