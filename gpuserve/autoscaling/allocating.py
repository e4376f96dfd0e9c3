"""Turn a target pod count into per-class actions with the operator's placement rule.

The rule that spreads pods over classes in preference order lives in
``gpuserve.placement.planning.place`` (the operator's reconcile plans Deployments with it).
The policy and the simulator's peers call it here instead of keeping copies:

* pods that serve or are starting stay where they are;
* growth goes first to ready warm pods (a promotion takes seconds), most preferred class
  first, then to new pods in the most preferred class with free capacity;
* shrinking removes pods from the least preferred class first.
"""

from __future__ import annotations

from gpuserve.autoscaling.decision import ClassAction
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.placement.planning import ClassCapacity, PoolNow, place

# Free capacity the caller does not know is unbounded; place() wants a number.
UNBOUNDED = 10**9  # room of a class without a known limit


def allocate(
    pools: PoolState, target: int, *, use_warm: bool = True
) -> tuple[tuple[ClassAction, ...], int]:
    """Per-class actions that move ``pools`` to ``target`` serving pods; returns
    (actions, pods that fit nowhere). ``use_warm=False``: a Deployment-style resize that
    only starts pods (peers keep no warm pool)."""
    order = [p.name for p in pools.classes]
    now = {p.name: PoolNow(scheduled=p.committed) for p in pools.classes}
    if not order:
        return (), max(target, 0)
    promote = dict.fromkeys(order, 0)
    if use_warm and target > pools.committed:
        # Warm pods are GPUs the service already holds: place growth on them first.
        warm = place(
            desired=min(target, pools.committed + pools.warm_ready),
            order=order,
            now=now,
            capacity={p.name: ClassCapacity(free=p.warm_ready, total=0) for p in pools.classes},
        )
        promote = {c: warm.replicas[c] - now[c].scheduled for c in order}
        now = {c: PoolNow(scheduled=warm.replicas[c]) for c in order}
    plan = place(
        desired=max(target, 0),
        order=order,
        now=now,
        capacity={p.name: ClassCapacity(free=free_room(p), total=0) for p in pools.classes},
    )
    actions = []
    for c in order:
        change = plan.replicas[c] - now[c].scheduled
        action = ClassAction(
            c, promote_warm=promote[c], start=max(change, 0), remove=max(-change, 0)
        )
        if action.delta or action.remove:
            actions.append(action)
    return tuple(actions), plan.unplaced


def free_room(pool: ClassPool) -> int:
    """How many more pods the class takes (a pool without a known limit: UNBOUNDED)."""
    return UNBOUNDED if pool.free_capacity is None else max(0, pool.free_capacity)
