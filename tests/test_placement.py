"""Placement across classes in order of preference, capacity, and pod roles."""

from __future__ import annotations

from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.placement.capacity import NodeInfo, PodRequest, class_capacity
from gpuserve.placement.planning import ClassCapacity, PoolNow, place, usable_classes
from gpuserve.placement.roles import PodState, assign_roles

ORDER = ["h100", "mig", "l4"]


def _cap(**free: int) -> dict[str, ClassCapacity]:
    return {k: ClassCapacity(free=v, total=max(v, 8)) for k, v in free.items()}


def test_growth_fills_preferred_class_first_then_spills() -> None:
    p = place(desired=5, order=ORDER, now={}, capacity=_cap(h100=3, mig=1, l4=4))
    assert p.replicas == {"h100": 3, "mig": 1, "l4": 1} and not p.problems


def test_existing_pods_stay_and_shrink_starts_at_least_preferred() -> None:
    now = {"h100": PoolNow(scheduled=2), "l4": PoolNow(scheduled=2)}
    p = place(desired=3, order=ORDER, now=now, capacity=_cap(h100=0, mig=0, l4=0))
    assert p.replicas == {"h100": 2, "mig": 0, "l4": 1}


def test_no_capacity_reports_the_classes() -> None:
    p = place(desired=2, order=["h100"], now={}, capacity=_cap(h100=0))
    assert p.unplaced == 2 and "h100" in p.problems[0]


def test_pending_pods_move_when_their_class_is_full() -> None:
    now = {"h100": PoolNow(scheduled=1, pending=1)}
    p = place(desired=2, order=ORDER, now=now, capacity=_cap(h100=0, mig=1, l4=0))
    assert p.replicas == {"h100": 1, "mig": 1, "l4": 0}


def test_multi_gpu_pods_need_whole_pods_per_node() -> None:
    accel = AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-H100-80GB-HBM3"})
    nodes = [
        NodeInfo("a", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8}),
        NodeInfo("b", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8}),
        NodeInfo("c", {"nvidia.com/gpu.product": "NVIDIA-L4"}, {"nvidia.com/gpu": 1}),
    ]
    pods = [PodRequest("a", {"nvidia.com/gpu": 5}), PodRequest("b", {"nvidia.com/gpu": 7})]
    assert class_capacity(accel, nodes=nodes, pods=pods) == ClassCapacity(free=4, total=16)
    assert class_capacity(accel, nodes=nodes, pods=pods, per_pod=2) == ClassCapacity(2, 16)


def test_usable_classes_reasons() -> None:
    body = valid_service()["spec"]
    body.update(
        precision="fp8", accelerators={"classes": ["a100", "mig", "ghost", "h100"], "gpusPerPod": 2}
    )
    spec = InferenceServiceSpec.model_validate(body)
    classes = {
        "a100": AcceleratorClassSpec.model_validate(
            {"gpuProduct": "A", "computeCapability": "8.0"}
        ),
        "mig": AcceleratorClassSpec.model_validate(
            {"gpuProduct": "A", "computeCapability": "9.0", "mig": {"profile": "1g.10gb"}}
        ),
        "h100": AcceleratorClassSpec.model_validate(
            {"gpuProduct": "H", "computeCapability": "9.0"}
        ),
    }
    order, issues = usable_classes(spec, classes)
    assert order == ["h100"]
    assert [i.reason for i in issues] == [
        "PrecisionUnsupported",
        "MigNeedsOneSlice",
        "AcceleratorClassNotFound",
    ]


def _pod(name: str, cls: str, role: str, ready: bool = True, cost: str | None = None) -> PodState:
    return PodState(name=name, accelerator_class=cls, role=role, ready=ready, deletion_cost=cost)


def test_promotes_ready_warm_pods_preferring_better_classes() -> None:
    pods = [
        _pod("l4-a", "l4", "warm"),
        _pod("h-a", "h100", "warm"),
        _pod("h-b", "h100", "warm", ready=False),
    ]
    changes = {c.pod: c.role for c in assign_roles(pods, desired_serving=1, order=ORDER)}
    assert changes["h-a"] == "serving" and changes.get("l4-a") == "warm"


def test_demotes_from_least_preferred_and_sets_deletion_cost() -> None:
    pods = [_pod("h-a", "h100", "serving", cost="100"), _pod("l4-a", "l4", "serving", cost="100")]
    changes = assign_roles(pods, desired_serving=1, order=ORDER)
    assert [(c.pod, c.role, c.deletion_cost) for c in changes] == [("l4-a", "warm", "0")]


def test_steady_state_needs_no_change() -> None:
    pods = [_pod("h-a", "h100", "serving", cost="100"), _pod("h-b", "h100", "warm", cost="0")]
    assert assign_roles(pods, desired_serving=1, order=ORDER) == []
