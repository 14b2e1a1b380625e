import pytest

from agent.routing import Route, RouteDecision, decide_route
from agent.settings import ContextSettings
from agent.tokens import ContextEstimate, Estimator, estimate_context
from agent.truncate import (
    cuttable_tool_result_tokens,
    oversized_tool_result_tokens,
    truncate_aggregate,
)
from agent.window import prompt_budget

BUDGET = 100_000


def test_route_values_are_the_documented_names():
    assert [r.value for r in Route] == [
        "fits",
        "truncate_tool_results_only",
        "compact_only",
        "compact_then_truncate",
    ]
    assert Route.FITS == "fits"


@pytest.mark.parametrize("estimate", [0, 99_999, 100_000])
def test_fits_up_to_and_including_budget(estimate):
    assert decide_route(estimate, BUDGET, cuttable_tokens=0) == RouteDecision(Route.FITS, 0)


def test_truncate_only_when_truncation_recovers_whole_overflow():
    assert decide_route(100_500, BUDGET, cuttable_tokens=500) == RouteDecision(
        Route.TRUNCATE_TOOL_RESULTS_ONLY, 500
    )
    assert decide_route(100_500, BUDGET, cuttable_tokens=501).route is (
        Route.TRUNCATE_TOOL_RESULTS_ONLY
    )


def test_truncate_only_wins_even_if_tail_has_oversized_results():
    decision = decide_route(100_500, BUDGET, cuttable_tokens=600, tail_oversized_tokens=300)
    assert decision.route is Route.TRUNCATE_TOOL_RESULTS_ONLY


def test_compact_only_when_truncation_falls_short_and_tail_is_clean():
    assert decide_route(100_500, BUDGET, cuttable_tokens=499) == RouteDecision(
        Route.COMPACT_ONLY, 500
    )
    assert decide_route(100_500, BUDGET, 499, tail_oversized_tokens=0).route is Route.COMPACT_ONLY


def test_compact_then_truncate_when_kept_tail_has_oversized_results():
    assert decide_route(150_000, BUDGET, cuttable_tokens=10_000, tail_oversized_tokens=1) == (
        RouteDecision(Route.COMPACT_THEN_TRUNCATE, 50_000)
    )


def test_accepts_context_estimate():
    estimate = ContextEstimate(tokens=100_001, from_usage=True, usage_index=0)
    assert decide_route(estimate, BUDGET, 0) == RouteDecision(Route.COMPACT_ONLY, 1)


def _result(n, chars):
    return {
        "role": "toolResult",
        "toolCallId": f"t{n}",
        "toolName": "bash",
        "content": [{"type": "text", "text": "x" * chars}],
        "isError": False,
        "timestamp": n,
    }


def test_end_to_end_with_other_modules():
    settings = ContextSettings(context_window=32_000)
    budget = prompt_budget(32_000, settings)  # 15,616
    msgs = [{"role": "user", "content": "go", "timestamp": 0}, _result(1, 70_000)]
    estimate = estimate_context(msgs, Estimator("chars"))
    cuttable = cuttable_tool_result_tokens(msgs, settings)
    decision = decide_route(estimate, budget, cuttable)
    assert decision.route is Route.TRUNCATE_TOOL_RESULTS_ONLY
    assert decision.overflow == estimate.tokens - budget

    # a pure estimate carries the 1.2 margin, so the char budget must undo it
    char_budget = int(budget / settings.estimate_safety_margin) * 4 - 400
    out, report = truncate_aggregate(msgs, char_budget, settings)
    assert report.fits
    assert decide_route(estimate_context(out, Estimator("chars")), budget, 0).route is Route.FITS

    # a kept tail with a 20,000-char result is oversized for a 32k window (cap 16,000)
    tail = [_result(2, 20_000)]
    assert oversized_tool_result_tokens(tail, 32_000, settings) == 1_000
