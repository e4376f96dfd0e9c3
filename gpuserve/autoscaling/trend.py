"""Trends in measured demand: a slope counts only where the noise around it cannot explain
it, since both scaling rules extrapolate it over a whole start-up time."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from gpuserve.autoscaling.bursts import MINUTE_S, Minutes


def significant_slope(points: Sequence[tuple[float, float]], rate_window: float) -> float:
    """Least-squares slope of ``(time, rate)`` points, or 0 unless it is significant.

    Only a slope larger than twice its standard error counts. Rates over overlapping
    windows are correlated, so the error is inflated by sqrt(rate_window / point spacing).
    """
    n = len(points)
    if n < 4:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_d = sum(d for _, d in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0.0:
        return 0.0
    slope = sum((t - mean_t) * (d - mean_d) for t, d in points) / var
    residual = sum((d - mean_d - slope * (t - mean_t)) ** 2 for t, d in points)
    spacing = (points[-1][0] - points[0][0]) / (n - 1)
    overlap = max(1.0, rate_window / spacing) if spacing > 0 else 1.0
    stderr = math.sqrt(residual / (n - 2) / var * overlap)
    return slope if abs(slope) > 2.0 * stderr else 0.0


def minute_trend(minutes: Minutes, now: float, span_s: float) -> float:
    """The significant slope (req/s per second) of the burst memory's per-minute levels
    over the whole minutes of the last ``span_s`` seconds; 0 with fewer than four, or
    where one of them recorded a surge (a jump fits a slope as well as a ramp does, and the
    surge rules answer it).

    A level is its minute's mean demand, so it stands at the minute's middle. The minute
    in progress is left out: its level covers less than a minute.
    """
    span = [m for m in minutes if now - span_s <= m[0] <= now - MINUTE_S]
    if any(surge > 0.0 for _, surge, _, _ in span):
        return 0.0
    return significant_slope(
        [(start + MINUTE_S / 2, level) for start, _, level, _ in span], MINUTE_S
    )


def hold_window(
    records: Sequence[tuple[float, int]],
    now: float,
    *,
    since: float,
    window_s: float,
    startup_s: float,
    slope: float,
    burst_headroom: float,
    line_now: float,
    replicas_for: Callable[[float], int],
) -> float:
    """How far back a scale-down is held: ``window_s``, or one start-up where demand
    falls and its line accounts for every record held (both scaling rules).

    The hold keeps pods that noise, or a burst's return, would want back before a new one
    could start. Demand falling beyond what its noise explains (``slope`` < 0, as
    ``significant_slope`` or ``minute_trend`` give it), with no ``burst_headroom`` held,
    is neither: where the replicas for the line followed back over the whole window are
    at least every record in it, those records are the demand that has gone, and holding
    them longer than a start-up only pays for pods the trend left behind. The records
    must cover a whole window (the memory began at ``since``): older ones are unknown.
    ``line_now`` is the line's value for a record made now (a record made from a mean
    over a window stands half that window behind the line).
    """
    if slope >= 0.0 or burst_headroom > 0.0 or now - since < window_s:
        return window_s
    held = max((n for t, n in records if t > now - window_s), default=0)
    before = line_now - slope * window_s
    return min(window_s, startup_s) if held <= replicas_for(before) else window_s
