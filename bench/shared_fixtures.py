"""Where the third-party session files live: outside this repository.

The pi session files (and Claude Code ones) used as test data are copies of other projects'
test data, so this repository does not hold them. They live in a ``shared/fixtures/`` folder
beside the clone (``<repo>/../shared/fixtures/pi`` and ``.../claude``), or under the folder
named by the environment variable ``JOURNAL_SHARED_FIXTURES``. Whoever reads them asks
`missing` first and skips, with its reason, when they are absent (a plain clone).

This module is the one place that knows the rule; it uses the standard library only, so that
bench scripts and tests can both load it by path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

ENV_VAR = "JOURNAL_SHARED_FIXTURES"
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO_ROOT.parent / "shared" / "fixtures"

PI = "pi"
CLAUDE = "claude"
PI_FILES = ("all-types.jsonl", "before-compaction.jsonl", "large-session.jsonl")


def shared_root(environ: Mapping[str, str] = os.environ) -> Path:
    """$JOURNAL_SHARED_FIXTURES when set (and not empty), else ``<repo>/../shared/fixtures``."""
    configured = environ.get(ENV_VAR)
    return Path(configured) if configured else DEFAULT_ROOT


def fixture_dir(kind: str, environ: Mapping[str, str] = os.environ) -> Path:
    """The folder of one kind of third-party file (`PI` or `CLAUDE`), present or not."""
    return shared_root(environ) / kind


def missing(kind: str, names: Iterable[str] = (),
            environ: Mapping[str, str] = os.environ) -> str | None:
    """Why the `kind` folder (or one of `names` in it) cannot be read, or None when all are there.

    The reason names the path looked at and how to provide it, ready for a skip message.
    """
    directory = fixture_dir(kind, environ)
    how = (f"set {ENV_VAR} to a folder holding {kind}/, or put shared/fixtures/{kind}/ "
           f"beside the repository")
    if not directory.is_dir():
        return f"third-party {kind} session files not found at {directory} ({how})"
    for name in names:
        if not (directory / name).is_file():
            return f"third-party {kind} session file {directory / name} not found ({how})"
    return None
