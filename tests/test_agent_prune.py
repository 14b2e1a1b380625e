import copy

import pytest

from agent.prune import (
    PruneLevel,
    clear_placeholder,
    protected_start,
    prune_level,
    prune_messages,
    ratio_threshold,
    soft_trim_text,
)
from agent.settings import ContextSettings
from agent.truncate import result_text

WINDOW = 100_000
BIG = "".join(f"line {i:05d} of a long file\n" for i in range(400))  # 10,400 chars


def assistant(n):
    return {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "x" * 5_000, "thinkingSignature": "sig"},
            {"type": "text", "text": "y" * 5_000},
            {"type": "toolCall", "id": f"t{n}", "name": "read", "arguments": {"path": "f"}},
        ],
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2},
        "stopReason": "toolUse",
        "timestamp": n,
    }


def result(n, text=BIG, images=0):
    content = [{"type": "text", "text": text}]
    content += [{"type": "image", "data": "AAAA", "mimeType": "image/png"}] * images
    return {
        "role": "toolResult",
        "toolCallId": f"t{n}",
        "toolName": "read",
        "content": content,
        "isError": False,
        "timestamp": n,
    }


def conversation(turns):
    """user, then `turns` x (assistant with a tool call, its tool result)."""
    msgs = [{"role": "user", "content": "go", "timestamp": 0}]
    for n in range(turns):
        msgs += [assistant(n), result(n)]
    return msgs


def test_ratio_threshold_avoids_float_overshoot():
    assert 0.55 * 100_000 > 55_000
    assert ratio_threshold(0.55, 100_000) == 55_000
    assert ratio_threshold(0.3, 100_000) == 30_000
    assert ratio_threshold(0.5, 100_001) == 50_001


@pytest.mark.parametrize(
    ("tokens", "level"),
    [
        (0, PruneLevel.NONE),
        (29_999, PruneLevel.NONE),
        (30_000, PruneLevel.SOFT_TRIM),
        (49_999, PruneLevel.SOFT_TRIM),
        (50_000, PruneLevel.CLEAR),
        (150_000, PruneLevel.CLEAR),
    ],
)
def test_levels_at_boundaries(tokens, level):
    assert prune_level(tokens, WINDOW) is level


def test_levels_follow_settings():
    settings = ContextSettings(soft_trim_ratio=0.1, hard_clear_ratio=0.2)
    assert prune_level(9_999, WINDOW, settings) is PruneLevel.NONE
    assert prune_level(10_000, WINDOW, settings) is PruneLevel.SOFT_TRIM
    assert prune_level(20_000, WINDOW, settings) is PruneLevel.CLEAR


def test_protected_start_is_third_last_assistant():
    msgs = conversation(5)  # assistants at 1, 3, 5, 7, 9
    assert protected_start(msgs, 3) == 5
    assert protected_start(msgs, 1) == 9
    assert protected_start(msgs, 0) == len(msgs)
    assert protected_start(conversation(2), 3) == 0


def test_below_30_percent_nothing_changes():
    msgs = conversation(6)
    before = copy.deepcopy(msgs)
    out, report = prune_messages(msgs, WINDOW, 29_999)
    assert out is msgs and msgs == before  # nothing to prune: no copy is made
    assert report.level is PruneLevel.NONE
    assert not report.changed


def test_at_30_percent_old_large_results_are_soft_trimmed():
    msgs = conversation(6)  # results at 2, 4, 6, 8, 10, 12; assistants at 1..11
    before = copy.deepcopy(msgs)
    out, report = prune_messages(msgs, WINDOW, 30_000)
    assert msgs == before  # input untouched
    assert report.level is PruneLevel.SOFT_TRIM
    assert report.protected_from == 7
    assert report.trimmed == (2, 4, 6)
    assert report.cleared == ()
    for i in (2, 4, 6):
        text = result_text(out[i])
        cut = len(BIG) - 3_000
        assert text.startswith(BIG[:1_500])
        assert text.endswith(BIG[-1_500:])
        assert f"[... {cut} characters cut" in text
        assert out[i]["toolCallId"] == msgs[i]["toolCallId"]
    for i in (8, 10, 12):
        assert out[i] is msgs[i]
    assert report.chars_removed == sum(
        len(result_text(msgs[i])) - len(result_text(out[i])) for i in (2, 4, 6)
    )


def test_soft_trim_threshold_is_strictly_greater():
    settings = ContextSettings(soft_trim_min_chars=4_000)
    msgs = conversation(5)
    msgs[2] = result(0, "a" * 4_000)
    msgs[4] = result(1, "b" * 4_001)
    out, report = prune_messages(msgs, WINDOW, 30_000, settings)
    assert out[2] is msgs[2]
    assert report.trimmed == (4,)
    assert "[... 1001 characters cut" in result_text(out[4])


def test_soft_trim_keeps_images_and_sizes_from_settings():
    settings = ContextSettings(
        soft_trim_min_chars=100, soft_trim_head_chars=10, soft_trim_tail_chars=5
    )
    msgs = conversation(4)
    msgs[2] = result(0, "H" * 10 + "m" * 200 + "T" * 5, images=1)
    out, _ = prune_messages(msgs, WINDOW, 40_000, settings)
    text = result_text(out[2])
    assert text == soft_trim_text("H" * 10 + "m" * 200 + "T" * 5, 10, 5)
    assert text.startswith("H" * 10 + "\n") and text.endswith("\n" + "T" * 5)
    assert [b["type"] for b in out[2]["content"]] == ["text", "image"]


def test_at_50_percent_old_results_are_cleared():
    msgs = conversation(6)
    msgs[4] = result(1, "short", images=0)
    msgs[6] = result(2, "z" * 300, images=2)
    before = copy.deepcopy(msgs)
    # 60,000: trimming index 2 saves ~1,850 tokens, not enough to get under 50,000
    out, report = prune_messages(msgs, WINDOW, 60_000)
    assert msgs == before
    assert report.level is PruneLevel.CLEAR
    assert report.cleared == (2, 6)
    assert report.trimmed == ()
    assert out[2]["content"] == [
        {"type": "text", "text": f"[old tool result cleared: {len(BIG)} chars]"}
    ]
    assert out[6]["content"] == [{"type": "text", "text": clear_placeholder(300, 2)}]
    assert "2 images" in clear_placeholder(300, 2)
    assert out[4] is msgs[4]  # the placeholder would be longer than "short"
    for i in (8, 10, 12):
        assert out[i] is msgs[i]


def test_49_percent_trims_but_does_not_clear():
    out, report = prune_messages(conversation(6), WINDOW, 49_999)
    assert report.level is PruneLevel.SOFT_TRIM
    assert "cleared" not in result_text(out[2])


def test_last_three_assistant_turns_protected_even_when_full():
    msgs = conversation(3)
    out, report = prune_messages(msgs, WINDOW, 99_000)
    assert report.level is PruneLevel.CLEAR
    assert report.protected_from == 1
    assert not report.changed
    assert all(a is b for a, b in zip(out, msgs, strict=True))


def test_results_after_last_assistant_are_protected():
    msgs = conversation(4)
    msgs.append(result(9))  # a pending result with no assistant reply yet
    out, report = prune_messages(msgs, WINDOW, 99_000)
    assert report.cleared == (2,)
    assert out[-1] is msgs[-1]


def test_protected_turn_count_is_a_setting():
    out, report = prune_messages(
        conversation(4), WINDOW, 60_000, ContextSettings(protected_assistant_turns=1)
    )
    assert report.cleared == (2, 4, 6)


def test_assistant_and_thinking_never_touched():
    msgs = conversation(6)
    for tokens in (30_000, 60_000):
        out, _ = prune_messages(msgs, WINDOW, tokens)
        for i, msg in enumerate(msgs):
            if msg["role"] != "toolResult":
                assert out[i] is msg


def test_other_roles_with_big_text_are_left_alone():
    msgs = conversation(5)
    msgs.insert(1, {"role": "bashExecution", "command": "cat", "output": BIG, "exitCode": 0})
    msgs.insert(1, {"role": "user", "content": BIG, "timestamp": 0})
    out, report = prune_messages(msgs, WINDOW, 60_000)
    assert out[1] is msgs[1] and out[2] is msgs[2]
    assert report.cleared == (4, 6)


def test_estimate_is_computed_when_omitted():
    msgs = conversation(6)
    # last assistant reports 40,000 tokens of context -> soft trim
    msgs[-2] = {
        **msgs[-2],
        "usage": {"input": 40_000, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    }
    out, report = prune_messages(msgs, WINDOW)
    assert report.level is PruneLevel.SOFT_TRIM
    assert report.estimate_tokens == 40_000 + 2_600  # usage + BIG after it at chars/4


# --- hard clear is staged after soft trim


def test_over_50_percent_trimming_alone_is_enough_so_nothing_is_cleared():
    """Three old results of 10,400 chars trim to ~3,050 each: ~5,500 tokens saved, so at
    52,000 (between 50% and ~55%) the context is back under 50% without clearing."""
    msgs = conversation(6)
    out, report = prune_messages(msgs, WINDOW, 52_000)
    assert report.level is PruneLevel.SOFT_TRIM
    assert report.trimmed == (2, 4, 6) and report.cleared == ()
    assert all("cleared" not in result_text(out[i]) for i in (2, 4, 6))


def test_still_over_after_trimming_clears_oldest_first_only_as_far_as_needed():
    msgs = conversation(6)
    # trimming saves ~5,513 tokens; clearing one trimmed result ~757 more
    out, report = prune_messages(msgs, WINDOW, 50_000 + 5_513 + 500)
    assert report.level is PruneLevel.CLEAR
    assert report.cleared == (2,)
    assert report.trimmed == (4, 6)
    assert result_text(out[2]).startswith("[old tool result cleared")
    assert "characters cut" in result_text(out[4])
    out, report = prune_messages(msgs, WINDOW, 90_000)
    assert report.cleared == (2, 4, 6) and report.trimmed == ()
