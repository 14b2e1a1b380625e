"""Choose how to bring an over-budget context back under the prompt budget.

The rule, with ``overflow = max(0, estimate - budget)``:

1. ``fits`` when ``estimate <= budget`` (overflow 0);
2. ``truncate_tool_results_only`` when truncating tool results alone recovers
   at least the overflow (``cuttable_tokens >= overflow``): cheaper than a
   summarisation call and loses less;
3. ``compact_then_truncate`` when compaction is needed and the tail it keeps
   would still hold oversized tool results (``tail_oversized_tokens > 0``),
   which compaction leaves verbatim;
4. ``compact_only`` otherwise.

The token inputs come from :mod:`agent.tokens` (estimate),
:mod:`agent.window` (budget) and :mod:`agent.truncate`
(``cuttable_tool_result_tokens`` and ``oversized_tool_result_tokens`` with
``start`` set to the first kept index).

``cuttable_tokens`` is compared with the overflow as given. A pure estimate
(no usage anchor) carries the 1.2 safety margin while cuttable tokens are raw
chars/4, so truncation in fact recovers a little more than counted: the rule
errs towards compaction, never towards a request that still overflows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agent.tokens import ContextEstimate


class Route(StrEnum):
    FITS = "fits"
    TRUNCATE_TOOL_RESULTS_ONLY = "truncate_tool_results_only"
    COMPACT_ONLY = "compact_only"
    COMPACT_THEN_TRUNCATE = "compact_then_truncate"


@dataclass(frozen=True)
class RouteDecision:
    route: Route
    overflow: int
    """Tokens over the prompt budget (0 when it fits)."""


def decide_route(
    estimate: int | ContextEstimate,
    budget: int,
    cuttable_tokens: int,
    tail_oversized_tokens: int = 0,
) -> RouteDecision:
    """Apply the module's routing rule; see the module docstring."""
    tokens = estimate.tokens if isinstance(estimate, ContextEstimate) else estimate
    overflow = max(0, tokens - budget)
    if overflow == 0:
        route = Route.FITS
    elif cuttable_tokens >= overflow:
        route = Route.TRUNCATE_TOOL_RESULTS_ONLY
    elif tail_oversized_tokens > 0:
        route = Route.COMPACT_THEN_TRUNCATE
    else:
        route = Route.COMPACT_ONLY
    return RouteDecision(route, overflow)
