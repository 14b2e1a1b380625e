"""Property tests for entry validation (issue 11, item 7): hostile values in any field of any
entry type never raise from load, Tree, build_context, sanitize, render, info, resume, rotation
planning or repair, and what repair writes then loads clean.

The base session holds every entry type with well-formed fields; each example replaces or
deletes a few fields (top level, inside the message, inside a content block) with hostile
values: wrong JSON types, numbers written as strings, lone surrogates, integers beyond 64 bits,
nesting deeper than any parser's limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from journal import Session, View, load
from journal.cli.tail import format_entry
from journal.context import build_context, for_model, to_model_messages
from journal.errors import JournalError
from journal.info import inspect
from journal.pairing import sanitize
from journal.render import describe_entry, describe_message
from journal.repair import plan, repair
from journal.rotation import rotate
from journal.snapshot import resume
from journal.tree import Tree
from journal.validate import pairing_problems

HEADER = {"type": "session", "version": 3, "id": "22222222-2222-4222-8222-222222222222",
          "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
DEEP = "@deep-nesting@"
DEEP_JSON = b"[" * 1500 + b"]" * 1500
BIG = "@big-number@"
BIG_JSON = b"123456789012345678901234567890"
DELETE = object()


def _e(kind: str, entry_id: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "id": entry_id, "parentId": parent,
            "timestamp": "2026-01-01T00:00:01.000Z", **fields}


def base_entries() -> list[dict[str, Any]]:
    call = {"type": "toolCall", "id": "call1", "name": "ls", "arguments": {"path": "."}}
    return [
        _e("message", "e0000001", None,
           message={"role": "user", "content": [{"type": "text", "text": "go"}], "timestamp": 1}),
        _e("message", "e0000002", "e0000001",
           message={"role": "assistant",
                    "content": [{"type": "thinking", "thinking": "hm", "thinkingSignature": "s"},
                                {"type": "text", "text": "ok"}, call],
                    "provider": "anthropic", "model": "m", "stopReason": "toolUse",
                    "timestamp": 2}),
        _e("message", "e0000003", "e0000002",
           message={"role": "toolResult", "toolCallId": "call1", "toolName": "ls",
                    "content": [{"type": "text", "text": "a.txt"}], "isError": False,
                    "timestamp": 3}),
        _e("model_change", "e0000004", "e0000003", provider="anthropic", modelId="m2"),
        _e("thinking_level_change", "e0000005", "e0000004", thinkingLevel="high"),
        _e("custom", "e0000006", "e0000005", customType="ext", data={"k": 1}),
        _e("custom_message", "e0000007", "e0000006", customType="note", content="a note",
           display=True),
        _e("label", "e0000008", "e0000007", targetId="e0000001", label="start"),
        _e("session_info", "e0000009", "e0000008", name="props"),
        _e("branch_summary", "e000000a", "e0000009", fromId="e0000003", summary="side"),
        _e("compaction", "e000000b", "e000000a", summary="sum", firstKeptEntryId="e0000004",
           tokensBefore=1234),
        _e("message", "e000000c", "e000000b",
           message={"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0,
                    "timestamp": 4}),
        _e("message", "e000000d", "e000000c",
           message={"role": "user", "content": "last", "timestamp": 5}),
        _e("unknown_kind", "e000000e", "e000000d", anything=[1]),
    ]


int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
hostile_values = st.one_of(
    st.none(), st.booleans(), int64,
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", " ", "12", "1e3", "\ud83d", "cut \udc00", "e0000001", "e000000d",
                     "call1", "assistant", "toolResult", "user", "label", "compaction",
                     DEEP, BIG]),
    st.text(max_size=8),
    st.lists(int64, max_size=2),
    st.dictionaries(st.sampled_from(["x", "id", "type"]), int64, max_size=2),
    st.just(DELETE),
)

TOP_FIELDS = ["type", "id", "parentId", "timestamp", "message", "provider", "modelId",
              "thinkingLevel", "customType", "data", "content", "display", "details",
              "targetId", "label", "name", "fromId", "summary", "firstKeptEntryId",
              "tokensBefore"]
MESSAGE_FIELDS = ["role", "content", "toolCallId", "toolName", "isError", "provider", "model",
                  "stopReason", "timestamp", "command", "output", "exitCode", "summary",
                  "details", "excludeFromContext", "cancelled", "truncated", "customType"]
BLOCK_FIELDS = ["type", "text", "id", "name", "arguments", "thinking", "thinkingSignature",
                "redacted"]

HEADER_FIELDS = ["type", "version", "id", "timestamp", "cwd", "parentSession"]

mutation = st.one_of(
    st.tuples(st.just("header"), st.just(0), st.sampled_from(HEADER_FIELDS), hostile_values),
    st.tuples(st.just("top"), st.integers(0, 13), st.sampled_from(TOP_FIELDS), hostile_values),
    st.tuples(st.just("message"), st.sampled_from([0, 1, 2, 11, 12]),
              st.sampled_from(MESSAGE_FIELDS), hostile_values),
    st.tuples(st.sampled_from(["block", "first_block"]), st.sampled_from([0, 1, 2]),
              st.sampled_from(BLOCK_FIELDS), hostile_values),
)


def _set(target: Any, key: str, value: Any) -> None:
    if not isinstance(target, dict):
        return
    if value is DELETE:
        target.pop(key, None)
    else:
        target[key] = value


def mutate(entries: list[dict[str, Any]], header: dict[str, Any],
           changes: list[tuple[str, int, str, Any]]) -> None:
    for where, index, key, value in changes:
        entry = header if where == "header" else entries[index]
        if where in ("top", "header"):
            _set(entry, key, value)
            continue
        message = entry.get("message")
        if where == "message":
            _set(message, key, value)
            continue
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and content:
            _set(content[0 if where == "first_block" else -1], key, value)


def dumps(value: Any) -> bytes:
    """JSON as JavaScript writes it: the stdlib escapes lone surrogates, which orjson refuses."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def write(path: Path, entries: list[dict[str, Any]], header: dict[str, Any] = HEADER) -> None:
    data = b"".join(dumps(e) + b"\n" for e in [header, *entries])
    data = data.replace(orjson.dumps(DEEP), DEEP_JSON).replace(orjson.dumps(BIG), BIG_JSON)
    path.write_bytes(data)


def exercise(path: Path) -> None:
    """Every read-side consumer of a session, on a possibly hostile file."""
    snap = load(path)
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    for entry in snap.entries:
        describe_entry(entry)
        format_entry(entry)
    tree.nested()
    _ = tree.labels, tree.name
    for leaf in {tree.leaf, 0, len(tree) // 2} if len(tree) else {None}:
        context = build_context(tree, None if leaf is None else tree.entries[leaf]["id"])
        for message in context.messages:
            describe_message(message)
        model_context = for_model(context)
        assert pairing_problems(model_context.messages) == []
        to_model_messages(model_context.messages)
        sanitize(context.messages)
        pairing_problems(context.messages)
    inspect(path).to_json()
    resume(path)
    View.open(path, full=True).context()
    try:
        with Session.open(path) as session:
            session.context()
    except JournalError:
        pass  # refused with a clear error (for example an unsupported version)
    try:
        rotate(path, dry_run=True)
    except JournalError:
        pass


def test_the_base_session_is_clean(tmp_path):
    path = tmp_path / "s.jsonl"
    write(path, base_entries())
    assert repair(path).changed is False
    assert load(path).diagnostics == [] and load(path).field_issues == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(mutation, min_size=1, max_size=4))
# a header whose type says Claude Code's "assistant" once made the file read as a transcript
@example(changes=[("header", 0, "type", "assistant"), ("header", 0, "id", DELETE)])
def test_hostile_fields_never_raise_and_repair_loads_clean(tmp_path_factory, changes):
    path = tmp_path_factory.mktemp("hostile") / "s.jsonl"
    entries, header = base_entries(), dict(HEADER)
    mutate(entries, header, changes)
    write(path, entries, header)
    exercise(path)
    plan(str(path))
    try:
        repair(path)
    except JournalError:
        return  # refused with a clear error (for example nothing left that is a session)
    snap = load(path)
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    assert snap.diagnostics == [], [d.describe() for d in snap.diagnostics]
    assert snap.field_issues == [], [d.describe() for d in snap.field_issues]
    assert tree.issues == []
    exercise(path)
    assert repair(path).changed is False, "a second repair finds nothing"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=st.binary(max_size=300), glue=st.sampled_from([b"", b'{"type":', b"\x00\x00"]))
def test_hostile_bytes_in_a_line_never_raise(tmp_path_factory, line, glue):
    path = tmp_path_factory.mktemp("bytes") / "s.jsonl"
    entries = base_entries()
    lines = [dumps(e) for e in [HEADER, *entries]]
    lines[5] = lines[5][:40] + glue + line + lines[6]
    path.write_bytes(b"\n".join(lines) + b"\n")
    exercise(path)
    repair(path)
    snap = load(path)
    tree = Tree(snap.entries)
    tree.finish_forward_check()
    assert snap.diagnostics == [] and snap.field_issues == [] and tree.issues == []
