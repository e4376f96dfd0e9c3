"""The token mix a replica is sized for: pooled over ten minutes, unless it moved.

One minute of requests measures a long-tailed mix poorly. On the Mooncake conversation
trace (about 180 requests a minute; prompts of 13,000 tokens on average, with a standard
deviation of 17,000) a minute's mean prompt strays by a tenth, and the rate a replica is
sized for, which follows the prompts' higher moments (their queue for the steps' token
budget), swung from 0.12 to 0.78 req/s between minutes at one load. The scale-down hold
then keeps the need of the lowest. Pooled over the last ten minutes
(``gpuserve.autoscaling.query_windows.LLM_MIX_S``), the mix is measured on ten times the
requests.

A mix does move, though: on the Azure conversation trace the mean prompt goes from 870 to
1,430 tokens between minutes of 1,200 requests, some twenty standard errors. So where the
window's mean prompt or mean output differs from the pooled one by more than ``MIX_Z``
standard errors of a window's mean (the pooled spread over the window's requests), the
mix moved and the window's own is used: the pooled one would lag it by minutes. A service
younger than the pooled window is sized on its minute's mix (``observing.windows_of``).

What it buys is steadiness, not fewer replicas on long tails: a pooled mix holds its
tail every minute, so on Mooncake its capacity sits near the lowest of a few minutes',
which the scale-down hold kept already (-3 to +4 % of GPU-hours in the simulator; 7 %
fewer on Azure x4 on slower engines, 2-3 points more on bursty 8 req/s). Figures:
docs/bench-notes/llm-capacity.md, "2026-12-07 (night)".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuserve.llm.capacity import LoadShape
from gpuserve.llm.observing import Observation

# Standard errors of a window's mean beyond which the mix moved. At two, a mix that did
# not move reads as moved in about one window in ten (two means tested): the window's
# own mix, as before pooling, and no worse.
MIX_Z = 2.0


@dataclass(frozen=True, slots=True)
class SizedMix:
    """The mix to size for, and the window it was measured over (seconds)."""

    shape: LoadShape
    seconds: float


def sized_mix(window: Observation, pooled: Observation | None) -> SizedMix | None:
    """``pooled``'s mix where ``window``'s does not differ from it beyond ``MIX_Z``
    standard errors (or measured none), else ``window``'s; None where neither measured
    one."""
    own = None if window.shape is None else SizedMix(window.shape, window.window_s)
    if pooled is None or pooled.shape is None:
        return own
    steady = SizedMix(pooled.shape, pooled.window_s)
    if window.shape is None:
        return steady
    requests = window.rate * window.window_s
    mix, seen = pooled.shape, window.shape
    prompts_moved = _strays(seen.prompt_mean, mix.prompt_mean, mix.prompt_moment(2), requests)
    outputs_moved = _strays(seen.output_mean, mix.output_mean, mix.output_square_mean, requests)
    return own if prompts_moved or outputs_moved else steady


def _strays(mean: float, pooled_mean: float, pooled_square: float | None, n: float) -> bool:
    """Whether a mean of ``n`` draws strays from the pooled one by more than ``MIX_Z``
    standard errors; a spread not measured cannot say it did not."""
    if pooled_square is None or n < 1:
        return True
    spread = math.sqrt(max(0.0, pooled_square - pooled_mean**2) / n)
    return abs(mean - pooled_mean) > MIX_Z * spread
