"""Model fallback, and calls of replies cut off by max_tokens, with `AnthropicModel` through
the real SDK against the mock transport (every request checked by the pairing validator), and
the `--fallback-model` flag (issue 17)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anthropic_mock import FAST_RETRY, MockAPI, error_response
from test_runner_anthropic import (
    check_journal,
    make_runner,
    message_end,
    message_start,
    messages_of,
    sse,
    text_events,
    text_reply,
    tool_events,
    tool_reply,
)

from agent.models import ScriptedModel
from agent.models.anthropic import AnthropicModel
from journal import Session

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
FALLBACK = "claude-haiku-4-5"
SECOND = "claude-opus-4-1"


@pytest.fixture(autouse=True)
def _no_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_SESSIONS_DIR", str(tmp_path / "default-sessions"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture
def api() -> Iterator[MockAPI]:
    mock = MockAPI()
    yield mock
    assert mock.problems == []
    assert mock.replies == [], "replies left unused"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


def on(api: MockAPI, model_id: str) -> AnthropicModel:
    """Another model on the same mock."""
    return AnthropicModel(model_id, client=api.model(max_retries=1).client)


def model_changes(entries: list[dict[str, Any]]) -> list[str]:
    return [e["modelId"] for e in entries if e.get("type") == "model_change"]


OVERLOADED = error_response(529, "overloaded_error", "Overloaded", **FAST_RETRY)
SERVER = error_response(500, "api_error", "Internal server error", **FAST_RETRY)


@pytest.mark.parametrize("failure", [OVERLOADED, SERVER], ids=["529", "500"])
def test_failure_outlasting_retries_switches_to_the_fallback(
        api: MockAPI, tmp_path: Path, workspace: Path, failure: httpx2.Response) -> None:
    api.queue(failure, failure,  # the primary: one call, one SDK retry
              tool_reply("Listing.", "toolu_1", "ls", {}),  # the fallback carries on
              text_reply("Done on the fallback."),
              text_reply("Back on the primary."))  # the next run
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        session.append_model_change("anthropic", api.model().model_id)
        runner, events = make_runner(session, api.model(max_retries=1),
                                     workspace, fallback_models=[on(api, FALLBACK)])
        result = runner.run("List the files.")
        entries = check_journal(session)
        assert session.context().model == {"provider": "anthropic", "modelId": FALLBACK}
        again = runner.run("And now?")
        after = check_journal(session)

    assert (result.stop_reason, result.final_text) == ("stop", "Done on the fallback.")
    assert [b["model"] for b in api.bodies] == [api.model().model_id] * 2 + [FALLBACK] * 2 + [
        api.model().model_id]
    assert api.bodies[1]["messages"] == api.bodies[2]["messages"]  # the same request
    assert model_changes(entries)[1:] == [FALLBACK]
    replies = [m for m in messages_of(entries) if m["role"] == "assistant"]
    assert [m["model"] for m in replies] == [FALLBACK, FALLBACK]
    assert all(m["stopReason"] != "error" for m in replies)  # the failure is not a turn
    change = next(e.data for e in events if e.kind == "model_change")
    assert change["model"] == FALLBACK and change["previous"] == api.model().model_id
    assert again.final_text == "Back on the primary."
    assert model_changes(after)[1:] == [FALLBACK, api.model().model_id]


def test_fallbacks_are_tried_in_order_then_the_turn_fails(api: MockAPI, tmp_path: Path,
                                                          workspace: Path) -> None:
    api.queue(OVERLOADED, OVERLOADED, OVERLOADED, OVERLOADED, OVERLOADED, OVERLOADED)
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, api.model(max_retries=1), workspace,
                                fallback_models=[on(api, FALLBACK), on(api, SECOND)])
        result = runner.run("Hello?")
        entries = check_journal(session)
    assert result.stop_reason == "error" and "overloaded" in result.message
    assert [b["model"] for b in api.bodies] == [api.model().model_id] * 2 + [FALLBACK] * 2 + [
        SECOND] * 2
    assert model_changes(entries) == [FALLBACK, SECOND]


def test_other_failures_do_not_fall_back(api: MockAPI, tmp_path: Path,
                                         workspace: Path) -> None:
    api.queue(error_response(400, "invalid_request_error", "bad tool schema"))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, _ = make_runner(session, api.model(max_retries=1), workspace,
                                fallback_models=[on(api, FALLBACK)])
        result = runner.run("Hello?")
        entries = check_journal(session)
    assert result.stop_reason == "error"
    assert len(api.bodies) == 1 and model_changes(entries) == []


def test_call_in_a_reply_cut_off_by_max_tokens_is_not_run(api: MockAPI, tmp_path: Path,
                                                          workspace: Path) -> None:
    api.queue(sse([message_start(), *text_events(0, "Creating it."),
                   *tool_events(1, "toolu_w", "write", {"path": "made.txt", "content": "x"}),
                   *message_end("max_tokens")]),
              text_reply("Understood."))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        runner, events = make_runner(session, api.model(), workspace)
        result = runner.run("Make made.txt.")
        entries = check_journal(session)
    assert result.final_text == "Understood."
    assert not (workspace / "made.txt").exists()
    assert not [e for e in events if e.kind == "tool_start"]
    messages = messages_of(entries)
    assert messages[1]["stopReason"] == "length"
    assert messages[2]["details"] == {"notRun": "length"} and messages[2]["isError"]
    answer = api.bodies[1]["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["tool_use_id"] == "toolu_w"
    assert "max_tokens" in json.dumps(answer["content"])


def test_fallback_model_flag(tmp_path: Path, workspace: Path) -> None:
    """`--fallback-model` (repeatable) builds the fallback chain of `journal-agent run`."""
    from agent.cli import build_parser, check_arguments

    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"model": "fallback-1", "turns": [{"text": "hi"}]}))
    args = build_parser().parse_args(
        ["run", "task", "--model", f"scripted:{scenario}", "--workspace", str(workspace),
         "--fallback-model", f"scripted:{scenario}", "--fallback-model", f"scripted:{scenario}"])
    plan = check_arguments(args)
    assert [m.model_id for m in plan.fallbacks] == ["fallback-1", "fallback-1"]
    assert all(isinstance(m, ScriptedModel) for m in plan.fallbacks)
    assert len(plan.settings.fallback_models) == 2


def test_a_new_process_on_a_session_left_on_the_fallback_starts_on_the_primary(
        api: MockAPI, tmp_path: Path, workspace: Path) -> None:
    api.queue(text_reply("Primary again."))
    with Session.create(str(tmp_path / "s"), cwd=str(workspace)) as session:
        session.append_model_change("anthropic", FALLBACK)  # where a killed run was left
        runner, _ = make_runner(session, api.model(), workspace,
                                fallback_models=[on(api, FALLBACK)])
        runner.run("Hello?")
        entries = check_journal(session)
    assert [b["model"] for b in api.bodies] == [api.model().model_id]
    assert model_changes(entries) == [FALLBACK, api.model().model_id]
