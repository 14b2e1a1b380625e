import copy

import pytest

from agent.settings import ContextSettings
from agent.truncate import (
    aggregate_order,
    cuttable_tool_result_tokens,
    max_result_chars,
    oversized_tool_result_tokens,
    result_text,
    tail_looks_important,
    truncate_aggregate,
    truncate_text,
    truncate_tool_result,
    truncate_tool_results,
    with_text,
)

PLAIN = "".join(f"reading chunk {i} of the document body\n" for i in range(2_000))


def result(text, images=0, call="t"):
    content = [{"type": "text", "text": text}]
    content += [{"type": "image", "data": "AAAA", "mimeType": "image/png"}] * images
    return {
        "role": "toolResult",
        "toolCallId": call,
        "toolName": "bash",
        "content": content,
        "isError": False,
        "timestamp": 1,
    }


# --- caps


@pytest.mark.parametrize(
    ("window", "cap"),
    [
        (16_000, 16_000),
        (99_999, 16_000),
        (100_000, 32_000),
        (199_999, 32_000),
        (200_000, 64_000),
        (1_000_000, 64_000),
    ],
)
def test_char_cap_by_window(window, cap):
    assert max_result_chars(window) == cap


def test_window_share_binds_when_tighter():
    # 30% of 10,000 tokens at 4 chars/token = 12,000 chars < 16,000 cap
    assert max_result_chars(10_000) == 12_000
    settings = ContextSettings(tool_result_window_share=0.05)
    assert max_result_chars(200_000, settings) == 40_000


def test_caps_are_settings():
    settings = ContextSettings(tool_result_char_caps=((0, 1_000), (50_000, 2_000)))
    assert max_result_chars(49_999, settings) == 1_000
    assert max_result_chars(50_000, settings) == 2_000


# --- important tail


@pytest.mark.parametrize(
    "ending",
    [
        "Traceback (most recent call last):\n  File 'x.py'\nValueError: bad",
        "npm ERR! something went wrong",
        "java.lang.NullPointerException at Foo.bar",
        "Build FAILED.",
        "error[E0308]: mismatched types",
        "Process exited with code 2",
        "exit code: 1",
        "returncode=137",
        '{\n  "ok": true,\n  "items": 3\n}\n',
        "===== 12 passed, 1 skipped in 0.42s =====",
        "Total: 1234 lines",
        "3 files changed, 10 insertions(+)",
    ],
)
def test_important_tail_detected(ending):
    assert tail_looks_important(PLAIN + ending)


@pytest.mark.parametrize(
    "ending",
    [
        "",
        "the quick brown fox jumps over the lazy dog",
        "def f(x):\n    return x\n",
        "terror and errorless words do not count",
        "nothing exceptionally bad, a tolerable terrain",
        "{ an opening brace only",
    ],
)
def test_unimportant_tail_not_detected(ending):
    assert not tail_looks_important(PLAIN + ending)


def test_only_the_end_is_scanned():
    text = "Traceback: early failure\n" + PLAIN
    assert not tail_looks_important(text)
    assert tail_looks_important(text, ContextSettings(tail_scan_chars=len(text)))


# --- single text


def test_short_text_untouched():
    assert truncate_text("abc", 3) == ("abc", 0)


def test_plain_text_keeps_head_and_reports_cut():
    out, cut = truncate_text(PLAIN, 10_000)
    assert len(out) <= 10_000
    assert cut == len(PLAIN) - out.index("\n\n[...")
    assert out.endswith(f"\n\n[... {cut} more characters truncated]")
    head = out[: out.index("\n\n[...")]
    assert PLAIN.startswith(head)
    assert head.endswith("\n")  # cut on a line break


def test_important_tail_keeps_head_and_tail():
    text = PLAIN + "FAILED tests/test_x.py::test_y - AssertionError\n1 failed, 40 passed"
    out, cut = truncate_text(text, 10_000)
    assert len(out) <= 10_000
    assert f"\n\n[... {cut} characters truncated ...]\n\n" in out
    head, tail = out.split(f"\n\n[... {cut} characters truncated ...]\n\n")
    assert text.startswith(head) and text.endswith(tail)
    assert tail.endswith("1 failed, 40 passed")
    assert len(head) + len(tail) + cut == len(text)
    assert 0.25 < len(tail) / (len(head) + len(tail)) < 0.31


def test_keep_tail_can_be_forced():
    out, _ = truncate_text(PLAIN, 5_000, keep_tail=True)
    assert out.endswith(PLAIN[-100:])
    out, _ = truncate_text(PLAIN + "Error: x", 5_000, keep_tail=False)
    assert "more characters truncated]" in out


def test_text_without_newlines_is_cut_exactly():
    out, cut = truncate_text("x" * 50_000, 1_000)
    assert len(out) <= 1_000
    assert out.count("x") + cut == 50_000


def test_tiny_limit_hard_cuts():
    assert truncate_text("x" * 100, 5) == ("xxxxx", 95)


# --- messages


def test_truncate_tool_result_returns_copy_and_keeps_images():
    msg = result("a" * 20_000 + "\n" + "b" * 10, images=1)
    snapshot = copy.deepcopy(msg)
    out, cut = truncate_tool_result(msg, 1_000)
    assert msg == snapshot
    assert cut > 0
    assert [b["type"] for b in out["content"]] == ["text", "image"]
    assert out["toolCallId"] == "t"
    same, zero = truncate_tool_result(msg, 50_000)
    assert same is msg and zero == 0


def test_result_text_joins_blocks_and_with_text_replaces_them():
    msg = {
        "role": "toolResult",
        "content": [
            {"type": "image", "data": "A", "mimeType": "image/png"},
            {"type": "text", "text": "one"},
            {"type": "text", "text": "two"},
        ],
    }
    assert result_text(msg) == "one\ntwo"
    new = with_text(msg, "X")
    assert new["content"] == [msg["content"][0], {"type": "text", "text": "X"}]
    assert with_text(msg, "X", keep_images=False)["content"] == [{"type": "text", "text": "X"}]
    assert result_text({"role": "toolResult", "content": "str"}) == "str"


def test_truncate_tool_results_applies_window_cap():
    msgs = [
        {"role": "user", "content": "x" * 100_000},
        result("a" * 70_000, call="1"),
        result("b" * 20_000, call="2"),
    ]
    snapshot = copy.deepcopy(msgs)
    out, report = truncate_tool_results(msgs, 100_000)
    assert msgs == snapshot
    assert out[0] is msgs[0] and out[2] is msgs[2]
    assert len(result_text(out[1])) <= 32_000
    assert report.truncated == (1,)
    assert report.chars_before == 90_000
    assert report.chars_after == len(result_text(out[1])) + 20_000
    assert report.chars_cut == report.chars_before - report.chars_after
    assert report.fits


# --- aggregate


def test_aggregate_order_is_largest_first_newest_among_equals():
    msgs = [
        result("a" * 5_000),
        {"role": "assistant", "content": []},
        result("b" * 9_000),
        result("c" * 5_000),
        result("d" * 9_000),
        result("e" * 100),
    ]
    assert aggregate_order(msgs) == [4, 2, 3, 0, 5]


def test_aggregate_within_budget_is_untouched():
    msgs = [result("a" * 5_000), result("b" * 5_000)]
    out, report = truncate_aggregate(msgs, 10_000)
    assert all(a is b for a, b in zip(out, msgs, strict=True))
    assert report.truncated == () and report.fits


def test_aggregate_cuts_largest_only_as_much_as_needed():
    msgs = [result("a" * 30_000), result("b" * 10_000), result("c" * 20_000)]
    out, report = truncate_aggregate(msgs, 50_000)
    assert report.truncated == (0,)
    assert len(result_text(out[0])) <= 20_000
    assert out[1] is msgs[1] and out[2] is msgs[2]
    assert report.fits and report.chars_after <= 50_000


def test_aggregate_walks_on_and_respects_floor():
    settings = ContextSettings(aggregate_min_keep_chars=2_000)
    msgs = [result("a" * 10_000), result("b" * 10_000), result("c" * 3_000)]
    out, report = truncate_aggregate(msgs, 8_000, settings)
    # equal sizes: the newer (index 1) goes first, down to the floor, then index 0
    assert report.truncated[:2] == (1, 0)
    assert len(result_text(out[1])) <= 2_000
    assert report.fits
    assert report.chars_after == sum(len(result_text(m)) for m in out)


def test_aggregate_reports_when_floor_prevents_fit():
    settings = ContextSettings(aggregate_min_keep_chars=2_000)
    msgs = [result("a" * 5_000), result("b" * 5_000)]
    out, report = truncate_aggregate(msgs, 1_000, settings)
    assert report.truncated == (1, 0)
    assert not report.fits
    assert all(len(result_text(m)) <= 2_000 for m in out)


def test_aggregate_ignores_non_tool_messages():
    msgs = [{"role": "user", "content": "u" * 50_000}, result("a" * 6_000)]
    out, report = truncate_aggregate(msgs, 5_000)
    assert out[0] is msgs[0]
    assert report.chars_before == 6_000 and report.truncated == (1,)


# --- what truncation could recover


def test_cuttable_and_oversized_tokens():
    msgs = [result("a" * 40_000), result("b" * 1_000), result("c" * 20_000)]
    # floor 2,000: (38,000 + 0 + 18,000) / 4
    assert cuttable_tool_result_tokens(msgs) == 14_000
    assert cuttable_tool_result_tokens(msgs, start=2) == 4_500
    # cap 16,000 for a 50k window: (24,000 + 0 + 4,000) / 4
    assert oversized_tool_result_tokens(msgs, 50_000) == 7_000
    assert oversized_tool_result_tokens(msgs, 50_000, start=1) == 1_000
    assert oversized_tool_result_tokens(msgs, 200_000) == 0
