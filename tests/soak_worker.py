"""One phase of the soak test (tests/test_soak.py), run as its own process so it can be killed.

    python soak_worker.py SESSION TURNS REPORT SEED

Opens SESSION (following rotations), and runs tasks on it with `AnthropicModel` (and a
fallback model, and `AnthropicSummarizer`) over one mock transport until the session holds
TURNS assistant replies that completed. The mock is a scripted server: it answers with tool
calls of the `work` tool and, now and then, a final text; and it injects failures by request
number: overflows (once per request body), 529 overloads (one the SDK's retry absorbs, and
pairs that outlast it, so the runner falls back), and 500s to the summarizer. Every request
body is checked with `journal.validate.api_pairing_problems`.

Prints one line per event the test counts, as it happens (the test kills the process part
way): `turns N` after each completed reply, `invalid`, `identical` (a request equal to one
that just overflowed), `overflow`, `overload`, `summarizer_failure`, `model_change`; and writes
REPORT (JSON counts of this phase) when it ends normally, after delivering every message
still queued.
"""

from __future__ import annotations

import json
import random
import sys
import uuid
from dataclasses import replace
from typing import Any

import anthropic
import httpx2

import journal.validate
from agent.compaction.summarize import AnthropicSummarizer
from agent.models.anthropic import AnthropicModel
from agent.runner import Runner, RunnerEvent
from agent.settings import DEFAULT_SETTINGS
from agent.steering import FOLLOW_UP, STEER
from journal import Durability, RotationPolicy, Session
from tools import Tool, ToolResult, Workspace

PRIMARY, FALLBACK = "claude-sonnet-4-6", "claude-haiku-4-5"
SETTINGS = replace(DEFAULT_SETTINGS, context_window=32_000, keep_recent_tokens=4_000,
                   retry_min_delay=0.0, retry_max_delay=0.0, summary_attempts=2)
FAST = {"retry-after-ms": "1"}


def sse(events: list[dict[str, Any]]) -> httpx2.Response:
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})


def reply(model: str, text: str, call: dict[str, Any] | None, input_tokens: int
          ) -> httpx2.Response:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {
            "id": "msg", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text",
                                                                      "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                              "text": text}},
        {"type": "content_block_stop", "index": 0}]
    if call is not None:
        events += [
            {"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": call["id"], "name": "work", "input": {}}},
            {"type": "content_block_delta", "index": 1, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(call["input"])}},
            {"type": "content_block_stop", "index": 1}]
    events += [{"type": "message_delta", "delta": {
                   "stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 30}},
               {"type": "message_stop"}]
    return sse(events)


def say(line: str) -> None:
    print(line, flush=True)


def error(status: int, etype: str, message: str) -> httpx2.Response:
    return httpx2.Response(status, json={"type": "error", "error": {"type": etype,
                                                                     "message": message}},
                           headers=FAST)


class Server:
    """The scripted API: deterministic by request number from the seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.counts = {"requests": 0, "invalid": 0, "overflows": 0, "overloads": 0,
                       "summarizer_requests": 0, "summarizer_failures": 0,
                       "identical_after_overflow": 0, "fallback_requests": 0}
        self.overflowed: set[bytes] = set()
        self.previous: bytes | None = None
        self.previous_overflowed = False
        self.overload_burst = 0

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        c = self.counts
        c["requests"] += 1
        if journal.validate.api_pairing_problems(body["messages"]):
            c["invalid"] += 1
            say("invalid")
        raw = request.content  # the SDK serializes the same request to the same bytes
        if self.previous_overflowed and raw == self.previous:
            c["identical_after_overflow"] += 1
            say("identical")
        self.previous, self.previous_overflowed = raw, False
        if not body.get("tools"):  # the summarizer
            c["summarizer_requests"] += 1
            if self.rng.random() < 0.15:
                c["summarizer_failures"] += 1
                say("summarizer_failure")
                return error(500, "api_error", "summarizer backend failed")
            return httpx2.Response(200, json={
                "id": "msg_s", "type": "message", "role": "assistant", "model": body["model"],
                "content": [{"type": "text", "text": "## Goal\nSoak.\n## Progress\nGoes on."}],
                "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 50, "output_tokens": 20}})
        if body["model"] == FALLBACK:
            c["fallback_requests"] += 1
        if self.overload_burst:
            self.overload_burst -= 1
            c["overloads"] += 1
            say("overload")
            return error(529, "overloaded_error", "Overloaded")
        roll = self.rng.random()
        if roll < 0.02 and raw not in self.overflowed:
            self.overflowed.add(raw)
            c["overflows"] += 1
            say("overflow")
            self.previous_overflowed = True
            return error(400, "invalid_request_error",
                         "prompt is too long: 40000 tokens > 32000 maximum")
        if roll < 0.04:
            self.overload_burst = 0 if self.rng.random() < 0.5 else 1  # a pair outlasts a retry
            c["overloads"] += 1
            say("overload")
            return error(529, "overloaded_error", "Overloaded")
        tokens = len(raw) // 4
        if self.rng.random() < 0.08:
            return reply(body["model"], "That part is done.", None, tokens)
        size = self.rng.choice((200, 800, 2_000, 6_000))
        call = {"id": f"toolu_{uuid.uuid4().hex[:16]}", "input": {"size": size}}
        return reply(body["model"], "Working on the next step.", call, tokens)


class Work(Tool):
    name = "work"
    description = "Does a step of work and prints its output."
    input_schema = {"type": "object", "properties": {"size": {"type": "integer"}},
                    "required": ["size"], "additionalProperties": False}

    def execute(self, args: dict[str, Any]) -> ToolResult:
        size = int(args["size"])
        lines = [f"output line {k}: " + "abcdefgh" * 6 for k in range(size // 64 + 1)]
        return ToolResult("\n".join(lines)[:size])


def completed(entries: list[dict[str, Any]]) -> int:
    return sum(1 for e in entries if e.get("type") == "message"
               and e["message"].get("role") == "assistant"
               and e["message"].get("stopReason") not in ("error", "aborted"))


def main(argv: list[str]) -> int:
    path, target, report, seed = argv[0], int(argv[1]), argv[2], int(argv[3])
    server = Server(seed)

    def client(retries: int) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key="test", max_retries=retries,
            http_client=httpx2.Client(transport=httpx2.MockTransport(server.handle)))

    turns = sum(completed(journal.load(p).entries) for p in journal.lineage(path))
    done: dict[str, Any] = {"turns": turns, "runs": 0, "stops": {}, "model_changes": 0,
                            "compactions": 0}

    def observe(event: RunnerEvent) -> None:
        if event.kind == "turn_end" and event.data["stop_reason"] not in ("error", "aborted"):
            done["turns"] += 1
            say(f"turns {done['turns']}")
        elif event.kind == "model_change":
            done["model_changes"] += 1
            say("model_change")

    with Session.open(path, durability=Durability.batch(every=64)) as session:
        session.rotation_policy = RotationPolicy(max_bytes=512 * 1024)
        workspace = Workspace(session.header.get("cwd") or ".")
        runner = Runner(session, AnthropicModel(PRIMARY, client=client(1)), [Work(workspace)],
                        settings=SETTINGS, on_event=observe, max_turns=60,
                        summarizer=AnthropicSummarizer(client(0)),
                        fallback_models=[AnthropicModel(FALLBACK, client=client(1))])
        prompt: str | None = None if done["turns"] else "Start the soak task."
        while done["turns"] < target:
            result = runner.run(prompt)
            done["runs"] += 1
            done["stops"][result.stop_reason] = done["stops"].get(result.stop_reason, 0) + 1
            prompt = f"Next task {done['runs']}."
        runner.run(None)  # takes in what waits in the inbox, delivers what is queued
        while runner.queues.pending(STEER) or runner.queues.pending(FOLLOW_UP):
            runner.run(None)
        done["compactions"] = runner.compactions
    with open(report, "w") as f:
        json.dump({**server.counts, **done}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
