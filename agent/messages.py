"""`Message`: a pi-shaped message as the agent wing reads it.

A message is the ``message`` field of a journal entry, or one the projection builds (a
compaction or branch summary, a shell run): a mapping with a ``role`` ("user", "assistant",
"toolResult", "bashExecution", "custom", "branchSummary", "compactionSummary") and that role's
fields, exactly as pi writes them. The agent only reads messages (a change is made on a copy),
hence a read-only `Mapping`; what a model returns is `agent.models.AssistantMessage`, a dict
its caller owns.

This module is the one owner of the alias and imports nothing, so any module may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Message = Mapping[str, Any]

__all__ = ["Message"]
