"""Which pods serve and which stand by in the warm pool.

Promotion flips a label (no restart), so a loaded standby pod joins the Service in the
time one label patch takes. Serving pods carry a higher pod-deletion-cost than standby
pods so that, when a pool shrinks, its ReplicaSet deletes standby pods first.

Each class has two Deployments: serving priority, and the warm pool's standby priority
(preemptible by any serving pod). A ready standby pod is promoted at once when serving
pods are missing; as soon as a serving-priority pod is ready it takes over and the
standby pod goes back to warm, marked with the lowest deletion cost, so it is the pod its
Deployment deletes when it shrinks back to the warm pool's size (unless a pod that is not
ready yet is there to go first: ReplicaSets delete those before looking at the cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuserve.resources.naming import ROLE_ROUTED_AROUND, ROLE_SERVING, ROLE_WARM, serves

DELETION_COST = {ROLE_SERVING: "100", ROLE_ROUTED_AROUND: "100", ROLE_WARM: "0"}
# A standby pod relieved of serving: the surplus pod of its Deployment.
RELIEVED_COST = "-100"


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
    standby: bool = False  # a pod of the class's standby (warm-pool) Deployment
    demoted_at: float | None = None  # epoch seconds it last stopped serving


# How long a pod that stopped serving stays before its Deployment may shrink over it:
# the Service and every client's endpoint list drop it first, and requests already sent
# to it finish. Deleting it at once failed requests in flight.
DRAIN_SECONDS = 10.0


@dataclass(frozen=True)
class RoleChange:
    pod: str
    role: str
    deletion_cost: str
    demoted_at: str | None = None  # set when the pod stops serving


def draining(pod: PodState, role: str, now: float) -> bool:
    """A ready pod that stopped serving less than DRAIN_SECONDS ago (or stops now)."""
    if serves(role) or not pod.ready or pod.deleting:
        return False
    if serves(pod.role):
        return True
    return pod.demoted_at is not None and now - pod.demoted_at < DRAIN_SECONDS


def drain_end(pod: PodState, now: float) -> float:
    """When a draining pod's drain ends (epoch seconds): DRAIN_SECONDS after its demotion,
    which is now for a pod the plan demotes now."""
    if serves(pod.role) or pod.demoted_at is None:
        return now + DRAIN_SECONDS
    return pod.demoted_at + DRAIN_SECONDS


def assign_roles(
    pods: Sequence[PodState],
    *,
    desired_serving: int,
    order: Sequence[str],
    now: float | None = None,
    routed_around: Sequence[str] = (),
) -> list[RoleChange]:
    """Label changes that make exactly ``desired_serving`` ready pods serve (or all ready
    pods, if fewer): serving-priority pods before standby pods (a standby pod serves only
    until a serving-priority pod is ready to take over), then current serving pods (stable;
    when shrinking, the least preferred classes are demoted first, and within a class the
    pods named in ``routed_around`` last), then better classes.

    Of the serving pods, those named in ``routed_around`` (the autoscaler's, deepest queue
    first) are routed around, at most half of them: however stale the autoscaler's list,
    the Service keeps at least half of its pods."""
    rank = {c: i for i, c in enumerate(order)}
    named = set(routed_around)
    live = [p for p in pods if not p.deleting]
    # Pods of a class no longer listed or usable stand by until their pool is deleted.
    ready = sorted(
        (p for p in live if p.ready and p.accelerator_class in rank),
        key=lambda p: (
            p.standby,
            not serves(p.role),
            rank.get(p.accelerator_class, len(rank)),
            # A demoted pod is deleted a drain and Triton's exit timeout later: one still
            # clearing a backlog would fail its queued requests, an idle one none.
            p.name not in named,
            p.name,
        ),
    )
    serving = {p.name for p in ready[: max(desired_serving, 0)]}
    around = set([n for n in routed_around if n in serving][: len(serving) // 2])
    changes: list[RoleChange] = []
    for p in live:
        role = ROLE_SERVING if p.name in serving else ROLE_WARM
        if p.name in around:
            role = ROLE_ROUTED_AROUND
        cost = DELETION_COST[role]
        if p.standby and role == ROLE_WARM and (serves(p.role) or p.deletion_cost == RELIEVED_COST):
            cost = RELIEVED_COST
        if p.role != role or p.deletion_cost != cost:
            stamp = None
            if now is not None and serves(p.role) and not serves(role):
                stamp = f"{now:.3f}"
            changes.append(
                RoleChange(pod=p.name, role=role, deletion_cost=cost, demoted_at=stamp)
            )
    return changes
