"""pi messages -> Anthropic request payloads (pure, no client involved)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import journal
import journal.validate
from agent.models import ModelRequest
from agent.models.payload import build_params, thinking_config, to_api_messages


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


def call(call_id: str, name: str = "ls", **args: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": args}


def assistant(*blocks: dict[str, Any], api: str = "anthropic-messages") -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), "api": api, "provider": "anthropic",
            "model": "claude-sonnet-4-5", "stopReason": "toolUse", "timestamp": 2}


def result(call_id: str, *blocks: dict[str, Any], error: bool = False) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "ls",
            "content": list(blocks), "isError": error, "timestamp": 3}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def alternates(api_messages: list[dict[str, Any]]) -> bool:
    roles = [m["role"] for m in api_messages]
    return all(a != b for a, b in zip(roles, roles[1:], strict=False))


@pytest.mark.parametrize(
    "name", ["all-types.jsonl", "large-session.jsonl", "before-compaction.jsonl"]
)
def test_real_sessions_convert_to_valid_payloads(name: str, pi_fixture: Any) -> None:
    snapshot = journal.load(pi_fixture(name))
    tree = journal.Tree(snapshot.entries)
    context = journal.build_context(tree, tree.leaf_id)
    clean, _ = journal.sanitize(context.messages)
    before = copy.deepcopy(clean)
    api_messages = to_api_messages(clean)
    assert clean == before
    assert api_messages and api_messages[0]["role"] == "user"
    assert journal.validate.api_pairing_problems(api_messages) == []
    assert alternates(api_messages)


def test_summaries_custom_and_shell_become_user_text_merged() -> None:
    messages = [
        {"role": "compactionSummary", "summary": "We built a.py.", "tokensBefore": 10,
         "timestamp": 1},
        user("Continue."),
        {"role": "bashExecution", "command": "ls", "output": "a.py\n", "exitCode": 0,
         "cancelled": False, "truncated": False, "timestamp": 2},
        {"role": "custom", "customType": "x", "content": "Injected", "display": True,
         "timestamp": 3},
    ]
    api_messages = to_api_messages(messages)
    assert len(api_messages) == 1 and api_messages[0]["role"] == "user"
    texts = [b["text"] for b in api_messages[0]["content"]]
    assert "We built a.py." in texts[0]
    assert texts[1] == "Continue."
    assert "`ls`" in texts[2] and "a.py" in texts[2]
    assert texts[3] == "Injected"


def test_images_become_base64_sources() -> None:
    image = {"type": "image", "data": "aGVsbG8=", "mimeType": "image/jpeg"}
    messages = [
        {"role": "user", "content": [text("What is this?"), image], "timestamp": 1},
        assistant(call("t1", "read", path="x.jpg")),
        result("t1", text("Read image"), image),
    ]
    api_messages = to_api_messages(messages)
    source = {"type": "base64", "media_type": "image/jpeg", "data": "aGVsbG8="}
    assert api_messages[0]["content"][1] == {"type": "image", "source": source}
    assert api_messages[2]["content"][0]["content"][1] == {"type": "image", "source": source}
    assert journal.validate.api_pairing_problems(api_messages) == []


def test_tool_results_group_into_one_user_message_before_other_blocks() -> None:
    messages = [
        user("go"),
        assistant(text("Two calls."), call("a"), call("b")),
        result("a", text("A")),
        result("b", error=True),
        user("And then?"),
    ]
    api_messages = to_api_messages(messages)
    assert [m["role"] for m in api_messages] == ["user", "assistant", "user"]
    blocks = api_messages[2]["content"]
    assert [b["type"] for b in blocks] == ["tool_result", "tool_result", "text"]
    assert blocks[1] == {"type": "tool_result", "tool_use_id": "b", "is_error": True}
    assert journal.validate.api_pairing_problems(api_messages) == []


def test_thinking_rules() -> None:
    messages = [
        user("q"),
        assistant(
            {"type": "thinking", "thinking": "signed", "thinkingSignature": "s1"},
            {"type": "thinking", "thinking": "unsigned"},
            {"type": "thinking", "thinking": "[Reasoning redacted]", "thinkingSignature": "d1",
             "redacted": True},
            {"type": "redactedThinking", "data": "d2"},
            text("answer"),
        ),
        user("q2"),
        assistant({"type": "thinking", "thinking": "from elsewhere", "thinkingSignature": "x"},
                  text("other"), api="openai-responses"),
        user("q3"),
    ]
    api_messages = to_api_messages(messages)
    assert api_messages[1]["content"] == [
        {"type": "thinking", "thinking": "signed", "signature": "s1"},
        text("unsigned"),
        {"type": "redacted_thinking", "data": "d1"},
        {"type": "redacted_thinking", "data": "d2"},
        text("answer"),
    ]
    assert api_messages[3]["content"] == [text("from elsewhere"), text("other")]


def test_tool_ids_are_made_safe_consistently() -> None:
    messages = [
        user("go"),
        assistant(call("call|1"), call("call_1")),
        result("call|1", text("one")),
        result("call_1", text("two")),
    ]
    api_messages = to_api_messages(messages)
    uses = [b["id"] for b in api_messages[1]["content"]]
    results = [b["tool_use_id"] for b in api_messages[2]["content"]]
    assert uses == results
    assert len(set(uses)) == 2
    assert all(set(u) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
               for u in uses)
    assert journal.validate.api_pairing_problems(api_messages) == []


def test_blank_messages_are_left_out_and_neighbours_merged() -> None:
    messages = [user("a"), assistant(text("   ")), user("b")]
    api_messages = to_api_messages(messages)
    assert api_messages == [{"role": "user", "content": [text("a"), text("b")]}]


def test_thinking_budget_and_max_tokens() -> None:
    assert thinking_config("off", 8192, "claude-sonnet-4-5") == (None, 8192)
    config, total = thinking_config("medium", 8192, "claude-sonnet-4-5")
    assert config == {"type": "enabled", "budget_tokens": 8192} and total == 16384
    config, total = thinking_config("high", 30_000, "claude-opus-4-1")
    assert total == 32_000 and config["budget_tokens"] < total
    assert config["budget_tokens"] >= 1024
    assert thinking_config("high", 8192, "claude-opus-4-6")[0] == {"type": "adaptive"}
    with pytest.raises(ValueError, match="thinking level"):
        thinking_config("extreme", 8192, "claude-sonnet-4-5")


def test_build_params_without_system_caches_the_tools() -> None:
    tools = [{"name": "ls", "description": "List.", "input_schema": {"type": "object"}}]
    params = build_params(ModelRequest([user("hi")], tools=tools), "claude-haiku-4-5")
    assert "system" not in params
    assert params["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in tools[0]
    assert params["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
