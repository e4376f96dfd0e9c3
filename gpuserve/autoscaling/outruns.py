"""Bursts that outran the ready pods: what no scaling decision could serve.

A burst that rose past what the pods able to serve within seconds (ready or warm) serve
overloads them until more pods are ready. When the overload is over within a cold start,
it is over before any pod started for it serves: only pods held before it could have
served it (``gpuserve.autoscaling.bursts`` holds headroom for the bursts seen, but a burst
taller than those seen lands on the pods there are). Both scaling rules keep one record per
stretch of evaluations that measured such an overload (begun by a rise beyond its noise,
past the capacity beyond the rate's own noise); ``outran_bursts`` picks the stretches that
ended within a start-up with no pod added to end them, and the tallest of them, so status
can say so and name the pods that serve it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from gpuserve.autoscaling.bursts import BEYOND_Z

# One stretch of overload: (first and last evaluation that measured it, s; the highest
# rate measured, req/s; the pods able to serve when it began, and the most during it).
Outrun = tuple[float, float, float, int, int]
Outruns = tuple[Outrun, ...]
# The records status keeps: the tallest, and the newest (which may be under way).
MAX_RECORDS = 30


def outran(rate: float, capacity: float, window_s: float) -> bool:
    """Whether a ``rate`` measured over ``window_s`` is past ``capacity`` beyond its
    Poisson noise (a rate at the capacity is no overload)."""
    return rate > capacity + BEYOND_Z * math.sqrt(max(rate, 0.0) / max(window_s, 1e-9))


@dataclass(frozen=True, slots=True)
class Seen:
    """What one evaluation measured: the arrival rate over ``window_s``, whether it rose
    beyond its noise within a start-up (a surge), and the pods able to serve within
    seconds (ready or warm) with the rate they serve."""

    rate: float
    window_s: float
    surge: bool
    able: int
    capacity: float


def remember_outrun(
    outruns: Outruns, seen: Seen, *, now: float, memory_s: float, gap_s: float
) -> Outruns:
    """The records younger than ``memory_s``, with ``seen``.

    A surge past the able pods' capacity starts a stretch; a rate past it extends the
    newest stretch, surge or not (the overload goes on), when that one's last evaluation
    is at most ``gap_s`` old (a rate over a window that long can dip below the capacity
    within one burst). A stretch keeps the most pods able while it was measured and,
    where an evaluation just after it still measures more than its first pods serve, the
    pods then: those added since ended it, not the burst."""
    kept = [r for r in outruns if r[1] > now - memory_s]
    newest = kept[-1] if kept and now - kept[-1][1] <= gap_s else None
    past = outran(seen.rate, seen.capacity, seen.window_s)
    if past and newest is not None:
        start, _, height, first, most = newest
        kept[-1] = (start, now, max(height, seen.rate), first, max(most, seen.able))
    elif past and seen.surge:
        kept.append((now, now, seen.rate, seen.able, seen.able))
    elif newest is not None and seen.able > newest[4]:
        start, last, height, first, _ = newest
        served_by_first = seen.capacity * first / seen.able  # at the pods' mean capacity
        if outran(seen.rate, served_by_first, seen.window_s):
            kept[-1] = (start, last, height, first, seen.able)
    if len(kept) > MAX_RECORDS:
        tallest = sorted(kept[:-1], key=lambda r: r[2], reverse=True)[: MAX_RECORDS - 1]
        kept = [*sorted(tallest), kept[-1]]
    return tuple(kept)


@dataclass(frozen=True, slots=True)
class OutrunReport:
    """The overloads shorter than a start-up the memory holds (none: ``bursts`` 0) and the
    tallest of them: the rate it reached, the pods able to serve then, and the pods that
    serve that rate (``needed``, set by the rule, which prices a pod)."""

    bursts: int
    height: float = 0.0
    ready: int = 0
    needed: int = 0
    memory_s: float = 0.0
    horizon_s: float = 0.0


def outran_bursts(
    outruns: Outruns, *, now: float, gap_s: float, horizon_s: float, memory_s: float
) -> OutrunReport:
    """The stretches that are over (no overload for ``gap_s``), lasted less than a
    start-up (``horizon_s``) and saw no pod added: pods started at their first evaluation
    came after them. One under way is not judged yet: it may yet last a start-up."""
    short = [
        r
        for r in outruns
        if now - r[1] > gap_s and r[1] - r[0] < horizon_s and r[4] == r[3]
    ]
    if not short:
        return OutrunReport(0, memory_s=memory_s, horizon_s=horizon_s)
    _, _, height, ready, _ = max(short, key=lambda r: r[2])
    return OutrunReport(len(short), height, ready, memory_s=memory_s, horizon_s=horizon_s)


def track_outruns(
    outruns: Outruns,
    seen: Seen,
    *,
    now: float,
    memory_s: float,
    gap_s: float,
    horizon_s: float,
    pods_for: Callable[[float], int],
) -> tuple[Outruns, OutrunReport | None]:
    """One evaluation of either rule: the records with ``seen``, and the report on them,
    its pods priced by ``pods_for`` (the rule's pods for a rate). With no burst memory
    (``memory_s`` 0) nothing is kept or reported."""
    if memory_s <= 0:
        return (), None
    kept = remember_outrun(outruns, seen, now=now, memory_s=memory_s, gap_s=gap_s)
    found = outran_bursts(kept, now=now, gap_s=gap_s, horizon_s=horizon_s, memory_s=memory_s)
    if found.bursts:
        found = replace(found, needed=pods_for(found.height))
    return kept, found


def covered_condition(
    found: OutrunReport, *, min_replicas: int, max_replicas: int
) -> tuple[Literal["True", "False"], str, str]:
    """The ``BurstsCovered`` condition's status, reason and message for ``found``. The
    message holds only what the records hold (not their count, which moves as they age),
    so an unchanged memory gives an unchanged message and no status write."""
    memory = f"{found.memory_s / 60:.0f} min"
    startup = f"a start-up ({found.horizon_s:.0f} s)"
    if found.bursts == 0:
        return (
            "True",
            "WithinReadyCapacity",
            f"No burst in the last {memory} overloaded the ready pods for less than "
            f"{startup}",
        )
    pods = "pod" if found.ready == 1 else "pods"
    message = (
        f"Bursts in the last {memory} overloaded the ready pods for less than {startup}, "
        f"so pods started for them came after them. The tallest reached {found.height:.1f} "
        f"req/s with {found.ready} {pods} ready; {found.needed} serve it"
    )
    if found.needed > max_replicas:
        message += f", more than scaling.maxReplicas ({max_replicas})"
    elif found.needed <= min_replicas:
        message += f", and scaling.minReplicas ({min_replicas}) holds them: not all were ready"
    # Not "set minReplicas to that many": the burst memory already holds them for bursts
    # as tall, and on heavy-tailed bursts the next one is often taller (bench/burst_advice.py:
    # such a minReplicas moved bursty's attainment by under 0.05 points).
    message += (
        ". The autoscaler keeps headroom for the bursts it saw in that time; only pods held "
        "before a taller one serve it: scaling.minReplicas, or scaling.warmPool (standby "
        "pods promoted in seconds, which serving pods may preempt), sized for the tallest "
        "burst to expect"
    )
    return "False", "ShortBurstsOutranReadyPods", message


def tallest_outrun_line(
    reports: Iterable[OutrunReport | None], *, min_replicas: int, max_replicas: int
) -> str | None:
    """What the ``BurstsCovered`` condition would have said over a replay, one line: at the
    tallest burst that outran the ready pods, or True throughout (None: the rule kept no
    burst memory). A replay reports it as status would have shown it."""
    kept = [r for r in reports if r is not None]
    if not kept:
        return None
    found = max(kept, key=lambda r: (r.bursts > 0, r.height))
    status, reason, message = covered_condition(
        found, min_replicas=min_replicas, max_replicas=max_replicas
    )
    when = "at the tallest burst" if found.bursts else "throughout"
    return f"BurstsCovered={status} {reason} ({when}): {message}"
