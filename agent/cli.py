"""`journal-agent`: run an agent on a journal session (run, chat, demo). Parsing and output only.

Sessions live under `$JOURNAL_AGENT_SESSIONS`, else `~/.journal-agent/sessions/`, in one folder
per workspace (named after its path, like pi's), unless `--sessions-dir` says otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from agent.console import print_event
from agent.models import Model, ModelError, ScenarioError
from agent.replay import continue_scripted
from agent.runner import Runner, RunResult
from agent.scenarios import SCENARIOS, scenario_path
from agent.settings import DEFAULT_SETTINGS, ContextSettings
from agent.window import ContextWindowTooSmall
from journal import JournalError, Session
from journal.cli import entry_parser, run
from tools import SandboxUnavailable, require_sandbox


def default_sessions_root() -> Path:
    configured = os.environ.get("JOURNAL_AGENT_SESSIONS")
    return Path(configured) if configured else Path.home() / ".journal-agent" / "sessions"


def workspace_folder(workspace: str) -> str:
    """A folder name for a workspace path, as pi names its per-project session folders."""
    cleaned = os.path.abspath(workspace).lstrip("/\\").replace("/", "-").replace("\\", "-")
    return f"--{cleaned.replace(':', '-')}--"


def sessions_dir_for(workspace: str, override: str | None) -> Path:
    if override:
        return Path(override)
    return default_sessions_root() / workspace_folder(workspace)


def make_model(spec: str | None, window: int | None) -> Model:
    """`anthropic:NAME` or `scripted:FILE`; by default Anthropic when a key is set."""
    if spec is None:
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise JournalError(
                "no model: set ANTHROPIC_API_KEY, or pass --model scripted:FILE to replay a "
                f"scenario offline (examples in {SCENARIOS})"
            )
        spec = "anthropic:claude-sonnet-4-5"
    kind, _, rest = spec.partition(":")
    if kind == "anthropic":
        from agent.models.anthropic import AnthropicModel

        return AnthropicModel(rest or "claude-sonnet-4-5", context_window=window)
    if kind == "scripted":
        from agent.models import ScriptedModel

        path = Path(rest)
        if not path.exists() and scenario_path(rest).exists():
            path = scenario_path(rest)
        if not path.is_file():
            raise JournalError(f"scenario file not found: {rest}")
        return ScriptedModel.from_file(path, context_window=window)
    raise JournalError(f"unknown model {spec!r}: use anthropic:NAME or scripted:FILE")


def build_runner(session: Session, model: Model, workspace: str, settings: ContextSettings,
                 quiet: bool = False, sandbox: bool = False) -> Runner:
    from agent.compaction import ExtractiveSummarizer
    from agent.models import ScriptedModel
    from tools import default_tools

    # a replayed scenario stays offline: its compactions never call Anthropic, key or not
    summarizer = ExtractiveSummarizer() if isinstance(model, ScriptedModel) else None
    return Runner(session, model, default_tools(workspace, sandbox=sandbox), settings=settings,
                  summarizer=summarizer, workspace=workspace,
                  on_event=None if quiet else print_event)


def _settings(args: argparse.Namespace) -> ContextSettings:
    from dataclasses import replace

    return replace(DEFAULT_SETTINGS, context_window=args.window) if args.window else (
        DEFAULT_SETTINGS)


def _open_session(args: argparse.Namespace, workspace: str) -> Session:
    if args.session and not args.new:
        return Session.open(args.session, migrate=not args.no_migrate)
    directory = sessions_dir_for(workspace, args.sessions_dir)
    return Session.create(str(directory), cwd=workspace)


def cmd_run(args: argparse.Namespace) -> int:
    if args.quiet:
        logging.getLogger().setLevel(logging.ERROR)
    if args.sandbox:
        require_sandbox()  # before anything is created
    workspace = os.path.abspath(args.workspace or os.getcwd())
    os.makedirs(workspace, exist_ok=True)
    model = make_model(args.model, args.window)
    with _open_session(args, workspace) as session:
        continue_scripted(model, session)
        if not args.quiet:
            print(f"session {session.path}")
        runner = build_runner(session, model, workspace, _settings(args), args.quiet,
                              sandbox=args.sandbox)
        result = runner.run(args.task)
        path = session.path
    return _report(result, path, args.quiet)


def _report(result: RunResult, path: str, quiet: bool) -> int:
    if not quiet:
        if result.final_text:
            print(result.final_text)
        print(f"{result.stop_reason}: {result.turns} turns, {result.compactions} compactions; "
              f"session {path}")
        if result.message and result.stop_reason != "stop":
            print(result.message)
    return 0 if result.stop_reason in ("stop", "max_turns") else 1


CHAT_HELP = """commands: /compact [focus]  /compact on|off  /new  /status  /resume  /quit"""


def cmd_chat(args: argparse.Namespace) -> int:
    if args.sandbox:
        require_sandbox()  # before anything is created
    workspace = os.path.abspath(args.workspace or os.getcwd())
    os.makedirs(workspace, exist_ok=True)
    model = make_model(args.model, args.window)
    settings = _settings(args)
    session = _open_session(args, workspace)
    auto_compact = True
    print(f"session {session.path}\n{CHAT_HELP}")
    try:
        runner = build_runner(session, model, workspace, settings, sandbox=args.sandbox)
        while True:
            try:
                line = input("> ").strip()
            except EOFError:
                break
            if not line:
                continue
            if line.startswith("/"):
                command, _, rest = line.partition(" ")
                if command == "/quit":
                    break
                if command == "/compact" and rest in ("on", "off"):
                    auto_compact = rest == "on"
                    runner.auto_compact = auto_compact
                    print(f"automatic compaction {rest}")
                elif command == "/compact":
                    done = runner.compact_now(rest or None)
                    print("compacted" if done else "nothing to compact")
                elif command == "/new":
                    session.close()
                    directory = sessions_dir_for(workspace, args.sessions_dir)
                    session = Session.create(str(directory), cwd=workspace)
                    runner = build_runner(session, model, workspace, settings, sandbox=args.sandbox)
                    runner.auto_compact = auto_compact
                    print(f"new session {session.path}")
                elif command == "/status":
                    print(status_line(runner))
                elif command == "/resume":
                    result = runner.run(None)
                    _report(result, session.path, False)
                else:
                    print(CHAT_HELP)
                continue
            result = runner.run(line)
            _report(result, session.path, False)
    except KeyboardInterrupt:
        print()
    finally:
        session.close()
    return 0


def status_line(runner: Runner) -> str:
    used, window = runner.current_tokens(), runner.budget.window
    size = os.path.getsize(runner.session.path)
    return (f"{used:,} of {window:,} tokens ({100 * used / window:.0f}%), "
            f"{runner.compactions} compactions; {runner.session.path} ({size:,} bytes)")


def cmd_demo(args: argparse.Namespace) -> int:
    from agent.demo import run_demo

    run_demo(args.dir)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = entry_parser(
        "journal-agent", "Run a coding agent whose every turn is persisted in a journal session.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        where = p.add_mutually_exclusive_group()
        where.add_argument("--session", metavar="PATH", help="continue this session file")
        where.add_argument("--new", action="store_true", help="start a new session (default)")
        p.add_argument("--no-migrate", action="store_true",
                       help="refuse a version 1 or 2 --session file instead of migrating it")
        p.add_argument("--model", metavar="SPEC",
                       help="anthropic:NAME (needs ANTHROPIC_API_KEY) or scripted:FILE "
                       "(replays a scenario offline); default anthropic when a key is set")
        p.add_argument("--workspace", metavar="DIR", help="where the tools may work (default .)")
        p.add_argument("--window", type=int, metavar="N", help="context window in tokens")
        p.add_argument("--sandbox", action="store_true",
                       help="run the bash tool under bubblewrap: only the workspace writable, "
                       "host processes and environment hidden (the shell otherwise runs with "
                       "your rights)")
        p.add_argument("--sessions-dir", metavar="DIR",
                       help="where new sessions go (default $JOURNAL_AGENT_SESSIONS or "
                       "~/.journal-agent/sessions/<workspace>)")

    p = sub.add_parser("run", help="run one task to completion",
                       description="Append TASK to the session and run until the model stops.")
    p.add_argument("task", help="what to do")
    common(p)
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("chat", help="talk to the agent interactively",
                       description=f"An interactive session. {CHAT_HELP}")
    common(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("demo", help="the offline demo: compaction, rotation, crash, repair",
                       description="Run a scripted coding session with the real tools and a "
                       "small window so it compacts and rotates, crash a second agent mid tool "
                       "call, repair and resume the session, and print what happened.")
    p.add_argument("--dir", default="journal-demo",
                   help="where the workspace and sessions go (default ./journal-demo)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `journal-agent` command."""
    return run(build_parser(), argv,
               expected=(ModelError, ContextWindowTooSmall, SandboxUnavailable, ScenarioError))


if __name__ == "__main__":
    sys.exit(main())
