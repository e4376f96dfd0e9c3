"""The oracle: per window, the fewest replicas whose requests meet both objectives at the
target share (or, where no number of replicas reaches it, at the share ample replicas
reach), knowing every arrival and starting replicas instantly. Its GPU-hours are a
lower bound for a real scaler on the same trace (up to the window granularity).

Each window is first sized alone, then the plan is checked end to end: a window starts
with the work the previous one left running and with the prefix cache it warmed, so a
size found alone can fall short (long prompts still prefilling) or be more than needed.
A window still short of the target, or of what ample replicas reach in the same run, gets
one more replica, until none is short (at most ``REFINE_ROUNDS`` times)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

from gpuserve.sim.llm.cluster import ClusterConfig, ClusterRun, simulate_cluster
from gpuserve.sim.llm.scalers import Planned, Static
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace
from gpuserve.sim.oracle import fewest_meeting, windows_overlapping

# A bound on the end-to-end checks (each is one run over the whole trace).
REFINE_ROUNDS = 8


class LLMOraclePlan(NamedTuple):
    scaler: Planned  # the plan, replayable
    run: ClusterRun  # its run over the whole trace
    alone: tuple[int, ...]  # each window's size alone (``sizes_alone``)

    @property
    def peak(self) -> int:
        """The most replicas a window needs alone: what provisioning for the busiest minute
        buys (static at peak). The end-to-end check's additions are left out: they answer
        the plan's own changes of size, which a static fleet does not make."""
        return self.peak_within(-math.inf)

    def peak_within(self, start_s: float, end_s: float = math.inf) -> int:
        """The most replicas a window overlapping [start_s, end_s) needs alone: static
        provisioning for the busiest minute of that span (a history, or the part measured
        after it)."""
        span = windows_overlapping(len(self.alone), self.scaler.window_s, start_s, end_s)
        return max((self.alone[k] for k in span), default=1)


def plan_oracle(
    config: ClusterConfig,
    trace: TokenTrace,
    *,
    window_s: float = 60.0,
    target: float = 0.99,
    most: int = 64,
) -> LLMOraclePlan:
    """The plan, its run over the whole trace and the peak of the windows alone."""
    sizes = sizes_alone(config, trace, window_s=window_s, target=target, most=most)
    plan = list(sizes)
    count = len(plan)
    # What each window can attain in context: ample replicas over the whole trace.
    ample = _static(config, trace, min(most, _ample(max(plan))))
    goals = [min(target, reached - 1e-9) for reached in _by_window(ample, window_s, count)]
    scaler = Planned(window_s, tuple(plan))
    run = _run(config, trace, scaler)
    for _ in range(REFINE_ROUNDS):
        reached = _by_window(run, window_s, count)
        short = [k for k in range(count) if reached[k] < goals[k] and plan[k] < most]
        if not short:
            break
        for k in short:
            plan[k] += 1
        scaler = Planned(window_s, tuple(plan))
        run = _run(config, trace, scaler)
    return LLMOraclePlan(scaler, run, tuple(sizes))


def sizes_alone(
    config: ClusterConfig,
    trace: TokenTrace,
    *,
    window_s: float = 60.0,
    target: float = 0.99,
    most: int = 64,
) -> list[int]:
    """Per window, the fewest replicas for its requests alone: the oracle's first pass, and
    its largest is what static provisioning for the busiest window buys."""
    plan: list[int] = []
    for k in range(int(trace.duration // window_s) + 1):
        part = _window(trace, k * window_s, (k + 1) * window_s)
        plan.append(_fewest(config, part, target, most, start=plan[-1] if plan else 1))
    return plan


def _by_window(run: ClusterRun, window_s: float, count: int) -> list[float]:
    """The run's attainment in each of ``count`` windows."""
    return [run.attainment(k * window_s, (k + 1) * window_s) for k in range(count)]


def _static(config: ClusterConfig, trace: TokenTrace, replicas: int) -> ClusterRun:
    return simulate_cluster(replace(config, initial_replicas=replicas), trace, Static(replicas))


def _run(config: ClusterConfig, trace: TokenTrace, scaler: Planned) -> ClusterRun:
    return simulate_cluster(replace(config, initial_replicas=scaler.plan[0]), trace, scaler)


def _window(trace: TokenTrace, start: float, end: float) -> TokenTrace:
    """The requests arriving in [start, end), shifted to begin at 0."""
    chosen = tuple(
        TokenRequest(r.arrival_s - start, r.prompt_tokens, r.output_tokens, r.block_hashes)
        for r in trace.requests
        if start <= r.arrival_s < end
    )
    return replace(trace, requests=chosen)


def _ample(size: int) -> int:
    """Replicas enough that more would not help a window planned at ``size``."""
    return max(2 * size, size + 4, 8)


def _fewest(
    config: ClusterConfig, part: TokenTrace, target: float, most: int, *, start: int
) -> int:
    """The fewest replicas for one window, alone."""
    if not part.requests:
        return 1

    def attained(n: int) -> float:
        return _static(config, part, n).attainment()

    # Some requests miss on any number of replicas (a prompt too long for the TTFT
    # objective): the window's goal is then what ample replicas attain.
    goal = min(target, attained(_ample(start)) - 1e-9)

    return fewest_meeting(lambda n: attained(n) >= goal, start=start, most=most)
