"""The suite's generators produce the traffic they claim to (seeded, measured)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from gpuserve.sim.generators import (
    bin_stats,
    bursty,
    diurnal,
    drift,
    flash_crowd,
    in_spans,
    new_peaks,
    periodic,
)
from gpuserve.sim.suite import AZURE, SUITE
from gpuserve.sim.workload import parse_trace, poisson_workload


def test_bursty_matches_the_statistics_of_the_bursty_production_trace() -> None:
    stats = [bin_stats(bursty(mean_rate=5.5, duration=1800.0, seed=s)) for s in range(1, 11)]
    assert all(abs(s.mean_rate - 5.5) < 0.5 for s in stats)  # the load does not hang on a seed
    assert 0.4 <= statistics.median(s.empty_fraction for s in stats) <= 0.6
    assert 1.4 <= statistics.median(s.cv for s in stats) <= 2.2
    assert statistics.median(s.peak_to_mean for s in stats) >= 8.0
    assert statistics.median(s.longest_quiet for s in stats) >= 120.0
    poisson = bin_stats(poisson_workload(rate=5.5, duration=1800.0, seed=1))
    assert poisson.empty_fraction == 0.0 and poisson.cv < 0.3


def test_same_seed_same_arrivals() -> None:
    assert bursty(mean_rate=3.0, duration=600.0, seed=4) == bursty(
        mean_rate=3.0, duration=600.0, seed=4
    )
    assert bursty(mean_rate=3.0, duration=600.0, seed=4) != bursty(
        mean_rate=3.0, duration=600.0, seed=5
    )


def test_flash_crowd_multiplies_the_rate_for_its_duration_only() -> None:
    base = poisson_workload(rate=5.0, duration=900.0, seed=2)
    crowd = flash_crowd(base, factor=4.0, start=300.0, duration=180.0, seed=3)
    assert 3.4 < crowd.rate_between(300.0, 480.0) / 5.0 < 4.6
    assert crowd.rate_between(0.0, 300.0) == base.rate_between(0.0, 300.0)
    assert crowd.rate_between(480.0, 900.0) == base.rate_between(480.0, 900.0)


def test_diurnal_peaks_in_the_middle_and_drift_stays_within_a_factor_two() -> None:
    day = diurnal(mean_rate=10.0, duration=1800.0, seed=1)
    assert day.rate_between(800.0, 1000.0) > 3 * day.rate_between(0.0, 200.0)
    walk = drift(mean_rate=10.0, duration=3600.0, seed=1)
    minutes = [walk.rate_between(t, t + 60.0) for t in range(0, 3540, 60)]
    assert min(minutes) > 4.0 and max(minutes) < 25.0


def test_periodic_spikes_recur_once_a_period_at_the_factor_asked() -> None:
    run = periodic(mean_rate=10.0, duration=3000.0, seed=2, period=300.0, factor=4.0)
    assert abs(len(run.arrivals) / 3000.0 - 10.0) < 0.5  # the mean is the one asked for
    tens = [run.rate_between(t, t + 10.0) for t in range(0, 3000, 10)]
    base = statistics.median(tens)
    spiking = [r > 2.5 * base for r in tens]
    starts = [10 * i for i, on in enumerate(spiking) if on and (i == 0 or not spiking[i - 1])]
    # One spike per period, each begun within a tenth of a period (and a bin) of its slot.
    slots = {round((t - 150.0) / 300.0) for t in starts}
    assert slots == set(range(10)) and len(starts) == 10
    assert all(abs((t - 150.0) - 300.0 * round((t - 150.0) / 300.0)) <= 40.0 for t in starts)
    peaks = [r for r, on in zip(tens, spiking, strict=True) if on]
    assert 3.0 < statistics.median(peaks) / base < 5.0


def test_the_suite_warms_each_workload_up_on_the_first_minute_of_its_source() -> None:
    root = Path(__file__).resolve().parents[2] / "traces"
    traces = {AZURE: parse_trace((root / AZURE).read_text().splitlines())}
    azure = next(w for w in SUITE if w.name == "azure-conv")
    first_minute = azure.build(traces, 1.0, 1).rate_between(0.0, azure.warmup_span(1.0))
    for load in (2.0, 4.0):
        span = azure.warmup_span(load)
        # The same requests, played `load` times faster: `load` times the rate.
        played = azure.build(traces, load, 1).rate_between(0.0, span)
        assert played == pytest.approx(load * first_minute, rel=1e-9)
    # A generator at k times the base rate runs in its own time: its first 60 s.
    assert next(w for w in SUITE if w.name == "bursty").warmup_span(4.0) == 60.0


def _burst(start: float, seconds: float, seed: int) -> tuple[float, ...]:
    return poisson_workload(rate=40.0, duration=seconds, seed=seed, start=start).arrivals


def test_new_peaks_are_load_above_everything_the_memory_holds() -> None:
    steady = poisson_workload(rate=10.0, duration=4000.0, seed=3).arrivals
    assert new_peaks(steady, memory=1800.0, horizon=45.0) == []  # noise is not a peak
    # A 30 s burst at 5x on top: its first bin is new; the same burst again within the
    # memory is not, and once the memory has forgotten it, it is new again.
    bursts = _burst(600.0, 30.0, 4) + _burst(1200.0, 30.0, 5) + _burst(3100.0, 30.0, 6)
    arrivals = tuple(sorted(steady + bursts))
    spans = new_peaks(arrivals, memory=1800.0, horizon=45.0)
    assert spans == [(600.0, 645.0), (3100.0, 3145.0)]
    assert new_peaks(arrivals, memory=3600.0, horizon=45.0) == [(600.0, 645.0)]
    # Measured from 1000 s on, after a history the policy served: the burst at 1200 s is
    # no peak (the history's at 600 s was as high), and the spans are timed from 1000 s.
    after = new_peaks(arrivals, memory=1800.0, horizon=45.0, measured_from=1000.0)
    assert after == [(2100.0, 2145.0)]
    # A span that began in the history but reaches into the measured part is kept.
    assert new_peaks(arrivals, memory=1800.0, horizon=45.0, measured_from=620.0) == [
        (-20.0, 25.0),
        (2480.0, 2525.0),
    ]


def test_times_in_overlapping_spans_are_found_with_their_ends_excluded() -> None:
    spans = [(10.0, 55.0), (20.0, 65.0), (100.0, 145.0)]
    times = [0.0, 10.0, 54.9, 60.0, 65.0, 99.9, 100.0, 144.9, 145.0]
    assert in_spans(times, spans) == [False, True, True, True, False, False, True, True, False]
    assert in_spans(times, []) == [False] * len(times)
