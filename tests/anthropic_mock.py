"""A mock Anthropic API for tests: queued replies on an httpx2 MockTransport, and SSE streams
built by hand. Every request body it receives is checked with `journal.api_pairing_problems`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2

import journal
import journal.validate
from agent.compaction.summarize import AnthropicSummarizer
from agent.models.anthropic import AnthropicModel

MODEL = "claude-sonnet-4-6"
FAST_RETRY = {"retry-after-ms": "1"}

Reply = Callable[[dict[str, Any]], httpx2.Response] | httpx2.Response


class MockAPI:
    """Serves queued replies and checks every request body it receives."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.bodies: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def queue(self, *replies: Reply) -> MockAPI:
        self.replies.extend(replies)
        return self

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        problems = journal.validate.api_pairing_problems(body["messages"])
        self.problems.extend(problems)
        assert problems == [], problems
        assert self.replies, "the model sent more requests than the test expected"
        reply = self.replies.pop(0)
        return reply(body) if callable(reply) else reply

    def model(self, max_retries: int = 2, **kwargs: Any) -> AnthropicModel:
        client = anthropic.Anthropic(
            api_key="test",
            http_client=httpx2.Client(transport=httpx2.MockTransport(self.handler)),
            max_retries=max_retries,
        )
        return AnthropicModel(MODEL, client=client, **kwargs)

    def summarizer(self, **kwargs: Any) -> AnthropicSummarizer:
        """An `AnthropicSummarizer` on the same mock (it turns the SDK's retries off itself)."""
        client = anthropic.Anthropic(
            api_key="test",
            http_client=httpx2.Client(transport=httpx2.MockTransport(self.handler)),
        )
        return AnthropicSummarizer(client, **kwargs)


# --- building SSE replies by hand


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events
    )


def stream_response(events: list[dict[str, Any]] | Iterator[bytes]) -> httpx2.Response:
    content = sse(*events) if isinstance(events, list) else events
    return httpx2.Response(200, content=content, headers={"content-type": "text/event-stream"})


def error_response(status: int, etype: str, message: str, **headers: str) -> httpx2.Response:
    body = {"type": "error", "error": {"type": etype, "message": message}}
    return httpx2.Response(status, json=body, headers=headers)


def start(input_tokens: int = 10, cache_read: int = 0, cache_write: int = 0) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens, "output_tokens": 1,
                "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": cache_write,
            },
        },
    }


def text_block(index: int, *pieces: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index,
         "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": index,
           "delta": {"type": "text_delta", "text": p}} for p in pieces),
        {"type": "content_block_stop", "index": index},
    ]


def thinking_block(index: int, thinking: str, signature: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": index,
         "delta": {"type": "thinking_delta", "thinking": thinking}},
        {"type": "content_block_delta", "index": index,
         "delta": {"type": "signature_delta", "signature": signature}},
        {"type": "content_block_stop", "index": index},
    ]


def redacted_block(index: int, data: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index,
         "content_block": {"type": "redacted_thinking", "data": data}},
        {"type": "content_block_stop", "index": index},
    ]


def tool_block(index: int, call_id: str, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    raw = json.dumps(args)
    cut = len(raw) // 2
    return [
        {"type": "content_block_start", "index": index,
         "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}},
        {"type": "content_block_delta", "index": index,
         "delta": {"type": "input_json_delta", "partial_json": raw[:cut]}},
        {"type": "content_block_delta", "index": index,
         "delta": {"type": "input_json_delta", "partial_json": raw[cut:]}},
        {"type": "content_block_stop", "index": index},
    ]


def end(stop: str = "end_turn", output_tokens: int = 5) -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
         "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"},
    ]
