"""The offline demo (`journal-agent demo`): the whole system end to end, no key, no network.

1. A scripted coding session runs with the real tools in a workspace and a small context
   window, so it compacts several times and the session rotates into successor files.
2. A second agent process continues the session and is killed with SIGKILL while one of its
   tool calls is running: the file now holds a tool call without a result.
3. `journal repair --strict` finds that and writes the missing result as an entry.
4. A third agent resumes the repaired session and finishes.
5. The tail of the session, its lineage and where every file lives are printed.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.compaction import ExtractiveSummarizer
from agent.console import plural, print_event
from agent.models import ScriptedModel
from agent.replay import continue_scripted
from agent.runner import Runner
from agent.scenarios import scenario_path
from agent.settings import DEFAULT_SETTINGS
from journal import JournalError, RotationPolicy, Session, lineage, load, repair, resolve_live
from tools import default_tools

MARKER = ".journal-demo"
WINDOW = 16_000
# A small window; pruning waits until the window is nearly full and truncation may not shorten
# old results (its floor is raised), so window pressure is resolved by compaction, which has
# to happen (and the session to rotate) several times within a short scripted task.
SETTINGS = replace(DEFAULT_SETTINGS, context_window=WINDOW, keep_recent_tokens=2_000,
                   soft_trim_ratio=0.85, hard_clear_ratio=0.95,
                   aggregate_min_keep_chars=1_000_000)
ROTATE = RotationPolicy(max_bytes=48 * 1024, after_compaction=True)
CRASH_DEADLINE = 30.0


def _say(text: str = "") -> None:
    print(text, flush=True)


def command(*words: str) -> str:
    """A command line as a shell reads it: each word quoted where it needs to be."""
    return shlex.join(words)


def _prepare(directory: Path) -> tuple[Path, Path]:
    """A fresh demo folder; only one this demo made before is ever cleared."""
    if directory.exists() and any(directory.iterdir()) and not (directory / MARKER).exists():
        raise JournalError(
            f"{directory} exists and was not made by this demo; pass --dir to choose another")
    for sub in ("workspace", "sessions"):
        shutil.rmtree(directory / sub, ignore_errors=True)
    workspace, sessions = directory / "workspace", directory / "sessions"
    workspace.mkdir(parents=True)
    sessions.mkdir()
    (directory / MARKER).write_text("made by journal-agent demo\n")
    return workspace, sessions


def _phase_one(workspace: Path, sessions: Path) -> str:
    model = ScriptedModel.from_file(scenario_path("demo.json"))
    with Session.create(str(sessions), cwd=str(workspace)) as session:
        session.rotation_policy = ROTATE
        session.append_model_change(model.provider, model.model_id)
        runner = Runner(session, model, default_tools(workspace), settings=SETTINGS,
                        summarizer=ExtractiveSummarizer(), workspace=str(workspace),
                        on_event=print_event)
        result = runner.run(model.prompt if hasattr(model, "prompt") else None)
        _say(f"  → {result.stop_reason} after {plural(result.turns, 'turn')}, "
             f"{plural(result.compactions, 'compaction')}")
        return session.path


def _child_command(session: str, workspace: Path, scenario: str, task: str) -> list[str]:
    return [sys.executable, "-m", "agent.cli", "run", task, "--session", session,
            "--model", f"scripted:{scenario_path(scenario)}", "--workspace", str(workspace),
            "--window", str(WINDOW), "--quiet"]


def _wait_for_running_tool(path: str, deadline: float) -> bool:
    """True once the live file's last entry is an assistant turn calling a tool."""
    while time.monotonic() < deadline:
        live, _ = resolve_live(path)
        entries = load(live).entries
        if entries:
            last = entries[-1]
            message = last.get("message") or {}
            if message.get("role") == "assistant" and any(
                    b.get("type") == "toolCall" for b in message.get("content") or []):
                return True
        time.sleep(0.05)
    return False


def _phase_two(session: str, workspace: Path) -> str:
    task = "Run the slow end-to-end check before we ship."
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(_child_command(session, workspace, "crash.json", task), env=env,
                             start_new_session=True)
    try:
        if not _wait_for_running_tool(session, time.monotonic() + CRASH_DEADLINE):
            raise JournalError("the crash agent never started its tool call")
        time.sleep(0.5)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    live, _ = resolve_live(session)
    _say(f"  killed agent pid {child.pid} with SIGKILL (exit {child.returncode}) while its "
         "bash call was running")
    return live


def _phase_three(live: str) -> None:
    # strict: a call without a result is a state pi answers itself when it sends a request
    # (a note, not damage); the demo shows repair writing that answer into the file
    check = repair(live, dry_run=True, strict=True)
    if check.changed:  # as `journal repair --check --strict` says it
        found = Counter(check.counts) + Counter(check.note_counts)
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(found.items()))
        _say(f"  check: needs repair ({kinds})")
    else:
        _say("  check: clean")
    report = repair(live, strict=True)
    for problem in [*report.problems, *report.notes]:
        _say(f"  fixed {problem.kind}: {problem.action}")
    _say(f"  backup {report.backup}")


def _phase_four(live: str, workspace: Path) -> str:
    model = ScriptedModel.from_file(scenario_path("resume.json"), call_id_prefix="resume_call_")
    with Session.open(live) as session:
        continue_scripted(model, session)
        model.turn = 0  # a different scenario: start at its first turn
        runner = Runner(session, model, default_tools(workspace), settings=SETTINGS,
                        summarizer=ExtractiveSummarizer(), workspace=str(workspace),
                        on_event=print_event)
        result = runner.run(model.prompt)
        _say(f"  → {result.stop_reason}: {result.final_text}")
        return session.path


def _phase_five(live: str, directory: Path) -> None:
    from contextlib import closing

    from journal import follow_events
    from journal.cli import TailPrinter

    _say(f"  {command('journal', 'tail', '-n', '8', os.path.relpath(live))}")
    printer = TailPrinter(sys.stdout, sys.stderr)
    with closing(follow_events(live, last=8, stop=lambda: True)) as events:
        for event in events:
            printer.show(event)
    sys.stdout.flush()
    chain = lineage(live)
    _say(f"  lineage ({len(chain)} files, oldest first):")
    for path in chain:
        _say(f"    {os.path.relpath(path)}")


def run_demo(directory: str | os.PathLike[str] = "journal-demo") -> dict[str, Any]:
    """Run the demo in `directory`; return where things are."""
    logging.getLogger("agent.window").setLevel(logging.ERROR)  # the small window is on purpose
    started = time.monotonic()
    root = Path(directory).resolve()
    workspace, sessions = _prepare(root)
    _say(f"journal demo in {root}\n")
    _say(f"1. a scripted coding session, window {WINDOW:,} tokens, real tools")
    first = _phase_one(workspace, sessions)
    live, _ = resolve_live(first)
    chain = lineage(live)
    if len(chain) > 1:  # named twice only when they differ
        _say(f"  rotated {plural(len(chain) - 1, 'time')}: the live session is now "
             f"{os.path.relpath(live)}, the first file is archived as "
             f"{os.path.relpath(chain[0])}\n")
    else:
        _say(f"  session {os.path.relpath(live)}\n")
    _say("2. a second agent continues the session and is killed mid tool call")
    live = _phase_two(live, workspace)
    _say("\n3. repair")
    _phase_three(live)
    _say("\n4. resume the repaired session")
    live = _phase_four(live, workspace)
    _say("\n5. tail and lineage")
    _phase_five(live, root)
    _say(f"\nworkspace: {workspace}\nsessions:  {sessions}\nlive:      {live}")
    _say(f"follow it: {command('journal', 'tail', '-f', live)}\n"
         f"(done in {time.monotonic() - started:.1f} s)")
    return {"workspace": str(workspace), "sessions": str(sessions), "live": live}
