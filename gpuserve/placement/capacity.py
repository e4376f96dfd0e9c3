"""Free GPU capacity per AcceleratorClass, from node and pod summaries read by the caller."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuserve.api.models import AcceleratorClassSpec
from gpuserve.placement.planning import ClassCapacity

PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    schedulable: bool = True


@dataclass(frozen=True)
class PodRequest:
    """An active pod's extended-resource requests and the node it is bound to."""

    node: str
    requests: Mapping[str, int] = field(default_factory=dict)
    # A warm-pool standby pod (PriorityClass gpuserve-standby): serving pods may preempt it.
    preemptible: bool = False
    # "namespace/service" of a gpuserve pod, to tell a service's own standby pods apart.
    owner: str | None = None


def matches(node: NodeInfo, accel: AcceleratorClassSpec) -> bool:
    if node.labels.get(PRODUCT_LABEL) != accel.product_label:
        return False
    return all(node.labels.get(k) == v for k, v in accel.node_labels.items())


def class_capacity(
    accel: AcceleratorClassSpec,
    *,
    nodes: Iterable[NodeInfo],
    pods: Iterable[PodRequest],
    per_pod: int = 1,
    owner: str | None = None,
) -> ClassCapacity:
    """Free and total units of the class's resource; free counts only whole pods per node
    (three free GPUs on one node and one on another hold one 2-GPU pod, not two).
    ``preemptible`` is what a serving pod could get on top by preempting standby pods of
    services other than ``owner`` (a service never plans to preempt its own warm pool)."""
    resource = accel.resource
    used: dict[str, int] = {}
    firm: dict[str, int] = {}
    for pod in pods:
        if resource in pod.requests:
            used[pod.node] = used.get(pod.node, 0) + pod.requests[resource]
            if not pod.preemptible or pod.owner == owner:
                firm[pod.node] = firm.get(pod.node, 0) + pod.requests[resource]
    total = free_pods = with_preemption = 0
    for node in nodes:
        if not matches(node, accel):
            continue
        have = node.allocatable.get(resource, 0)
        total += have
        if node.schedulable:
            free_pods += max(have - used.get(node.name, 0), 0) // per_pod
            with_preemption += max(have - firm.get(node.name, 0), 0) // per_pod
    return ClassCapacity(
        free=free_pods * per_pod,
        total=total,
        preemptible=(with_preemption - free_pods) * per_pod,
    )
