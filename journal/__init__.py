"""journal: an event-sourced session store for long-running LLM agents (pi format v3)."""

from .codec import Diagnostic
from .context import Context, build_context, to_model_messages
from .durability import Durability
from .errors import (
    JournalError,
    LockTimeout,
    NotASession,
    UnknownEntry,
    UnsupportedVersion,
    WriteFailed,
)
from .lock import current_holder
from .model import CURRENT_VERSION, Entry
from .quarantine import Quarantined, read_quarantine
from .session import Session
from .snapshot import Snapshot, load, resume
from .tree import Tree, TreeIssue, TreeNode

__all__ = [
    "CURRENT_VERSION",
    "Context",
    "Diagnostic",
    "Durability",
    "Entry",
    "JournalError",
    "LockTimeout",
    "NotASession",
    "Quarantined",
    "Session",
    "Snapshot",
    "Tree",
    "TreeIssue",
    "TreeNode",
    "UnknownEntry",
    "UnsupportedVersion",
    "WriteFailed",
    "build_context",
    "current_holder",
    "load",
    "read_quarantine",
    "resume",
    "to_model_messages",
]
