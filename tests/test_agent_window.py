import logging

import pytest

from agent.settings import ContextSettings
from agent.window import (
    Budget,
    ContextWindowTooSmall,
    check_window,
    clamp_reserve,
    model_window,
    prompt_budget,
    resolve_budget,
    resolve_window,
)


def test_explicit_setting_beats_model_table():
    settings = ContextSettings(context_window=50_000)
    assert resolve_window("claude-sonnet-4-5", settings) == 50_000


def test_model_table_then_default():
    assert resolve_window("claude-sonnet-4-5") == 200_000
    assert resolve_window("anthropic/Claude-Opus-4") == 200_000
    assert resolve_window("gpt-4o-mini") == 128_000
    assert resolve_window("some-local-model") == 200_000
    assert resolve_window(None) == 200_000
    assert resolve_window(None, ContextSettings(default_context_window=64_000)) == 64_000


def test_model_table_is_overridable_and_first_match_wins():
    settings = ContextSettings(model_windows=(("claude-haiku*", 100_000), ("claude-*", 150_000)))
    assert model_window("claude-haiku-4", settings) == 100_000
    assert model_window("claude-sonnet-4", settings) == 150_000
    assert model_window("gpt-4o", settings) is None
    assert model_window("", settings) is None


def test_window_below_minimum_is_refused_with_advice():
    with pytest.raises(ContextWindowTooSmall) as err:
        check_window(15_999)
    message = str(err.value)
    assert "15,999" in message and "16,000" in message
    assert "larger window" in message and "context_window" in message
    assert err.value.window == 15_999
    assert isinstance(err.value, ValueError)
    with pytest.raises(ContextWindowTooSmall):
        resolve_window(None, ContextSettings(context_window=15_999))


@pytest.mark.parametrize("window", [16_000, 31_999])
def test_small_window_is_accepted_with_warning(window, caplog):
    with caplog.at_level(logging.WARNING, logger="agent.window"):
        assert check_window(window) == window
    assert any("small" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("window", [32_000, 200_000])
def test_normal_window_does_not_warn(window, caplog):
    with caplog.at_level(logging.WARNING, logger="agent.window"):
        assert check_window(window) == window
    assert caplog.records == []


def test_minimum_and_warning_levels_are_settings():
    settings = ContextSettings(min_context_window=1_000, warn_context_window=2_000)
    assert check_window(1_000, settings) == 1_000
    with pytest.raises(ContextWindowTooSmall):
        check_window(999, settings)


def test_budget_is_window_minus_reserve_when_roomy():
    assert prompt_budget(200_000) == 200_000 - 16_384
    assert prompt_budget(32_000) == 32_000 - 16_384
    assert prompt_budget(24_384) == 8_000  # reserve fits exactly


def test_reserve_is_clamped_to_leave_prompt_floor():
    # floor = min(8_000, window / 2)
    assert clamp_reserve(20_000) == 12_000
    assert prompt_budget(20_000) == 8_000
    assert clamp_reserve(16_000) == 8_000
    assert prompt_budget(16_000) == 8_000
    assert prompt_budget(24_383) == 8_000
    # below 16,000 (only reachable by lowering the minimum) half stays for the prompt
    assert prompt_budget(10_000) == 5_000


def test_reserve_clamp_uses_settings():
    settings = ContextSettings(reserve_tokens=4_000, min_prompt_tokens=30_000)
    assert clamp_reserve(100_000, settings) == 4_000
    assert clamp_reserve(40_000, settings) == 4_000
    assert clamp_reserve(20_000, settings) == 4_000
    tight = ContextSettings(reserve_tokens=50_000, min_prompt_tokens=30_000)
    assert clamp_reserve(70_000, tight) == 40_000
    assert clamp_reserve(40_000, tight) == 20_000


def test_resolve_budget():
    assert resolve_budget("claude-sonnet-4-5") == Budget(200_000, 16_384, 183_616)
    assert resolve_budget(None, ContextSettings(context_window=16_000)) == Budget(
        16_000, 8_000, 8_000
    )
