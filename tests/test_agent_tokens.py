import json
import math
import socket

import pytest
import tiktoken.load
from third_party import pi_path

from agent import tokens
from agent.settings import ContextSettings
from agent.tokens import (
    ContextEstimate,
    Estimator,
    build_cl100k_encoding,
    chars_counter,
    estimate_context,
    get_counter,
    message_parts,
    tiktoken_counter,
    usage_tokens,
)

ENGLISH = (
    "The committee met on Thursday afternoon to review the proposal for the new library. "
    "Several members raised concerns about the cost of maintenance, while others argued "
    "that the town had waited long enough for a building that could serve students, "
    "families and older residents alike. After a long discussion, they agreed to ask the "
    "architect for a revised plan and to hold a public meeting before the end of the month."
)

PYTHON = '''\
def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping closed intervals."""
    if not intervals:
        return []
    ordered = sorted(intervals)
    merged = [ordered[0]]
    for start, end in ordered[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


if __name__ == "__main__":
    print(merge_intervals([(1, 3), (2, 6), (8, 10), (15, 18)]))
'''

CHINESE = (
    "委员会在星期四下午开会，审议了新图书馆的建设方案。几位成员对维护费用表示担忧，"
    "另一些成员则认为，镇上等待一座能够同时服务学生、家庭和老年居民的建筑已经太久了。"
    "经过长时间的讨论，他们同意请建筑师修改方案，并在月底之前举行一次公开会议。"
)


def user(text, ts=1):
    return {"role": "user", "content": text, "timestamp": ts}


def assistant(blocks, usage=None, stop="stop"):
    msg = {
        "role": "assistant",
        "content": blocks,
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "stopReason": stop,
        "timestamp": 2,
    }
    if usage is not None:
        msg["usage"] = usage
    return msg


def usage(inp=0, out=0, cr=0, cw=0):
    return {
        "input": inp,
        "output": out,
        "cacheRead": cr,
        "cacheWrite": cw,
        "totalTokens": inp + out + cr + cw,
        "cost": {"total": 0},
    }


def tool_result(text, images=0):
    content = [{"type": "text", "text": text}]
    content += [{"type": "image", "data": "AAAA", "mimeType": "image/png"}] * images
    return {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "read",
        "content": content,
        "isError": False,
        "timestamp": 3,
    }


# --- counters


def test_chars_counter_is_ceil_of_quarter():
    assert chars_counter("") == 0
    assert chars_counter("abc") == 1
    assert chars_counter("abcd") == 1
    assert chars_counter("abcde") == 2


def test_counter_lookup_by_name():
    assert get_counter("chars") is chars_counter
    assert get_counter("tiktoken") is tiktoken_counter
    with pytest.raises(ValueError, match="chars, tiktoken"):
        get_counter("bytes")


def test_tiktoken_counter_matches_known_cl100k_ids():
    enc = tokens.cl100k_encoding()
    assert enc.encode("hello world") == [15339, 1917]
    assert tiktoken_counter("hello world") == 2
    # special-token text is plain text, not an error
    assert tiktoken_counter("<|endoftext|>") > 1


def test_encoding_builds_without_network_or_cache(monkeypatch, tmp_path):
    for var in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "REQUESTS_CA_BUNDLE",
        "SSL_CERT_FILE",
        "DATA_GYM_CACHE_DIR",
    ):
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    def no_network(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)

    enc = build_cl100k_encoding()
    assert enc.encode("hello world") == [15339, 1917]
    assert list(cache.iterdir()) == []
    assert not (tmp_path / "home").exists()


def test_corrupt_data_file_is_refused(tmp_path):
    bad = tmp_path / "cl100k_base.tiktoken"
    bad.write_bytes(b"IQ== 0\n")
    with pytest.raises(tokens.TokenizerUnavailable, match="checksum"):
        build_cl100k_encoding(bad)


def test_chars_over_tiktoken_by_kind_of_text():
    ratios = {}
    for name, text in (("english", ENGLISH), ("python", PYTHON), ("chinese", CHINESE)):
        ratios[name] = chars_counter(text) / tiktoken_counter(text)
        print(
            f"{name}: chars/4={chars_counter(text)} tiktoken={tiktoken_counter(text)} "
            f"ratio={ratios[name]:.2f}"
        )
    # English prose: cl100k averages ~5 chars per token, so chars/4 over-counts (safe side).
    assert 1.0 < ratios["english"] < 1.6
    # Code: indentation and punctuation make tokens shorter, chars/4 slightly under-counts.
    assert 0.7 < ratios["python"] < 1.0
    # Chinese: about a token per character, chars/4 under-counts several-fold.
    assert ratios["chinese"] < 0.4
    assert ratios["chinese"] < ratios["python"] < ratios["english"]


# --- per-message estimates


def test_message_parts_cover_every_role():
    texts, images = message_parts(
        assistant(
            [
                {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
                {"type": "text", "text": "Reading."},
                {"type": "toolCall", "id": "x", "name": "read", "arguments": {"path": "a.ts"}},
            ]
        )
    )
    assert texts == ["hmm", "Reading.", "read", '{"path":"a.ts"}']
    assert images == 0
    assert message_parts(tool_result("out", images=2)) == (["out"], 2)
    assert message_parts(user([{"type": "text", "text": "hi"}])) == (["hi"], 0)
    assert message_parts(
        {"role": "bashExecution", "command": "ls", "output": "a.ts\n", "exitCode": 0}
    ) == (["ls", "a.ts\n"], 0)
    assert message_parts({"role": "custom", "customType": "x", "content": "Injected"}) == (
        ["Injected"],
        0,
    )
    assert message_parts({"role": "compactionSummary", "summary": "S", "tokensBefore": 9}) == (
        ["S"],
        0,
    )
    assert message_parts({"role": "branchSummary", "summary": "B", "fromId": "x"}) == (["B"], 0)
    assert message_parts({"role": "somethingNew"}) == ([], 0)


def test_tool_call_arguments_keep_non_ascii():
    texts, _ = message_parts(
        assistant([{"type": "toolCall", "id": "x", "name": "w", "arguments": {"t": "中文"}}])
    )
    assert texts[-1] == json.dumps({"t": "中文"}, ensure_ascii=False, separators=(",", ":"))


def test_estimate_rounds_once_per_message_and_charges_images():
    est = Estimator("chars", image_tokens=1_200)
    assert est.estimate_message(user("abcde")) == 2
    # 3 + 3 chars = 6 -> 2 tokens, not 1 + 1
    msg = assistant([{"type": "text", "text": "abc"}, {"type": "text", "text": "def"}])
    assert est.estimate_message(msg) == 2
    assert est.estimate_message(tool_result("abcd", images=2)) == 1 + 2_400


def test_estimate_cached_by_entry_id_only():
    calls = []

    def counting(text):
        calls.append(text)
        return len(text)

    est = Estimator(counting)
    msg = user("hello")
    assert est.estimate_message(msg, "e1") == 5
    assert est.estimate_message({"role": "user", "content": "changed"}, "e1") == 5
    assert len(calls) == 1
    assert est.cached("e1") == 5
    est.estimate_message(msg)
    est.estimate_message(msg)
    assert len(calls) == 3
    est.forget("e1")
    assert est.cached("e1") is None
    assert est.estimate_messages([msg, msg], ["a", "b"]) == 10
    est.forget()
    assert est.cached("a") is None


def test_estimator_from_settings_uses_counter_name():
    est = Estimator.from_settings(ContextSettings(token_counter="tiktoken", image_tokens=7))
    assert est.counter_name == "tiktoken"
    assert est.estimate_message(tool_result("hello world", images=1)) == 2 + 7


# --- context estimate


def test_usage_tokens_sums_four_fields_and_skips_bad_messages():
    assert usage_tokens(assistant([], usage(100, 20, 300, 4))) == 424
    assert usage_tokens(assistant([], usage(100, 20), stop="aborted")) is None
    assert usage_tokens(assistant([], usage(100, 20), stop="error")) is None
    assert usage_tokens(assistant([], usage())) is None
    assert usage_tokens(assistant([])) is None
    assert usage_tokens(user("x")) is None


def test_context_estimate_anchors_on_last_usable_usage():
    msgs = [
        user("a" * 400),
        assistant([{"type": "text", "text": "x"}], usage(1_000, 50)),
        tool_result("b" * 40),
        assistant([{"type": "text", "text": "y"}], usage(2_000, 100, 500, 10)),
        tool_result("c" * 80),
        user("d" * 8),
        assistant([{"type": "text", "text": "z"}], usage(9_999), stop="aborted"),
    ]
    result = estimate_context(msgs, Estimator("chars"))
    assert result == ContextEstimate(
        tokens=2_610 + 20 + 2 + 1,
        from_usage=True,
        usage_index=3,
        usage_tokens=2_610,
        trailing_tokens=23,
    )


def test_context_estimate_without_usage_applies_margin():
    msgs = [user("a" * 40), tool_result("b" * 40)]
    result = estimate_context(msgs, Estimator("chars"))
    assert result.from_usage is False
    assert result.usage_index is None
    assert result.trailing_tokens == 20
    assert result.tokens == 24  # exactly 20 * 1.2, no float overshoot
    assert estimate_context(msgs, Estimator("chars"), safety_margin=1.5).tokens == 30
    assert estimate_context([], Estimator("chars")).tokens == 0


def test_context_estimate_uses_entry_id_cache():
    est = Estimator("chars")
    msgs = [user("a" * 40)]
    estimate_context(msgs, est, ["id1"])
    assert est.cached("id1") == 10


def test_real_fixture_messages_estimate():
    path = pi_path("all-types.jsonl")
    with open(path) as fh:
        entries = [json.loads(line) for line in fh if line.strip()]
    msgs = [e["message"] for e in entries if e.get("type") == "message"]
    ids = [e["id"] for e in entries if e.get("type") == "message"]
    result = estimate_context(msgs, Estimator("chars"), ids)
    assert result.from_usage
    assert msgs[result.usage_index]["role"] == "assistant"
    assert result.tokens >= usage_tokens(msgs[result.usage_index])
    assert math.isfinite(result.tokens)
