"""How long the autoscaler's Prometheus windows are, from how often Prometheus scrapes Triton.

A window must hold enough samples to say anything: ``rate()`` over a range returns nothing
unless the range holds two samples, so a 15-s range over a 15-s scrape (the chart's
PodMonitor default) is empty most of the time and the autoscaler would hold for want of
metrics. Prometheus' own advice is a range of at least four scrape intervals. The LLM rule
reads its series at instants a window apart and divides by the window: an instant query
returns each series' newest sample, so a window that is not a whole number of intervals
would count one interval's increase in some passes and two in others. Behind a scrape of
a second or so (the local stack) the windows are those the rules were built and measured
with: 15 s for rates, 60 s and 15 s for the LLM rule. KEDA's trigger (engine: keda) reads
rate() over the service's stable window, widened the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The chart's PodMonitor scrapes every 15 s unless told otherwise: the interval assumed when
# none is stated.
DEFAULT_SCRAPE_INTERVAL_S = 15.0
RATE_WINDOW_S = 15.0  # the rate() range behind a fast scrape
RATE_SAMPLES = 4  # scrape intervals a rate() range holds at least (Prometheus' advice)
LLM_STABLE_S = 60.0  # the LLM rule's stable window behind a fast scrape
LLM_RECENT_S = 15.0  # and its recent one
LLM_STABLE_INTERVALS = 4  # the stable window spans at least this many intervals
LLM_MIX_S = 600.0  # the window the LLM rule pools its token mix over (gpuserve.llm.mixing)


@dataclass(frozen=True, slots=True)
class QueryWindows:
    """The windows for a Prometheus that scrapes Triton every ``scrape_interval_s``."""

    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S

    def __post_init__(self) -> None:
        if not math.isfinite(self.scrape_interval_s) or self.scrape_interval_s <= 0:
            raise ValueError(f"scrape interval: must be positive, got {self.scrape_interval_s}")

    def rate_window_over(self, seconds: float) -> float:
        """A rate() range of at least ``seconds`` that holds enough samples."""
        return max(seconds, RATE_SAMPLES * self.scrape_interval_s)

    @property
    def rate_window_s(self) -> float:
        """The range of the request rule's rate() queries (and the policy's rate window)."""
        return self.rate_window_over(RATE_WINDOW_S)

    @property
    def rate_range(self) -> str:
        """``rate_window_s`` as PromQL writes a range."""
        return promql_range(self.rate_window_s)

    @property
    def vllm_windows_s(self) -> tuple[float, float]:
        """The LLM rule's stable and recent windows: whole numbers of scrape intervals."""
        stable = max(LLM_STABLE_S, LLM_STABLE_INTERVALS * self.scrape_interval_s)
        return self._whole(stable), self._whole(LLM_RECENT_S)

    @property
    def vllm_mix_s(self) -> float:
        """The window the LLM rule pools its token mix over (gpuserve.llm.mixing): a whole
        number of scrape intervals, and longer than the stable window."""
        stable, _ = self.vllm_windows_s
        return max(self._whole(LLM_MIX_S), 2 * stable)

    def _whole(self, seconds: float) -> float:
        """``seconds`` rounded up to a whole number of scrape intervals (at least one)."""
        s = self.scrape_interval_s
        return max(1, math.ceil(seconds / s - 1e-9)) * s


def promql_range(seconds: float) -> str:
    """A range as PromQL writes one: whole seconds where it is, else whole milliseconds."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"
