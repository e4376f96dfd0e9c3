"""Which pods serve and which stand by in the warm pool.

Promotion flips a label (no restart), so a loaded standby pod joins the Service in the
time one label patch takes. Serving pods carry a higher pod-deletion-cost than standby
pods so that, when a pool shrinks, its ReplicaSet deletes standby pods first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuserve.resources.naming import ROLE_SERVING, ROLE_WARM

DELETION_COST = {ROLE_SERVING: "100", ROLE_WARM: "0"}


@dataclass(frozen=True)
class PodState:
    name: str
    accelerator_class: str
    role: str
    ready: bool
    deleting: bool = False
    node: str | None = None
    unschedulable: str | None = None
    deletion_cost: str | None = None
    created: float = 0.0  # epoch seconds, for start-up ages


@dataclass(frozen=True)
class RoleChange:
    pod: str
    role: str
    deletion_cost: str


def assign_roles(
    pods: Sequence[PodState], *, desired_serving: int, order: Sequence[str]
) -> list[RoleChange]:
    """Label changes that make exactly ``desired_serving`` ready pods serve (or all ready
    pods, if fewer), preferring pods of the most preferred classes."""
    rank = {c: i for i, c in enumerate(order)}
    live = [p for p in pods if not p.deleting]
    # Pods of a class no longer listed or usable stand by until their pool is deleted.
    ready = sorted(
        (p for p in live if p.ready and p.accelerator_class in rank),
        # Keep current serving pods serving (stable), then prefer better classes.
        key=lambda p: (p.role != ROLE_SERVING, rank.get(p.accelerator_class, len(rank)), p.name),
    )
    serving = {p.name for p in ready[: max(desired_serving, 0)]}
    if desired_serving < sum(1 for p in ready if p.role == ROLE_SERVING):
        # Shrinking: demote from the least preferred classes first.
        by_class = sorted(
            (p for p in ready if p.role == ROLE_SERVING),
            key=lambda p: (rank.get(p.accelerator_class, len(rank)), p.name),
        )
        serving = {p.name for p in by_class[:desired_serving]}
    changes: list[RoleChange] = []
    for p in live:
        role = ROLE_SERVING if p.name in serving else ROLE_WARM
        cost = DELETION_COST[role]
        if p.role != role or p.deletion_cost != cost:
            changes.append(RoleChange(pod=p.name, role=role, deletion_cost=cost))
    return changes
