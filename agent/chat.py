"""The `journal-agent chat` loop: each line typed is a task, a line starting with `/` a command.

`/retry` asks the model again without a new message (after an error, an overflow or Ctrl-C);
`/resume` is its older name and still works. Neither picks another session: `--session PATH`
does that when chat starts.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.console import print_result, status_line
from agent.runner import Runner

COMMANDS: tuple[tuple[str, str], ...] = (
    ("/compact [focus]", "compact now, optionally telling the summary what to focus on"),
    ("/compact on|off", "turn automatic compaction on or off"),
    ("/new", "close this session and start a new one"),
    ("/status", "tokens used of the window, compactions so far, the session file and its size"),
    ("/retry", "ask the model again without a new message (after an error, an overflow or "
               "Ctrl-C); /resume is its old name"),
    ("/help", "this list"),
    ("/quit", "leave (so do end of input and Ctrl-C)"),
)
ALIASES = {"/resume": "/retry"}
BANNER = "commands: " + "  ".join(name for name, _ in COMMANDS)
"""The one line printed when chat starts."""


def help_text() -> str:
    """What `/help` prints: every command and what it does."""
    width = max(len(name) for name, _ in COMMANDS)
    return "\n".join(f"  {name:<{width}}  {what}" for name, what in COMMANDS)


class Chat:
    """Reads lines until `/quit` or the end of input, running the agent on each task.

    `new_runner` makes a runner on a freshly created session (for `/new`). The session of
    `runner` (the one in use at the end) is the caller's to close.
    """

    def __init__(self, runner: Runner, new_runner: Callable[[], Runner],
                 read: Callable[[str], str] = input) -> None:
        self.runner = runner
        self.new_runner = new_runner
        self.read = read

    def loop(self) -> None:
        while True:
            try:
                line = self.read("> ").strip()
            except EOFError:
                return
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    return
                continue
            self._run(line)

    def command(self, line: str) -> bool:
        """Carry out one `/` command; False when it was `/quit`."""
        name, _, rest = line.partition(" ")
        name, rest = ALIASES.get(name, name), rest.strip()
        runner = self.runner
        if name == "/quit":
            return False
        if name == "/compact" and rest in ("on", "off"):
            runner.auto_compact = rest == "on"
            print(f"automatic compaction {rest}")
        elif name == "/compact":
            runner.compact_now(rest or None)  # the compaction line says what happened
        elif name == "/new":
            fresh = self.new_runner()
            fresh.auto_compact = runner.auto_compact
            runner.session.close()
            self.runner = fresh
            print(f"new session {fresh.session.path}")
        elif name == "/status":
            print(status_line(runner))
        elif name == "/retry":
            self._run(None)
        elif name == "/help":
            print(help_text())
        else:
            print(f"unknown command {name}: /help lists the commands")
        return True

    def _run(self, task: str | None) -> None:
        result = self.runner.run(task)
        print_result(result, self.runner.session.path)
