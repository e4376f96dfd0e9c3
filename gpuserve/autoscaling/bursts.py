"""Burst memory: headroom for the surges a service was seen to have.

Bursts shorter than a cold start cannot be chased; only capacity held through the quiet
spells serves them (a surge that lasted longer was chased, and keeps no headroom). Both
scaling rules (the request rule in ``deciding`` and the LLM token rule in
``gpuserve.llm.deciding``) keep one record per minute of the largest surge
measured, the demand it rose from and the mean demand, and hold the headroom those
records call for, less what the miss budget of the planning quantile absorbs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

# (start, largest surge, the level, the demand the largest surge rose from)
Minutes = tuple[tuple[float, float, float, float], ...]
MINUTE_S = 60.0
# A per-minute record: its minute's start first.
Record = TypeVar("Record", bound=tuple[float, ...])


def kept_minutes(
    records: Sequence[Record], now: float, memory_s: float
) -> tuple[list[Record], bool]:
    """The per-minute records younger than ``memory_s``, and whether the newest one's
    minute is still in progress at ``now`` (a new evaluation adds to it, not a record)."""
    kept = [r for r in records if r[0] > now - memory_s]
    return kept, bool(kept) and now - kept[-1][0] < MINUTE_S


def remember_minute(
    surges: Minutes,
    now: float,
    surge: float,
    level: float,
    *,
    memory_s: float,
    rose_from: float | None = None,
) -> Minutes:
    """One record per minute over the last ``memory_s`` seconds: (start, largest surge,
    the minute's level, the demand that surge rose from).

    The level is the latest ``level`` (mean demand over the stable window) given in the
    minute, so by its end the minute's own mean: taken at the minute's first evaluation,
    it was a mean lagging half a window, and a crowd's second minute recorded the half-way
    level, which the step rule then took for the lowest demand since the crowd came.
    ``rose_from`` is what the surge was measured against; None stands for the level when
    the minute began (the LLM rule measures a rise against the last minute's rate). The
    step rule needs it apart from the level: a surge measured against the demand of a
    start-up or two earlier rose from below the level of its minute when demand ramped.
    Every minute is kept, surge or not, so the miss budget knows how many requests the
    memory covers; this also bounds the status the operator stores (30 records for 30 min).
    """
    if memory_s <= 0:
        return ()
    kept, in_progress = kept_minutes(surges, now, memory_s)
    if in_progress:
        t, v, _, b = kept[-1]
        if rose_from is not None and surge > v:
            b = rose_from
        kept[-1] = (t, max(v, surge), level, b)
    else:
        base = rose_from if rose_from is not None and surge > 0.0 else level
        kept.append((now, surge, level, base))
    return tuple(kept)


def burst_headroom(minutes: Minutes, horizon: float, level: float, *, quantile: float) -> float:
    """Headroom (req/s) for the remembered surges, except what the miss budget absorbs.

    A surge ``v`` above headroom ``h`` overloads the replicas until new ones start: their
    queues grow, so every request of that stretch waits, not only the excess. It costs
    about ``(d + v) * horizon`` requests (``d`` the minute's mean demand). The planning
    ``quantile`` allows ``1 - quantile`` of the requests the memory covers to miss: the
    headroom covers every surge except the largest ones whose cost fits that budget
    together; a rare surge fits it only when the horizon is short against the memory (a
    promotion). A rise that demand has stayed at since was a step, not a burst: a surge
    counts only beyond the lowest demand of every later minute and now (a burst that went
    away counts whole; a ramp that stayed is the level now). What demand stayed at is
    counted from where the surge rose: a ramp's surge, measured against the demand a
    start-up or two before it, rose from below the level of its own minute.

    A surge that outlasted a start-up is no burst either, even once it has gone: where
    demand stayed at half its height or more through each of the whole minutes after it
    that span a start-up (and one more, for where in its minute it began), the replicas it
    started served it, and a crowd seen once would otherwise hold its headroom for the rest
    of the memory. Only what went away sooner cannot be chased.
    """
    surges: list[tuple[float, float]] = []
    floor = level  # the lowest level from the record on to now
    after: list[float] = []  # the levels of the minutes after the record, the nearest last
    lasting = math.ceil(horizon / MINUTE_S) + 1
    for _, v, d, rose_from in reversed(minutes):
        kept = v - max(0.0, floor - rose_from)
        stayed = after[-lasting:]
        chased = len(stayed) == lasting and min(stayed) >= rose_from + v / 2.0
        if kept > 0.0 and not chased:
            surges.append((kept, d))
        floor = min(floor, d)
        after.append(d)
    surges.sort(reverse=True)
    allowed = (1.0 - quantile) * sum(d for _, _, d, _ in minutes) * MINUTE_S
    spent = 0.0
    for v, d in surges:
        spent += (d + v) * horizon
        if spent > allowed:
            return v  # this surge and every smaller one are covered
    return 0.0
