"""How much noisier than Poisson an LLM service's arrivals are, from its two windows.

The LLM rule sees a service through two nested windows of counters (the last minute and
the last 15 s), not a rate history. Where the minute's rate is ``r``, the 15-s rate of
Poisson arrivals differs from it with variance ``r * (1/15 - 1/60)``; traffic ``D`` times
as variable (its index of dispersion: variance over mean of counts) multiplies that by
``D``. So each evaluation's squared difference over that variance is a one-sample
estimate of ``D``. They are summed per minute; the median of the whole minutes' means is
the measured index, at least 1. The median leaves out a crowd's few minutes, so a rise is
judged against the traffic around it, and it reads low rather than high (a minute's mean
is skewed right), which errs toward taking a rise for a rise.
"""

from __future__ import annotations

import statistics

from gpuserve.autoscaling.bursts import MINUTE_S, kept_minutes

# (minute start, sum of the one-evaluation estimates, evaluations)
DispersionMinutes = tuple[tuple[float, float, int], ...]


def dispersion_sample(
    recent_rate: float, recent_window_s: float, stable_rate: float, stable_window_s: float
) -> float | None:
    """One evaluation's estimate of the index of dispersion; None where it measures nothing
    (no arrivals, or windows that are not nested)."""
    spread = 1.0 / recent_window_s - 1.0 / stable_window_s if recent_window_s > 0 else 0.0
    if stable_rate <= 0.0 or spread <= 0.0:
        return None
    return (recent_rate - stable_rate) ** 2 / (stable_rate * spread)


def remember_dispersion(
    minutes: DispersionMinutes, now: float, sample: float | None, *, memory_s: float
) -> DispersionMinutes:
    """Add ``sample`` to the minute in progress; minutes older than ``memory_s`` go."""
    if memory_s <= 0:
        return ()
    kept, in_progress = kept_minutes(minutes, now, memory_s)
    if sample is None:
        return tuple(kept)
    if in_progress:
        start, total, count = kept[-1]
        kept[-1] = (start, total + sample, count + 1)
    else:
        kept.append((now, sample, 1))
    return tuple(kept)


def measured_dispersion(minutes: DispersionMinutes, now: float, *, least: int = 5) -> float:
    """The median of the whole minutes' mean estimates, at least 1; 1 (Poisson) while
    fewer than ``least`` whole minutes are known. The minute in progress holds the rise
    being judged and does not count."""
    means = [total / count for start, total, count in minutes if start <= now - MINUTE_S and count]
    if len(means) < least:
        return 1.0
    return max(1.0, statistics.median(means))
