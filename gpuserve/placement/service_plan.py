"""The one plan of one service: usable classes, capacity, pod roles and pool sizes.

(service, classes, cluster view) -> plan. The reconcile applies it, the autoscaler reads
its pool state from it, and the tests call it directly: the rules of placement (preference
order, whole pods per node, preemption of other services' standby pods, the scheduler's
verdict on stuck pods, the warm pool's share of capacity) live here and in
``placement.planning``, nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.placement.capacity import NodeInfo, PodRequest, class_capacity
from gpuserve.placement.planning import (
    ClassCapacity,
    ClassIssue,
    PoolNow,
    PoolsPlan,
    plan_pools,
    usable_classes,
)
from gpuserve.placement.roles import PodState, RoleChange, assign_roles, drain_end, draining
from gpuserve.resources.naming import serves


@dataclass(frozen=True)
class ClusterView:
    """What the caller knows of the cluster: classes (a string is a class that failed to
    parse, with the reason), GPU nodes, every pod holding GPUs, and this service's pods."""

    classes: Mapping[str, AcceleratorClassSpec | str]
    nodes: Sequence[NodeInfo] = ()
    gpu_pods: Sequence[PodRequest] = ()
    pods: Sequence[PodState] = ()

    def valid_classes(self) -> dict[str, AcceleratorClassSpec]:
        return {k: v for k, v in self.classes.items() if isinstance(v, AcceleratorClassSpec)}

    def live_pods(self, accelerator_class: str | None = None) -> list[PodState]:
        return [
            p
            for p in self.pods
            if not p.deleting
            and (accelerator_class is None or p.accelerator_class == accelerator_class)
        ]


@dataclass(frozen=True)
class ServicePlan:
    order: list[str]
    issues: list[ClassIssue]
    desired: int
    gpus_per_pod: int = 1
    capacity: dict[str, ClassCapacity] = field(default_factory=dict)
    roles: list[RoleChange] = field(default_factory=list)
    pools: PoolsPlan | None = None
    # Pods that stopped serving and keep their place in their Deployment while requests
    # sent to them finish (roles.DRAIN_SECONDS), and when the first of those drains ends
    # (epoch seconds): the Deployment sizes change then, though nothing in the cluster does.
    draining: frozenset[str] = frozenset()
    drain_ends: float | None = None

    @property
    def usable(self) -> bool:
        return bool(self.order)

    def role_of(self, pod: PodState) -> str:
        """The pod's role once the plan's label changes are applied."""
        return next((c.role for c in self.roles if c.pod == pod.name), pod.role)

    def serving_and_warm(self, pods: Sequence[PodState]) -> tuple[int, int]:
        """Ready pods that serve, and ready pods that stand warm, once the plan's label
        changes are applied. A Terminating pod is neither, and neither is a pod that
        drains: the surplus of a scale-down, or a standby pod relieved by a serving-priority
        one, which its Deployment deletes when the drain ends (counting it showed a warm
        pod more than warmPool after every promotion and every scale-down)."""
        serving = warm = 0
        for p in pods:
            if not p.ready or p.deleting or p.name in self.draining:
                continue
            if serves(self.role_of(p)):
                serving += 1
            else:
                warm += 1
        return serving, warm

    @property
    def unplaced(self) -> int:
        return self.pools.unplaced if self.pools is not None else self.desired

    def fallback_note(self) -> str:
        """Why serving pods go to a less preferred class, when they do."""
        if self.pools is None:
            return ""
        used = [c for c in self.order if self.pools.serving.get(c)]
        if not used or used[0] == self.order[0]:
            return ""
        passed = self.order[: self.order.index(used[0])]
        why = "; ".join(
            f"{c} has {self.capacity[c].free} of {self.capacity[c].total} GPUs free "
            "(full, cordoned, or its pods cannot be scheduled)"
            for c in passed
            if c in self.capacity
        )
        return f"serving on {', '.join(used)}, not the preferred {self.order[0]}: {why}"


def class_problems(
    spec: InferenceServiceSpec, classes: Mapping[str, AcceleratorClassSpec | str]
) -> tuple[list[str], list[ClassIssue]]:
    """Usable classes in preference order, and why each other listed class is not."""
    order, issues = usable_classes(
        spec, {k: v for k, v in classes.items() if isinstance(v, AcceleratorClassSpec)}
    )
    for name, value in classes.items():
        if isinstance(value, str) and name in spec.accelerators.classes:
            issues = [i for i in issues if i.class_name != name]
            issues.append(ClassIssue(name, "InvalidAcceleratorClass", value))
    return order, issues


def _after_scheduler(cap: ClassCapacity, stuck: Sequence[PodState]) -> ClassCapacity:
    # The scheduler has the last word: a class it can't fill has no room. A stuck standby
    # pod only says nothing is free: serving pods may still preempt.
    if any(not p.standby for p in stuck):
        return ClassCapacity(free=0, total=cap.total)
    if stuck:
        return ClassCapacity(free=0, total=cap.total, preemptible=cap.preemptible)
    return cap


def plan_service(
    spec: InferenceServiceSpec,
    *,
    owner: str,
    cluster: ClusterView,
    desired: int,
    every_ready_pod_serves: bool = False,
    now: float | None = None,
    warm_pool: int | None = None,
    routed_around: Sequence[str] = (),
) -> ServicePlan:
    """Roles and Deployment sizes that bring ``desired`` serving pods (and the warm pool)
    as close as capacity allows. ``owner`` is "namespace/name" (a service never plans to
    preempt its own standby pods). With ``every_ready_pod_serves`` (an external scaler
    owns the replica count) every ready pod serves and no pool is sized here. With ``now``
    (epoch seconds) demotions are stamped, and a pod that stopped serving keeps its place
    in its Deployment while it drains (``roles.DRAIN_SECONDS``). ``warm_pool``: the standby
    pods wanted when the autoscaler sizes the pool (warmPoolMode auto); None keeps
    spec.scaling.warmPool. ``routed_around``: serving pods the autoscaler takes out of
    routing while they clear their queues (``roles.assign_roles``)."""
    order, issues = class_problems(spec, cluster.classes)
    if not order:
        return ServicePlan(
            order=order, issues=issues, desired=desired, gpus_per_pod=spec.accelerators.gpus_per_pod
        )
    classes = cluster.valid_classes()
    if every_ready_pod_serves:
        desired = sum(1 for p in cluster.live_pods() if p.ready)
    capacity: dict[str, ClassCapacity] = {}
    serving_now: dict[str, PoolNow] = {}
    standby_now: dict[str, PoolNow] = {}
    for c in order:
        cap = class_capacity(
            classes[c],
            nodes=cluster.nodes,
            pods=cluster.gpu_pods,
            per_pod=spec.accelerators.gpus_per_pod,
            owner=owner,
        )
        mine = cluster.live_pods(c)
        capacity[c] = _after_scheduler(cap, [p for p in mine if p.unschedulable])
        for counts, standby in ((serving_now, False), (standby_now, True)):
            pool = [p for p in mine if p.standby == standby]
            counts[c] = PoolNow(
                scheduled=sum(1 for p in pool if p.node),
                pending=sum(1 for p in pool if not p.node),
            )
    # Roles are decided first: the standby pods serving after them keep their place in
    # the standby Deployments (warm pool + promoted) until serving-priority pods relieve them.
    roles = assign_roles(
        cluster.pods, desired_serving=desired, order=order, now=now, routed_around=routed_around
    )
    after = {c.pod: c.role for c in roles}
    # Standby pods that serve, or drain, keep their place in the standby Deployment;
    # draining serving-priority pods keep theirs in the serving one.
    standby_kept: dict[str, int] = {}
    drain = 0
    drains: dict[str, float] = {}  # draining pod -> when its drain ends
    for p in cluster.live_pods():
        role = after.get(p.name, p.role)
        if now is not None and draining(p, role, now):
            drains[p.name] = drain_end(p, now)
        held = serves(role) or p.name in drains
        if p.standby and held:
            standby_kept[p.accelerator_class] = standby_kept.get(p.accelerator_class, 0) + 1
        elif held and not serves(role):
            drain += 1
    pools = plan_pools(
        desired=desired + drain,
        warm_pool=spec.scaling.warm_pool if warm_pool is None else warm_pool,
        order=order,
        serving_now=serving_now,
        standby_now=standby_now,
        standby_serving=standby_kept,
        capacity=capacity,
        gpus_per_pod=spec.accelerators.gpus_per_pod,
    )
    return ServicePlan(
        order=order,
        issues=issues,
        desired=desired,
        gpus_per_pod=spec.accelerators.gpus_per_pod,
        capacity=capacity,
        roles=roles,
        pools=pools,
        draining=frozenset(drains),
        drain_ends=min(drains.values(), default=None),
    )


def pool_state(
    spec: InferenceServiceSpec,
    *,
    cluster: ClusterView,
    now: float,
    serving_target: int | None = None,
) -> PoolState:
    """What the autoscaling policy sees of the service: its pods per usable class, in the
    plan's order of preference.

    The policy is given no capacity bound (``free_capacity`` None): it says how many
    serving pods the service needs, and the plan places them (preempting other services'
    standby pods where that helps) and reports what it cannot place. A bound here would
    hide the shortfall: the decision would shrink to what fits and status would say all
    is well. ``serving_target`` is the serving count the plan aims at: pods still starting
    count as future capacity only up to it; the rest are the warm pool coming up, and
    counting them would grow the target on every evaluation."""
    order, _ = class_problems(spec, cluster.classes)
    classes = cluster.valid_classes()
    budget = None
    if serving_target is not None:
        serving = sum(1 for p in cluster.live_pods() if p.ready and serves(p.role))
        budget = max(0, serving_target - serving)
    pools: list[ClassPool] = []
    for c in order:
        accel = classes[c]
        mine = cluster.live_pods(c)
        ages = sorted((max(0.0, now - p.created) for p in mine if not p.ready), reverse=True)
        if budget is not None:  # preferred classes' oldest pods first
            ages = ages[:budget]
            budget -= len(ages)
        pools.append(
            ClassPool(
                name=c,
                speed=accel.relative_speed,
                serving_ready=sum(1 for p in mine if p.ready and serves(p.role)),
                warm_ready=sum(1 for p in mine if p.ready and not serves(p.role)),
                starting=tuple(ages),
                free_capacity=None,
                cost_per_hour=accel.cost_per_hour,
            )
        )
    return PoolState(classes=tuple(pools))


def first_pods_unseen(
    spec: InferenceServiceSpec, *, owner: str, cluster: ClusterView, now: float, target: int
) -> bool:
    """Whether the ``target`` serving pods a new object starts with all fit and some are
    not yet seen (neither ready nor starting). The reconcile has asked for them, or is about
    to; deciding before the Deployment controller makes them would count them as a scale-up
    from zero, as if the autoscaler had added what the spec's lower bound already asked for.
    Where they do not fit, deciding now records what cannot be placed."""
    if target <= 0:
        return False
    if pool_state(spec, cluster=cluster, now=now, serving_target=target).committed >= target:
        return False
    return plan_service(spec, owner=owner, cluster=cluster, desired=target).unplaced == 0
