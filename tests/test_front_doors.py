"""The packages' front doors: what `journal` and `agent` export, and what importing them costs."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agent
import journal
import journal.pairing
import journal.validate

ROOT = Path(__file__).resolve().parents[1]
TEST_HELPERS = {
    journal.validate: ("pairing_problems", "api_pairing_problems", "assert_valid_pairing",
                       "InvalidPairing"),
    journal.pairing: ("synthetic_result",),
}


def docstring_example(module_doc: str) -> str:
    """The first indented block of a module docstring: the example it shows."""
    block: list[str] = []
    for line in module_doc.splitlines():
        if line.startswith("    ") or (block and not line.strip()):
            block.append(line)
        elif block:
            break
    assert block, "the docstring shows no indented example"
    return textwrap.dedent("\n".join(block))


def documented_names(module_doc: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", module_doc))


@pytest.mark.parametrize("module", [journal, agent], ids=lambda m: m.__name__)
def test_every_exported_name_resolves_and_is_documented(module) -> None:
    assert module.__doc__ is not None
    missing = [name for name in module.__all__ if name not in documented_names(module.__doc__)]
    assert missing == [], f"{module.__name__} exports names its docstring does not describe"
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert len(set(module.__all__)) == len(module.__all__)


def test_testing_helpers_live_in_their_modules_not_at_the_top() -> None:
    for home, names in TEST_HELPERS.items():
        for name in names:
            assert callable(getattr(home, name)), f"{home.__name__}.{name}"
            assert name not in journal.__all__
            assert not hasattr(journal, name), f"journal.{name} is still a top-level name"


def test_agent_exposes_what_a_run_needs() -> None:
    from agent.compaction import compact
    from agent.compaction.summarize import ExtractiveSummarizer, default_summarizer
    from agent.models.scripted import ScriptedModel
    from agent.runner import Runner
    from agent.settings import DEFAULT_SETTINGS

    assert agent.Runner is Runner
    assert agent.ScriptedModel is ScriptedModel
    assert agent.DEFAULT_SETTINGS is DEFAULT_SETTINGS
    assert agent.compact is compact
    assert agent.ExtractiveSummarizer is ExtractiveSummarizer
    assert agent.default_summarizer is default_summarizer
    assert agent.scenario_path("demo.json").is_file()


def test_agent_docstring_example_runs_offline(tmp_path: Path, monkeypatch, capsys) -> None:
    """The example in `agent`'s docstring is run as written, so it cannot rot."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = docstring_example(agent.__doc__ or "")
    assert "Runner(" in code and "run(" in code
    exec(compile(code, "<agent docstring>", "exec"), {"__name__": "__example__"})
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed.startswith("stop 4 Done: hello.py prints")
    assert (tmp_path / "workspace" / "hello.py").read_text().startswith("print(")
    sessions = list((tmp_path / "sessions").glob("*.jsonl"))
    assert len(sessions) == 1
    entries = journal.load(sessions[0]).entries
    roles = [e["message"]["role"] for e in entries if e["type"] == "message"]
    assert roles.count("assistant") == 4 and roles.count("toolResult") == 3


def _modules_after(statement: str) -> set[str]:
    probe = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            cwd=ROOT, timeout=60, check=True)
    return set(result.stdout.split())


def test_import_journal_loads_neither_the_model_stack_nor_the_tail_machinery() -> None:
    loaded = _modules_after("import journal")
    assert "journal.session" in loaded
    heavy = {"anthropic", "tiktoken", "httpx2", "asyncio", "watchfiles"} & loaded
    assert heavy == set(), f"import journal loads {sorted(heavy)}"


def test_import_agent_leaves_the_anthropic_sdk_for_first_use() -> None:
    assert "anthropic" not in _modules_after("import agent")
    assert "anthropic" in _modules_after("import agent; agent.AnthropicModel")


def test_shipped_scenarios_live_inside_the_agent_package() -> None:
    package = Path(agent.__file__).resolve().parent
    assert agent.SCENARIOS.parent == package
    names = {p.name for p in agent.SCENARIOS.glob("*.json")}
    assert {"demo.json", "crash.json", "resume.json"} <= names
    assert not (ROOT / "fixtures" / "scenarios").exists()
