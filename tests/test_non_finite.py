"""A NaN or infinity in an entry is refused at append, file and database sessions alike:
JSON has no such number (orjson would write null), so the open session would hold a number
that a resume reads back as null. Nothing is written, the session in memory is unchanged,
and the error names the field."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from either_backend import stored

from journal import NonFiniteNumber, Session, resume


def assistant(cost: float) -> dict[str, object]:
    return {"role": "assistant", "content": [{"type": "text", "text": "hi"}], "provider": "p",
            "model": "m", "stopReason": "stop", "timestamp": 2,
            "usage": {"input": 1, "output": 1, "cost": {"total": cost}}}


APPENDS: dict[str, tuple[Callable[[Session], object], str]] = {
    "message NaN": (lambda s: s.append_message(assistant(math.nan)), "message.usage.cost.total"),
    "custom inf": (lambda s: s.append_custom_entry("x", {"v": [1, math.inf]}), "data.v[1]"),
    "entry -inf": (lambda s: s.append_entry({"type": "custom", "customType": "x",
                                             "data": -math.inf}), "data"),
    "batch": (lambda s: s.append_many([
        {"type": "message", "message": {"role": "user", "content": "ok", "timestamp": 3}},
        {"type": "message", "message": {"role": "user", "content": "no", "timestamp": math.nan}},
    ]), "message.timestamp"),
}


@pytest.mark.parametrize("how", APPENDS)
def test_a_non_finite_number_is_refused_and_nothing_changes(file_or_database: str, how: str):
    append, field = APPENDS[how]
    with Session.create(file_or_database, cwd="/") as session:
        first = session.append_message({"role": "user", "content": "a", "timestamp": 1})
        before, context = stored(session.path), session.context()
        with pytest.raises(NonFiniteNumber) as raised:
            append(session)
        assert raised.value.where == field
        assert str(raised.value).startswith(f"{session.path}: not appended: {field} is ")
        assert stored(session.path) == before
        assert session.leaf_id == first and session.context() == context
        session.append_message(assistant(0.5))  # the session goes on
        live = session.context()
        path = session.path
    again = resume(path)
    assert again.entries[-1]["message"] == live.messages[-1]


def test_null_and_finite_numbers_pass(file_or_database: str):
    with Session.create(file_or_database, cwd="/") as session:
        session.append_custom_entry("x", {"none": None, "big": 1e308, "small": -5e-324})
        data = session.entries[-1]["data"]
        path = session.path
    assert resume(path).entries[-1]["data"] == data


@pytest.mark.parametrize("value", [2**70, {1, 2}, object()], ids=["int>64bit", "set", "object"])
def test_a_value_json_cannot_hold_is_refused_and_nothing_changes(file_or_database: str,
        value: object):
    """orjson's TypeError reached the caller as it was, no JournalError naming the session."""
    from journal import JournalError, NotJson

    with Session.create(file_or_database, cwd="/") as session:
        first = session.append_message({"role": "user", "content": "a", "timestamp": 1})
        before = stored(session.path)
        with pytest.raises(NotJson) as raised:
            session.append_custom_entry("x", {"v": value})
        assert isinstance(raised.value, JournalError)
        assert str(raised.value).startswith(f"{session.path}: not appended: the entry cannot "
                                            "be written as JSON (")
        assert stored(session.path) == before and session.leaf_id == first
        session.append_message({"role": "user", "content": "on", "timestamp": 2})


def test_a_non_finite_number_in_a_dataclass_is_refused(file_or_database: str):
    """orjson writes a dataclass as an object: a NaN in one was written as null unchecked."""
    from dataclasses import dataclass

    @dataclass
    class Usage:
        cost: float

    @dataclass
    class Hidden:
        cost: float
        _cache: float

    with Session.create(file_or_database, cwd="/") as session:
        before = stored(session.path)
        with pytest.raises(NonFiniteNumber) as raised:
            session.append_custom_entry("x", {"usage": Usage(math.nan)})
        assert raised.value.where == "data.usage.cost"
        set_later = Usage(1.0)
        set_later.extra = math.inf  # type: ignore[attr-defined]  # written by orjson too
        with pytest.raises(NonFiniteNumber) as raised:
            session.append_custom_entry("x", {"usage": set_later})
        assert raised.value.where == "data.usage.extra"
        assert stored(session.path) == before
        hidden = Hidden(1.0, math.nan)  # orjson writes no `_`-name: nothing non-finite written
        session.append_custom_entry("x", {"usage": hidden, "none": None})
