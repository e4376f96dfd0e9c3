"""In-memory indexes kopf keeps from watches: no list calls on the reconcile path.

- ``accelerator_classes``: class name -> parsed spec (or the parse error);
- ``gpu_nodes``: node name -> labels and GPU allocatable;
- ``gpu_pods``: active pods with GPU requests -> node, requests and whether a serving pod
  may preempt them (warm-pool standby pods), for free capacity;
- ``service_pods``: (namespace, service) -> each pod's role, readiness and placement.
"""

from __future__ import annotations

import datetime
from typing import Any

import kopf
from pydantic import ValidationError

from gpuserve.api.models import GROUP, VERSION, AcceleratorClassSpec
from gpuserve.placement.capacity import NodeInfo, PodRequest
from gpuserve.placement.roles import PodState
from gpuserve.resources.naming import (
    ANNOTATION_DEMOTED_AT,
    CLASSES_PLURAL,
    LABEL_CLASS,
    LABEL_POOL,
    LABEL_ROLE,
    LABEL_SERVICE,
    POOL_STANDBY,
    STANDBY_PRIORITY_CLASS,
)

GPU_PREFIX = "nvidia.com/"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


@kopf.index(GROUP, VERSION, CLASSES_PLURAL)
async def accelerator_classes(
    name: str, spec: kopf.Spec, **_: Any
) -> dict[str, AcceleratorClassSpec | str]:
    try:
        return {name: AcceleratorClassSpec.model_validate(dict(spec))}
    except ValidationError as exc:
        return {name: f"invalid AcceleratorClass {name!r}: {exc.errors()[0]['msg']}"}


@kopf.index("", "v1", "nodes")
async def gpu_nodes(
    name: str, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[str, NodeInfo]:
    allocatable = body.get("status", {}).get("allocatable", {}) or {}
    gpus = {k: _int(v) for k, v in allocatable.items() if k.startswith(GPU_PREFIX)}
    schedulable = not body.get("spec", {}).get("unschedulable", False)
    return {
        name: NodeInfo(name=name, labels=dict(labels), allocatable=gpus, schedulable=schedulable)
    }


def _gpu_requests(spec: kopf.Spec) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in spec.get("containers", []) or []:
        resources = container.get("resources", {}) or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in merged.items():
            if key.startswith(GPU_PREFIX):
                total[key] = total.get(key, 0) + _int(value)
    return total


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None  # hand-edited: treated as not draining


def epoch(stamp: str | None) -> float:
    """An RFC 3339 timestamp of the API as epoch seconds (0 when absent)."""
    if not stamp:
        return 0.0
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _active(status: kopf.Status) -> bool:
    return status.get("phase") not in ("Succeeded", "Failed")


@kopf.index("", "v1", "pods")
async def gpu_pods(
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[tuple[str, str], PodRequest] | None:
    node = spec.get("nodeName")
    requests = _gpu_requests(spec)
    if not node or not requests or not _active(status):
        return None
    service = labels.get(LABEL_SERVICE)
    namespace = namespace or ""
    return {
        (namespace, name): PodRequest(
            node=node,
            requests=requests,
            preemptible=spec.get("priorityClassName") == STANDBY_PRIORITY_CLASS,
            owner=f"{namespace}/{service}" if service else None,
        )
    }


def _condition(status: kopf.Status, type_: str) -> dict[str, Any] | None:
    for cond in status.get("conditions", []) or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


@kopf.index("", "v1", "pods", labels={LABEL_SERVICE: kopf.PRESENT})
async def service_pods(
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    annotations: kopf.Annotations,
    meta: kopf.Meta,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[tuple[str, str], PodState] | None:
    if not _active(status):
        return None
    ready = _condition(status, "Ready")
    scheduled = _condition(status, "PodScheduled")
    unschedulable = None
    # A pod nominated to a node waits for preempted pods to leave: placed, not stuck.
    nominated = bool(status.get("nominatedNodeName"))
    if scheduled and scheduled.get("status") == "False" and not nominated:
        unschedulable = scheduled.get("message") or scheduled.get("reason") or "unschedulable"
    state = PodState(
        name=name,
        accelerator_class=labels.get(LABEL_CLASS, ""),
        role=labels.get(LABEL_ROLE, ""),
        ready=bool(ready and ready.get("status") == "True"),
        deleting=meta.get("deletionTimestamp") is not None,
        node=spec.get("nodeName"),
        unschedulable=unschedulable,
        deletion_cost=annotations.get(DELETION_COST),
        created=epoch(meta.get("creationTimestamp")),
        standby=labels.get(LABEL_POOL) == POOL_STANDBY,
        demoted_at=_float(annotations.get(ANNOTATION_DEMOTED_AT)),
    )
    return {(namespace or "", labels[LABEL_SERVICE]): state}
