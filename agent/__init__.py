"""agent: run an LLM agent on a journal session, with its context kept inside the window.

Every turn is committed to the session as it happens; when the context grows past its budget
the older part of the branch is compacted into a summary (nothing is deleted), and a request
that still overflows is recovered by truncating tool results on a new branch. A complete run,
offline, with the scripted model replaying a scenario shipped with the package:

    from pathlib import Path

    from agent import DEFAULT_SETTINGS, ExtractiveSummarizer, Runner, ScriptedModel, scenario_path
    from journal import Session
    from tools import default_tools

    workspace = Path("workspace")
    workspace.mkdir(exist_ok=True)
    model = ScriptedModel.from_file(scenario_path("short.json"))
    with Session.create("sessions", cwd=str(workspace)) as session:
        session.append_model_change(model.provider, model.model_id)
        runner = Runner(session, model, default_tools(workspace), settings=DEFAULT_SETTINGS,
                        summarizer=ExtractiveSummarizer(), workspace=str(workspace))
        result = runner.run(model.prompt)
    print(result.stop_reason, result.turns, result.final_text)

With a key in `ANTHROPIC_API_KEY`, `AnthropicModel("claude-sonnet-4-6")` takes the scripted
model's place and `default_summarizer()` picks `AnthropicSummarizer`. What is here:

Running
    `Runner` (the run loop), `RunResult`, `RunnerEvent` (what `on_event` observers get),
    `queue_message` (a steering or follow-up message for the agent working on a session, from
    any thread or process; `Runner.steer` and `Runner.follow_up` do the same for one runner).

Models
    `Model` (the interface), `ModelRequest`, `ModelEvent`, `ScriptedModel` (replays a
    scenario; `scenario_path` and `SCENARIOS` are the shipped ones), `AnthropicModel`
    (imported on first use, so `import agent` does not load the SDK), and the errors a model
    raises: `ModelError`, `ContextOverflow`, `Overloaded`, `RateLimited`, `AuthError`,
    `ModelTimeout`, `ModelAborted`. The rest is in the `agent.models` package.

Settings
    `ContextSettings` (every tunable number) and `DEFAULT_SETTINGS`.

Compaction
    `compact` (summarize the older part of the branch into a compaction entry),
    `CompactionResult`, `CompactionHooks`; the steps it runs (cut point, staged
    summarization, record) are in the `agent.compaction` package.

Summarizers
    `Summarizer` (the protocol), `ExtractiveSummarizer` (offline), `AnthropicSummarizer`,
    `default_summarizer` (Anthropic when a key is set, else extractive), `SummarizerError`.

This wing needs the `agent` extra (`pip install 'journal[agent]'`); the store, `journal`,
does not.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.compaction import (
        AnthropicSummarizer,
        CompactionHooks,
        CompactionResult,
        ExtractiveSummarizer,
        Summarizer,
        SummarizerError,
        compact,
        default_summarizer,
    )
    from agent.models import (
        AuthError,
        ContextOverflow,
        Model,
        ModelAborted,
        ModelError,
        ModelEvent,
        ModelRequest,
        ModelTimeout,
        Overloaded,
        RateLimited,
        ScriptedModel,
    )
    from agent.models.anthropic import AnthropicModel
    from agent.runner import Runner, RunnerEvent, RunResult
    from agent.scenarios import SCENARIOS, scenario_path
    from agent.settings import DEFAULT_SETTINGS, ContextSettings
    from agent.steering import queue_message

__all__ = [
    # running
    "Runner",
    "RunResult",
    "RunnerEvent",
    "queue_message",
    # models
    "Model",
    "ModelRequest",
    "ModelEvent",
    "ScriptedModel",
    "scenario_path",
    "SCENARIOS",
    "AnthropicModel",
    "ModelError",
    "ContextOverflow",
    "Overloaded",
    "RateLimited",
    "AuthError",
    "ModelTimeout",
    "ModelAborted",
    # settings
    "ContextSettings",
    "DEFAULT_SETTINGS",
    # compaction
    "compact",
    "CompactionResult",
    "CompactionHooks",
    # summarizers
    "Summarizer",
    "ExtractiveSummarizer",
    "AnthropicSummarizer",
    "default_summarizer",
    "SummarizerError",
]


_HOMES = {
    "agent.runner": ("Runner", "RunResult", "RunnerEvent"),
    "agent.models": ("Model", "ModelRequest", "ModelEvent", "ScriptedModel", "ModelError",
                     "ContextOverflow", "Overloaded", "RateLimited", "AuthError", "ModelTimeout",
                     "ModelAborted"),
    "agent.models.anthropic": ("AnthropicModel",),
    "agent.scenarios": ("scenario_path", "SCENARIOS"),
    "agent.settings": ("ContextSettings", "DEFAULT_SETTINGS"),
    "agent.steering": ("queue_message",),
    "agent.compaction": ("compact", "CompactionResult", "CompactionHooks", "Summarizer",
                         "ExtractiveSummarizer", "AnthropicSummarizer", "default_summarizer",
                         "SummarizerError"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """Each name from its module on first use, so that `import agent` (and `journal-agent`
    starting up) loads nothing heavy: the Anthropic SDK and the tokenizer come with the
    names that need them."""
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
