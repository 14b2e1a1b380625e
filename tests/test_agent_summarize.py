"""Summarizers: identifiers, the transcript text, the extractive and the Anthropic summarizer."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest

from agent.compaction import FallbackLevel, summarize_messages
from agent.compaction.facts import extract_facts, extract_identifiers
from agent.compaction.summarize import (
    EXTRACTIVE_MARK,
    IDENTIFIER_INSTRUCTIONS,
    SYSTEM_PROMPT,
    UPDATE_INSTRUCTIONS,
    AnthropicSummarizer,
    ExtractiveSummarizer,
    Summarizer,
    SummarizerError,
    SummaryOverflow,
    SummaryRejected,
    SummaryTimeout,
    default_summarizer,
)
from agent.compaction.transcript import message_text, serialize_conversation
from agent.settings import ContextSettings

SMALL = ContextSettings(context_window=16_000)


def user(text, ts=0):
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def call(call_id, name="bash", **arguments):
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}


def assistant(text=None, calls=(), thinking=None):
    content = [{"type": "thinking", "thinking": thinking}] if thinking else []
    content += ([{"type": "text", "text": text}] if text else []) + list(calls)
    return {"role": "assistant", "content": content, "stopReason": "stop", "timestamp": 0}


def result(call_id, text, name="bash", error=False):
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name,
            "content": [{"type": "text", "text": text}], "isError": error, "timestamp": 0}


CONVERSATION = [
    user("Fix the flaky test in tests/test_io.py; CI run https://ci.example.com/runs/8812"),
    assistant("Let me look.", [call("toolu_01AbC9xYz", "read", path="tests/test_io.py")],
              thinking="probably a race"),
    result("toolu_01AbC9xYz", "def test_io(): ..." + "x" * 5_000, "read"),
    assistant(calls=[call("toolu_02", "bash", command="pytest -x tests/test_io.py")]),
    result("toolu_02", "FAILED tests/test_io.py::test_io - TimeoutError", error=True),
    assistant("The root cause is a missing lock in src/io/pool.py. I decided to add a lock "
              "because two writers race.", [call("toolu_03", "edit", path="src/io/pool.py",
                                                 old_text="a", new_text="b")]),
    result("toolu_03", "ok", "edit"),
    {"role": "bashExecution", "command": "git rev-parse HEAD", "output": "9c1e2f3a4b5d",
     "exitCode": 0, "timestamp": 0},
    user("Now also bump the server on localhost:8080 to port 9090"),
    assistant("Done: the server listens on port 9090 (commit 5d41402abc4b)."),
]


# ---------------------------------------------------------------------------------------
# identifiers and the transcript


def test_identifiers_are_found_verbatim():
    text = (
        "see https://x.io/a?b=1, commit 3f9a2c1d and /srv/app/main.py: id "
        "550e8400-e29b-41d4-a716-446655440000, toolu_01AbCdEf9, host db.internal:5432, "
        "10.0.0.12, port 3000, file src/agent/compaction.py and README.md, "
        "C:\\Users\\me\\notes.txt, ~/proj/run.sh."
    )
    found = extract_identifiers(text)
    for value in ("https://x.io/a?b=1", "3f9a2c1d", "/srv/app/main.py",
                  "550e8400-e29b-41d4-a716-446655440000", "toolu_01AbCdEf9",
                  "db.internal:5432", "10.0.0.12", "3000", "src/agent/compaction.py",
                  "README.md", "C:\\Users\\me\\notes.txt", "~/proj/run.sh"):
        assert value in found, value
    assert extract_identifiers("we decided and/or agreed on a plan, e.g. utf-8") == []


def test_transcript_is_labelled_text_without_tool_blocks():
    text = serialize_conversation(CONVERSATION)
    assert "[User]: Fix the flaky test" in text
    assert "[Assistant thinking]: probably a race" in text
    assert '[Assistant called a tool]: read(path="tests/test_io.py")' in text
    assert "[Tool error from bash]: FAILED tests/test_io.py::test_io - TimeoutError" in text
    assert "[User ran a shell command]: git rev-parse HEAD\n9c1e2f3a4b5d" in text
    tool_result = message_text(CONVERSATION[2])
    assert len(tool_result) < 2_100 and "characters truncated" in tool_result
    assert message_text({"role": "custom", "customType": "n", "content": "hi"}) == "[Note (n)]: hi"


# ---------------------------------------------------------------------------------------
# extractive


def test_extractive_summary_names_goal_decisions_files_failures_identifiers():
    assert isinstance(ExtractiveSummarizer(), Summarizer)
    text = ExtractiveSummarizer().summarize(CONVERSATION)
    assert text.startswith(EXTRACTIVE_MARK)
    assert "- First request: Fix the flaky test in tests/test_io.py" in text
    assert "- Latest request: Now also bump the server" in text
    assert "root cause is a missing lock" in text
    assert "## Files modified\n- src/io/pool.py" in text
    assert "## Files read\n- tests/test_io.py" in text
    assert "- bash: FAILED tests/test_io.py::test_io - TimeoutError" in text
    for value in ("https://ci.example.com/runs/8812", "localhost:8080",
                  "9090", "5d41402abc4b", "src/io/pool.py"):
        assert value in text


def test_extractive_summary_fits_max_tokens():
    many = [user(f"touch /data/shard-{i:04d}/part-{i:06d}.parquet id-{i:08d}")
            for i in range(500)]
    text = ExtractiveSummarizer().summarize(many, max_tokens=300)
    assert len(text) <= 1_200
    assert "- First request: touch /data/shard-0000" in text
    assert "id-00000499" in text  # the newest identifiers are kept first


def test_extractive_merges_its_own_previous_summary_and_keeps_a_foreign_one():
    s = ExtractiveSummarizer()
    first = s.summarize(CONVERSATION[:7])
    second = s.summarize(CONVERSATION[7:], previous_summary=first)
    assert "- First request: Fix the flaky test" in second
    assert "- Latest request: Now also bump" in second
    assert "src/io/pool.py" in second and "https://ci.example.com/runs/8812" in second
    assert second.count("## Goal") == 1

    foreign = s.summarize(CONVERSATION[7:], previous_summary="## Goal\nShip v2 (model text)")
    assert "## Earlier summary\n## Goal\nShip v2 (model text)" in foreign


def test_extract_facts_counts_requests():
    facts = extract_facts(CONVERSATION)
    assert facts.requests == 2
    assert facts.modified_files == ["src/io/pool.py"]
    assert facts.read_files == ["tests/test_io.py"]


def test_default_summarizer_needs_a_key():
    assert isinstance(default_summarizer(environ={}), ExtractiveSummarizer)
    chosen = default_summarizer("claude-haiku-4-5", environ={"ANTHROPIC_API_KEY": "sk-test"})
    assert isinstance(chosen, AnthropicSummarizer) and chosen.model == "claude-haiku-4-5"


# ---------------------------------------------------------------------------------------
# Anthropic, through the real SDK and a mock transport


def ok(text="## Goal\nsummary text"):
    return httpx2.Response(200, json={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5},
    })


def error(status, kind, message, headers=None):
    return httpx2.Response(status, headers=headers or {},
                           json={"type": "error", "error": {"type": kind, "message": message}})


class Server:
    """A mock transport: replies in turn from `replies` (the last one repeats)."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests = []

    def __call__(self, request):
        body = json.loads(request.content)
        self.requests.append(body)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        return reply(body) if callable(reply) else reply

    def summarizer(self, **options):
        client = anthropic.Anthropic(
            api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(self)))
        return AnthropicSummarizer(client, **options)


def test_what_the_anthropic_summarizer_sends():
    server = Server(ok())
    summarizer = server.summarizer(model="claude-haiku-4-5")
    text = summarizer.summarize(CONVERSATION, previous_summary="PREVIOUS CHECKPOINT",
                                focus="the locking change", max_tokens=1_234)
    assert text == "## Goal\nsummary text"
    (body,) = server.requests
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 1_234
    assert body["system"] == SYSTEM_PROMPT
    assert "tools" not in body
    assert [m["role"] for m in body["messages"]] == ["user"]
    blocks = body["messages"][0]["content"]
    assert [b["type"] for b in blocks] == ["text"]
    prompt = blocks[0]["text"]
    assert "<previous-summary>\nPREVIOUS CHECKPOINT\n</previous-summary>" in prompt
    assert UPDATE_INSTRUCTIONS in prompt and IDENTIFIER_INSTRUCTIONS in prompt
    assert prompt.endswith("Additional focus for this checkpoint:\nthe locking change")
    assert "[Assistant called a tool]: read(" in prompt
    raw = json.dumps(body)
    for forbidden in ('"tool_use"', '"tool_result"', '"toolCall"', '"toolResult"'):
        assert forbidden not in raw


def test_no_previous_summary_no_update_instructions():
    server = Server(ok())
    server.summarizer().summarize([user("hi there")])
    prompt = server.requests[0]["messages"][0]["content"][0]["text"]
    assert "<previous-summary>" not in prompt and UPDATE_INSTRUCTIONS not in prompt


@pytest.mark.parametrize(
    ("reply", "kind", "retryable"),
    [
        (error(529, "overloaded_error", "Overloaded"), SummarizerError, True),
        (error(429, "rate_limit_error", "slow down", {"retry-after": "2"}), SummarizerError, True),
        (error(500, "api_error", "boom"), SummarizerError, True),
        (error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 "
               "maximum"), SummaryOverflow, False),
        (error(413, "request_too_large", "Request exceeds the maximum size"), SummaryOverflow,
         False),
        (error(401, "authentication_error", "invalid x-api-key"), SummaryRejected, False),
        (error(400, "invalid_request_error", "messages: field required"), SummaryRejected,
         False),
        (error(504, "timeout_error", "gateway timeout"), SummaryTimeout, False),
    ],
)
def test_api_errors_become_typed_errors(reply, kind, retryable):
    server = Server(reply)
    with pytest.raises(kind) as caught:
        server.summarizer().summarize([user("hello")])
    assert type(caught.value) is kind and caught.value.retryable is retryable
    assert len(server.requests) == 1  # the SDK's own retries are off


def test_client_timeout_is_a_timeout():
    def hang(request):
        raise httpx2.ReadTimeout("timed out", request=request)

    client = anthropic.Anthropic(api_key="test",
                                 http_client=httpx2.Client(transport=httpx2.MockTransport(hang)))
    with pytest.raises(SummaryTimeout):
        AnthropicSummarizer(client, timeout=1.0).summarize([user("hello")])


def test_529_and_429_are_retried_with_backoff():
    server = Server(error(529, "overloaded_error", "Overloaded"),
                    error(429, "rate_limit_error", "slow down", {"retry-after": "2"}), ok())
    delays = []
    out = summarize_messages([user("hello there")], server.summarizer(), SMALL,
                             sleep=delays.append)
    assert out.level == FallbackLevel.FULL and out.text == "## Goal\nsummary text"
    assert len(server.requests) == 3 and out.attempts == 3
    assert 0.5 <= delays[0] <= 0.6 and delays[1] == 2.0  # Retry-After wins


def test_retries_are_limited_to_three_attempts():
    server = Server(error(529, "overloaded_error", "Overloaded"))
    delays = []
    out = summarize_messages([user("hello there")], server.summarizer(), SMALL,
                             sleep=delays.append)
    assert out.level == FallbackLevel.PLAIN
    assert len(server.requests) == 3 and len(delays) == 2


def test_prompt_too_long_goes_to_the_next_fallback_level():
    def reply(body):
        prompt = body["messages"][0]["content"][0]["text"]
        if "HUGE" in prompt:
            return error(400, "invalid_request_error",
                         "prompt is too long: 230000 tokens > 200000 maximum")
        return ok("## Goal\nthe small part")

    server = Server(reply)
    messages = [user("small " + "s" * 400), assistant("ok"), user("HUGE " + "h" * 40_000),
                assistant("fine"), user("last one")]
    delays = []
    out = summarize_messages(messages, server.summarizer(), SMALL, sleep=delays.append)
    assert out.level == FallbackLevel.PARTIAL and out.oversized == 1
    assert out.text.startswith("## Goal\nthe small part\n\n[Left out of this summary: a user")
    assert delays == []
    assert "HUGE" not in server.requests[-1]["messages"][0]["content"][0]["text"]


def test_compact_end_to_end_with_the_anthropic_summarizer(tmp_path):
    import journal
    from agent.compaction import SPLIT_TURN_HEADING, compact

    server = Server(ok("## Goal\nthe checkpoint"))
    settings = ContextSettings(context_window=64_000, keep_recent_tokens=1_000)
    with journal.Session.create(tmp_path / "s.jsonl", cwd=str(tmp_path)) as session:
        for m in CONVERSATION:
            session.append_message(m)
        first = compact(session, server.summarizer(), settings, sleep=lambda s: None)
        # the big tool result crosses the threshold: the first turn is split, nothing before it
        assert first.is_split_turn and first.summarized_messages == 0
        assert first.summary.startswith(f"No earlier history.\n\n---\n\n{SPLIT_TURN_HEADING}"
                                        "\n\n## Goal\nthe checkpoint")
        assert len(server.requests) == 1
        for i in range(4):
            session.append_message(user(f"more work {i} " + "w" * 2_000))
            session.append_message(assistant(f"did {i} " + "d" * 2_000))
        second = compact(session, server.summarizer(), settings, sleep=lambda s: None)
        assert second.summary.startswith("## Goal\nthe checkpoint")
        assert session.context(raw=True).messages[0]["summary"] == second.summary
    prompt = server.requests[1]["messages"][0]["content"][0]["text"]
    assert f"<previous-summary>\n{first.summary}\n</previous-summary>" in prompt
    for body in server.requests:
        assert "tools" not in body and '"tool_use"' not in json.dumps(body)
