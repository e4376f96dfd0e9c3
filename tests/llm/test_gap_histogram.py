"""The cluster simulator's histograms take a scrape's observations at once: the same
bucket counts and the same sum, to the last bit, as adding each observation (for TPOT,
each request's gaps) as it is made."""

from __future__ import annotations

import random
from bisect import bisect_left

import numpy as np
import pytest

from gpuserve.llm import metrics as vllm
from gpuserve.sim.llm.cluster import _Histogram


def _token_times(rng: random.Random, count: int) -> list[float]:
    clock, out = rng.uniform(0.0, 600.0), []
    for _ in range(count):
        clock += rng.expovariate(1 / 0.03)
        out.append(clock)
    return out


@pytest.mark.parametrize("lengths", [[2], [5], [2, 2, 2], [300, 2, 17, 1000, 3], [9] * 40])
def test_gaps_added_at_once_match_each_series_added_alone(lengths: list[int]) -> None:
    rng = random.Random(sum(lengths))
    series = [_token_times(rng, n) for n in lengths]
    # Each series alone, as the simulator added a finished request's gaps before.
    counts, total = [0.0] * (len(vllm.TPOT_BUCKETS) + 1), 0.0
    for times in series:
        gaps = np.diff(np.asarray(times))
        for bucket in np.searchsorted(np.asarray(vllm.TPOT_BUCKETS), gaps, side="left"):
            counts[bucket] += 1.0
        total += float(gaps.sum())
    together = _Histogram(vllm.TPOT_BUCKETS)
    together.add_gaps(series)
    assert together.counts == counts
    assert together.total == total  # the same float, not merely close
    assert sum(together.counts) == sum(n - 1 for n in lengths)


def test_no_series_adds_nothing() -> None:
    histogram = _Histogram(vllm.TPOT_BUCKETS)
    histogram.add_gaps([])
    assert histogram.total == 0.0 and not any(histogram.counts)


def test_observations_taken_at_a_scrape_match_each_added_as_made() -> None:
    rng = random.Random(4)
    histogram = _Histogram(vllm.TTFT_BUCKETS)
    counts, total = [0.0] * (len(vllm.TTFT_BUCKETS) + 1), 0.0
    for scrape in range(3):
        # A bound itself counts in its own bucket (``le``), as Prometheus counts.
        values = [rng.expovariate(2.0) for _ in range(50 * scrape)] + [vllm.TTFT_BUCKETS[2]]
        for value in values:
            histogram.observed.append(value)
            counts[bisect_left(vllm.TTFT_BUCKETS, value)] += 1.0
            total += value
        histogram.take_observed()
        assert histogram.counts == counts
        assert histogram.total == total  # the same float
        assert histogram.observed == []  # taken once
