"""What an oracle's plan costs once it pays for its start-ups, as every real scaler does.

The oracles (``gpuserve.sim.oracle``, ``gpuserve.sim.llm.oracle``) know every arrival and
start replicas instantly and for nothing. A scaler with the same foresight on a real
cluster creates each replica a start-up before it must serve, holding its GPU meanwhile,
and keeps a replica through a dip shorter than what restarting it costs. ``paid_plan`` is
the cheapest such schedule that never serves with fewer replicas than the plan in any
window; ``start_cost_s`` is what it costs beyond the plan's own GPU-seconds. Both oracles'
GPU-hours stay the lower bound the benches divide by; this is the bound's distance from
what foresight can buy on a real cluster.
"""

from __future__ import annotations

from collections.abc import Sequence


def paid_plan(plan: Sequence[int], window_s: float, start_s: float) -> tuple[int, ...]:
    """Replicas per window, each at least the plan's, that minimise the GPU-seconds served
    (replicas x ``window_s``) plus ``start_s`` for every replica added. The first window's
    replicas are there from the start, as they are for every policy the benches run."""
    return _cheapest(plan, window_s, start_s)[1]


def start_cost_s(
    plan: Sequence[int], window_s: float, start_s: float, *, from_window: int = 0
) -> float:
    """GPU-seconds ``paid_plan`` costs beyond ``plan`` served with free, instant starts,
    counted from window ``from_window`` on (a run measured after a warm-up or a history:
    the pods held and started before it are not in what is measured)."""
    sizes = _cheapest(plan, window_s, start_s)[1]
    before = [plan[0] if plan else 0, *sizes[:-1]]
    return sum(
        (sizes[k] - plan[k]) * window_s + start_s * max(0, sizes[k] - before[k])
        for k in range(max(0, from_window), len(plan))
    )


def _cheapest(
    plan: Sequence[int], window_s: float, start_s: float
) -> tuple[float, tuple[int, ...]]:
    """The least cost over the windows (served GPU-seconds plus starts) and its sizes."""
    if window_s <= 0 or start_s < 0:
        raise ValueError(f"window_s > 0 and start_s >= 0 required, got {window_s}, {start_s}")
    if not plan:
        return 0.0, ()
    top = max(plan)
    # cost[n]: the cheapest schedule up to this window ending at n replicas; back[k][n]:
    # the size before it.
    cost = {plan[0]: 0.0}
    back: list[dict[int, int]] = []
    for need in plan:
        step: dict[int, float] = {}
        came: dict[int, int] = {}
        for n in range(need, top + 1):
            before, paid = min(
                ((p, c + start_s * max(0, n - p)) for p, c in cost.items()),
                key=lambda pc: (pc[1], -pc[0]),
            )
            step[n], came[n] = paid + n * window_s, before
        cost = step
        back.append(came)
    n = min(cost, key=lambda k: (cost[k], k))
    least = cost[n]
    sizes = []
    for came in reversed(back):
        sizes.append(n)
        n = came[n]
    return least, tuple(reversed(sizes))
