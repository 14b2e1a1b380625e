"""The example scenarios of the scripted model, shipped inside the package.

`journal-agent demo` replays them, so they travel as package data: an installed wheel has no
`fixtures/` beside it. `--model scripted:NAME` finds a scenario here by its file name.
"""

from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent
"""The folder holding the shipped `*.json` scenarios."""


def scenario_path(name: str) -> Path:
    """The shipped scenario file `name` (such as "demo.json"); it may not exist."""
    return SCENARIOS / name
