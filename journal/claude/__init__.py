"""Claude Code transcripts, read in place as a second dialect of the store.

Claude Code writes each session as `~/.claude/projects/<project>/<session>.jsonl` (one record
per line, no header) and each subagent's run as `<session>/subagents/agent-<id>.jsonl`. This
package detects such files (`dialect_of`, `detect_stream`), reads them (`read`, `resume`) and
translates their records into the store's own entries (`Translator`), so the tree, the
projection, `View`, the renderer and the tail work on them unchanged. `journal.load` and
`journal.resume` call it by themselves when a file is a Claude Code transcript. Nothing here
writes: Claude Code owns its files.

The projection, as Claude Code resumes a session:

- the leaf is the last main-chain (not `isSidechain`) `user` or `assistant` record; in a file
  with none, the last such record of any chain, else the latest `summary`'s `leafUuid`;
- the branch is the walk up `parentUuid` from the leaf; at a `compact_boundary` it goes on
  along `logicalParentUuid` (the history before it), but the latest boundary on the branch
  is a compaction: the model sees its summary (the `isCompactSummary` user record under it)
  and what follows, nothing before;
- a compaction that kept its latest records (`preservedSegment`) has them relinked under
  its summary, as Claude Code relinks them;
- consecutive assistant lines of one API response (same `message.id`) are one message;
- the results of a response's tool calls follow it, in the order written, even those Claude
  Code hung beside the chain (parallel calls);
- sidechain records and subagent files are branches of their own, never on the main branch.

Example:
    >>> import journal
    >>> view = journal.View.open("~/.claude/projects/p/1c0b....jsonl")  # doctest: +SKIP
    >>> len(view.context().messages)  # doctest: +SKIP
"""

from .detect import (
    CLAUDE,
    DIALECTS,
    PI,
    check_dialect,
    detect_bytes,
    detect_stream,
    dialect_of,
    stated_dialect,
)
from .messages import assistant_message, user_messages
from .reading import ClaudeRead, feed_lines, read, resume, subagent_files
from .records import RECORD_TYPES, Record
from .translate import COMPACT_SUMMARY, CUSTOM_PREFIX, Translator, kept_copy_of

__all__ = [
    "CLAUDE",
    "COMPACT_SUMMARY",
    "CUSTOM_PREFIX",
    "DIALECTS",
    "PI",
    "RECORD_TYPES",
    "ClaudeRead",
    "Record",
    "Translator",
    "assistant_message",
    "check_dialect",
    "detect_bytes",
    "detect_stream",
    "dialect_of",
    "feed_lines",
    "kept_copy_of",
    "read",
    "resume",
    "stated_dialect",
    "subagent_files",
    "user_messages",
]
