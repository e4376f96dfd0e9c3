"""Seeded synthetic traffic for the workload suite, and the statistics that describe it.

Every generator is a non-homogeneous Poisson process whose rate follows a seeded path:

* ``bursty``: an on/off Markov-modulated process. Quiet spells (no requests) and bursts
  alternate with exponential durations; each burst draws its own rate from a log-normal
  law. Defaults reproduce a real code-completion/agent trace in 10 s bins: about half the
  bins empty, coefficient of variation of the counts ~1.7, peaks ~12x the mean, arriving
  after quiet spells of minutes (``bin_stats`` measures them; tests check them).
* ``flash_crowd``: extra arrivals on top of a workload, ``factor`` times its own rate,
  for ``duration`` seconds (a step up and a step down).
* ``diurnal``: a day's rise and fall compressed: rate ``mean * (1 - depth * cos(2 pi t / T))``.
* ``drift``: a slow random walk of the log-rate, bounded to [mean / 2, mean * 2].
* ``periodic``: scheduled spikes (batch jobs, cron, a client's polling cycle): ``factor``
  times the base rate for 45-90 s at every ``period``, each start jittered by up to a
  tenth of the period, on a steady base.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuserve.sim.workload import Workload, poisson_workload


@dataclass(frozen=True, slots=True)
class BinStats:
    """Counts of arrivals in fixed bins: what makes traffic bursty for an autoscaler."""

    bin_seconds: float
    mean_rate: float  # req/s
    empty_fraction: float  # bins with no arrival
    cv: float  # coefficient of variation of the counts
    peak_to_mean: float  # largest bin over the mean bin
    longest_quiet: float  # longest run of empty bins, seconds


def bin_counts(arrivals: Sequence[float], bin_seconds: float = 10.0) -> list[int]:
    """Arrivals per ``bin_seconds`` bin, from 0 to the last arrival's bin."""
    if not arrivals:
        return []
    counts = [0] * (int(arrivals[-1] // bin_seconds) + 1)
    for t in arrivals:
        counts[int(t // bin_seconds)] += 1
    return counts


def bin_stats(workload: Workload, bin_seconds: float = 10.0) -> BinStats:
    counts = bin_counts(workload.arrivals, bin_seconds)
    if not counts:
        return BinStats(bin_seconds, 0.0, 1.0, 0.0, 0.0, 0.0)
    bins = len(counts)
    mean = sum(counts) / bins
    var = sum((c - mean) ** 2 for c in counts) / bins
    longest = run = 0
    for c in counts:
        run = run + 1 if c == 0 else 0
        longest = max(longest, run)
    return BinStats(
        bin_seconds=bin_seconds,
        mean_rate=mean / bin_seconds,
        empty_fraction=sum(1 for c in counts if c == 0) / bins,
        cv=math.sqrt(var) / mean if mean > 0 else 0.0,
        peak_to_mean=max(counts) / mean if mean > 0 else 0.0,
        longest_quiet=longest * bin_seconds,
    )


def new_peaks(
    arrivals: Sequence[float],
    *,
    memory: float,
    horizon: float,
    bin_seconds: float = 10.0,
    measured_from: float = 0.0,
) -> list[tuple[float, float]]:
    """Spans ``[start, start + horizon)`` from every bin busier than every bin of the
    ``memory`` before it, by more than 3 standard deviations of Poisson noise.

    A policy that learns from what it measured cannot have provisioned for such load: the
    largest load in its memory was lower, and pods it starts serve only ``horizon`` (a cold
    start) later. Only foresight (the oracle, static at the trace's peak) covers it. Misses
    there are the price of not knowing the future; misses elsewhere are the policy's own.
    ``measured_from``: arrivals before it are a history the policy served (the bins after
    it are judged against its load too); spans are then timed from it and only those
    reaching past it kept.
    """
    counts = bin_counts(arrivals, bin_seconds)
    span = int(memory // bin_seconds)
    spans = []
    for i in range(1, len(counts)):
        before = max(counts[max(0, i - span) : i])
        start = i * bin_seconds - measured_from
        if counts[i] > before + 3.0 * math.sqrt(before + 1.0) and start + horizon > 0:
            spans.append((start, start + horizon))
    return spans


def in_spans(times: Sequence[float], spans: Sequence[tuple[float, float]]) -> list[bool]:
    """For each of ``times``, whether it falls in one of ``spans`` (``[start, end)``, in
    order of start, overlapping as ``new_peaks`` returns them)."""
    merged: list[list[float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [m[0] for m in merged]
    inside = []
    for t in times:
        k = bisect.bisect_right(starts, t) - 1
        inside.append(k >= 0 and t < merged[k][1])
    return inside


def _from_rate(rate: Callable[[float], float], peak: float, duration: float, seed: int) -> Workload:
    """Poisson arrivals with a time-varying rate (thinning against ``peak``)."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = 0.0
    while peak > 0:
        t += rng.expovariate(peak)
        if t >= duration:
            break
        if rng.random() * peak < rate(t):
            arrivals.append(t)
    return Workload(arrivals=tuple(arrivals), items=(1,) * len(arrivals))


def _piecewise(segments: list[tuple[float, float]]) -> Callable[[float], float]:
    """Rate function of (start, rate) segments sorted by start."""
    starts = [s for s, _ in segments]

    def rate(t: float) -> float:
        lo, hi = 0, len(starts)
        while hi - lo > 1:  # last segment starting at or before t
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if starts[mid] <= t else (lo, mid)
        return segments[lo][1]

    return rate


# The bursts of the real trace the defaults reproduce: their mean length (s) and the
# coefficient of variation of their rates. Only the quiet spells are a caller's choice.
MEAN_BURST = 40.0
BURST_CV = 1.4


def bursty(*, mean_rate: float, duration: float, seed: int, mean_quiet: float = 60.0) -> Workload:
    """On/off Markov-modulated arrivals with mean ``mean_rate`` req/s over the long run."""
    rng = random.Random(seed)
    on_share = MEAN_BURST / (mean_quiet + MEAN_BURST)
    sigma = math.sqrt(math.log1p(BURST_CV**2))
    segments: list[tuple[float, float]] = []
    t = rng.uniform(0.0, mean_quiet)  # start somewhere in a quiet spell
    segments.append((0.0, 0.0))
    while t < duration:
        level = mean_rate / on_share * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
        segments.append((t, level))
        t += rng.expovariate(1.0 / MEAN_BURST)
        segments.append((t, 0.0))
        t += rng.expovariate(1.0 / mean_quiet)
    # Rescale so that this run's mean is the one asked for: a half-hour holds only a
    # dozen bursts, and the load level of the suite must not depend on the seed.
    ends = [s for s, _ in segments[1:]] + [duration]
    area = sum(r * max(0.0, min(e, duration) - s) for (s, r), e in zip(segments, ends, strict=True))
    scale = mean_rate * duration / area if area > 0 else 1.0
    segments = [(s, r * scale) for s, r in segments]
    peak = max(r for _, r in segments)
    return _from_rate(_piecewise(segments), peak, duration, seed + 1)


def flash_crowd(
    base: Workload, *, factor: float, start: float, duration: float, seed: int
) -> Workload:
    """``base`` plus a crowd: ``factor`` times the base's own rate in [start, start+duration).

    The crowd's extra arrivals are Poisson at (factor - 1) times the base's mean rate over
    the minute before the crowd.
    """
    before = base.rate_between(max(0.0, start - 60.0), start) or base.rate_between(
        0.0, base.duration
    )
    extra = poisson_workload(
        rate=(factor - 1.0) * before, duration=duration, seed=seed, start=start
    ).arrivals
    merged = sorted(
        [(t, n) for t, n in zip(base.arrivals, base.items, strict=True)] + [(t, 1) for t in extra]
    )
    return Workload(arrivals=tuple(t for t, _ in merged), items=tuple(n for _, n in merged))


def diurnal(
    *, mean_rate: float, duration: float, seed: int, depth: float = 0.7, period: float = 0.0
) -> Workload:
    """A compressed day: trough, peak at the middle, trough (one ``period``, default the
    whole duration)."""
    period = period or duration
    return _from_rate(
        lambda t: mean_rate * (1.0 - depth * math.cos(2.0 * math.pi * t / period)),
        mean_rate * (1.0 + depth),
        duration,
        seed,
    )


def drift(
    *, mean_rate: float, duration: float, seed: int, step: float = 30.0, sigma: float = 0.08
) -> Workload:
    """The log-rate takes a Gaussian step every ``step`` seconds (bounded to a factor 2)."""
    rng = random.Random(seed)
    segments: list[tuple[float, float]] = []
    level = 0.0
    t = 0.0
    while t < duration:
        segments.append((t, mean_rate * math.exp(level)))
        level = max(-math.log(2.0), min(math.log(2.0), level + rng.gauss(0.0, sigma)))
        t += step
    peak = max(r for _, r in segments)
    return _from_rate(_piecewise(segments), peak, duration, seed + 1)


def periodic(
    *,
    mean_rate: float,
    duration: float,
    seed: int,
    period: float = 300.0,
    factor: float = 4.0,
) -> Workload:
    """A steady base with a spike of ``factor`` times it every ``period`` seconds (45-90 s
    long, its start jittered by up to ``period / 10``); the base is set so that the whole
    run's mean is ``mean_rate``. Spikes recur, so what one teaches the policy holds for
    the next, unlike a flash crowd's."""
    rng = random.Random(seed)
    spikes: list[tuple[float, float]] = []
    start = period / 2
    while start < duration:
        begin = max(0.0, start + rng.uniform(-period / 10, period / 10))
        spikes.append((begin, min(duration, begin + rng.uniform(45.0, 90.0))))
        start += period
    spiked = sum(end - begin for begin, end in spikes)
    base = mean_rate * duration / (duration + (factor - 1.0) * spiked)
    segments = [(0.0, base)]
    for begin, end in spikes:
        segments += [(begin, base * factor), (end, base)]
    return _from_rate(_piecewise(segments), base * factor, duration, seed + 1)
