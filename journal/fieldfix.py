"""What repair does with an entry whose fields have the wrong JSON type (`model.bad_fields`).

Readers keep such entries as pi does and only report them; repair must leave a file that reads
clean, so it decides here, per field, the smallest fix that keeps the projection pi makes:

- `tokensBefore` holding a number written as a string (`"12000"`) becomes that number, as
  JavaScript's `Number()` reads it; any other value is removed (the field is optional);
- `firstKeptEntryId` that is not a string or null is removed: pi finds no entry with it and
  keeps nothing before the compaction, exactly as when the field is absent;
- any other wrong field makes the entry unusable (a label whose target is an object, a message
  without a role, a model change without a model name, ...): the entry is dropped, its bytes
  are quarantined and its children are attached to its parent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .model import Entry, bad_fields

_REMOVABLE = frozenset({"tokensBefore", "firstKeptEntryId"})


@dataclass
class FieldRepair:
    """The repaired entry (None: drop it) and one line per change made."""

    entry: Entry | None
    actions: list[str] = field(default_factory=list)


def repair_fields(entry: Entry) -> FieldRepair | None:
    """How to fix an entry's wrongly typed fields, or None when they are all right.

    Example:
        >>> repair_fields({"type": "compaction", "id": "a", "parentId": None,
        ...                "summary": "s", "tokensBefore": "12"}).actions
        ["tokensBefore: the string '12' became the number 12"]
    """
    bad = bad_fields(entry)
    if not bad:
        return None
    if any(name not in _REMOVABLE for name, _ in bad):
        reasons = "; ".join(f"{name} is not {expected}" for name, expected in bad)
        return FieldRepair(None, [f"dropped the entry ({reasons})"])
    fixed = dict(entry)
    actions = []
    for name, expected in bad:
        value = fixed.pop(name)
        number = _js_number(value) if name == "tokensBefore" else None
        if number is not None:
            fixed[name] = number
            actions.append(f"{name}: the string {value!r} became the number {number}")
        else:
            actions.append(f"{name}: removed {_short(value)} (not {expected})")
    return FieldRepair(fixed, actions)


def _js_number(value: object) -> int | float | None:
    """A finite number written as a string, read as JavaScript's Number() reads it."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def _short(value: object, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
