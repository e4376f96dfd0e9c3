"""The oracle: per window, the fewest replicas whose requests meet both objectives at the
target share (or, where no number of replicas reaches it, at the share ample replicas
reach), knowing every arrival and starting replicas instantly. Its GPU-hours are a
lower bound for a real scaler on the same trace (up to the window granularity and the
cache warmth each window starts with)."""

from __future__ import annotations

from dataclasses import replace

from gpuserve.sim.llm.cluster import ClusterConfig, ClusterRun, simulate_cluster
from gpuserve.sim.llm.scalers import Planned, Static
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace

REFINE_ROUNDS = 1  # end-to-end checks that add a replica to windows still short


def plan_oracle(
    config: ClusterConfig,
    trace: TokenTrace,
    *,
    window_s: float = 60.0,
    target: float = 0.99,
    most: int = 64,
) -> tuple[Planned, ClusterRun]:
    """The plan and its run over the whole trace."""
    count = int(trace.duration // window_s) + 1
    plan: list[int] = []
    goals: list[float] = []
    for k in range(count):
        part = _window(trace, k * window_s, (k + 1) * window_s)
        size, goal = _fewest(config, part, target, most, start=plan[-1] if plan else 1)
        plan.append(size)
        goals.append(goal)
    scaler = Planned(window_s, tuple(plan))
    run = _run(config, trace, scaler)
    for _ in range(REFINE_ROUNDS):
        short = [
            k
            for k in range(count)
            if run.attainment(k * window_s, (k + 1) * window_s) < goals[k] and plan[k] < most
        ]
        if not short:
            break
        for k in short:
            plan[k] += 1
        scaler = Planned(window_s, tuple(plan))
        run = _run(config, trace, scaler)
    return scaler, run


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


def _fewest(
    config: ClusterConfig, part: TokenTrace, target: float, most: int, *, start: int
) -> tuple[int, float]:
    """(fewest replicas, the attainment goal they meet) for one window."""
    if not part.requests:
        return 1, target

    def attained(n: int) -> float:
        sized = replace(config, initial_replicas=n)
        return simulate_cluster(sized, part, Static(n)).attainment()

    # Some requests miss on any number of replicas (a prompt too long for the TTFT
    # objective): the window's goal is then what ample replicas attain.
    goal = min(target, attained(max(2 * start, start + 4, 8)) - 1e-9)

    def meets(n: int) -> bool:
        return attained(n) >= goal

    n = max(1, start)
    if meets(n):
        while n > 1 and meets(n - 1):
            n -= 1
        return n, goal
    while n < most and not meets(n + 1):
        n += 1
    return min(most, n + 1), goal
