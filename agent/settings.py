"""Every tunable number of the agent's context management, in one place.

All modules in ``agent`` take a :class:`ContextSettings` (or fall back to
:data:`DEFAULT_SETTINGS`), so a caller overrides a threshold once with
``dataclasses.replace(DEFAULT_SETTINGS, reserve_tokens=8_000)`` instead of
hunting for module constants.
"""

from __future__ import annotations

from dataclasses import dataclass

from journal import RotationPolicy

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

    # --- the session file and the model (journal-agent run and chat)
    rotate: bool = True
    """Rotate the session into a short successor file after a compaction (journal's
    `RotationPolicy`), so the files of long sessions stop growing; `--no-rotate` turns it off."""
    rotate_min_bytes: int = 8 * 1024 * 1024
    """...but only once the file holds at least this many bytes: a small file is not worth a
    successor (each rotation archives a file and starts a new one), a large one is read and
    copied less often. 8 MiB is a few hours of a busy coding session."""
    fallback_models: tuple[str, ...] = ()
    """Models (``anthropic:NAME``, ``scripted:FILE``) tried in order when the model in use is
    overloaded, rate limited or failing on the server side after its client's retries; the
    next run starts on the primary model again. ``--fallback-model`` adds to them."""

    # --- request-level pruning (agent.prune)
    history_turn_limit: int = 0
    """Send only the last this many user turns (a user message and all that follows it up
    to the next); 0: no limit, the design's default (`limitHistoryTurns`). Unlike the design,
    a compaction summary at the start is kept: it stands for everything before and is short."""
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
    aggregate_input_headroom: float = 0.75
    """Aggregate truncation (before a request over budget, and the overflow ladder's
    truncation rung) cuts tool results until the whole input fits this share of the window,
    leaving the rest for the reply and the estimate's error (the design's 0.75)."""

    # --- overflow recovery (agent.overflow, the runner)
    overflow_compactions: int = 3
    """Compactions the overflow ladder may run for one model call (a compaction already run
    while that call's request was built counts as one). Then tool results are truncated in
    the session, then the run stops."""
    timeout_compactions: int = 2
    """Compactions after a timeout, for one model call, when the prompt is large."""
    timeout_compact_share: float = 0.65
    """A timeout compacts only when the prompt estimate is above this share of the window."""

    # --- compaction (agent.compaction)
    keep_recent_tokens: int = 20_000
    """Tokens of the newest messages kept verbatim after a compaction (see find_cut_point)."""
    keep_recent_max_share: float = 0.5
    """keep_recent_tokens is clamped to this share of the prompt budget, so that what is kept
    leaves room for the summary in small windows."""
    max_history_share: float = 0.5
    """When the history to summarize exceeds this share of the prompt budget, its oldest half
    is dropped (repeatedly) and summarized on its own first, its summary then serving as the
    previous summary of the rest (the design's `maxHistoryShare`)."""
    summary_reserve_share: float = 0.8
    """Largest summary, as a share of the reply reserve (pi: 0.8)."""
    summary_budget_share: float = 0.25
    """...and as a share of the prompt budget, whichever is smaller."""
    turn_prefix_reserve_share: float = 0.5
    """Largest summary of a split turn's prefix, as a share of the reply reserve."""
    chunk_ratio: float = 0.4
    """Share of the window one summarization request may fill."""
    min_chunk_ratio: float = 0.15
    """The chunk ratio shrinks towards this when the average message is large."""
    large_message_share: float = 0.1
    """Average message (x summary_safety_margin) above this share of the window: smaller chunks."""
    summary_safety_margin: float = 1.2
    """Chunks are filled to budget / this, for estimator error."""
    summarization_overhead_tokens: int = 4_096
    """Tokens of a summarization request taken by prompts, previous summary and tags."""
    oversized_message_share: float = 0.5
    """A message (x summary_safety_margin) above this share of the window is too large to
    summarize; the second fallback level leaves it out with a note."""
    summary_tool_result_chars: int = 2_000
    """Tool results count this many characters at most when chunks are planned (as
    AnthropicSummarizer cuts them; keep its tool_result_chars equal)."""
    max_preserved_identifiers: int = 30
    """Identifiers of the summarized messages checked (and appended when missing) verbatim."""
    max_tool_failures: int = 8
    tool_failure_chars: int = 160
    summary_attempts: int = 3
    """Attempts per summarization call. No retry after an overflow, a timeout, an abort or a
    refused request (agent.compaction.summarize error types)."""
    retry_min_delay: float = 0.5
    retry_max_delay: float = 5.0
    retry_jitter: float = 0.2
    """Backoff delays are multiplied by a random factor in [1 - jitter, 1 + jitter]."""
    duplicate_prompt_min_chars: int = 24
    duplicate_prompt_window_seconds: float = 60.0
    hook_timeout_seconds: float = 5.0
    """Longest wait for a before/after compaction hook; a slower hook is left behind."""
    agents_file: str = "AGENTS.md"
    """The workspace file whose rules every compaction summary carries ('' for none)."""
    agents_sections: tuple[str, ...] = ("Session Startup", "Red Lines")
    """Headings (any level, matched case-insensitively) whose sections are carried. A file
    with none of them has its opening carried instead: we differ from the design here because
    most AGENTS.md files name their sections otherwise and put the rules first."""
    agents_facts_chars: int = 2_000
    """Most characters of AGENTS.md carried into one summary."""
    memory_flush: bool = False
    """Append key facts to <workspace>/memory/YYYY-MM-DD.md before they are compacted away."""
    memory_flush_soft_tokens: int = 4_000
    """The runner flushes once per compaction cycle, as soon as the context estimate comes
    within this many tokens of the prompt budget (where compaction starts): the design's
    `softThresholdTokens`. The compaction of that cycle then does not flush again."""


DEFAULT_SETTINGS = ContextSettings()


def rotation_policy(settings: ContextSettings = DEFAULT_SETTINGS) -> RotationPolicy | None:
    """The rotation policy of `journal-agent` sessions, None when rotation is off."""
    if not settings.rotate:
        return None
    return RotationPolicy(max_bytes=settings.rotate_min_bytes, after_compaction=True)
