"""Projection, following pi's buildSessionContext rule by rule."""

from __future__ import annotations

from collections import Counter

from journal import Session, load, to_model_messages
from journal.context import build_context, iso_to_millis
from journal.tree import Tree

T = "2026-01-01T00:00:00.000Z"


def msg(entry_id, parent, role="user", text=None, **extra):
    message = {"role": role, "content": text or entry_id, **extra}
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": T,
            "message": message}


def ctx(entries, leaf=None):
    t = Tree(entries)
    return build_context(t, t.leaf_id if leaf is None else leaf)


def contents(c):
    return [m.get("content", m.get("summary")) for m in c.messages]


def test_plain_path_and_defaults():
    c = ctx([msg("a", None), msg("b", "a")])
    assert contents(c) == ["a", "b"]
    assert c.thinking_level == "off" and c.model is None and c.leaf_id == "b"


def test_null_leaf_gives_empty_context():
    t = Tree([msg("a", None)])
    assert build_context(t, None).messages == []


def test_settings_come_from_the_whole_path_and_assistant_overrides_model_change():
    entries = [
        msg("a", None),
        {"type": "thinking_level_change", "id": "t", "parentId": "a", "timestamp": T,
         "thinkingLevel": "high"},
        {"type": "model_change", "id": "m", "parentId": "t", "timestamp": T,
         "provider": "anthropic", "modelId": "one"},
        msg("b", "m", "assistant", [], provider="openai", model="two"),
    ]
    c = ctx(entries)
    assert c.thinking_level == "high"
    assert c.model == {"provider": "openai", "modelId": "two"}
    entries.append({"type": "model_change", "id": "m2", "parentId": "b", "timestamp": T,
                    "provider": "anthropic", "modelId": "three"})
    assert ctx(entries).model == {"provider": "anthropic", "modelId": "three"}


def compaction(entry_id, parent, first_kept, summary="S"):
    return {"type": "compaction", "id": entry_id, "parentId": parent, "timestamp": T,
            "summary": summary, "firstKeptEntryId": first_kept, "tokensBefore": 10}


def test_compaction_summary_then_kept_then_after():
    entries = [msg("a", None), msg("b", "a"), msg("c", "b"), compaction("k", "c", "b"),
               msg("d", "k")]
    c = ctx(entries)
    assert [m["role"] for m in c.messages] == ["compactionSummary", "user", "user", "user"]
    assert contents(c) == ["S", "b", "c", "d"]
    assert c.compaction_id == "k"
    assert c.messages[0]["tokensBefore"] == 10
    assert c.messages[0]["timestamp"] == iso_to_millis(T)


def test_only_latest_compaction_applies_and_its_kept_search_starts_at_root():
    # pi searches firstKeptEntryId from the root of the path, so entries an earlier
    # compaction summarised reappear if the later one keeps from before it.
    entries = [msg("a", None), msg("b", "a"), compaction("k1", "b", "b", "S1"), msg("c", "k1"),
               compaction("k2", "c", "a", "S2"), msg("d", "k2")]
    assert contents(ctx(entries)) == ["S2", "a", "b", "c", "d"]


def test_first_kept_not_on_path_keeps_nothing_before_the_compaction():
    entries = [msg("a", None), msg("b", "a"), compaction("k", "b", "zzzzzzzz"), msg("c", "k")]
    assert contents(ctx(entries)) == ["S", "c"]


def test_branch_summary_custom_message_and_ignored_entries():
    entries = [
        msg("a", None),
        {"type": "branch_summary", "id": "bs", "parentId": "a", "timestamp": T, "fromId": "a",
         "summary": "explored"},
        {"type": "branch_summary", "id": "empty", "parentId": "bs", "timestamp": T,
         "fromId": "a", "summary": ""},
        {"type": "custom_message", "customType": "ext", "content": "inject", "display": True,
         "id": "cm", "parentId": "empty", "timestamp": T},
        {"type": "custom", "customType": "ext", "data": {}, "id": "cu", "parentId": "cm",
         "timestamp": T},
        {"type": "label", "id": "lb", "parentId": "cu", "timestamp": T, "targetId": "a",
         "label": "x"},
        {"type": "mystery", "id": "my", "parentId": "lb", "timestamp": T},
    ]
    c = ctx(entries)
    assert [m["role"] for m in c.messages] == ["user", "branchSummary", "custom"]
    assert c.messages[1] == {"role": "branchSummary", "summary": "explored", "fromId": "a",
                             "timestamp": iso_to_millis(T)}
    assert c.messages[2]["customType"] == "ext" and "details" not in c.messages[2]


def test_leaf_argument_projects_another_branch():
    entries = [msg("a", None), msg("b", "a"), msg("c", "a")]
    assert contents(ctx(entries, leaf="b")) == ["a", "b"]


def test_real_fixtures_have_the_expected_shape(pi_fixture):
    snap = load(pi_fixture("before-compaction.jsonl"))
    c = ctx(snap.entries)
    roles = Counter(m["role"] for m in c.messages)
    assert c.messages[0]["role"] == "compactionSummary"
    assert roles == {"compactionSummary": 1, "user": 31, "assistant": 219, "toolResult": 192,
                     "bashExecution": 3}
    big = load(pi_fixture("large-session.jsonl"))
    roles = Counter(m["role"] for m in ctx(big.entries).messages)
    assert roles == {"user": 88, "assistant": 453, "toolResult": 373}
    types = load(pi_fixture("all-types.jsonl"))
    c = ctx(types.entries)
    assert [m["role"] for m in c.messages] == ["user", "assistant", "branchSummary"]
    assert c.thinking_level == "high"


def test_to_model_messages_makes_user_text():
    messages = [
        {"role": "compactionSummary", "summary": "S", "tokensBefore": 1, "timestamp": 1},
        {"role": "branchSummary", "summary": "B", "fromId": "x", "timestamp": 2},
        {"role": "custom", "customType": "e", "content": "hi", "display": True, "timestamp": 3},
        {"role": "bashExecution", "command": "ls", "output": "a\n", "exitCode": 2,
         "cancelled": False, "truncated": False, "timestamp": 4},
        {"role": "bashExecution", "command": "x", "output": "", "exitCode": 0,
         "excludeFromContext": True, "timestamp": 5},
        {"role": "user", "content": "u", "timestamp": 6},
    ]
    out = to_model_messages(messages)
    assert [m["role"] for m in out] == ["user"] * 5
    assert "S" in out[0]["content"][0]["text"] and "<summary>" in out[0]["content"][0]["text"]
    assert "B" in out[1]["content"][0]["text"]
    assert out[2]["content"] == [{"type": "text", "text": "hi"}]
    assert "ls" in out[3]["content"][0]["text"] and "Exit code: 2" in out[3]["content"][0]["text"]
    assert out[4] is messages[5]


def test_live_index_and_resume_agree_with_full_projection(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_thinking_level_change("high")
        s.append_model_change("anthropic", "m1")
        first = s.append_message({"role": "user", "content": "one"})
        for i in range(30):
            s.append_message({"role": "user", "content": f"u{i}"})
        kept = s.append_message({"role": "user", "content": "kept"})
        s.append_compaction("summary", kept, 500)
        s.append_message({"role": "user", "content": "after"})
        live = s.context()
        path = s.path
    with Session.open(path) as s:
        assert not s.tree.complete, "open must resume from the tail"
        assert len(s.entries) < 10
        resumed = s.context()
        assert s.get_entry(first)["message"]["content"] == "one"  # loads on demand
        assert s.tree.complete
    full = ctx(load(path).entries)
    assert live.same_as(full) and resumed.same_as(full)
    assert full.thinking_level == "high" and full.model == {"provider": "anthropic",
                                                            "modelId": "m1"}


def test_session_context_is_sanitized_unless_raw(tmp_path):
    with Session.create(tmp_path / "s.jsonl", cwd="/") as s:
        s.append_message({"role": "user", "content": "go"})
        s.append_message({"role": "assistant", "provider": "p", "model": "m",
                          "content": [{"type": "toolCall", "id": "c1", "name": "ls",
                                       "arguments": {}}], "stopReason": "toolUse"})
        s.append_message({"role": "user", "content": "are you there?"})
        raw = s.context(raw=True)
        sent = s.context()
    assert [m["role"] for m in raw.messages] == ["user", "assistant", "user"]
    assert [m["role"] for m in sent.messages] == ["user", "assistant", "toolResult", "user"]
    assert sent.pairing.counts == {"missing_result": 1}
