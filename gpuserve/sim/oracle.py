"""The oracle: fewest serving replicas per window that meet the attainment target, knowing
every future arrival and starting pods instantly. Its GPU-hours are a lower bound for any
real policy on the same workload (up to the window granularity)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuserve.sim.config import SimConfig
from gpuserve.sim.scalers import HoldScaler, ScaleOrder, ScalerView, resize_to
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import Workload

# How many times the end-to-end check may add a replica to the windows still short.
REFINE_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class OraclePlan:
    window: float
    replicas: tuple[int, ...]  # serving replicas for [k*window, (k+1)*window)

    def window_of(self, t: float) -> int:
        """The index of the window holding time ``t`` (past the plan's end: past its last)."""
        return max(0, int(t // self.window))

    def at(self, t: float) -> int:
        return self.replicas[min(len(self.replicas) - 1, self.window_of(t))]

    @property
    def peak(self) -> int:
        return max(self.replicas)

    def within(self, start: float, end: float = float("inf")) -> OraclePlan:
        """The windows that overlap ``[start, end)``, the first of them now at 0 (a plan
        over a history and the part measured after it, cut to one of them)."""
        span = windows_overlapping(len(self.replicas), self.window, start, end)
        kept = self.replicas[span.start : span.stop]
        if not kept:
            raise ValueError(f"no window of the plan overlaps [{start}, {end})")
        return OraclePlan(self.window, kept)


def windows_overlapping(count: int, window: float, start: float, end: float = math.inf) -> range:
    """Which of ``count`` windows of ``window`` seconds (the first at 0) overlap
    ``[start, end)``: a plan over a history and the part measured after it, cut to one of
    them (at least the window holding ``start``)."""
    first = int(max(0.0, start) // window)
    last = count if end == math.inf else math.ceil(end / window)
    return range(first, min(count, max(first + 1, last)))


@dataclass(frozen=True, slots=True)
class OracleGoal:
    """What the oracle plans: per ``window`` seconds, the fewest replicas whose requests
    meet ``target`` attainment."""

    window: float = 30.0
    target: float = 0.99


def plan_oracle(
    *,
    config: SimConfig,
    workload: Workload,
    goal: OracleGoal = OracleGoal(),
    max_replicas: int = 200,
) -> OraclePlan:
    """Per window, the fewest replicas whose requests meet the goal's attainment.

    Each window is searched on its own (empty queues, instant pods); the schedule is
    then checked end to end and any window the carried-over queue pushes below target
    gets one more replica, for a few rounds.
    """
    window, target = goal.window, goal.target
    base = replace(config, warm_pool=0, scrape_outages=(), measure_from=0.0)
    count = int(workload.duration // window) + 1
    plan: list[int] = []
    for k in range(count):
        part = workload.window(k * window, (k + 1) * window)
        plan.append(_fewest(base, part, target, max_replicas, start=plan[-1] if plan else 1))
    for _ in range(REFINE_ROUNDS):
        result = simulate(
            config=replace(base, initial_replicas=plan[0]),
            workload=workload,
            scaler=OracleScaler(OraclePlan(window, tuple(plan))),
        )
        short = [
            k
            for k in range(count)
            if result.attainment(k * window, (k + 1) * window) < target and plan[k] < max_replicas
        ]
        if not short:
            break
        for k in short:
            plan[k] += 1
    return OraclePlan(window, tuple(plan))


def _fewest(config: SimConfig, part: Workload, target: float, most: int, *, start: int) -> int:
    if len(part) == 0:
        return 1

    def meets(n: int) -> bool:
        sized = replace(config, initial_replicas=n)
        result = simulate(config=sized, workload=part, scaler=HoldScaler())
        return result.attainment() >= target

    return fewest_meeting(meets, start=start, most=most)


def fewest_meeting(meets: Callable[[int], bool], *, start: int, most: int) -> int:
    """The fewest replicas in [1, most] that ``meets``, searched from ``start`` (the
    window before's size: neighbouring windows need alike sizes, so few sizes are tried).
    ``most`` when none below it meets."""
    n = max(1, start)
    if meets(n):
        while n > 1 and meets(n - 1):
            n -= 1
        return n
    while n < most and not meets(n + 1):
        n += 1
    return min(most, n + 1)


class OracleScaler:
    """Follows a plan at window boundaries with instantly ready pods."""

    name = "oracle"

    def __init__(self, plan: OraclePlan) -> None:
        self.plan = plan
        self.interval = plan.window
        self.offset = 0.0

    def step(self, view: ScalerView) -> ScaleOrder:
        # Evaluate just after the boundary so the next window's size applies to all of it.
        target = self.plan.at(view.now + 1e-6)
        return resize_to(view.pools, target, reason=f"oracle plan: {target}", instant=True)
