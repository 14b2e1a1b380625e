"""Every tunable number of the agent's context management, in one place.

All modules in ``agent`` take a :class:`ContextSettings` (or fall back to
:data:`DEFAULT_SETTINGS`), so a caller overrides a threshold once with
``dataclasses.replace(DEFAULT_SETTINGS, reserve_tokens=8_000)`` instead of
hunting for module constants.
"""

from __future__ import annotations

from dataclasses import dataclass

# (glob pattern, window) pairs; first match wins, so specific patterns go first.
# Patterns are matched case-insensitively against the model id with any
# "provider/" prefix removed.
DEFAULT_MODEL_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-*", 200_000),
    ("gpt-4o*", 128_000),
    ("gpt-4.1*", 1_047_576),
    ("gpt-5*", 400_000),
    ("o3*", 200_000),
    ("o4-mini*", 200_000),
    ("gemini-*", 1_048_576),
)

# (smallest window in tokens, largest single tool result in chars); the entry with the
# largest threshold not above the window applies.
DEFAULT_TOOL_RESULT_CHAR_CAPS: tuple[tuple[int, int], ...] = (
    (0, 16_000),
    (100_000, 32_000),
    (200_000, 64_000),
)


@dataclass(frozen=True)
class ContextSettings:
    """Thresholds for token counting, window sizing, pruning, truncation and routing."""

    # --- token counting (agent.tokens)
    token_counter: str = "chars"
    """``"chars"`` (ceil(chars/4), what pi uses) or ``"tiktoken"`` (cl100k_base)."""
    image_tokens: int = 1_200
    """Flat cost of one image block; providers bill images by pixels, not bytes."""
    estimate_safety_margin: float = 1.2
    """Multiplier applied when no assistant ``usage`` anchors the estimate."""

    # --- window and budget (agent.window)
    context_window: int | None = None
    """Explicit window; wins over the model table."""
    default_context_window: int = 200_000
    model_windows: tuple[tuple[str, int], ...] = DEFAULT_MODEL_WINDOWS
    min_context_window: int = 16_000
    """Windows below this are refused: the reserve alone would eat them."""
    warn_context_window: int = 32_000
    reserve_tokens: int = 16_384
    """Tokens kept free for the model's reply."""
    min_prompt_tokens: int = 8_000
    """The reserve is clamped so min(this, window / 2) stays available for the prompt."""

    # --- request-level pruning (agent.prune)
    soft_trim_ratio: float = 0.30
    hard_clear_ratio: float = 0.50
    soft_trim_min_chars: int = 4_000
    """Only tool results with more text than this are soft-trimmed."""
    soft_trim_head_chars: int = 1_500
    soft_trim_tail_chars: int = 1_500
    protected_assistant_turns: int = 3
    """Tool results of this many most recent assistant turns are never pruned."""

    # --- tool-result truncation (agent.truncate)
    chars_per_token: int = 4
    tool_result_window_share: float = 0.30
    """Largest share of the window one tool result may take."""
    tool_result_char_caps: tuple[tuple[int, int], ...] = DEFAULT_TOOL_RESULT_CHAR_CAPS
    truncate_tail_share: float = 0.30
    """Share of the kept characters given to the tail when the tail looks important."""
    tail_scan_chars: int = 2_000
    """How much of the end of a result is searched for signs of an important tail."""
    aggregate_min_keep_chars: int = 2_000
    """Aggregate truncation never shrinks one result below this many characters."""


DEFAULT_SETTINGS = ContextSettings()
