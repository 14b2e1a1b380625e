"""`journal-agent`: run an agent on a journal session (run, chat, demo). Parsing and output only.

New sessions go under `$JOURNAL_SESSIONS_DIR` (`$JOURNAL_AGENT_SESSIONS`, its deprecated old
name, still works, with a notice), else `~/.journal-agent/sessions/`, in one folder per
workspace (named after its path, like pi's), unless `--sessions-dir` says otherwise. Either
may name a PostgreSQL database (`postgresql://user@host/db`) instead of a folder: each new
session is then a database session named by its id. `chat`'s `/new` on a database session
starts the next one in the same database.

`run` and `chat` check every argument before they create anything: the task, `--window`, the
sandbox, the workspace (it must exist), the model (a scenario file is read and checked, an
Anthropic model needs a key) and the model's window. Only then is a session created or opened.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import shlex
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.console import print_event, print_result
from agent.models import Model, ModelError, ScenarioError
from agent.replay import continue_scripted
from agent.runner import Runner
from agent.scenarios import SCENARIOS, scenario_path
from agent.settings import DEFAULT_SETTINGS, ContextSettings, rotation_policy
from agent.window import ContextWindowTooSmall, run_window
from journal import JournalError, Session, Unreachable, WriteFailed, live_session, resolve_live
from journal.cli import entry_parser, run, seconds
from journal.lock import DEFAULT_LOCK_TIMEOUT
from journal.pg.url import (
    DATABASE_ENV,
    DEFAULT_DATABASE,
    is_database_url,
    names_session,
    parse_database,
    parse_url,
    short_name,
    shown,
)
from journal.storage import as_storage
from tools import SandboxUnavailable, require_sandbox

SESSIONS_ENV = "JOURNAL_SESSIONS_DIR"
OLD_SESSIONS_ENV = "JOURNAL_AGENT_SESSIONS"
"""The deprecated name of `SESSIONS_ENV`: still read, with a notice on stderr."""
KEY_ENVS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
"""Where the Anthropic SDK finds credentials when it is given none."""


def warn(message: str) -> None:
    """A notice that does not change the outcome: one `Warning: ...` line on stderr."""
    print(f"Warning: {message}", file=sys.stderr)


def default_sessions_root() -> str:
    """`$JOURNAL_SESSIONS_DIR`, else the deprecated `$JOURNAL_AGENT_SESSIONS`, else
    `~/.journal-agent/sessions`. Reading the old name says so on stderr. As written: a
    database's URL is not a path (a path would fold its `//`)."""
    configured = os.environ.get(SESSIONS_ENV)
    old = os.environ.get(OLD_SESSIONS_ENV)
    if old and not configured:
        warn(f"{OLD_SESSIONS_ENV} is deprecated: set {SESSIONS_ENV} instead (same meaning)")
        configured = old
    elif old and old != configured:
        warn(f"{OLD_SESSIONS_ENV} is deprecated and ignored: {SESSIONS_ENV} is set")
    return configured or str(Path.home() / ".journal-agent" / "sessions")


def workspace_folder(workspace: str) -> str:
    """A folder name for a workspace path, as pi names its per-project session folders."""
    cleaned = os.path.abspath(workspace).lstrip("/\\").replace("/", "-").replace("\\", "-")
    return f"--{cleaned.replace(':', '-')}--"


def sessions_dir_for(workspace: str, override: str | None) -> str:
    """Where new sessions of `workspace` go: `override`, else the configured root's folder
    for the workspace, or the root itself when it names a database. Checked: a database is
    named by its URL without a session, and anything else that looks like a URL is refused
    (it was made into folders named like the URL, its password included)."""
    where = override or default_sessions_root()
    if is_database_url(where):
        if names_session(where):
            raise JournalError(f"{shown(where)}: a session, not a database; new sessions go "
                               "into a database named by its URL (postgresql://user@host/db, "
                               f"or {DEFAULT_DATABASE} for the one {DATABASE_ENV} names)")
        parse_database(where)  # the default database is set (BadDatabaseUrl otherwise)
        return where
    if "://" in where:
        raise JournalError(f"{shown(where)}: not a folder; a database is named "
                           "postgresql://user@host/db")
    return where if override else os.path.join(where, workspace_folder(workspace))


def new_session(where: str, workspace: str, lock_timeout: float = DEFAULT_LOCK_TIMEOUT
                ) -> Session:
    """A new session in the folder or database `where` (see `sessions_dir_for`)."""
    return Session.create(where, cwd=workspace, lock_timeout=lock_timeout)


def make_model(spec: str | None, window: int | None) -> Model:
    """`anthropic:NAME` or `scripted:FILE`; by default Anthropic when a key is set.

    Nothing is sent: an Anthropic model without credentials in the environment, an unknown
    kind and a scenario file that cannot be read or does not follow the format are errors.
    """
    if spec is None:
        if not _has_anthropic_key():
            raise JournalError(
                "no model: set ANTHROPIC_API_KEY, or pass --model scripted:FILE to replay a "
                f"scenario offline (examples in {SCENARIOS})"
            )
        spec = "anthropic:"
    kind, _, rest = spec.partition(":")
    if kind == "anthropic":
        if not _has_anthropic_key():
            raise JournalError(
                f"--model {spec} needs ANTHROPIC_API_KEY: set it to your Anthropic API key, or "
                "pass --model scripted:FILE to replay a scenario offline")
        from agent.models.anthropic import AnthropicModel

        if not rest:  # the model's own default
            return AnthropicModel(context_window=window)
        return AnthropicModel(rest, context_window=window)
    if kind == "scripted":
        from agent.models import ScriptedModel

        path = Path(rest)
        if not path.exists() and scenario_path(rest).exists():
            path = scenario_path(rest)
        if not rest or not path.is_file():
            raise JournalError(f"scenario file not found: {rest}")
        scenario = read_scenario(path)
        try:
            return ScriptedModel(scenario, context_window=window)
        except ScenarioError as e:
            raise ScenarioError(f"{path}: {e}") from e
    raise JournalError(f"unknown model {spec!r}: use anthropic:NAME or scripted:FILE")


def _has_anthropic_key() -> bool:
    return any(os.environ.get(name) for name in KEY_ENVS)


_TEXT_FIELDS = ("name", "description", "model", "provider", "prompt")


def read_scenario(path: Path) -> dict[str, Any]:
    """A scenario file's JSON, with the fields the model writes into messages checked.

    Raises ScenarioError (naming the file) for bytes that are not UTF-8 or JSON, and for
    top-level fields of the wrong type; the model checks the rest of the format.
    """
    try:
        text = path.read_bytes().decode("utf-8")
        scenario = json.loads(text)
    except UnicodeDecodeError as e:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {e.start:,})") from e
    except RecursionError as e:
        raise ScenarioError(f"{path}: not valid JSON: nested too deeply") from e
    except ValueError as e:
        raise ScenarioError(f"{path}: not valid JSON: {e}") from e
    if isinstance(scenario, dict):
        for key in _TEXT_FIELDS:
            if key in scenario and not isinstance(scenario[key], str):
                raise ScenarioError(f"{path}: {key!r} must be a string")
        for key in ("context_window", "overflow_above"):
            if isinstance(scenario.get(key), bool):
                raise ScenarioError(f"{path}: {key!r} must be a positive integer")
    return scenario


def build_runner(session: Session, model: Model, workspace: str, settings: ContextSettings,
                 quiet: bool = False, sandbox: bool = False,
                 fallbacks: Sequence[Model] = ()) -> Runner:
    from agent.compaction import ExtractiveSummarizer
    from agent.models import ScriptedModel
    from tools import default_tools

    # a replayed scenario stays offline: its compactions never call Anthropic, key or not
    summarizer = ExtractiveSummarizer() if isinstance(model, ScriptedModel) else None
    session.rotation_policy = rotation_policy(settings)
    return Runner(session, model, default_tools(workspace, sandbox=sandbox), settings=settings,
                  summarizer=summarizer, workspace=workspace,
                  on_event=None if quiet else print_event, fallback_models=fallbacks)


@dataclass(frozen=True)
class Plan:
    """What `run` and `chat` were asked for, checked, before anything is created."""

    workspace: str
    model: Model
    settings: ContextSettings
    sessions_dir: str | None
    """Where new sessions go (a folder or a database); None when `--session` names the
    session to continue."""
    fallbacks: tuple[Model, ...] = ()
    """Models to fall back on, in order (the settings' list, then `--fallback-model`)."""


def check_arguments(args: argparse.Namespace) -> Plan:
    """Check every argument of `run` and `chat`; raise before anything is created."""
    for flag in ("session", "workspace", "sessions_dir"):
        value = getattr(args, flag)
        if value is not None and not value.strip():  # "$UNSET_VARIABLE": never a default
            raise JournalError(f"--{flag.replace('_', '-')} is empty: name a "
                               f"{'session file' if flag == 'session' else 'directory'}")
    minimum = DEFAULT_SETTINGS.min_context_window
    if args.window is not None and args.window < minimum:
        raise JournalError(f"--window {args.window}: a context window must be at least "
                           f"{minimum:,} tokens")
    if args.sandbox:
        require_sandbox()
    workspace = checked_workspace(args.workspace or os.getcwd())
    model = make_model(args.model, args.window)
    settings = (replace(DEFAULT_SETTINGS, context_window=args.window) if args.window
                else DEFAULT_SETTINGS)
    if args.rotate_bytes is not None:
        if args.rotate_bytes < 0:
            raise JournalError(f"--rotate-bytes {args.rotate_bytes}: give a size in bytes, "
                               "0 or more")
        settings = replace(settings, rotate_min_bytes=args.rotate_bytes)
    if args.no_rotate:
        settings = replace(settings, rotate=False)
    specs = (*settings.fallback_models, *(args.fallback_model or ()))
    settings = replace(settings, fallback_models=specs)
    fallbacks = tuple(make_model(spec, args.window) for spec in specs)
    try:  # the window the runner will use: from the flag, the model, or the model table
        run_window(model, settings)
    except ContextWindowTooSmall as e:
        raise JournalError(
            f"the model's context window of {e.window:,} tokens is below the minimum of "
            f"{e.minimum:,}: if it is really larger, pass --window N") from e
    continuing = bool(args.session) and not args.new
    sessions_dir = None if continuing else sessions_dir_for(workspace, args.sessions_dir)
    return Plan(workspace, model, settings, sessions_dir, fallbacks)


def checked_workspace(path: str) -> str:
    """The absolute path of an existing directory; never created (a typo would otherwise
    start the agent in an empty folder, with its sessions filed under the typo)."""
    workspace = os.path.abspath(path)
    try:
        mode = os.stat(workspace).st_mode
    except FileNotFoundError:
        raise JournalError(
            f"--workspace {workspace}: no such directory; create it first "
            f"(mkdir -p {shlex.quote(workspace)}) or pick another") from None
    if not stat.S_ISDIR(mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), workspace)
    return workspace


def _open_session(args: argparse.Namespace, plan: Plan) -> Session:
    if plan.sessions_dir is not None:
        return new_session(plan.sessions_dir, plan.workspace, args.lock_timeout)
    if is_database_url(args.session):
        from journal.pg.connect import NoJournalSchema  # the [postgres] extra is there

        try:
            missing = as_storage(args.session).mark() is None
        except NoJournalSchema:
            missing = True
        if missing:
            raise JournalError(f"{shown(args.session)}: no such session in the database; to "
                               "start a new one there, give --sessions-dir with the "
                               "database's URL (postgresql://user@host/db) instead of "
                               "--session")
    return Session.open(args.session, migrate=not args.no_migrate,
                        lock_timeout=args.lock_timeout)


def _where_next(args: argparse.Namespace, workspace: str) -> str:
    """Where `chat`'s /new puts a session: `--sessions-dir`, else the database of the
    database session continued, else the configured folder."""
    if not args.sessions_dir and args.session and is_database_url(args.session):
        return parse_url(args.session).conninfo
    return sessions_dir_for(workspace, args.sessions_dir)


@contextmanager
def _warnings_once(name: str) -> Iterator[None]:
    """Each distinct warning of logger `name` is shown once while this lasts (the small-window
    warning would otherwise repeat at every compaction)."""
    seen: set[str] = set()

    def first_time(record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text in seen:
            return False
        seen.add(text)
        return True

    logger = logging.getLogger(name)
    logger.addFilter(first_time)
    try:
        yield
    finally:
        logger.removeFilter(first_time)


def cmd_run(args: argparse.Namespace) -> int:
    if not args.task.strip():
        raise JournalError("the task is empty: say what the agent should do")
    with _warnings_once("agent.window"):
        plan = check_arguments(args)
        with _open_session(args, plan) as session:
            continue_scripted(plan.model, session)
            if not args.quiet:
                print(f"session {session.path}")
            runner = build_runner(session, plan.model, plan.workspace, plan.settings,
                                  args.quiet, sandbox=args.sandbox, fallbacks=plan.fallbacks)
            try:
                result = runner.run(args.task)
            except (WriteFailed, Unreachable) as e:  # the store, not the agent, stopped it
                name = short_name(session.path) if is_database_url(session.path) else \
                    session.path
                raise JournalError(f"{e}. Every turn stored before is kept: run again with "
                                   f"--session {name} to go on from there") from e
            path = session.path
    if not args.quiet:
        print_result(result, path)
    return 0 if result.stop_reason in ("stop", "max_turns") else 1


def cmd_chat(args: argparse.Namespace) -> int:
    from agent.chat import BANNER, Chat

    with _warnings_once("agent.window"):
        plan = check_arguments(args)
        session = _open_session(args, plan)
        workspace = plan.workspace

        def new_runner() -> Runner:
            fresh = new_session(plan.sessions_dir or _where_next(args, workspace), workspace,
                                args.lock_timeout)
            return build_runner(fresh, plan.model, workspace, plan.settings,
                                sandbox=args.sandbox, fallbacks=plan.fallbacks)

        print(f"session {session.path}\n{BANNER}")
        chat: Chat | None = None
        try:
            chat = Chat(build_runner(session, plan.model, workspace, plan.settings,
                                     sandbox=args.sandbox, fallbacks=plan.fallbacks), new_runner,
                        background=sys.stdin.isatty())
            chat.loop()
        except KeyboardInterrupt:
            print()
        finally:
            (chat.runner.session if chat is not None else session).close()
    return 0


def cmd_queue(args: argparse.Namespace) -> int:
    from agent.steering import FOLLOW_UP, STEER, queue_message

    if not args.text.strip():
        raise JournalError("the message is empty: say what the agent should know")
    if is_database_url(args.session):
        if as_storage(args.session).mark() is None:
            raise JournalError(f"{shown(args.session)}: no such session in the database")
    elif not os.path.isfile(resolve_live(args.session)[0]):
        raise JournalError(f"{args.session}: no such session file")
    kind = FOLLOW_UP if args.follow_up else STEER
    target = live_session(args.session)  # a rotated one: its live successor's inbox
    message_id = queue_message(target, args.text, kind, follow=False)
    if args.json:
        print(json.dumps({"id": message_id, "kind": kind, "session": args.session,
                          "queuedTo": shown(target)}))
    else:
        what = "a follow-up" if args.follow_up else "a steering message"
        print(f"queued {what} ({message_id}): the agent reads it "
              f"{'when it would stop' if args.follow_up else 'after its current tool call'}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.postgres:
        from agent.demo_postgres import run_postgres_demo

        run_postgres_demo(args.dir)
        return 0
    from agent.demo import run_demo

    run_demo(args.dir)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = entry_parser(
        "journal-agent", "Run a coding agent whose every turn is persisted in a journal session.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        where = p.add_mutually_exclusive_group()
        where.add_argument("--session", metavar="PATH", help="continue this session: a file, "
                           "or a database session (pg:ID, postgresql://...?session=ID)")
        where.add_argument("--new", action="store_true", help="start a new session (default)")
        p.add_argument("--no-migrate", action="store_true",
                       help="refuse a version 1 or 2 --session file instead of migrating it")
        p.add_argument("--lock-timeout", type=seconds, default=DEFAULT_LOCK_TIMEOUT,
                       metavar="S", help="seconds to wait for another writer of --session "
                       f"to let go (default {DEFAULT_LOCK_TIMEOUT:g})")
        p.add_argument("--model", metavar="SPEC",
                       help="anthropic:NAME (needs ANTHROPIC_API_KEY) or scripted:FILE "
                       "(replays a scenario offline); default anthropic when a key is set")
        p.add_argument("--workspace", metavar="DIR",
                       help="where the tools may work: an existing directory (default .)")
        p.add_argument("--window", type=int, metavar="N",
                       help=f"context window in tokens, at least "
                       f"{DEFAULT_SETTINGS.min_context_window:,} (default: the model's)")
        p.add_argument("--sandbox", action="store_true",
                       help="run the bash tool under bubblewrap: only the workspace writable, "
                       "host processes and environment hidden (the shell otherwise runs with "
                       "your rights)")
        p.add_argument("--fallback-model", action="append", metavar="SPEC",
                       help="a model to switch to when the model in use stays overloaded, rate "
                       "limited or failing on the server side after its retries (repeatable: "
                       "tried in order; the next run starts on --model again)")
        p.add_argument("--no-rotate", action="store_true",
                       help="never rotate the session file (by default, after a compaction a "
                       "file of at least --rotate-bytes moves into a short successor)")
        p.add_argument("--rotate-bytes", type=int, metavar="N",
                       help=f"rotate after a compaction once the file holds N bytes (default "
                       f"{DEFAULT_SETTINGS.rotate_min_bytes:,}; 0: after every compaction)")
        p.add_argument("--sessions-dir", metavar="DIR",
                       help="where new sessions go: a folder, or a PostgreSQL database "
                       "(postgresql://user@host/db, or pg: for the one $JOURNAL_DATABASE_URL "
                       "names) (default $JOURNAL_SESSIONS_DIR/<workspace>, or the database "
                       "it names, else ~/.journal-agent/sessions/<workspace>)")

    p = sub.add_parser("run", help="run one task to completion",
                       description="Append TASK to the session and run until the model stops.")
    p.add_argument("task", help="what to do (not empty)")
    common(p)
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("chat", help="talk to the agent interactively",
                       description="An interactive session: each line is a task, lines "
                       "starting with / are commands (/help lists them).")
    common(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("queue", help="queue a message for the agent working on a session",
                       description="Queue TEXT for the agent working on SESSION (a `run` or "
                       "`chat` in another terminal): a steering message, read after the tool "
                       "call it runs now, or with --follow-up when it would stop. With no agent "
                       "working, the next run on the session reads it. Recorded in the session, "
                       "it is delivered once, also after a crash.")
    p.add_argument("session", metavar="SESSION", help="the session: a file, or a database "
                   "session (pg:ID, postgresql://...?session=ID); a rotated one is followed to "
                   "its live successor")
    p.add_argument("text", metavar="TEXT", help="the message (not empty)")
    p.add_argument("--follow-up", action="store_true",
                   help="deliver it when the agent would stop instead of after the current tool "
                   "call")
    p.add_argument("--json", action="store_true", help="print the id as JSON")
    p.set_defaults(func=cmd_queue)

    p = sub.add_parser("demo", help="the offline demo: compaction, rotation, crash, repair",
                       description="Run a scripted coding session with the real tools and a "
                       "small window so it compacts and rotates, crash a second agent mid tool "
                       "call, repair and resume the session, and print what happened.")
    p.add_argument("--dir", default="journal-demo",
                   help="where the workspace and sessions go (default ./journal-demo)")
    p.add_argument("--postgres", action="store_true",
                   help="keep the session in PostgreSQL: a throwaway embedded server (the "
                        "journal[postgres] extra), with a crash, repair, a resume, fencing "
                        "and a rotation")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `journal-agent` command."""
    return run(build_parser(), argv,
               expected=(ModelError, ContextWindowTooSmall, SandboxUnavailable, ScenarioError),
               loggers=OWN_LOGGERS)


OWN_LOGGERS = ("journal", "agent", "tools")
"""The loggers `-q` and `-v` set (`journal.cli.app.command_logging`): the agent's, its
tools' and the store's."""


if __name__ == "__main__":
    sys.exit(main())
