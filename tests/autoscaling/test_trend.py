"""Significant slopes of measured demand, and the trend of the burst memory's minutes."""

from __future__ import annotations

import random

import pytest

from gpuserve.autoscaling.bursts import Minutes
from gpuserve.autoscaling.trend import minute_trend, significant_slope


def test_a_slope_counts_only_beyond_twice_its_standard_error() -> None:
    rng = random.Random(3)
    ramp = [(10.0 * k, 5.0 + 0.1 * k + rng.gauss(0.0, 0.05)) for k in range(12)]
    assert significant_slope(ramp, 10.0) == pytest.approx(0.01, rel=0.1)
    noise = [(10.0 * k, 5.0 + rng.gauss(0.0, 0.5)) for k in range(12)]
    assert significant_slope(noise, 10.0) == 0.0
    # Rates over windows six points wide are correlated: the same small slope is noise.
    weak = [(10.0 * k, 5.0 + 0.03 * k + (0.08 if k % 2 else -0.08)) for k in range(12)]
    assert significant_slope(weak, 10.0) == pytest.approx(0.003, rel=0.15)
    assert significant_slope(weak, 60.0) == 0.0
    assert significant_slope(ramp[:3], 10.0) == 0.0  # too few points to judge


def _minutes(levels: list[float], surges: list[float] | None = None) -> Minutes:
    surges = surges or [0.0] * len(levels)
    return tuple((60.0 * k, s, d, d) for k, (d, s) in enumerate(zip(levels, surges, strict=True)))


def test_the_minutes_trend_reads_whole_minutes_of_its_span_and_no_surges() -> None:
    levels = [10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0]
    now = 60.0 * len(levels) + 5.0  # the last record's minute is over
    assert minute_trend(_minutes(levels), now, 300.0) == pytest.approx(2.0 / 60.0)
    # A minute in progress (its level covers a few seconds) is not read.
    in_progress = _minutes([*levels, 60.0])
    assert minute_trend(in_progress, now + 60.0 - 30.0, 300.0) == pytest.approx(2.0 / 60.0)
    # Older minutes than the span are not read: a rise that stopped is no trend.
    stopped = _minutes([10.0, 14.0, 18.0, 22.0, 22.0, 22.0, 22.0, 22.0, 22.0])
    assert minute_trend(stopped, 60.0 * 9 + 5.0, 300.0) == 0.0
    assert minute_trend(stopped, 60.0 * 9 + 5.0, 600.0) > 0.0
    # A surge recorded in the span: the rise may be a jump, which the surge rules answer.
    jumped = _minutes(levels, [0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0])
    assert minute_trend(jumped, now, 300.0) == 0.0
    assert minute_trend(_minutes(levels[:3]), 60.0 * 3 + 5.0, 300.0) == 0.0
