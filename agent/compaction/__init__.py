"""agent.compaction: summarize the older part of a branch into a `compaction` entry.

Nothing is deleted: the summary is appended to the journal with the id of the first entry kept
verbatim. The package's modules, each one step, lower ones never importing higher ones:

- `transcript`: messages as the labelled text a summarizer reads;
- `facts`: identifiers, files, tool failures and decisions taken from messages, no model;
- `summarize`: the `Summarizer` protocol, its typed errors, the offline `ExtractiveSummarizer`
  and the `AnthropicSummarizer`;
- `cutpoint`: the projection of a branch, the cut point and `prepare_compaction` (read only);
- `staged`: `summarize_messages`, chunked and staged calls to a summarizer with retries and
  fallback levels;
- `compact`: `record_compaction` and `compact`, which runs the steps with hooks and the
  optional memory flush.

Everything a caller needs is importable from here.
"""

from __future__ import annotations

from agent.compaction.compact import (
    AGENTS_HEADING,
    SPLIT_TURN_HEADING,
    TURN_PREFIX_INSTRUCTIONS,
    CompactionHooks,
    CompactionResult,
    MemoryFlusher,
    agents_rules,
    compact,
    compose_summary,
    file_lists_section,
    flush_memory,
    memory_file,
    missing_identifiers_section,
    preserved_identifiers,
    record_compaction,
    run_hook,
    tool_failures_section,
)
from agent.compaction.cutpoint import (
    CUT_ROLES,
    TURN_START_ROLES,
    CompactionPreparation,
    CutPoint,
    Entry,
    duplicate_prompts,
    entry_role,
    estimate_branch_context,
    estimate_session_context,
    find_cut_point,
    prepare_compaction,
    projection,
)
from agent.compaction.staged import (
    MERGE_INSTRUCTIONS,
    NO_HISTORY,
    FallbackLevel,
    SummaryOutcome,
    adaptive_chunk_ratio,
    backoff_delay,
    call_groups,
    chunk_budget,
    chunk_messages,
    is_oversized,
    plain_summary,
    summarize_messages,
    summary_max_tokens,
)
from agent.compaction.summarize import (
    AnthropicSummarizer,
    ExtractiveSummarizer,
    Summarizer,
    SummarizerError,
    SummaryAborted,
    SummaryOverflow,
    SummaryRejected,
    SummaryTimeout,
    default_summarizer,
)

__all__ = [
    # compact
    "AGENTS_HEADING",
    "SPLIT_TURN_HEADING",
    "TURN_PREFIX_INSTRUCTIONS",
    "CompactionHooks",
    "CompactionResult",
    "MemoryFlusher",
    "agents_rules",
    "compact",
    "compose_summary",
    "file_lists_section",
    "flush_memory",
    "memory_file",
    "missing_identifiers_section",
    "preserved_identifiers",
    "record_compaction",
    "run_hook",
    "tool_failures_section",
    # cutpoint
    "CUT_ROLES",
    "TURN_START_ROLES",
    "CompactionPreparation",
    "CutPoint",
    "Entry",
    "duplicate_prompts",
    "entry_role",
    "estimate_branch_context",
    "estimate_session_context",
    "find_cut_point",
    "prepare_compaction",
    "projection",
    # staged
    "MERGE_INSTRUCTIONS",
    "NO_HISTORY",
    "FallbackLevel",
    "SummaryOutcome",
    "adaptive_chunk_ratio",
    "backoff_delay",
    "call_groups",
    "chunk_budget",
    "chunk_messages",
    "is_oversized",
    "plain_summary",
    "summarize_messages",
    "summary_max_tokens",
    # summarize
    "Summarizer",
    "SummarizerError",
    "SummaryAborted",
    "SummaryOverflow",
    "SummaryRejected",
    "SummaryTimeout",
    "ExtractiveSummarizer",
    "AnthropicSummarizer",
    "default_summarizer",
]
