"""kopf handlers of InferenceService: every trigger funnels into ``converging.converge``.

Triggers: the service is seen first or its spec changes (its generation moves); one of
its pods changes (readiness, scheduling, deletion); one of its children drifts; the
autoscaler changes its desired size; and the resync loop of ``controllers.periodic`` that
catches anything missed (it writes nothing when nothing changed). The handlers only put
the service's key on the reconcile queue (``controllers.workqueue``); its workers read the
latest body and children from the indexes. Handlers and indexers are coroutines: they are
quick and pure, and kopf's thread pool would make each wait behind the others.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from controllers.converging import (
    ClusterView,
    Event,
    converge,
    post_events,
    remember_kopf_context,
    routed_around,
)
from controllers.packed import Packed
from controllers.state import state_of
from gpuserve.api.models import GROUP, VERSION
from gpuserve.placement import service_plan
from gpuserve.resources import inference_pool
from gpuserve.resources.naming import FIELD_MANAGER, LABEL_SERVICE, SERVICES_PLURAL
from gpuserve.resources.ownership import owned_part

log = logging.getLogger(__name__)
ISVC = (GROUP, VERSION, SERVICES_PLURAL)
MANAGED = {"app.kubernetes.io/managed-by": "gpuserve"}


@kopf.index(*ISVC)
async def services(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], Packed]:
    remember_kopf_context()  # for controllers.periodic's event posting
    return {(namespace or "", name): Packed.of(_what_is_read(body))}


def _what_is_read(body: kopf.Body) -> dict[str, Any]:
    """The body without what no reconcile reads: the field managers, and kopf's own
    bookkeeping in status (progress, and a copy of the last handled spec)."""
    obj = dict(body)
    meta = dict(obj.get("metadata", {}))
    meta.pop("managedFields", None)
    obj["metadata"] = meta
    if isinstance(obj.get("status"), Mapping):
        obj["status"] = {k: v for k, v in obj["status"].items() if k != "kopf"}
    return obj


def _strip(body: kopf.Body) -> Packed:
    """What the index keeps of a child: the fields gpuserve applied (all a reconcile
    compares), not the whole object, packed."""
    owned = owned_part(body, FIELD_MANAGER)
    return Packed.of(owned if owned is not None else _what_is_read(body))


CONFIGMAPS = ("", "v1", "configmaps")
DEPLOYMENTS = ("apps", "v1", "deployments")
SERVICES = ("", "v1", "services")
PDBS = ("policy", "v1", "poddisruptionbudgets")
# LLM services' pools. Without the extension's CRDs kopf just does not watch them (it
# watches CRDs and starts once the kind appears); the reconcile then skips the pool.
POOLS = (inference_pool.API_GROUP, "v1", inference_pool.PLURAL)
# Every watch of these kinds is for gpuserve's children only: startup.configure asks the
# API server to send only those (a label selector), not every ConfigMap of the cluster.
CHILD_RESOURCES = (CONFIGMAPS, DEPLOYMENTS, SERVICES, PDBS, POOLS)


# One index per child kind (the reconcile reads each by name), filled by one function.
@kopf.index(*CONFIGMAPS, labels=MANAGED, id="child_configmaps")
@kopf.index(*DEPLOYMENTS, labels=MANAGED, id="child_deployments")
@kopf.index(*SERVICES, labels=MANAGED, id="child_services")
@kopf.index(*PDBS, labels=MANAGED, id="child_pdbs")
@kopf.index(*POOLS, labels=MANAGED, id="child_inferencepools")
async def child_index(
    namespace: str | None, name: str, labels: kopf.Labels, body: kopf.Body, **kw: Any
) -> Any:
    service = labels.get(LABEL_SERVICE)
    if not service:
        return None
    packed = _strip(body)
    # Drift: what gpuserve applied changed under it (someone edited, scaled or took over a
    # field). A change it did not apply there (the controller manager's status updates,
    # several per Deployment while it rolls out) needs no reconcile.
    state = state_of(kw)
    child = (str(body.get("kind")), namespace or "", name)
    digest = hash(packed.data)
    if state.child_digests.get(child, digest) != digest:
        state.queue.add((namespace or "", service))
    state.child_digests[child] = digest
    return {(namespace or "", service): packed}


CHILD_INDEXES = (
    "child_configmaps",
    "child_deployments",
    "child_services",
    "child_pdbs",
    "child_inferencepools",
)


def view_of(key: tuple[str, str], kw: dict[str, Any]) -> ClusterView:
    children: dict[tuple[str, str], dict[str, Any]] = {}
    for index_name in CHILD_INDEXES:
        for entry in kw[index_name].get(key, []):
            obj = entry.unpack()
            children[(obj["kind"], obj["metadata"]["name"])] = obj
    classes: dict[str, Any] = {}
    for name, store in kw["accelerator_classes"].items():
        for value in store:
            classes[name] = value
    cluster = service_plan.ClusterView(
        classes=classes,
        nodes=[n for store in kw["gpu_nodes"].values() for n in store],
        gpu_pods=[p for store in kw["gpu_pods"].values() for p in store],
        pods=list(kw["service_pods"].get(key, [])),
    )
    return ClusterView(cluster=cluster, children=children)


def reconcile(body: dict[str, Any], kw: dict[str, Any]) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return  # going away: its children follow through garbage collection
    key = (meta["namespace"], meta["name"])
    events: list[Event] = []
    try:
        converge(body, view_of(key, kw), state_of(kw), events)
    finally:  # what was done is announced, even if a later step failed (and is retried)
        post_events(body, events)


def reconcile_key(key: tuple[str, str], kw: dict[str, Any]) -> None:
    """The queue's work: the service as the index holds it now (gone: nothing to do)."""
    entry = next(iter(kw["services"].get(key, [])), None)
    if entry is not None:
        reconcile(entry.unpack(), kw)


def what_queues(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a service, when it moves, queues it for a reconcile.

    The uid: deleted and made anew under the same name. The generation: the spec moved.
    The autoscaler's results that change what is rendered, applied once the index holds
    them: the desired sizes, the pods to route around, and what a ScaledObject's
    thresholds are rendered for (the scale or the token mix, controllers.keda_calibrating).
    Other status writes are the operator's own results and queue nothing."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    return (
        str(meta.get("uid")),
        meta.get("generation"),
        status.get("desiredReplicas"),
        status.get("desiredWarmPool"),
        routed_around(status),
        (status.get("kedaCalibration") or {}).get("serviceScale"),
        (status.get("kedaTokenMix") or {}).get("requestsPerReplica"),
    )


# An event handler, not kopf's create/update/resume handlers: those keep their progress
# and a copy of the last handled spec on the object, two extra writes (and two more watch
# events) per new service. The spec's generation says the same: a service is queued when
# the operator sees it first (listing, creation) and whenever what_queues moves.
@kopf.on.event(*ISVC)
async def on_inference_service_event(
    namespace: str | None, name: str, body: kopf.Body, type: str | None, **kw: Any
) -> None:
    state = state_of(kw)
    key = (namespace or "", name)
    if type == "DELETED":
        state.last_queued.pop(key, None)
        return
    seen = what_queues(body)
    if state.last_queued.get(key) != seen:
        state.last_queued[key] = seen
        state.queue.add(key)


@kopf.on.event("", "v1", "pods", labels={LABEL_SERVICE: kopf.PRESENT})
async def on_pod_event(namespace: str | None, labels: kopf.Labels, **kw: Any) -> None:
    state_of(kw).queue.add((namespace or "", labels[LABEL_SERVICE]))


# A child deleted by someone else is made again (the indexer above catches the changes).
@kopf.on.event(*DEPLOYMENTS, labels=MANAGED, id="on_deployment_event")
@kopf.on.event(*CONFIGMAPS, labels=MANAGED, id="on_configmap_event")
@kopf.on.event(*SERVICES, labels=MANAGED, id="on_service_event")
@kopf.on.event(*PDBS, labels=MANAGED, id="on_pdb_event")
@kopf.on.event(*POOLS, labels=MANAGED, id="on_inferencepool_event")
async def on_child_event(
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    body: kopf.Body,
    type: str | None,
    **kw: Any,
) -> None:
    service = labels.get(LABEL_SERVICE)
    if service and type == "DELETED":
        state = state_of(kw)
        state.child_digests.pop((str(body.get("kind")), namespace or "", name), None)
        state.queue.add((namespace or "", service))
