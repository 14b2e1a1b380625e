"""One classifier of Anthropic API errors: the model and the summarizer, fed the same response
through the real SDK over a mock transport, read it as the same kind of failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from anthropic_mock import MockAPI, error_response

from agent.compaction.summarize import (
    SummarizerError,
    SummaryOverflow,
    SummaryRejected,
    SummaryTimeout,
)
from agent.models import (
    AuthError,
    ContextOverflow,
    ModelError,
    ModelRequest,
    ModelTimeout,
    Overloaded,
    RateLimited,
)
from agent.models.errors import OVERFLOW_TEXT, Failure, classify, is_overflow, overflow_sizes

USER = {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 1}

# what each kind of failure becomes on either side: (model error type, summarizer error type,
# whether the summarizer retries it)
SIDES: dict[Failure, tuple[type[ModelError], type[SummarizerError], bool]] = {
    Failure.OVERFLOW: (ContextOverflow, SummaryOverflow, False),
    Failure.AUTH: (AuthError, SummaryRejected, False),
    Failure.OVERLOADED: (Overloaded, SummarizerError, True),
    Failure.RATE_LIMIT: (RateLimited, SummarizerError, True),
    Failure.TIMEOUT: (ModelTimeout, SummaryTimeout, False),
    Failure.SERVER: (ModelError, SummarizerError, True),
    Failure.REQUEST: (ModelError, SummaryRejected, False),
}

OVERFLOW_PHRASES = [
    # what the API answers today
    "prompt is too long: 210034 tokens > 200000 maximum",
    "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, decrease "
    "input length or `max_tokens` and try again",
    # what one of the two old classifiers matched and the other did not
    "input is too long for requested model",
    "the request exceeds the model's context",
    "prompt exceeds the context available",
    "this request exceeds the limit of the model",
    # what both matched
    "input exceeds the model's maximum number of tokens",
    "too many input tokens",
    "too many tokens in the request",
    "this model's maximum context length is 200000 tokens",
    "the context window of this model is 200000 tokens",
    "request too large for the model",
]

Reply = Callable[[], httpx2.Response]

RESPONSES: list[tuple[str, Reply, Failure]] = [
    *[
        (f"400 {phrase[:30]}",
         lambda phrase=phrase: error_response(400, "invalid_request_error", phrase),
         Failure.OVERFLOW)
        for phrase in OVERFLOW_PHRASES
    ],
    ("413 request_too_large",
     lambda: error_response(413, "request_too_large",
                            "Request exceeds the maximum allowed number of bytes."),
     Failure.OVERFLOW),
    ("413 without a body", lambda: httpx2.Response(413, text="Request Entity Too Large"),
     Failure.OVERFLOW),
    ("400 request_too_large", lambda: error_response(400, "request_too_large", "Too large"),
     Failure.OVERFLOW),
    ("401", lambda: error_response(401, "authentication_error", "invalid x-api-key"),
     Failure.AUTH),
    ("403", lambda: error_response(403, "permission_error", "not allowed"), Failure.AUTH),
    ("529", lambda: error_response(529, "overloaded_error", "Overloaded"), Failure.OVERLOADED),
    ("429", lambda: error_response(429, "rate_limit_error", "slow down", **{"retry-after": "2"}),
     Failure.RATE_LIMIT),
    ("504", lambda: error_response(504, "timeout_error", "gateway timeout"), Failure.TIMEOUT),
    ("408", lambda: httpx2.Response(408, text="Request Timeout"), Failure.TIMEOUT),
    ("500", lambda: error_response(500, "api_error", "Internal server error"), Failure.SERVER),
    ("503", lambda: httpx2.Response(503, text="Service Unavailable"), Failure.SERVER),
    ("409", lambda: httpx2.Response(409, text="Conflict"), Failure.SERVER),
    ("400 other", lambda: error_response(400, "invalid_request_error", "tools.0.name: bad"),
     Failure.REQUEST),
    ("404", lambda: error_response(404, "not_found_error", "model: claude-x"), Failure.REQUEST),
    ("400 structured message",
     lambda: httpx2.Response(400, json={"type": "error", "error": {
         "type": "invalid_request_error", "message": {"field": "tools.0.name"}}}),
     Failure.REQUEST),
]


def model_error(reply: Reply) -> ModelError:
    api = MockAPI().queue(reply())
    with pytest.raises(ModelError) as caught:
        api.model(max_retries=0).complete(ModelRequest(messages=[USER]))
    return caught.value


def summarizer_error(reply: Reply) -> SummarizerError:
    api = MockAPI().queue(reply())
    with pytest.raises(SummarizerError) as caught:
        api.summarizer().summarize([USER])
    return caught.value


@pytest.mark.parametrize(("reply", "kind"), [(r, k) for _, r, k in RESPONSES],
                         ids=[name for name, _, _ in RESPONSES])
def test_model_and_summarizer_read_a_response_the_same_way(reply: Reply, kind: Failure) -> None:
    model_type, summarizer_type, retryable = SIDES[kind]
    from_model = model_error(reply)
    from_summarizer = summarizer_error(reply)
    assert type(from_model) is model_type, from_model
    assert type(from_summarizer) is summarizer_type, from_summarizer
    assert from_summarizer.retryable is retryable
    assert from_model.status == from_summarizer.status == reply().status_code


@pytest.mark.parametrize("phrase", OVERFLOW_PHRASES)
def test_every_overflow_phrase_is_an_overflow_on_both_sides(phrase: str) -> None:
    def reply() -> httpx2.Response:
        return error_response(400, "invalid_request_error", phrase)

    assert isinstance(model_error(reply), ContextOverflow)
    assert isinstance(summarizer_error(reply), SummaryOverflow)


def test_the_sizes_of_both_api_overflow_messages_are_read() -> None:
    too_long = model_error(lambda: error_response(
        400, "invalid_request_error", "prompt is too long: 210,034 tokens > 200000 maximum"))
    with_output = model_error(lambda: error_response(
        400, "invalid_request_error",
        "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000"))
    assert isinstance(too_long, ContextOverflow) and isinstance(with_output, ContextOverflow)
    assert (too_long.tokens, too_long.limit) == (210034, 200000)
    assert (with_output.tokens, with_output.limit) == (206192, 200000)


def test_retry_after_is_read_the_same_way_on_both_sides() -> None:
    def reply() -> httpx2.Response:
        return error_response(429, "rate_limit_error", "slow down", **{"retry-after-ms": "1500"})

    from_model = model_error(reply)
    assert isinstance(from_model, RateLimited)
    assert from_model.retry_after == summarizer_error(reply).retry_after == 1.5


def test_a_transport_timeout_is_a_timeout_on_both_sides() -> None:
    def hang(request: Any) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    api = MockAPI()
    api.handler = hang  # type: ignore[method-assign]
    with pytest.raises(ModelTimeout):
        api.model(max_retries=0).complete(ModelRequest(messages=[USER]))
    with pytest.raises(SummaryTimeout):
        api.summarizer(timeout=1.0).summarize([USER])


def test_classify_leaves_foreign_exceptions_alone() -> None:
    assert classify(ValueError("not ours")) is None
    assert classify(TypeError("unsupported operand")) is None


def test_overflow_rule_needs_a_bad_request_or_a_size_status() -> None:
    assert is_overflow(413, "", "anything")
    assert is_overflow(200, "request_too_large", "")
    assert is_overflow(200, "invalid_request_error", "prompt is too long")
    assert not is_overflow(500, "api_error", "prompt is too long")
    assert not is_overflow(400, "invalid_request_error", "messages: field required")
    assert overflow_sizes("no numbers here") == (None, None)
    assert all(OVERFLOW_TEXT.search(p) for p in OVERFLOW_PHRASES)
