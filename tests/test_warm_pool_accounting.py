"""The warm pool's standby Deployments: replica accounting, the role swap, preemption.

A class has a serving Deployment (the tier's PriorityClass) and a standby Deployment
(gpuserve-standby, below both tiers). A ready standby pod is promoted at once; when a
serving-priority pod is ready it takes over, the standby pod goes back to warm with the
lowest deletion cost, and the standby Deployment shrinks back to the warm pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from controllers import converging
from controllers.startup import priority_classes
from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.api.status import InferenceServiceStatus
from gpuserve.placement.capacity import PRODUCT_LABEL, NodeInfo, PodRequest, class_capacity
from gpuserve.placement.planning import ClassCapacity, PoolsPlan
from gpuserve.placement.roles import DELETION_COST, DRAIN_SECONDS, RELIEVED_COST, PodState
from gpuserve.placement.service_plan import ClusterView, ServicePlan, plan_service

ORDER = ["h100", "l4"]


def pod(
    name: str,
    role: str,
    *,
    standby: bool,
    cls: str = "h100",
    ready: bool = True,
    cost: str | None = None,
    demoted_at: float | None = None,
    deleting: bool = False,
) -> PodState:
    return PodState(
        name=name,
        accelerator_class=cls,
        role=role,
        ready=ready,
        node="n" if ready else None,
        deletion_cost=cost if cost is not None else DELETION_COST[role],
        standby=standby,
        demoted_at=demoted_at,
        deleting=deleting,
    )


# The settled state of a service with one serving pod and a warm pool of two.
ONE_SERVING_TWO_WARM = (
    pod("s1", "serving", standby=False),
    pod("w1", "warm", standby=True),
    pod("w2", "warm", standby=True),
)


def service_body(warm: int) -> dict[str, object]:
    body = valid_service("svc")
    body["metadata"]["namespace"] = "ns"
    body["spec"]["accelerators"] = {"classes": ORDER}
    body["spec"]["scaling"] = {"minReplicas": 0, "maxReplicas": 100, "warmPool": warm}
    return body


def cluster_of(pods: Sequence[PodState], *, free: int = 100, preemptible: int = 0) -> ClusterView:
    """The h100 node has 100 GPUs: ``free`` of them free, and ``preemptible`` held by
    another service's standby pods; there is no L4 node."""
    classes = {c: AcceleratorClassSpec.model_validate({"gpuProduct": c.upper()}) for c in ORDER}
    gpu = "nvidia.com/gpu"
    return ClusterView(
        classes=classes,
        nodes=[NodeInfo("h", {PRODUCT_LABEL: "H100"}, {gpu: 100})],
        gpu_pods=[
            PodRequest("h", {gpu: 100 - free - preemptible}, owner="ns/other"),
            PodRequest("h", {gpu: preemptible}, preemptible=True, owner="ns/other"),
        ],
        pods=pods,
    )


def plan_for(
    pods: Sequence[PodState], *, desired: int, warm: int, free: int = 100, preemptible: int = 0
) -> tuple[dict[str, tuple[str, str]], PoolsPlan]:
    """One reconcile's decisions: roles (pod -> (role, cost)) and the Deployment sizes, from
    the operator's own plan (see ``cluster_of`` for the capacity)."""
    cluster = cluster_of(pods, free=free, preemptible=preemptible)
    plan = plan_service(
        parse_inference_service(service_body(warm)).spec,
        owner="ns/svc",
        cluster=cluster,
        desired=desired,
    )
    assert plan.pools is not None and plan.order == ORDER
    return {c.pod: (c.role, c.deletion_cost) for c in plan.roles}, plan.pools


def test_settled_pool_sizes_are_serving_plus_warm() -> None:
    pods = ONE_SERVING_TWO_WARM
    changes, plan = plan_for(pods, desired=1, warm=2, free=0)
    assert changes == {}
    assert plan.serving == {"h100": 1, "l4": 0} and plan.standby == {"h100": 2, "l4": 0}
    assert plan.unplaced == 0


def test_fresh_service_plans_both_deployments() -> None:
    _, plan = plan_for([], desired=2, warm=1)
    assert plan.serving["h100"] == 2 and plan.standby["h100"] == 1


def test_scale_up_promotes_a_standby_pod_at_once_and_refills_behind_it() -> None:
    pods = ONE_SERVING_TWO_WARM
    changes, plan = plan_for(pods, desired=2, warm=2)
    # The fast path: one label flip on a loaded standby pod.
    assert changes == {"w1": ("serving", "100")}
    # A serving-priority pod is created to take over; the warm pool is refilled (2 + 1).
    assert plan.serving["h100"] == 2 and plan.standby["h100"] == 3


def test_serving_priority_pod_ready_swaps_roles_and_the_relieved_pod_is_the_surplus() -> None:
    pods = [
        pod("s1", "serving", standby=False),
        pod("s2", "warm", standby=False),  # the new serving-priority pod, just ready
        pod("w1", "serving", standby=True),  # promoted earlier
        pod("w2", "warm", standby=True),
        pod("w3", "warm", standby=True),  # the refill
    ]
    changes, plan = plan_for(pods, desired=2, warm=2)
    assert changes == {"s2": ("serving", "100"), "w1": ("warm", RELIEVED_COST)}
    # Back to the warm pool's size: the ReplicaSet deletes the lowest deletion cost, w1.
    assert plan.serving["h100"] == 2 and plan.standby["h100"] == 2
    assert int(RELIEVED_COST) < int(DELETION_COST["warm"]) < int(DELETION_COST["serving"])
    # The next reconcile keeps w1 marked until it is gone (no flip back to "0").
    after = [
        pod("s1", "serving", standby=False),
        pod("s2", "serving", standby=False),
        pod("w1", "warm", standby=True, cost=RELIEVED_COST),
        pod("w2", "warm", standby=True),
        pod("w3", "warm", standby=True),
    ]
    changes, plan = plan_for(after, desired=2, warm=2)
    assert changes == {} and plan.standby["h100"] == 2


def test_scale_down_demotes_standby_pods_first_and_deletes_surplus_serving_pods() -> None:
    pods = [
        pod("s1", "serving", standby=False),
        pod("s2", "serving", standby=False),
        pod("w1", "serving", standby=True),  # still covering for a serving pod
        pod("w2", "warm", standby=True),
        pod("w3", "warm", standby=True),
    ]
    changes, plan = plan_for(pods, desired=1, warm=2)
    assert changes == {"w1": ("warm", RELIEVED_COST), "s2": ("warm", "0")}
    # s2 (cost 0) goes from the serving Deployment; w1 (the lowest cost) from the standby.
    assert plan.serving["h100"] == 1 and plan.standby["h100"] == 2


def test_a_serving_standby_pod_keeps_its_place_when_the_cluster_is_full() -> None:
    # No free GPU: the serving-priority pod can't be placed (a service does not preempt its
    # own warm pool), so the promoted standby pod keeps serving and the warm pool is short.
    pods = ONE_SERVING_TWO_WARM
    changes, plan = plan_for(pods, desired=2, warm=2, free=0)
    assert changes == {"w1": ("serving", "100")}
    assert plan.serving["h100"] == 1 and plan.standby["h100"] == 2
    assert plan.unplaced == 2 and any("warm pool short" in p for p in plan.problems)


def test_serving_pods_plan_on_other_services_standby_gpus_but_standby_pods_do_not() -> None:
    _, plan = plan_for([], desired=2, warm=1, free=0, preemptible=2)
    assert plan.serving["h100"] == 2  # the scheduler preempts the other service's warm pool
    assert plan.standby["h100"] == 0 and plan.unplaced == 1  # standby pods preempt nothing


def test_capacity_counts_only_other_services_standby_pods_as_preemptible() -> None:
    accel = AcceleratorClassSpec.model_validate({"gpuProduct": "H"})
    nodes = [
        NodeInfo("a", {"nvidia.com/gpu.product": "H"}, {"nvidia.com/gpu": 4}),
        NodeInfo("b", {"nvidia.com/gpu.product": "H"}, {"nvidia.com/gpu": 2}),
    ]
    gpu = {"nvidia.com/gpu": 1}
    pods = [
        PodRequest("a", gpu, preemptible=True, owner="ns/other"),
        PodRequest("a", gpu, preemptible=True, owner="ns/other"),
        PodRequest("a", gpu, preemptible=True, owner="ns/me"),
        PodRequest("a", gpu),
        PodRequest("b", {"nvidia.com/gpu": 2}),
    ]
    cap = class_capacity(accel, nodes=nodes, pods=pods, owner="ns/me")
    assert cap == ClassCapacity(free=0, total=6, preemptible=2)
    assert class_capacity(accel, nodes=nodes, pods=pods, owner="ns/other").preemptible == 1


def test_standby_priority_class_is_below_both_tiers_and_never_preempts() -> None:
    pcs = {pc["metadata"]["name"]: pc for pc in priority_classes()}
    standby = pcs["gpuserve-standby"]
    assert standby["value"] < pcs["gpuserve-batch"]["value"] < pcs["gpuserve-interactive"]["value"]
    assert standby["preemptionPolicy"] == "Never" and not standby["globalDefault"]
    assert pcs["gpuserve-batch"]["preemptionPolicy"] == "PreemptLowerPriority"


# Status: what `kubectl get gsvc` and the demo's live view show. The reconcile plans with
# the clock (``now``), so pods that stopped serving drain in their Deployment first.
T0 = 1_000_000.0


def reconciled(
    pods: Sequence[PodState], *, desired: int, warm: int, now: float
) -> tuple[InferenceServiceStatus, ServicePlan]:
    """The status one reconcile writes, and its plan."""
    svc = parse_inference_service(service_body(warm))
    cluster = cluster_of(pods)
    plan = plan_service(svc.spec, owner="ns/svc", cluster=cluster, desired=desired, now=now)
    status = InferenceServiceStatus(desired_replicas=desired)
    view = converging.ClusterView(cluster=cluster)
    converging._fill_status(status, svc=svc, view=view, plan=plan, gen=1)
    return status, plan


def test_a_relieved_standby_pod_draining_after_a_scale_up_is_not_counted_warm() -> None:
    # The demo's chat (warmPool 2) after its scale-up: w1 was promoted, s2 (the new
    # serving-priority pod) relieved it, w3 refilled the pool. w1 drains, then the standby
    # Deployment shrinks back to 2 and deletes it: it is not a third warm pod.
    pods = [
        pod("s1", "serving", standby=False),
        pod("s2", "serving", standby=False),
        pod("w1", "warm", standby=True, cost=RELIEVED_COST, demoted_at=T0),
        pod("w2", "warm", standby=True),
        pod("w3", "warm", standby=True),
    ]
    status, plan = reconciled(pods, desired=2, warm=2, now=T0 + 1)
    assert (status.replicas, status.warm_replicas) == (2, 2)
    assert (status.pools[0].serving, status.pools[0].warm, status.pools[0].ready) == (2, 2, 5)
    assert plan.pools is not None and plan.pools.standby["h100"] == 3  # held while it drains
    # The drain's end changes the plan: the reconcile asks to run again then.
    assert plan.drain_ends == T0 + DRAIN_SECONDS
    _, later = reconciled(pods, desired=2, warm=2, now=T0 + DRAIN_SECONDS + 1)
    assert later.pools is not None and later.pools.standby["h100"] == 2
    assert later.drain_ends is None


def test_a_serving_pod_demoted_at_scale_down_is_not_counted_warm_while_it_drains() -> None:
    # The demo's chat at its scale-down: s2 stops serving now; its Deployment keeps it for
    # the drain, then deletes it (the lowest deletion cost of the serving Deployment).
    pods = [
        pod("s1", "serving", standby=False),
        pod("s2", "serving", standby=False),
        pod("w1", "warm", standby=True),
        pod("w2", "warm", standby=True),
    ]
    status, plan = reconciled(pods, desired=1, warm=2, now=T0)
    assert {c.pod: c.role for c in plan.roles} == {"s2": "warm"}
    assert (status.replicas, status.warm_replicas) == (1, 2)
    assert plan.drain_ends == T0 + DRAIN_SECONDS
    # The next reconcile sees the label: still draining, still not warm.
    pods[1] = pod("s2", "warm", standby=False, demoted_at=T0)
    status, plan = reconciled(pods, desired=1, warm=2, now=T0 + 5)
    assert (status.replicas, status.warm_replicas) == (1, 2)
    assert plan.pools is not None and plan.pools.serving["h100"] == 2


def test_a_terminating_pod_is_neither_serving_nor_warm() -> None:
    pods = [
        pod("s1", "serving", standby=False),
        pod("s2", "serving", standby=False, deleting=True),
        pod("w1", "warm", standby=True),
        pod("w2", "warm", standby=True, deleting=True),
    ]
    status, _ = reconciled(pods, desired=1, warm=1, now=T0)
    assert (status.replicas, status.warm_replicas) == (1, 1)
    assert (status.pools[0].replicas, status.pools[0].ready) == (2, 2)
