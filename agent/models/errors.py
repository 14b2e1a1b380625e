"""The one classifier of Anthropic API failures, shared by the model and the summarizer.

:func:`classify` turns anything the SDK or its HTTP transport raises into an
:class:`APIFailure`: what kind of failure it is, the status and error type the API sent, its
text, and, when the API says so, the wait it asks for and the sizes of an overflowing request.
:class:`~agent.models.anthropic.AnthropicModel` and
:class:`~agent.compaction.summarize.AnthropicSummarizer` each map the kind onto their own error
types (they differ in what they retry), so a response means the same thing to both.

A request that does not fit (:attr:`Failure.OVERFLOW`) is recognised by any of: HTTP 413 (the
SDK's ``ContentTooLargeError``), the error type ``request_too_large``, or a 400 /
``invalid_request_error`` whose message matches :data:`OVERFLOW_TEXT`. The API's own phrases
are "prompt is too long: 210034 tokens > 200000 maximum" and "input length and `max_tokens`
exceed context limit: 198000 + 8192 > 200000"; the pattern also takes the usual wordings of
proxies and older API versions ("input is too long", "too many tokens", "context length",
"maximum context", "exceeds the model's maximum", "request too large", ...).

The rest, first match wins: 401/403 or ``authentication_error``/``permission_error`` (and
missing credentials) are :attr:`Failure.AUTH`; 529 or ``overloaded_error``
:attr:`Failure.OVERLOADED`; 429 or ``rate_limit_error`` :attr:`Failure.RATE_LIMIT`; 408/504,
``timeout_error`` and transport timeouts :attr:`Failure.TIMEOUT`; other 5xx, 409 and
``api_error`` :attr:`Failure.SERVER`; connection failures :attr:`Failure.CONNECTION`; any other
status :attr:`Failure.REQUEST` (the request can never succeed as sent); an SDK error without a
status :attr:`Failure.OTHER`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anthropic
import httpx2


class Failure(StrEnum):
    OVERFLOW = "overflow"
    """The request is larger than the model's window or the API's size limit: send less."""
    AUTH = "auth"
    OVERLOADED = "overloaded"
    RATE_LIMIT = "rate_limit"
    TIMEOUT = "timeout"
    SERVER = "server"
    """A server-side failure that may pass on its own (5xx, a 409 conflict)."""
    CONNECTION = "connection"
    REQUEST = "request"
    """The API refused the request as sent (a 4xx that is none of the above)."""
    OTHER = "other"
    """An SDK or transport error that carries no status."""


TRANSIENT = frozenset(
    {Failure.OVERLOADED, Failure.RATE_LIMIT, Failure.TIMEOUT, Failure.SERVER, Failure.CONNECTION}
)
"""Failures that may pass when the same request is sent again later."""

OVERFLOW_TEXT = re.compile(
    r"prompt is too long|input is too long|too many (?:input )?tokens"
    r"|context (?:window|length|limit)|maximum context"
    r"|exceeds? the (?:model'?s? )?(?:context|maximum|limit)|request too large",
    re.IGNORECASE,
)
"""The phrases that say a request does not fit, in the API's messages and proxies'."""
OVERFLOW_TYPES = frozenset({"request_too_large"})

_TOKENS_OVER_LIMIT = re.compile(r"(\d[\d,]*)\s*tokens?\s*>\s*(\d[\d,]*)")
_SUM_OVER_LIMIT = re.compile(r"(\d[\d,]*)\s*\+\s*(\d[\d,]*)\s*>\s*(\d[\d,]*)")
_AUTH_TYPES = frozenset({"authentication_error", "permission_error"})
_TIMEOUT_STATUS = frozenset({408, 504})


@dataclass(frozen=True)
class APIFailure:
    """One classified failure of a call to the Anthropic API."""

    kind: Failure
    text: str
    """What the API or the transport said, prefixed with status and error type when known."""
    status: int | None = None
    error_type: str = ""
    """The ``error.type`` of the API's body ("" when there is none)."""
    retry_after: float | None = None
    """Seconds the API asked to wait (``retry-after-ms`` or ``retry-after``)."""
    tokens: int | None = None
    """For an overflow: the size counted against the window (with the output budget when the
    API's message adds it), when the message says so."""
    limit: int | None = None
    """For an overflow: the window the API reported, when its message says so."""

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT


def is_overflow(status: int | None, error_type: str, message: str) -> bool:
    """Whether a response with this status, ``error.type`` and message is a context overflow."""
    if status == 413 or error_type in OVERFLOW_TYPES:
        return True
    bad_request = status == 400 or error_type == "invalid_request_error"
    return bad_request and OVERFLOW_TEXT.search(message) is not None


def overflow_sizes(message: str) -> tuple[int | None, int | None]:
    """(size, limit) from an overflow message, or (None, None) when it gives no numbers."""
    summed = _SUM_OVER_LIMIT.search(message)
    if summed:
        prompt, output, limit = (_number(n) for n in summed.groups())
        return prompt + output, limit
    over = _TOKENS_OVER_LIMIT.search(message)
    if over:
        tokens, limit = (_number(n) for n in over.groups())
        return tokens, limit
    return None, None


def classify(error: BaseException) -> APIFailure | None:
    """The failure ``error`` stands for; None when it comes from neither the SDK nor httpx2."""
    text = str(error) or type(error).__name__
    if isinstance(error, anthropic.APITimeoutError | httpx2.TimeoutException):
        return APIFailure(Failure.TIMEOUT, text)
    if isinstance(error, anthropic.APIStatusError):
        return _status_failure(error)
    if isinstance(error, anthropic.APIConnectionError | httpx2.TransportError):
        return APIFailure(Failure.CONNECTION, text)
    if isinstance(error, anthropic.CredentialsError) or (
        isinstance(error, TypeError) and "authentication" in text
    ):
        # the SDK raises a TypeError when it finds no key at request time
        return APIFailure(Failure.AUTH, text)
    if isinstance(error, anthropic.AnthropicError | httpx2.HTTPError):
        return APIFailure(Failure.OTHER, text)
    return None


def _status_failure(error: anthropic.APIStatusError) -> APIFailure:
    status = error.status_code
    body = error.body if isinstance(error.body, Mapping) else {}
    raw_error = body.get("error")
    fields: Mapping[str, Any] = raw_error if isinstance(raw_error, Mapping) else {}
    raw_type = getattr(error, "type", None) or fields.get("type")
    etype = raw_type if isinstance(raw_type, str) else ""
    # a proxy may send a structured message: the patterns need text
    detail = str(getattr(error, "api_message", None) or fields.get("message") or error)
    # an error event inside a stream arrives with the stream's status, 200
    label = f"{status} {etype}".strip() if status and status != 200 else (etype or "error")
    text = f"{label}: {detail}"
    if is_overflow(status, etype, detail):
        tokens, limit = overflow_sizes(detail)
        return APIFailure(Failure.OVERFLOW, text, status, etype, tokens=tokens, limit=limit)
    kind = _status_kind(status, etype)
    after = _retry_after(error.response.headers) if kind in TRANSIENT else None
    return APIFailure(kind, text, status, etype, retry_after=after)


def _status_kind(status: int, etype: str) -> Failure:
    if status in (401, 403) or etype in _AUTH_TYPES:
        return Failure.AUTH
    if status == 529 or etype == "overloaded_error":
        return Failure.OVERLOADED
    if status == 429 or etype == "rate_limit_error":
        return Failure.RATE_LIMIT
    if status in _TIMEOUT_STATUS or etype == "timeout_error":
        return Failure.TIMEOUT
    if status >= 500 or status == 409 or etype == "api_error":
        return Failure.SERVER
    return Failure.REQUEST


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for key, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers[key]) / scale
        except (KeyError, TypeError, ValueError):
            continue
    return None


def _number(text: str) -> int:
    return int(text.replace(",", ""))
