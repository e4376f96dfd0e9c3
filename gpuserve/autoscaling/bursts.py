"""Burst memory: headroom for the surges a service was seen to have.

Bursts shorter than a cold start cannot be chased; only capacity held through the quiet
spells serves them (a surge that lasted longer was chased, and keeps no headroom). Both
scaling rules (the request rule in ``deciding`` and the LLM token rule in
``gpuserve.llm.deciding``) keep one record per minute of the largest surge
measured, the demand it rose from and the mean demand, and hold the headroom those
records call for, less what the miss budget of the planning quantile absorbs. While a
burst may be under way, ``BurstBound`` keeps that headroom from stacking on it where the
bursts seen reached alike heights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median_high
from typing import NamedTuple, TypeVar

# (start, largest surge, the level, the demand the largest surge rose from)
Minutes = tuple[tuple[float, float, float, float], ...]
MINUTE_S = 60.0
# A rate past a bound by this many standard deviations of its Poisson noise is past it
# (the surge tests' 4: a test run every evaluation must be strict).
BEYOND_Z = 4.0
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
    promotion).
    """
    surges = sorted(((b.size, b.demand) for b in _bursts(minutes, horizon, level)), reverse=True)
    allowed = (1.0 - quantile) * sum(d for _, _, d, _ in minutes) * MINUTE_S
    spent = 0.0
    for v, d in surges:
        spent += (d + v) * horizon
        if spent > allowed:
            return v  # this surge and every smaller one are covered
    return 0.0


class _Burst(NamedTuple):
    start: float  # the minute's start
    size: float  # what of the surge counts as a burst
    demand: float  # the minute's mean demand
    rose_from: float
    height: float  # the demand it reached


def _bursts(minutes: Minutes, horizon: float, level: float) -> list[_Burst]:
    """The remembered surges that were bursts.

    A rise that demand has stayed at since was a step, not a burst: a surge counts only
    beyond the lowest demand of every later minute and now (a burst that went away counts
    whole; a ramp that stayed is the level now). What demand stayed at is counted from
    where the surge rose: a ramp's surge, measured against the demand a start-up or two
    before it, rose from below the level of its own minute.

    A surge that outlasted a start-up is no burst either, even once it has gone: where
    demand stayed at half its height or more through each of the whole minutes after it
    that span a start-up (and one more, for where in its minute it began), the replicas it
    started served it, and a crowd seen once would otherwise hold its headroom for the rest
    of the memory. Only what went away sooner cannot be chased.
    """
    bursts: list[_Burst] = []
    floor = level  # the lowest level from the record on to now
    after: list[float] = []  # the levels of the minutes after the record, the nearest last
    lasting = math.ceil(horizon / MINUTE_S) + 1
    for t, v, d, rose_from in reversed(minutes):
        kept = v - max(0.0, floor - rose_from)
        stayed = after[-lasting:]
        chased = len(stayed) == lasting and min(stayed) >= rose_from + v / 2.0
        if kept > 0.0 and not chased:
            bursts.append(_Burst(t, kept, d, rose_from, rose_from + v))
        floor = min(floor, d)
        after.append(d)
    return bursts


@dataclass(frozen=True)
class BurstBound:
    """How far the headroom and a rise's extrapolation go: the height the next burst is
    expected to reach.

    Headroom is added to the level. That is right where bursts vary in height (one larger
    than any seen comes soon) and wasted where they recur alike (scheduled spikes): there,
    the level plus the largest rise seen provisions past the height they all reach
    whenever the level is up by a little noise, and while a burst is under way the level
    already holds it, so the headroom on top provisions for that burst plus another as
    large. The heights the earlier bursts reached say which: the highest, less what its
    own noise explains of its lead over their median and stretched by its ratio to that
    median, bounds the next one (``reach``), shifted by how far demand grew since they
    rose. Alike heights put the bound near them; spread ones put it far off, and the
    headroom stacks as it always did. A burst under way that goes past the bound beyond
    its noise shows the heights are not alike: while it is recent, its own height is the
    bound.
    """

    reach: float  # req/s the next burst is expected to reach; infinite with none seen
    window_s: float  # what the rates are counted over (their Poisson noise follows it)

    def passed(self, rate: float) -> bool:
        """Whether a measured rate is past the reach beyond its own noise."""
        return rate > self.reach + BEYOND_Z * math.sqrt(self.reach / self.window_s)

    def provision(self, level: float, headroom: float) -> float:
        """The rate to hold replicas for: the level plus the headroom, but no more than
        the reach, and never less than the level (the automatic warm pool subtracts two of
        these: under the level, it kept standby pods for headroom the serving pods hold)."""
        return max(level, min(level + headroom, self.reach))

    def ceiling(self, measured: float, level: float) -> float:
        """The most a rate read while ``measured`` is measured may ask for: a rate
        measured no further past the reach than its noise is one of the bursts seen, and
        asks for no more than their height (or the measured ``level``, where higher)."""
        return math.inf if self.passed(measured) else max(level, self.reach)

    def extrapolate(self, ahead: float, measured: float, level: float) -> float:
        """A rise extrapolated to ``ahead``, not carried past the ceiling."""
        return min(ahead, self.ceiling(measured, level))


def burst_bound(
    minutes: Minutes,
    now: float,
    horizon: float,
    level: float,
    *,
    level_window_s: float,
    window_s: float,
) -> BurstBound:
    """The bound from the bursts recorded before the recent span (one under way is no
    evidence of how high it will go), unless a burst of that span went past it.

    The recent span is where a burst may still be in the level: a burst lasts up to a
    start-up (``horizon``; longer, it is chased), the level (a mean over
    ``level_window_s``) holds it that much longer, and its record may have begun up to a
    minute before it. The demand now is the level, or within that span what the recent
    bursts rose from; past the demand the earlier bursts rose from (their median), the
    reach moves up with it. ``window_s`` is what the rates are counted over."""
    window = max(window_s, 1e-9)
    recent_s = horizon + level_window_s + MINUTE_S
    before = [b for b in _bursts(minutes, horizon, level) if b.start <= now - recent_s]
    recent = [(v, b) for t, v, _, b in minutes if t > now - recent_s and v > 0.0]
    if not before:
        return BurstBound(math.inf, window)
    heights = sorted(b.height for b in before)
    median = median_high(heights)
    # Each height is a noisy maximum, and the largest of n of them leads their median by
    # about sqrt(2 ln n) standard deviations of that noise alone (the expected maximum of
    # n normal draws): that much of the highest one's lead is no spread of the bursts.
    lead = math.sqrt(2.0 * math.log(max(2, len(heights))))
    top = max(median, heights[-1] - lead * math.sqrt(heights[-1] / window))
    rose = median_high(b.rose_from for b in before)
    demand = min([level, *(b for _, b in recent)])
    # Growth within the level's own noise is no growth: the reach would move with it.
    grown = demand - rose - BEYOND_Z * math.sqrt(rose / max(level_window_s, 1e-9))
    bound = BurstBound(top * top / median + max(0.0, grown), window)
    passing = [b + v for v, b in recent if bound.passed(b + v)]
    if passing:
        # The burst under way went past it: the heights are not alike, and its own height
        # is the most known. Headroom on a level that holds it would provision for it and
        # another as large at once (a spike 5 % past the reach asked for 10 replicas where
        # 7 served); a rate beyond its noise is still chased (``ceiling``).
        return replace(bound, reach=max(passing))
    return bound
