"""Bring one InferenceService's children and status in line with its spec.

Called from every trigger (the service changed, one of its pods or children changed, the
periodic resync); reads cluster state only from kopf's indexes, writes only what differs. One lock
per service keeps two triggers from promoting the same pod twice.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controllers import kube
from gpuserve.api.conditions import set_condition
from gpuserve.api.models import (
    API_VERSION,
    AcceleratorClassSpec,
    InferenceService,
    parse_inference_service,
)
from gpuserve.api.status import Condition, InferenceServiceStatus, PoolStatus
from gpuserve.placement.capacity import NodeInfo, PodRequest, class_capacity
from gpuserve.placement.planning import (
    ClassCapacity,
    ClassIssue,
    PoolNow,
    plan_pools,
    usable_classes,
)
from gpuserve.placement.roles import PodState, assign_roles
from gpuserve.resources.naming import LABEL_ROLE, ROLE_SERVING
from gpuserve.resources.rendering import (
    PoolPlan,
    RenderInput,
    config_hash,
    endpoint,
    pool_plans,
    render_children,
)

log = logging.getLogger(__name__)
Obj = dict[str, Any]
PLURAL = "inferenceservices"

# kopf.event and kopf.warn need kopf's posting context (its settings and event queue),
# which kopf sets only while it processes an object. Work started outside it (the loops
# in controllers.periodic) runs in a copy of the last such context seen.
_kopf_context: contextvars.Context | None = None


def remember_kopf_context() -> None:
    global _kopf_context
    _kopf_context = contextvars.copy_context()


def in_kopf_context(fn: Any, *args: Any) -> Any:
    context = _kopf_context.copy() if _kopf_context is not None else contextvars.copy_context()
    return context.run(fn, *args)


_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_APPLIERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="apply")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ClusterView:
    """What the indexes say about the cluster, for one reconcile."""

    classes: Mapping[str, AcceleratorClassSpec | str]
    nodes: list[NodeInfo]
    gpu_pods: list[PodRequest]
    pods: list[PodState]
    children: Mapping[tuple[str, str], Obj] = field(default_factory=dict)
    extra_pod_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus_url: str = "http://prometheus.monitoring:9090"


@dataclass
class Outcome:
    status: InferenceServiceStatus
    events: list[tuple[str, str, str]] = field(default_factory=list)  # type, reason, message


def desired_serving(svc: InferenceService, status: InferenceServiceStatus) -> int:
    scaling = svc.spec.scaling
    wanted = (
        status.desired_replicas if status.desired_replicas is not None else scaling.min_replicas
    )
    return max(scaling.min_replicas, min(scaling.max_replicas, wanted))


def _stalled(status: InferenceServiceStatus, *, gen: int | None, reason: str, message: str) -> None:
    now = now_rfc3339()
    conds = status.conditions
    conds = set_condition(
        conds,
        type_="Stalled",
        status="True",
        reason=reason,
        message=message,
        generation=gen,
        now=now,
    )
    conds = set_condition(
        conds,
        type_="Ready",
        status="False",
        reason=reason,
        message=message,
        generation=gen,
        now=now,
    )
    conds = set_condition(
        conds,
        type_="Reconciling",
        status="False",
        reason=reason,
        message="waiting for the spec or the cluster to change",
        generation=gen,
        now=now,
    )
    status.conditions = conds
    status.observed_generation = gen


def converge(body: Obj, view: ClusterView) -> Outcome:
    meta = body["metadata"]
    key = (meta.get("namespace", ""), meta["name"])
    with _locks[key]:
        return _converge(body, view)


def _converge(body: Obj, view: ClusterView) -> Outcome:
    meta = body["metadata"]
    gen = meta.get("generation")
    live_status = dict(body.get("status") or {})
    status = InferenceServiceStatus.model_validate(live_status)
    outcome = Outcome(status=status)
    try:
        svc = parse_inference_service(body)
    except ValidationError as exc:
        # Admission normally stops this; an object from an older schema can still get here.
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        _stalled(status, gen=gen, reason="InvalidSpec", message=f"{where}: {err['msg']}")
        _write_status(body, status, live_status)
        return outcome

    classes = {k: v for k, v in view.classes.items() if isinstance(v, AcceleratorClassSpec)}
    order, issues = usable_classes(svc.spec, classes)
    for name, value in view.classes.items():
        if isinstance(value, str) and name in svc.spec.accelerators.classes:
            issues = [i for i in issues if i.class_name != name]
            issues.append(ClassIssue(name, "InvalidAcceleratorClass", value))
    if not order:
        message = "; ".join(i.message for i in issues) or "no AcceleratorClass is usable"
        reason = issues[0].reason if issues else "NoUsableAcceleratorClass"
        _stalled(status, gen=gen, reason=reason, message=message)
        _write_status(body, status, live_status)
        return outcome

    per_pod = svc.spec.accelerators.gpus_per_pod
    owner = f"{meta.get('namespace', '')}/{meta['name']}"
    capacity: dict[str, ClassCapacity] = {}
    serving_now: dict[str, PoolNow] = {}
    standby_now: dict[str, PoolNow] = {}
    for c in order:
        cap = class_capacity(
            classes[c], nodes=view.nodes, pods=view.gpu_pods, per_pod=per_pod, owner=owner
        )
        mine = [p for p in view.pods if p.accelerator_class == c and not p.deleting]
        stuck = [p for p in mine if p.unschedulable]
        # The scheduler has the last word: a class it can't fill has no room. A stuck
        # standby pod only says nothing is free: serving pods may still preempt.
        if any(not p.standby for p in stuck):
            cap = ClassCapacity(free=0, total=cap.total)
        elif stuck:
            cap = ClassCapacity(free=0, total=cap.total, preemptible=cap.preemptible)
        capacity[c] = cap
        for now, pool in (
            (serving_now, [p for p in mine if not p.standby]),
            (standby_now, [p for p in mine if p.standby]),
        ):
            now[c] = PoolNow(
                scheduled=sum(1 for p in pool if p.node),
                pending=sum(1 for p in pool if not p.node),
            )
    desired = desired_serving(svc, status)
    keda = svc.spec.scaling.engine == "keda"
    if keda:  # KEDA sizes the preferred class's Deployment; every ready pod serves.
        desired = sum(1 for p in view.pods if p.ready and not p.deleting)
    # Roles are decided first: the standby pods serving after them keep their place in
    # the standby Deployments (warm pool + promoted) until serving-priority pods relieve them.
    changes = assign_roles(view.pods, desired_serving=desired, order=order)
    role_after = {c.pod: c.role for c in changes}
    standby_serving: dict[str, int] = {}
    for p in view.pods:
        if p.standby and not p.deleting and role_after.get(p.name, p.role) == ROLE_SERVING:
            standby_serving[p.accelerator_class] = standby_serving.get(p.accelerator_class, 0) + 1
    plan = plan_pools(
        desired=desired,
        warm_pool=svc.spec.scaling.warm_pool,
        order=order,
        serving_now=serving_now,
        standby_now=standby_now,
        standby_serving=standby_serving,
        capacity=capacity,
        gpus_per_pod=per_pod,
    )
    pools = pool_plans(plan, order)
    if keda:
        pools = {c: PoolPlan(replicas=0) for c in order}
    # One pool per usable class: a listed class that cannot run this spec gets none.
    children = render_children(
        RenderInput(
            service=svc,
            classes={c: classes[c] for c in order},
            pools=pools,
            extra_pod_labels=view.extra_pod_labels,
            prometheus_url=view.prometheus_url,
        )
    )
    # Role labels before the Deployments: demoted pods get their low deletion cost before
    # a Deployment shrinks, so the ReplicaSet deletes standby pods rather than serving ones.
    for change in changes:
        patched = kube.patch_pod_metadata(
            meta["namespace"],
            change.pod,
            labels={LABEL_ROLE: change.role},
            annotations={"controller.kubernetes.io/pod-deletion-cost": change.deletion_cost},
        )
        was = next((p for p in view.pods if p.name == change.pod), None)
        if patched and was is not None and was.ready and was.role != change.role:
            verb = "Promoted" if change.role == ROLE_SERVING else "Demoted"
            outcome.events.append(("Normal", verb, f"pod {change.pod} is now {change.role}"))

    # The children index is fed by watches: a child it doesn't hold is (about to be)
    # missing, so it is applied without a GET first. Children are independent objects
    # (pods wait for their ConfigMap on their own), so they are applied concurrently.
    pending = [
        (child, view.children.get((child["kind"], child["metadata"]["name"]))) for child in children
    ]
    if any(live is None for _, live in pending) and not _still_exists(meta):
        # A service deleted while a watch was down can linger in kopf's index (a relist
        # does not drop it); recreating its missing children would feed the garbage
        # collector forever. Creating a child is rare, so one GET guards it.
        return outcome
    # Kinds without an index (ScaledObject) are read before applying.
    results = _APPLIERS.map(
        lambda pair: kube.apply_if_changed(
            pair[0], live=pair[1], fetch=pair[0]["kind"] not in kube.INDEXED_KINDS
        ),
        pending,
    )
    try:
        applied = sum(1 for written in results if written)
    except kube.KindNotServed as exc:
        _stalled(status, gen=gen, reason="EngineUnavailable", message=str(exc))
        _write_status(body, status, live_status)
        return outcome
    except ApiException as exc:
        if exc.status not in (400, 422):
            raise  # the API server or etcd is away: kopf retries
        # The API server refuses what this spec renders to (something admission let
        # through): say so and wait for a new spec instead of retrying forever.
        _stalled(status, gen=gen, reason="InvalidChild", message=_api_message(exc))
        _write_status(body, status, live_status)
        return outcome
    rendered = {(c["kind"], c["metadata"]["name"]) for c in children}
    stale = [
        name
        for (kind, name) in view.children
        if kind == "Deployment" and (kind, name) not in rendered
    ]
    for name in stale:  # the pool of a class no longer listed or no longer usable
        if kube.delete_deployment(meta["namespace"], name):
            outcome.events.append(("Normal", "Retired", f"deleted Deployment {name}"))

    _fill_status(
        status,
        svc=svc,
        view=view,
        order=order,
        plan_unplaced=plan.unplaced,
        problems=plan.problems,
        changes=role_after,
        desired=desired,
        gen=gen,
        issues=[i.message for i in issues],
    )
    if applied:
        outcome.events.append(("Normal", "Applied", f"applied {applied} child object(s)"))
    _write_status(body, status, live_status)
    return outcome


def _still_exists(meta: Mapping[str, Any]) -> bool:
    live = kube.get(API_VERSION, "InferenceService", meta["name"], meta.get("namespace"))
    return live is not None and live["metadata"].get("uid") == meta.get("uid")


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)[:1000]
    except ValueError:
        return str(exc.reason)


def _fill_status(
    status: InferenceServiceStatus,
    *,
    svc: InferenceService,
    view: ClusterView,
    order: list[str],
    plan_unplaced: int,
    problems: list[str],
    changes: Mapping[str, str],
    desired: int,
    gen: int | None,
    issues: list[str],
) -> None:
    now = now_rfc3339()
    pools: list[PoolStatus] = []
    serving_total = warm_total = 0
    for c in order:
        mine = [p for p in view.pods if p.accelerator_class == c and not p.deleting]
        roles = {p.name: changes.get(p.name, p.role) for p in mine}
        serving = sum(1 for p in mine if p.ready and roles[p.name] == ROLE_SERVING)
        warm = sum(1 for p in mine if p.ready and roles[p.name] != ROLE_SERVING)
        serving_total += serving
        warm_total += warm
        pools.append(
            PoolStatus(
                accelerator_class=c,
                replicas=len(mine),
                ready=sum(1 for p in mine if p.ready),
                serving=serving,
                warm=warm,
                pending=sum(1 for p in mine if not p.node),
            )
        )
    status.pools = pools
    status.replicas = serving_total
    status.warm_replicas = warm_total
    status.accelerators = ",".join(p.accelerator_class for p in pools if p.serving) or ""
    status.endpoint = endpoint(svc)
    status.config_hash = config_hash(svc.spec)
    conds: list[Condition] = status.conditions
    wanted_warm = svc.spec.scaling.warm_pool
    if plan_unplaced:
        msg = "; ".join(problems)
        conds = set_condition(
            conds,
            type_="Schedulable",
            status="False",
            reason="InsufficientCapacity",
            message=msg,
            generation=gen,
            now=now,
        )
    else:
        conds = set_condition(
            conds,
            type_="Schedulable",
            status="True",
            reason="CapacityAvailable",
            message="every replica has a GPU to go to",
            generation=gen,
            now=now,
        )
    starved = plan_unplaced > 0 and serving_total + sum(p.pending for p in pools) == 0
    if starved:
        conds = set_condition(
            conds,
            type_="Stalled",
            status="True",
            reason="InsufficientCapacity",
            message="; ".join(problems),
            generation=gen,
            now=now,
        )
    else:
        note = "; ".join(issues)
        conds = set_condition(
            conds,
            type_="Stalled",
            status="False",
            reason="Progressing",
            message=note or "no blocking problem",
            generation=gen,
            now=now,
        )
    ready = serving_total >= max(1, min(desired, svc.spec.scaling.min_replicas)) or desired == 0
    conds = set_condition(
        conds,
        type_="Ready",
        status="True" if ready else "False",
        reason="ServingPodsReady" if ready else "WaitingForPods",
        message=f"{serving_total}/{desired} serving, {warm_total}/{wanted_warm} warm",
        generation=gen,
        now=now,
    )
    settled = serving_total == desired and warm_total >= wanted_warm and not plan_unplaced
    conds = set_condition(
        conds,
        type_="Reconciling",
        status="False" if settled or starved else "True",
        reason="Settled" if settled else ("Stalled" if starved else "ScalingPods"),
        message=f"{serving_total}/{desired} serving, {warm_total}/{wanted_warm} warm",
        generation=gen,
        now=now,
    )
    status.conditions = conds
    status.observed_generation = gen
    status.desired_replicas = desired


def _write_status(body: Obj, status: InferenceServiceStatus, live_status: Obj) -> None:
    meta = body["metadata"]
    rendered = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    kube.patch_status(
        plural=PLURAL,
        name=meta["name"],
        namespace=meta.get("namespace"),
        status=rendered,
        live_status=live_status,
    )


def post_events(body: Obj, outcome: Outcome) -> None:
    for type_, reason, message in outcome.events:
        kopf.event(body, type=type_, reason=reason, message=message)
