"""The one plan of a service (placement.service_plan): capacity with preemption, the
policy's view of the pools, and pods that drain before their Deployment shrinks."""

from __future__ import annotations

from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.placement.capacity import PRODUCT_LABEL, NodeInfo, PodRequest
from gpuserve.placement.roles import DRAIN_SECONDS, PodState
from gpuserve.placement.service_plan import (
    ClusterView,
    first_pods_unseen,
    plan_service,
    pool_state,
)

H100 = "NVIDIA-H100-80GB-HBM3"
CLASSES = {"h100": AcceleratorClassSpec.model_validate({"gpuProduct": H100})}
NODE = NodeInfo(name="n0", labels={PRODUCT_LABEL: H100}, allocatable={"nvidia.com/gpu": 4})
T0 = 1_000_000.0


def spec(warm: int = 0, lo: int = 1, hi: int = 4) -> InferenceServiceSpec:
    body = valid_service("chat")
    body["spec"]["accelerators"] = {"classes": ["h100"]}
    body["spec"]["scaling"] = {"minReplicas": lo, "maxReplicas": hi, "warmPool": warm}
    return InferenceServiceSpec.model_validate(body["spec"])


def pod(name: str, role: str, *, standby: bool = False, **kw: object) -> PodState:
    return PodState(
        name=name, accelerator_class="h100", role=role, ready=True, node="n0",
        standby=standby, **kw,  # type: ignore[arg-type]
    )


def gpu(owner: str, *, standby: bool = False) -> PodRequest:
    return PodRequest(node="n0", requests={"nvidia.com/gpu": 1}, preemptible=standby, owner=owner)


def test_the_policy_gets_no_capacity_bound_and_the_plan_preempts_other_warm_pools() -> None:
    # chat serves on one GPU; "reports" holds the other three, two of them standby pods.
    cluster = ClusterView(
        classes=CLASSES,
        nodes=[NODE],
        gpu_pods=[gpu("ns/chat"), gpu("ns/reports"), *[gpu("ns/reports", standby=True)] * 2],
        pods=[pod("chat-0", "serving")],
    )
    plan = plan_service(spec(), owner="ns/chat", cluster=cluster, desired=3)
    assert plan.capacity["h100"].free == 0 and plan.capacity["h100"].preemptible == 2
    assert plan.pools is not None and plan.pools.serving == {"h100": 3}
    assert plan.unplaced == 0  # two of them by preempting reports' standby pods
    pools = pool_state(spec(), cluster=cluster, now=T0, serving_target=3)
    assert pools.classes[0].free_capacity is None  # the policy says what it needs

    # Four wanted, three placeable even with preemption: the plan says what is short.
    short = plan_service(spec(), owner="ns/chat", cluster=cluster, desired=4)
    assert short.unplaced == 1 and short.pools is not None
    assert "1 replica(s) unplaced" in short.pools.problems[0]


def test_own_standby_pods_are_not_counted_as_preemptible() -> None:
    cluster = ClusterView(
        classes=CLASSES,
        nodes=[NODE],
        gpu_pods=[gpu("ns/chat"), *[gpu("ns/chat", standby=True)] * 3],
        pods=[pod("chat-0", "serving")],
    )
    plan = plan_service(spec(warm=3), owner="ns/chat", cluster=cluster, desired=2)
    assert plan.capacity["h100"].preemptible == 0


def test_a_relieved_standby_pod_drains_before_the_standby_deployment_shrinks() -> None:
    # A standby pod serves (promoted); a serving-priority pod is now ready to relieve it.
    pods = [pod("serve-0", "serving"), pod("sb-0", "serving", standby=True), pod("new-0", "warm")]
    gpu_pods = [gpu("ns/chat"), gpu("ns/chat", standby=True), gpu("ns/chat")]
    cluster = ClusterView(classes=CLASSES, nodes=[NODE], gpu_pods=gpu_pods, pods=pods)
    plan = plan_service(spec(warm=0), owner="ns/chat", cluster=cluster, desired=2, now=T0)
    change = {c.pod: c for c in plan.roles}
    assert change["sb-0"].role == "warm" and change["sb-0"].demoted_at == f"{T0:.3f}"
    assert change["new-0"].role == "serving"
    assert plan.pools is not None and plan.pools.standby == {"h100": 1}  # kept while draining

    drained = [
        pod("serve-0", "serving"),
        pod("new-0", "serving"),
        pod("sb-0", "warm", standby=True, demoted_at=T0, deletion_cost="-100"),
    ]
    cluster = ClusterView(classes=CLASSES, nodes=[NODE], gpu_pods=gpu_pods, pods=drained)
    during = plan_service(spec(), owner="ns/chat", cluster=cluster, desired=2, now=T0 + 1)
    assert during.pools is not None and during.pools.standby == {"h100": 1}
    later = T0 + DRAIN_SECONDS + 1
    after = plan_service(spec(), owner="ns/chat", cluster=cluster, desired=2, now=later)
    assert after.pools is not None and after.pools.standby == {"h100": 0}


def test_a_scale_down_keeps_the_demoted_pod_in_its_deployment_until_drained() -> None:
    pods = [pod("a", "serving"), pod("b", "serving"), pod("c", "serving")]
    gpu_pods = [gpu("ns/chat")] * 3
    cluster = ClusterView(classes=CLASSES, nodes=[NODE], gpu_pods=gpu_pods, pods=pods)
    plan = plan_service(spec(), owner="ns/chat", cluster=cluster, desired=2, now=T0)
    demoted = [c for c in plan.roles if c.role == "warm"]
    assert len(demoted) == 1 and demoted[0].demoted_at is not None
    assert plan.pools is not None and plan.pools.serving == {"h100": 3}
    # Without a clock (the autoscaler's view) nothing drains: the size is the target.
    bare = plan_service(spec(), owner="ns/chat", cluster=cluster, desired=2)
    assert bare.pools is not None and bare.pools.serving == {"h100": 2}


def test_a_fallback_to_a_less_preferred_class_says_why() -> None:
    classes = {
        **CLASSES,
        "l4": AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-L4"}),
    }
    l4 = NodeInfo(name="l0", labels={PRODUCT_LABEL: "NVIDIA-L4"}, allocatable={"nvidia.com/gpu": 4})
    cordoned = NodeInfo(
        name="n0", labels={PRODUCT_LABEL: H100}, allocatable={"nvidia.com/gpu": 4},
        schedulable=False,
    )
    body = valid_service("chat")
    body["spec"]["accelerators"] = {"classes": ["h100", "l4"]}
    two = InferenceServiceSpec.model_validate(body["spec"])
    cluster = ClusterView(classes=classes, nodes=[cordoned, l4])
    plan = plan_service(two, owner="ns/chat", cluster=cluster, desired=2)
    assert plan.pools is not None and plan.pools.serving == {"h100": 0, "l4": 2}
    note = plan.fallback_note()
    assert "serving on l4, not the preferred h100" in note and "0 of 4 GPUs free" in note
    cluster = ClusterView(classes=classes, nodes=[NODE, l4])
    assert plan_service(two, owner="ns/chat", cluster=cluster, desired=2).fallback_note() == ""


def test_a_new_objects_first_pods_are_awaited_only_while_they_fit_and_are_not_yet_seen() -> None:
    def unseen(pods: list[PodState], gpu_pods: list[PodRequest], target: int = 2) -> bool:
        cluster = ClusterView(classes=CLASSES, nodes=[NODE], gpu_pods=gpu_pods, pods=pods)
        return first_pods_unseen(
            spec(lo=target), owner="ns/chat", cluster=cluster, now=T0, target=target
        )

    starting = PodState(
        name="chat-1",
        accelerator_class="h100",
        role="serving",
        ready=False,
        node="n0",
        created=T0 - 1,
    )
    assert unseen([], [])  # asked for, not made yet
    assert unseen([pod("chat-0", "serving")], [gpu("ns/chat")])  # one of two seen
    assert not unseen([pod("chat-0", "serving"), starting], [gpu("ns/chat")] * 2)
    assert not unseen([], [], target=0)  # nothing asked for: scale from zero decides
    # Three GPUs held by another service's serving pods: two cannot both be placed, and
    # the decision that says so is not held back.
    assert not unseen([], [gpu("ns/reports")] * 3)
