"""journal: an event-sourced session store for long-running LLM agents (pi format v3)."""

from .codec import Diagnostic
from .context import (
    Context,
    build_context,
    compaction_summary_message,
    entry_message,
    iso_to_millis,
    to_model_messages,
)
from .durability import Durability
from .errors import (
    JournalError,
    LockTimeout,
    NotASession,
    UnknownEntry,
    UnsafeLockFile,
    UnsupportedVersion,
    WriteFailed,
)
from .info import SessionInfo, inspect
from .lineage import lineage, resolve_live
from .lock import current_holder
from .model import CURRENT_VERSION, Entry
from .pairing import Fix, PairingReport, sanitize, synthetic_result
from .quarantine import Quarantined, read_quarantine
from .repair import Problem, RepairReport, repair
from .rotation import RotationAborted, RotationPolicy, RotationResult, rotate
from .session import Session
from .snapshot import Snapshot, load, resume
from .tail import TailEvent, afollow, afollow_events, follow, follow_events
from .tree import Tree, TreeIssue, TreeNode
from .validate import InvalidPairing, api_pairing_problems, assert_valid_pairing, pairing_problems
from .view import View

__all__ = [
    "CURRENT_VERSION",
    "Context",
    "Diagnostic",
    "Durability",
    "Entry",
    "Fix",
    "InvalidPairing",
    "JournalError",
    "LockTimeout",
    "NotASession",
    "PairingReport",
    "Problem",
    "Quarantined",
    "RepairReport",
    "RotationAborted",
    "RotationPolicy",
    "RotationResult",
    "Session",
    "SessionInfo",
    "Snapshot",
    "TailEvent",
    "Tree",
    "TreeIssue",
    "TreeNode",
    "UnknownEntry",
    "UnsafeLockFile",
    "UnsupportedVersion",
    "View",
    "WriteFailed",
    "afollow",
    "afollow_events",
    "api_pairing_problems",
    "assert_valid_pairing",
    "build_context",
    "compaction_summary_message",
    "current_holder",
    "entry_message",
    "follow",
    "follow_events",
    "inspect",
    "iso_to_millis",
    "lineage",
    "load",
    "pairing_problems",
    "read_quarantine",
    "repair",
    "resolve_live",
    "resume",
    "rotate",
    "sanitize",
    "synthetic_result",
    "to_model_messages",
]
