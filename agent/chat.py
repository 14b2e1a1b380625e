"""The `journal-agent chat` loop: each line typed is a task, a line starting with `/` a command.

`/retry` asks the model again without a new message (after an error, an overflow or Ctrl-C);
`/resume` is its older name and still works. Neither picks another session: `--session PATH`
does that when chat starts.

On a terminal the agent works in the background while chat keeps reading: a line typed while
it works is queued as a steering message (delivered after the tool call running now, the rest
of that turn's calls skipped), `/followup TEXT` queues a follow-up (delivered when the agent
would stop), and Ctrl-C stops the agent. With input from a pipe or a file, each line waits
for the previous task to finish, as before.
"""

from __future__ import annotations

import threading
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
    ("/followup TEXT", "while the agent works: queue TEXT for when it would stop (a line "
                       "typed while it works steers it after the current tool call)"),
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
                 read: Callable[[str], str] = input, *, background: bool = False) -> None:
        self.runner = runner
        self.new_runner = new_runner
        self.read = read
        self.background = background
        """Run each task in a worker thread and keep reading (see the module docstring)."""
        self._worker: threading.Thread | None = None
        self._abort = threading.Event()

    @property
    def working(self) -> bool:
        """Whether a task runs in the background now."""
        return self._worker is not None and self._worker.is_alive()

    def loop(self) -> None:
        try:
            self._loop()
        except BaseException:  # Ctrl-C, SIGTERM (journal.interrupt): stop the agent first
            self._stop()
            raise
        finally:
            self._wait()

    def _loop(self) -> None:
        while True:
            try:
                line = self.read("> ").strip()
            except EOFError:
                return
            except KeyboardInterrupt:
                if not self.working:
                    raise
                self._stop()  # Ctrl-C while the agent works stops the agent, not chat
                continue
            if not line:
                continue
            if self.working:
                if not self._while_working(line):
                    return
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

    def _while_working(self, line: str) -> bool:
        """A line typed while the agent works; False when it was `/quit`."""
        name, _, rest = line.partition(" ")
        runner = self.runner
        if name == "/quit":
            self._stop()
            return False
        if name == "/followup" and rest.strip():
            runner.follow_up(rest.strip())
            print("queued as a follow-up: the agent reads it when it would stop")
        elif name == "/status":
            print(status_line(runner))
        elif name.startswith("/"):
            print(f"the agent is working: {name} waits until it stops (Ctrl-C stops it); "
                  "a plain line steers it, /followup TEXT queues a follow-up")
        else:
            runner.steer(line)
            print("queued: the agent reads it after the current tool call")
        return True

    def _run(self, task: str | None) -> None:
        if not self.background:
            result = self.runner.run(task)
            print_result(result, self.runner.session.path)
            return
        self._abort = threading.Event()
        runner, abort = self.runner, self._abort

        def work() -> None:
            result = runner.run(task, abort=abort)
            print_result(result, runner.session.path)

        self._worker = threading.Thread(target=work, name="agent-run", daemon=True)
        self._worker.start()

    def _stop(self) -> None:
        self._abort.set()
        self._wait()

    def _wait(self) -> None:
        if self._worker is not None:
            self._worker.join()
            self._worker = None
