"""The LLM rule's measure of how much noisier than Poisson a service's arrivals are."""

from __future__ import annotations

import bisect
import random

import pytest

from gpuserve.llm.dispersion import (
    DispersionMinutes,
    dispersion_sample,
    measured_dispersion,
    remember_dispersion,
)


def _rate(times: list[float], at: float, window: float) -> float:
    """Arrivals per second over the ``window`` seconds up to ``at`` (``times`` sorted)."""
    return (bisect.bisect_right(times, at) - bisect.bisect_right(times, at - window)) / window


def _evaluated(times: list[float], minutes: int) -> DispersionMinutes:
    """The records an evaluation every 5 s keeps from its 60-s and 15-s arrival rates."""
    kept: DispersionMinutes = ()
    for now in map(float, range(60, minutes * 60 + 1, 5)):
        recent, stable = _rate(times, now, 15.0), _rate(times, now, 60.0)
        sample = dispersion_sample(recent, 15.0, stable, 60.0)
        kept = remember_dispersion(kept, now, sample, memory_s=1800.0)
    return kept


def _arrivals(seed: int, rate: float, clump: int, minutes: int) -> list[float]:
    """Poisson arrivals of clumps of ``clump`` requests each (index of dispersion ``clump``)."""
    rng, now, times = random.Random(seed), 0.0, []
    while now < minutes * 60:
        now += rng.expovariate(rate / clump)
        times += [now] * clump
    return times


@pytest.mark.parametrize("seed", range(4))
def test_poisson_arrivals_measure_about_one_and_clumps_of_four_about_four(seed: int) -> None:
    poisson = _evaluated(_arrivals(seed, 6.0, 1, 20), 20)
    clumped = _evaluated(_arrivals(seed, 6.0, 4, 20), 20)
    assert measured_dispersion(poisson, 1205.0) < 1.5
    assert 2.0 < measured_dispersion(clumped, 1205.0) < 6.0


def test_the_minute_in_progress_and_the_first_minutes_do_not_count() -> None:
    quiet = tuple((60.0 * k, 12.0, 12) for k in range(6))  # mean 1 in each whole minute
    assert measured_dispersion(quiet, 360.0) == 1.0
    crowd = remember_dispersion(quiet, 360.0, 500.0, memory_s=1800.0)
    assert crowd[-1] == (360.0, 500.0, 1)
    assert measured_dispersion(crowd, 365.0) == 1.0  # the crowd's minute is in progress
    noisy = tuple((60.0 * k, 36.0, 12) for k in range(6))
    assert measured_dispersion(noisy, 360.0) == 3.0
    assert measured_dispersion(noisy[:4], 360.0) == 1.0  # too few minutes: Poisson


def test_a_crowd_of_a_few_minutes_leaves_the_median_where_the_traffic_around_it_is() -> None:
    minutes = tuple((60.0 * k, (400.0 if 5 <= k < 8 else 24.0), 12) for k in range(12))
    assert measured_dispersion(minutes, 720.0) == 2.0


def test_old_minutes_are_forgotten_and_unmeasured_evaluations_add_nothing() -> None:
    kept = remember_dispersion((), 0.0, 2.0, memory_s=120.0)
    kept = remember_dispersion(kept, 30.0, 4.0, memory_s=120.0)
    assert kept == ((0.0, 6.0, 2),)
    kept = remember_dispersion(kept, 130.0, None, memory_s=120.0)
    assert kept == ()
    assert remember_dispersion(kept, 140.0, 1.0, memory_s=0.0) == ()
    assert dispersion_sample(3.0, 15.0, 0.0, 60.0) is None
    assert dispersion_sample(3.0, 60.0, 2.0, 60.0) is None  # not nested: no spread
    assert dispersion_sample(3.0, 15.0, 2.0, 60.0) == pytest.approx(1.0 / (2.0 * 0.05))
