"""Claude Code transcripts read in place: detection, translation and the projection.

Generated transcripts (bench/gen_claude.py) carry their own account of what the projection
must be; hand-written ones pin each rule; the shared samples (claude-code-log's test data)
are read where they are.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from third_party import claude_path, pi_path

import journal
from journal import claude
from journal.context import Context, build_context, for_model, iso_to_millis
from journal.errors import ForeignSession
from journal.snapshot import load, resume
from journal.validate import pairing_problems

ROOT = Path(__file__).resolve().parents[1]


def _gen() -> ModuleType:
    name = "bench_gen_claude"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "gen_claude.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


gc = _gen()


def kinds(snap: journal.Snapshot, context: Context) -> list[tuple[str, str]]:
    """A context as (kind, key) pairs, in the generator's terms."""
    assert snap.claude is not None
    raw = snap.claude.translator.raw
    out: list[tuple[str, str]] = []
    for message, entry_id in zip(context.messages, context.entry_ids, strict=True):
        role = message["role"]
        if role == "compactionSummary":
            out.append(("summary", ""))
        elif role == "assistant":
            assert entry_id is not None
            out.append(("assistant", raw[entry_id][0]["message"]["id"]))
        elif role == "toolResult":
            out.append(("toolResult", message["toolCallId"]))
        else:
            assert entry_id is not None
            # a kept segment's copy (`<id>@<anchor>`) stands for the record it copies
            out.append((role, entry_id.split("@")[0]))
    return out


def expected(stats: Any) -> list[tuple[str, str]]:
    return [(k, "" if k == "summary" else v) for k, v in stats.context]


def project(snap: journal.Snapshot) -> Context:
    tree = snap.tree()
    return build_context(tree, tree.leaf_id)


@pytest.fixture(scope="module", params=[11, 12, 13])
def generated(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp(f"claude{request.param}")
    return gc.generate(out, mb=1.5, seed=request.param, compactions=3, rewinds=4)


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


# -- generated transcripts


def test_load_projects_what_the_generator_wrote(generated: Any) -> None:
    snap = load(generated.path)
    assert snap.dialect == claude.CLAUDE and snap.header is None
    assert snap.claude is not None and snap.leaf_id is not None
    # the leaf is the entry of the last main-chain record (a response's first line)
    assert generated.leaf in [r["uuid"] for r in snap.claude.translator.raw[snap.leaf_id]]
    context = project(snap)
    assert kinds(snap, context) == expected(generated)
    assert context.compaction_id is not None


def test_resume_reads_the_tail_and_agrees(generated: Any) -> None:
    full = load(generated.path)
    tail = resume(generated.path)
    assert not tail.complete
    assert len(tail.entries) < len(full.entries)
    assert tail.leaf_id == full.leaf_id
    assert project(tail).same_as(project(full))


def test_the_context_pairs_without_fixes(generated: Any) -> None:
    """Parallel tool results that Claude Code hung beside the chain are found: the pairing
    sanitizer has nothing to fix and the strict validator nothing to report."""
    context = project(load(generated.path))
    assert pairing_problems(context.messages) == []
    assert not for_model(context).pairing.changed  # type: ignore[union-attr]


def test_one_message_per_api_response(generated: Any) -> None:
    snap = load(generated.path)
    records = [orjson.loads(line) for f in [generated.path, *generated.subagents]
               for line in f.read_bytes().splitlines()]
    lines_per_id: dict[str, int] = {}
    for r in records:
        if r["type"] == "assistant":
            lines_per_id[r["message"]["id"]] = lines_per_id.get(r["message"]["id"], 0) + 1
    assistants = [e for e in snap.entries if e["type"] == "message"
                  and e["message"]["role"] == "assistant" and "@" not in e["id"]]
    assert len(assistants) == len(lines_per_id)
    assert any(len(e["message"]["content"]) > 1 for e in assistants)
    assert sum(len(e["message"]["content"]) for e in assistants) == sum(lines_per_id.values())


def test_the_agent_estimates_tokens(generated: Any) -> None:
    from agent.tokens import Estimator

    context = project(load(generated.path))
    assert Estimator().estimate_messages(context.messages) > 0


def test_subagents_and_sidechains_are_branches_of_their_own(generated: Any) -> None:
    snap = load(generated.path)
    assert snap.claude is not None and snap.claude.subagent_files
    tree = snap.tree()
    on_branch = {tree.entries[i]["id"] for i in tree.path(tree.leaf)}
    sidechain = {eid for eid, recs in snap.claude.translator.raw.items()
                 if recs[0].get("isSidechain")}
    assert sidechain and not (sidechain & on_branch)
    agents = {recs[0].get("agentId") for recs in snap.claude.translator.raw.values()}
    for sub in snap.claude.subagent_files:
        assert Path(sub).name.removeprefix("agent-").removesuffix(".jsonl") in agents
    roots = [tree.entries[i] for i in tree.roots()]
    assert len(roots) >= 1 + len(snap.claude.subagent_files)


def test_view_follows_appended_records(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=0.3, seed=5, compactions=1, rewinds=0)
    view = journal.View.open(stats.path)
    before = len(view.context(raw=True).messages)
    leaf = stats.leaf
    base = {"isSidechain": False, "userType": "external", "cwd": "/w",
            "sessionId": stats.session_id, "version": gc.VERSION, "gitBranch": "main"}
    more = [
        {"parentUuid": leaf, **base, "type": "user",
         "message": {"role": "user", "content": "one more thing"}, "uuid": "u-new",
         "timestamp": "2026-02-01T00:00:00.000Z"},
        {"parentUuid": "u-new", **base, "type": "assistant",
         "message": {"id": "msg_new", "role": "assistant", "model": "m",
                     "content": [{"type": "text", "text": "first"}], "stop_reason": None},
         "uuid": "a-new1", "timestamp": "2026-02-01T00:00:01.000Z"},
        {"parentUuid": "a-new1", **base, "type": "assistant",
         "message": {"id": "msg_new", "role": "assistant", "model": "m",
                     "content": [{"type": "text", "text": "second"}],
                     "stop_reason": "end_turn"},
         "uuid": "a-new2", "timestamp": "2026-02-01T00:00:02.000Z"},
    ]
    with stats.path.open("ab") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in more))
    new = view.refresh()
    assert [e["id"] for e in new] == ["u-new", "a-new1"]
    assert view.leaf_id == "a-new1"
    context = view.context(raw=True)
    assert len(context.messages) == before + 2
    assert [b["text"] for b in context.messages[-1]["content"]] == ["first", "second"]


# -- rules, on hand-written transcripts


def _rec(kind: str, uid: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    rec = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/w",
           "sessionId": "s", "version": "2.0.76", "gitBranch": "main", "type": kind}
    rec.update(fields)
    rec["uuid"] = uid
    rec.setdefault("timestamp", "2026-01-01T00:00:00.000Z")
    return rec


def _asst(uid: str, parent: str | None, mid: str, block: dict[str, Any],
          stop: str | None = None, **usage: int) -> dict[str, Any]:
    return _rec("assistant", uid, parent, message={
        "model": "claude-sonnet-4-5", "id": mid, "type": "message", "role": "assistant",
        "content": [block], "stop_reason": stop, "usage": usage or {"input_tokens": 1,
                                                                   "output_tokens": 1}})


def _user(uid: str, parent: str | None, content: Any, **fields: Any) -> dict[str, Any]:
    return _rec("user", uid, parent, message={"role": "user", "content": content}, **fields)


def _result(uid: str, parent: str, call: str, text: str = "ok") -> dict[str, Any]:
    return _user(uid, parent, [{"tool_use_id": call, "type": "tool_result", "content": text}])


def test_parallel_calls_merge_and_their_results_follow(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {},
         "isSnapshotUpdate": False},
        _user("u1", None, "go"),
        _asst("a1", "u1", "m1", {"type": "thinking", "thinking": "hm", "signature": "sig"}),
        _asst("a2", "a1", "m1", {"type": "tool_use", "id": "t1", "name": "Read",
                                 "input": {"file_path": "x"}}),
        _rec("progress", "p1", "a2", data={"type": "hook_progress"}),
        _asst("a3", "p1", "m1", {"type": "tool_use", "id": "t2", "name": "Bash",
                                 "input": {"command": "ls"}}, "tool_use",
              input_tokens=5, output_tokens=7, cache_read_input_tokens=100,
              cache_creation_input_tokens=20),
        _result("r1", "a2", "t1", "one"),
        _result("r2", "a3", "t2", "two"),
        _asst("a4", "r2", "m2", {"type": "text", "text": "done"}, "end_turn"),
    ])
    snap = load(path)
    context = project(snap)
    roles = [m["role"] for m in context.messages]
    assert roles == ["user", "assistant", "toolResult", "toolResult", "assistant"]
    merged = context.messages[1]
    assert [b["type"] for b in merged["content"]] == ["thinking", "toolCall", "toolCall"]
    assert merged["content"][0]["thinkingSignature"] == "sig"
    assert merged["usage"] == {"input": 5, "output": 7, "cacheRead": 100, "cacheWrite": 20,
                               "totalTokens": 132}
    assert merged["stopReason"] == "toolUse"
    assert [m["toolCallId"] for m in context.messages[2:4]] == ["t1", "t2"]
    assert [m["toolName"] for m in context.messages[2:4]] == ["Read", "Bash"]
    assert pairing_problems(context.messages) == []
    assert snap.claude is not None
    assert [r["uuid"] for r in snap.claude.translator.raw["a1"]] == ["a1", "a2", "a3"]


def test_the_conversation_going_on_from_a_progress_record(tmp_path: Path) -> None:
    """Newer versions go on from a hook's progress record on the last call's line, which may
    be written before that call's result: the result still comes before what follows."""
    path = write(tmp_path / "t.jsonl", [
        _user("u1", None, "go"),
        _asst("a1", "u1", "m1", {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}),
        _asst("a2", "a1", "m1", {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}},
              "tool_use"),
        _result("r1", "a1", "t1"),
        _rec("progress", "p2", "a2", data={"type": "hook_progress"}),
        _result("r2", "a2", "t2"),
        _asst("a3", "p2", "m2", {"type": "text", "text": "done"}, "end_turn"),
    ])
    context = project(load(path))
    assert [m["role"] for m in context.messages] == [
        "user", "assistant", "toolResult", "toolResult", "assistant"]
    assert pairing_problems(context.messages) == []


def test_compaction_rewind_and_summary_leaf(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [
        _user("u1", None, "start"),
        _asst("a1", "u1", "m1", {"type": "text", "text": "ready"}, "end_turn"),
        _user("b1", "a1", "first attempt"),
        _asst("b1a", "b1", "m2", {"type": "text", "text": "first"}, "end_turn"),
        _user("b2", "a1", "second attempt"),  # a rewind: the same parent as b1
        _asst("b2a", "b2", "m3", {"type": "text", "text": "second"}, "end_turn"),
        _rec("system", "cb", None, subtype="compact_boundary", logicalParentUuid="b2a",
             content="Conversation compacted", compactMetadata={"trigger": "auto",
                                                                "preTokens": 150000}),
        _user("cs", "cb", "This session is being continued. Summary: a plan.",
              isCompactSummary=True, isVisibleInTranscriptOnly=True),
        _user("p1", "cs", "after"),
        _asst("p1a", "p1", "m4", {"type": "text", "text": "final"}, "end_turn"),
        _rec("system", "td", "p1a", subtype="turn_duration", durationMs=5),
        {"type": "summary", "summary": "A plan", "leafUuid": "p1a"},
        {"type": "ai-title", "aiTitle": "Planning", "sessionId": "s"},
    ])
    snap = load(path)
    assert snap.leaf_id == "p1a"
    context = project(snap)
    assert [m["role"] for m in context.messages] == ["compactionSummary", "user", "assistant"]
    assert context.messages[0]["summary"] == "This session is being continued. Summary: a plan."
    assert context.messages[0]["tokensBefore"] == 150000
    tree = snap.tree()
    branch = [tree.entries[i]["id"] for i in tree.path(tree.leaf)]
    # logicalParentUuid keeps the history before the boundary on the branch, the rewound
    # attempt beside it
    assert branch[:5] == ["u1", "a1", "b2", "b2a", "cb"] and "b1" not in branch
    assert snap.claude is not None and snap.claude.title == "Planning"
    assert resume(path).entries[0]["id"] == "cb"


def test_a_file_of_sidechains_only_and_a_summary_leaf(tmp_path: Path) -> None:
    side = _user("s1", None, "task")
    side["isSidechain"] = True
    path = write(tmp_path / "agent-x.jsonl", [side])
    assert load(path).leaf_id == "s1"
    only = write(tmp_path / "only.jsonl", [
        _rec("system", "x1", None, subtype="local_command", content="/cost"),
        {"type": "summary", "summary": "t", "leafUuid": "x1"},
    ])
    assert load(only).leaf_id == "x1"


def test_tool_results_with_text_images_and_errors(tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBOR"}}
    path = write(tmp_path / "t.jsonl", [
        _user("u1", None, [image, {"type": "text", "text": "look"}]),
        _asst("a1", "u1", "m1", {"type": "tool_use", "id": "t1", "name": "Read",
                                 "input": {}}, "tool_use"),
        _user("r1", "a1", [{"tool_use_id": "t1", "type": "tool_result", "is_error": True,
                            "content": [image]},
                           {"type": "text", "text": "[Request interrupted by user]"}]),
    ])
    context = project(load(path))
    assert context.messages[0]["content"][0] == {"type": "image", "data": "iVBOR",
                                                 "mimeType": "image/png"}
    result, note = context.messages[2], context.messages[3]
    assert result["role"] == "toolResult" and result["isError"] is True
    assert result["content"][0]["mimeType"] == "image/png"
    assert note == {"role": "user", "content": [{"type": "text",
                                                 "text": "[Request interrupted by user]"}],
                    "timestamp": note["timestamp"]}
    assert context.entry_ids[2:] == ["r1", "r1:1"]


def test_duplicate_uuids_keep_the_first(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [_user("u1", None, "a"), _user("u1", None, "b")])
    snap = load(path)
    assert len(snap.entries) == 1 and snap.entries[0]["message"]["content"] == "a"
    assert snap.claude is not None and snap.claude.translator.duplicates == 1


# -- detection and refusal


def test_detection(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=0.1, seed=1)
    assert claude.dialect_of(stats.path) == claude.CLAUDE
    assert claude.dialect_of(pi_path("all-types.jsonl")) == claude.PI
    assert claude.detect_bytes(b'garbage\n\n{"type":"summary","summary":"x"}\n') == claude.CLAUDE
    assert claude.detect_bytes(b"") == claude.PI
    # forcing the pi dialect reads a Claude Code file as a pi file without a header
    forced = load(stats.path, dialect=claude.PI)
    assert forced.dialect == claude.PI and not forced.entries
    with pytest.raises(ValueError):
        load(stats.path, dialect="cursor")


def test_a_pi_file_whose_header_type_says_assistant_is_still_pi(tmp_path: Path) -> None:
    """A Claude Code type on a line with none of Claude Code's keys is weak evidence: the pi
    entries after it decide (found by tests/test_hostile_props.py)."""
    header = b'{"type":"assistant","version":3,"cwd":"/w"}\n'
    entry = (b'{"type":"message","id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:01Z",'
             b'"message":{"role":"user","content":"hi","timestamp":1}}\n')
    assert claude.detect_bytes(header + entry) == claude.PI
    path = tmp_path / "s.jsonl"
    path.write_bytes(header + entry)
    assert claude.dialect_of(path) == claude.PI
    assert [e["id"] for e in load(path).entries] == ["e1"]
    # alone, the weak line still tells: a file of such lines is Claude Code's
    assert claude.detect_bytes(header) == claude.CLAUDE
    path.write_bytes(header)
    assert claude.dialect_of(path) == claude.CLAUDE


def test_session_open_refuses_and_leaves_nothing(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=0.1, seed=2)
    before = stats.path.read_bytes()
    listing = sorted(os.listdir(tmp_path))
    with pytest.raises(ForeignSession, match="never appended to"):
        journal.Session.open(stats.path)
    assert stats.path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == listing


# -- the shared samples (claude-code-log's test data)

SAMPLES = ["representative_messages.jsonl", "edge_cases.jsonl", "todowrite_examples.jsonl",
           "session_b.jsonl"]


@pytest.mark.parametrize("name", SAMPLES)
def test_samples_load_in_place(name: str) -> None:
    path = claude_path(name)
    before = path.read_bytes()
    snap = load(path)
    assert snap.dialect == claude.CLAUDE
    records = [orjson.loads(line) for line in before.splitlines() if line.strip()]
    objects = [r for r in records if isinstance(r, dict)]
    main = [r for r in objects if r.get("type") in ("user", "assistant")
            and isinstance(r.get("uuid"), str) and not r.get("isSidechain")]
    assert snap.leaf_id is not None
    assert snap.tree().get(snap.leaf_id) is not None
    assert snap.claude is not None
    leaf_record = snap.claude.translator.raw[snap.leaf_id][-1]
    assert leaf_record["uuid"] == main[-1]["uuid"]
    context = project(snap)
    assert context.messages and context.entry_ids[-1] is not None
    not_objects = len(records) - len(objects)
    assert sum(d.reason == "not_object" for d in snap.diagnostics) == not_objects
    assert path.read_bytes() == before


def test_todowrite_sample_projects_its_chain() -> None:
    """The sample whose records are chained: every main-chain message is on the branch."""
    path = claude_path("todowrite_examples.jsonl")
    snap = load(path)
    context = project(snap)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    calls = [b["id"] for r in records if r.get("type") == "assistant"
             for b in r["message"]["content"] if b.get("type") == "tool_use"]
    results = [m["toolCallId"] for m in context.messages if m["role"] == "toolResult"]
    assert calls and results == calls
    assert pairing_problems(context.messages) == []


def test_a_record_without_a_message_object_is_reported_not_kept(tmp_path: Path) -> None:
    broken = _rec("user", "u2", "u1", message="error")
    path = write(tmp_path / "t.jsonl", [_user("u1", None, "a"), broken, _user("u2", "u1", "b")])
    snap = load(path)
    assert [d.reason for d in snap.diagnostics] == ["bad_field"]
    assert snap.diagnostics[0].line == 2
    assert [e["id"] for e in snap.entries] == ["u1", "u2"]
    assert snap.entries[1]["message"]["content"] == "b"


def test_parallel_calls_written_as_siblings_merge(tmp_path: Path) -> None:
    """The other shape of parallel calls: each tool_use line hangs where the first does."""
    path = write(tmp_path / "t.jsonl", [
        _user("u1", None, "go"),
        _asst("a1", "u1", "m1", {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}),
        _asst("a2", "u1", "m1", {"type": "tool_use", "id": "t2", "name": "Grep", "input": {}}),
        _asst("a3", "u1", "m1", {"type": "tool_use", "id": "t3", "name": "Bash", "input": {}},
              "tool_use"),
        _result("r1", "a1", "t1"), _result("r2", "a2", "t2"), _result("r3", "a3", "t3"),
        _asst("a4", "r2", "m2", {"type": "text", "text": "done"}, "end_turn"),
    ])
    context = project(load(path))
    assert [m["role"] for m in context.messages] == [
        "user", "assistant", "toolResult", "toolResult", "toolResult", "assistant"]
    assert [b["id"] for b in context.messages[1]["content"]] == ["t1", "t2", "t3"]
    assert pairing_problems(context.messages) == []


def test_a_compaction_that_keeps_a_segment(tmp_path: Path) -> None:
    """`compactMetadata.preservedSegment`: Claude Code relinks the kept segment's head under
    the summary when it loads the file, and goes on from the segment's tail."""
    records = [
        _user("u1", None, "old"),
        _asst("a1", "u1", "m1", {"type": "text", "text": "old answer"}, "end_turn"),
        _user("u2", "a1", "kept prompt"),
        _asst("a2", "u2", "m2", {"type": "tool_use", "id": "t1", "name": "Read", "input": {}},
              "tool_use", input_tokens=190000, output_tokens=5),
        _result("r2", "a2", "t1"),
        _asst("a3", "r2", "m3", {"type": "text", "text": "kept answer"}, "end_turn"),
        _rec("system", "cb", None, subtype="compact_boundary", logicalParentUuid="a3",
             compactMetadata={"trigger": "auto", "preTokens": 190000, "preservedSegment": {
                 "headUuid": "u2", "anchorUuid": "cs", "tailUuid": "a3"}}),
        _user("cs", "cb", "Summary of the old part.", isCompactSummary=True),
    ]
    only = write(tmp_path / "only.jsonl", records)
    context = project(load(only))
    assert [m["role"] for m in context.messages] == [
        "compactionSummary", "user", "assistant", "toolResult", "assistant"]
    assert context.messages[1]["content"] == "kept prompt"
    assert context.messages[2]["usage"]["input"] == 0  # zeroed, as Claude Code does
    path = write(tmp_path / "t.jsonl", [*records, _user("u3", "a3", "new"),
                                        _asst("a4", "u3", "m4", {"type": "text", "text": "ok"},
                                              "end_turn")])
    snap = load(path)
    context = project(snap)
    assert [m["role"] for m in context.messages] == [
        "compactionSummary", "user", "assistant", "toolResult", "assistant", "user",
        "assistant"]
    assert "old" not in [m.get("content") for m in context.messages]
    tail = resume(path)
    assert not tail.complete and project(tail).same_as(context)


@given(st.one_of(
    st.datetimes(min_value=__import__("datetime").datetime(1971, 1, 1)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"),
    st.text(alphabet="0123456789-T:.Z²x", min_size=20, max_size=26)))
@settings(max_examples=300, deadline=None)
def test_message_times_read_as_the_projection_reads_them(stamp: str) -> None:
    record = {"timestamp": stamp, "message": {"role": "assistant", "content": []}}
    assert claude.assistant_message(record)["timestamp"] == iso_to_millis(stamp)


def test_resume_of_a_transcript_never_compacted_reads_it_forward(tmp_path: Path) -> None:
    stats = gc.generate(tmp_path, mb=0.5, seed=41, compactions=0)
    tail = resume(stats.path)
    assert tail.complete and tail.claude is not None and not tail.claude.subagent_files
    full = load(stats.path)
    assert project(tail).same_as(project(full))
    assert kinds(tail, project(tail)) == expected(stats)
