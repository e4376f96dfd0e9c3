"""AcceleratorClass status: how many matching nodes and GPUs the cluster has for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from controllers import kube
from controllers.converging import now_rfc3339
from controllers.packed import Packed
from gpuserve.api.conditions import ConditionWriter
from gpuserve.api.models import GROUP, VERSION, AcceleratorClassSpec
from gpuserve.api.status import AcceleratorClassStatus
from gpuserve.placement.capacity import class_capacity, matches
from gpuserve.resources.naming import CLASSES_PLURAL

ACCEL = (GROUP, VERSION, CLASSES_PLURAL)


@kopf.index(*ACCEL)
async def class_bodies(name: str, body: kopf.Body, **_: Any) -> dict[str, Packed]:
    return {name: Packed.of(dict(body))}


@kopf.on.resume(*ACCEL)
@kopf.on.create(*ACCEL)
@kopf.on.update(*ACCEL, field="spec")
def on_class_change(body: kopf.Body, name: str, **kw: Any) -> None:
    report_capacity(body, name, kw)


def report_capacity(body: Mapping[str, Any], name: str, kw: Mapping[str, Any]) -> None:
    """Status of one class; also called by the periodic capacity loop."""
    live = dict(body.get("status") or {})
    status = AcceleratorClassStatus.model_validate(live)
    gen = body["metadata"].get("generation")
    conds = ConditionWriter(status.conditions, generation=gen, now=now_rfc3339())
    try:
        spec = AcceleratorClassSpec.model_validate(dict(body["spec"]))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        conds.set("Ready", "False", "InvalidSpec", f"{where}: {err['msg']}")
    else:
        nodes = [n for store in kw["gpu_nodes"].values() for n in store]
        pods = [p for store in kw["gpu_pods"].values() for p in store]
        cap = class_capacity(spec, nodes=nodes, pods=pods)
        status.nodes = sum(1 for n in nodes if matches(n, spec))
        status.capacity = cap.total
        status.allocated = cap.total - cap.free
        found = f"{status.nodes} node(s) with {cap.total} x {spec.resource}"
        if status.nodes:
            conds.set("Ready", "True", "NodesFound", found)
        else:
            conds.set("Ready", "False", "NoMatchingNodes", found)
    status.conditions = conds.conditions
    status.observed_generation = gen
    kube.patch_status(
        plural=CLASSES_PLURAL,
        name=name,
        namespace=None,
        status=status.model_dump(by_alias=True, exclude_none=True, mode="json"),
        live_status=live,
    )
