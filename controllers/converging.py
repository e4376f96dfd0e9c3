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
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from controllers import kube, routing
from controllers.state import OperatorState, uid_of
from gpuserve.api.conditions import AUTOSCALER_CONDITIONS, ConditionWriter, without
from gpuserve.api.models import (
    API_VERSION,
    AcceleratorClassSpec,
    InferenceService,
    parse_inference_service,
)
from gpuserve.api.status import InferenceServiceStatus, PoolStatus
from gpuserve.autoscaling.keda_calibration import threshold_measured
from gpuserve.llm.keda_mix import mix_measured, recorded_mix
from gpuserve.placement import service_plan
from gpuserve.placement.service_plan import ServicePlan, plan_service
from gpuserve.resources import inference_pool
from gpuserve.resources.naming import (
    ANNOTATION_DEMOTED_AT,
    LABEL_ROLE,
    ROLE_ROUTED_AROUND,
    ROLE_SERVING,
    SERVICES_PLURAL,
)
from gpuserve.resources.rendering import (
    PoolPlan,
    RenderInput,
    config_hash,
    endpoint,
    pool_plans,
    render_children,
)
from gpuserve.resources.sameness import contains

log = logging.getLogger(__name__)
Obj = dict[str, Any]

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


# How long after a drain's end the reconcile that shrinks its Deployment runs: past the
# end for sure, whatever the rounding of the demotion stamp.
DRAIN_MARGIN_S = 0.25

_APPLIERS = ThreadPoolExecutor(max_workers=kube.APPLIER_THREADS, thread_name_prefix="apply")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ClusterView:
    """What the indexes say, for one reconcile: the cluster as placement sees it, and the
    service's children as gpuserve last applied them."""

    cluster: service_plan.ClusterView
    children: Mapping[tuple[str, str], Obj] = field(default_factory=dict)


Event = tuple[str, str, str]  # type, reason, message


@dataclass
class Outcome:
    status: InferenceServiceStatus
    events: list[Event] = field(default_factory=list)


def wanted_warm_pool(svc: InferenceService, status: InferenceServiceStatus) -> int:
    """Standby pods wanted: the spec's warmPool, or with warmPoolMode auto the
    autoscaler's last size for it (none before its first decision), within warmPool."""
    scaling = svc.spec.scaling
    if scaling.warm_pool_mode != "auto":
        return scaling.warm_pool
    ceiling = scaling.warm_pool or scaling.max_replicas
    return max(0, min(ceiling, status.desired_warm_pool or 0))


def routed_around(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The pods the autoscaler last named to route around, from a raw status."""
    entries = status.get("routedAround")
    if not isinstance(entries, list):
        return ()
    return tuple(str(e["pod"]) for e in entries if isinstance(e, dict) and "pod" in e)


def desired_serving(svc: InferenceService, status: InferenceServiceStatus) -> int:
    scaling = svc.spec.scaling
    wanted = (
        status.desired_replicas if status.desired_replicas is not None else scaling.min_replicas
    )
    return max(scaling.min_replicas, min(scaling.max_replicas, wanted))


def _routing_around(svc: InferenceService, status: InferenceServiceStatus) -> list[str]:
    """The pods the autoscaler names to route around, where it sizes the service: KEDA's
    replicas and advice (scaling.mode advisory) leave every pod in routing."""
    scaling = svc.spec.scaling
    if scaling.engine != "builtin" or scaling.mode == "advisory":
        return []
    return [r.pod for r in status.routed_around]


def _stalled(status: InferenceServiceStatus, *, gen: int | None, reason: str, message: str) -> None:
    conds = ConditionWriter(status.conditions, generation=gen, now=now_rfc3339())
    conds.set("Stalled", "True", reason, message)
    conds.set("Ready", "False", reason, message)
    conds.set("Reconciling", "False", reason, "waiting for the spec or the cluster to change")
    status.conditions = conds.conditions
    status.observed_generation = gen


def converge(
    body: Obj, view: ClusterView, state: OperatorState, events: list[Event] | None = None
) -> Outcome:
    """``events`` collects the announcements of what was done as it is done, so that the
    caller can post them even when a later step fails (a pod promoted before a refused
    status write was still promoted)."""
    with state.locks.get(uid_of(body)):
        return _converge(body, view, state, [] if events is None else events)


def _converge(body: Obj, view: ClusterView, state: OperatorState, events: list[Event]) -> Outcome:
    """Read the spec, plan, apply the plan, write status: each step below is one call."""
    meta = body["metadata"]
    gen = meta.get("generation")
    live_status = dict(body.get("status") or {})
    status = InferenceServiceStatus.model_validate(live_status)
    outcome = Outcome(status=status, events=events)
    try:
        svc = parse_inference_service(body)
    except ValidationError as exc:
        # Admission normally stops this; an object from an older schema can still get here.
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        _stalled(status, gen=gen, reason="InvalidSpec", message=f"{where}: {err['msg']}")
        _write_status(body, status, live_status)
        return outcome

    now = time.time()
    around = _routing_around(svc, status)
    if status.routed_around and not around:
        status.routed_around = []  # KEDA or advice: the autoscaler names none any more
    if svc.spec.scaling.engine != "builtin":
        status.conditions = without(status.conditions, AUTOSCALER_CONDITIONS)
    if not threshold_measured(svc.spec):
        status.keda_calibration = None  # measured for a threshold there is no more
    if not mix_measured(svc.spec):
        status.keda_token_mix = None
    plan = plan_service(
        svc.spec,
        owner=f"{meta.get('namespace', '')}/{meta['name']}",
        cluster=view.cluster,
        desired=desired_serving(svc, status),
        # KEDA sizes the preferred class's Deployment; every ready pod serves.
        every_ready_pod_serves=svc.spec.scaling.engine == "keda",
        now=now,
        warm_pool=wanted_warm_pool(svc, status),
        routed_around=around,
    )
    if not plan.usable:
        message = "; ".join(i.message for i in plan.issues) or "no AcceleratorClass is usable"
        reason = plan.issues[0].reason if plan.issues else "NoUsableAcceleratorClass"
        _stalled(status, gen=gen, reason=reason, message=message)
        _write_status(body, status, live_status)
        return outcome
    if plan.drain_ends is not None:
        # A drained pod's Deployment shrinks when the drain ends; no watch event says so,
        # and waiting for the resync kept it (counted warm) up to 30 s longer.
        key = (meta.get("namespace") or "", meta["name"])
        state.queue.add_later(key, plan.drain_ends - now + DRAIN_MARGIN_S)

    children, unserved = _servable(_render(svc, plan, view, state, status))
    problem = _apply(meta, plan, children, view, state, outcome)
    transition: Event | None = None
    if problem is not None:
        _stalled(status, gen=gen, reason=problem[0], message=problem[1])
    else:
        _fill_status(status, svc=svc, view=view, plan=plan, gen=gen)
        was = routing.pool_condition_status(status.conditions)
        status.conditions = routing.set_pool_condition(
            status.conditions, svc, unserved, generation=gen, now=now_rfc3339()
        )
        transition = routing.pool_event(was, status.conditions)
    _write_status(body, status, live_status)
    # It announces a change of condition, so only once the change is recorded: a refused
    # (stale) write leaves the old condition, and the retry would announce it again.
    if transition is not None:
        outcome.events.append(transition)
    return outcome


def _role_event(pod: str, was: str, role: str) -> tuple[str, str]:
    """The event of a pod's change of role: its reason and message."""
    if role == ROLE_ROUTED_AROUND:
        return "RoutedAround", (
            f"pod {pod} leaves the Service until it clears its queue (status.routedAround)"
        )
    if was == ROLE_ROUTED_AROUND and role == ROLE_SERVING:
        return "Rejoined", f"pod {pod} is back in the Service: its queue is cleared"
    verb = "Promoted" if role == ROLE_SERVING else "Demoted"
    return verb, f"pod {pod} is now {role}"


def _servable(children: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """The children to apply, and the optional ones left out because the API server does
    not serve their kind (an InferencePool without the extension's CRDs): the service
    works without them, so it is not stalled; its status says what was skipped."""
    kept: list[Obj] = []
    skipped: list[Obj] = []
    for child in children:
        optional = child["kind"] in routing.OPTIONAL_KINDS
        if optional and not kube.serves(child["apiVersion"], child["kind"]):
            skipped.append(child)
        else:
            kept.append(child)
    return kept, skipped


def _render(
    svc: InferenceService,
    plan: ServicePlan,
    view: ClusterView,
    state: OperatorState,
    status: InferenceServiceStatus,
) -> list[Obj]:
    assert plan.pools is not None
    pools = pool_plans(plan.pools, plan.order)
    if svc.spec.scaling.engine == "keda":
        pools = {c: PoolPlan(replicas=0) for c in plan.order}
    return render_children(
        RenderInput(
            service=svc,
            classes=_usable_classes(plan, view),
            pools=pools,
            extra_pod_labels=state.settings.extra_pod_labels,
            prometheus_url=state.settings.keda_prometheus_url,
            scrape_interval=state.settings.scrape_interval,
            keda_service_scale=(
                status.keda_calibration.service_scale if status.keda_calibration else 1.0
            ),
            keda_token_mix=recorded_mix(status.keda_token_mix),
        )
    )


def _usable_classes(plan: ServicePlan, view: ClusterView) -> dict[str, AcceleratorClassSpec]:
    """One pool per usable class: a listed class that cannot run this spec gets none (and
    the model files follow the classes that have pools)."""
    classes = view.cluster.valid_classes()
    return {c: classes[c] for c in plan.order if c in classes}


def _apply(
    meta: Mapping[str, Any],
    plan: ServicePlan,
    children: list[Obj],
    view: ClusterView,
    state: OperatorState,
    outcome: Outcome,
) -> tuple[str, str] | None:
    """Role labels, then children, then retired pools. Returns (reason, message) when the
    API server refuses what the spec renders to."""
    namespace = meta["namespace"]
    recent = state.writes.get(uid_of({"metadata": meta}))
    # Role labels before the Deployments: demoted pods get their low deletion cost before
    # a Deployment shrinks, so the ReplicaSet deletes standby pods rather than serving ones.
    pods = {p.name: p for p in view.cluster.pods}
    # Promotions first: a client reading the serving set between two patches must never
    # find it empty (demote-then-promote left a moment with no endpoint under load).
    for change in sorted(plan.roles, key=lambda c: c.role != ROLE_SERVING):
        was = pods.get(change.pod)
        # kopf's index shows our own patch a moment later; patching (and announcing) the
        # same change again meanwhile would repeat the event on every trigger.
        # (A role change exists only while the index shows the pod otherwise.)
        key, wanted = ("Pod", change.pod), (change.role, change.deletion_cost)
        if recent.in_flight(key, wanted):
            continue
        annotations = {"controller.kubernetes.io/pod-deletion-cost": change.deletion_cost}
        if change.demoted_at is not None:
            annotations[ANNOTATION_DEMOTED_AT] = change.demoted_at
        patched = kube.patch_pod_metadata(
            namespace, change.pod, labels={LABEL_ROLE: change.role}, annotations=annotations
        )
        recent.record(key, wanted)
        if patched and was is not None and was.ready and was.role != change.role:
            verb, message = _role_event(change.pod, was.role, change.role)
            # "<ns>/<name>: promoted pod <pod>": tests read the transitions in this form.
            log.info("%s/%s: %s pod %s", namespace, meta["name"], verb.lower(), change.pod)
            outcome.events.append(("Normal", verb, message))

    # The children index is fed by watches: a child it doesn't hold is (about to be)
    # missing, so it is applied without a GET first. Children are independent objects
    # (pods wait for their ConfigMap on their own), so they are applied concurrently.
    pending: list[tuple[Obj, Obj | None]] = []
    for child in children:
        key = (child["kind"], child["metadata"]["name"])
        live = view.children.get(key)
        if live is not None and contains(live, child):
            recent.forget(key)  # the index shows it: nothing to write, nothing in flight
        elif not recent.in_flight(key, _digest(child)):
            pending.append((child, live))
    if any(live is None for _, live in pending) and not _still_exists(meta):
        # A service deleted while a watch was down can linger in kopf's index (a relist
        # does not drop it); recreating its missing children would feed the garbage
        # collector forever. Creating a child is rare, so one GET guards it.
        return None
    # Kinds without an index (ScaledObject) are read before applying.
    results = _APPLIERS.map(
        lambda pair: kube.apply_if_changed(
            pair[0], live=pair[1], fetch=pair[0]["kind"] not in kube.INDEXED_KINDS
        ),
        pending,
    )
    try:
        applied = 0
        for (child, _), written in zip(pending, results, strict=True):
            if written:
                applied += 1
                key = (child["kind"], child["metadata"]["name"])
                recent.record(key, _digest(child))
    except kube.KindNotServed as exc:
        if exc.kind in routing.OPTIONAL_KINDS:
            raise  # its CRD went away meanwhile; the retry skips it (kube.serves)
        return "EngineUnavailable", str(exc)
    except ApiException as exc:
        if exc.status not in (400, 422):
            raise  # the API server or etcd is away: kopf retries
        # The API server refuses what this spec renders to (something admission let
        # through): say so and wait for a new spec instead of retrying forever.
        return "InvalidChild", _api_message(exc)
    rendered = {(c["kind"], c["metadata"]["name"]) for c in children}
    # Children the spec no longer renders: the pool Deployment of a class no longer listed
    # or usable, the InferencePool of a service that is no longer an LLM service.
    retire: dict[str, Callable[[str], bool]] = {
        "Deployment": lambda name: kube.delete_deployment(namespace, name),
        inference_pool.KIND: lambda name: kube.delete(
            inference_pool.API_VERSION, inference_pool.KIND, name, namespace
        ),
    }
    for kind, name in view.children:
        if kind in retire and (kind, name) not in rendered and retire[kind](name):
            outcome.events.append(("Normal", "Retired", f"deleted {kind} {name}"))
    if applied:
        outcome.events.append(("Normal", "Applied", f"applied {applied} child object(s)"))
    return None


def _digest(obj: Obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


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
    plan: ServicePlan,
    gen: int | None,
) -> None:
    desired = plan.desired
    pools: list[PoolStatus] = []
    serving_total = warm_total = 0
    for c in plan.order:
        mine = view.cluster.live_pods(c)
        serving, warm = plan.serving_and_warm(mine)
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
    status.config_hash = config_hash(svc.spec, _usable_classes(plan, view))
    conds = ConditionWriter(status.conditions, generation=gen, now=now_rfc3339())
    wanted_warm = wanted_warm_pool(svc, status)
    problems = plan.pools.problems if plan.pools is not None else []
    unplaced = plan.unplaced
    skipped = [i.message for i in plan.issues]
    if unplaced:
        wants = f"wants {desired} serving and {wanted_warm} warm: " + "; ".join(problems)
        conds.set("Schedulable", "False", "InsufficientCapacity", wants)
    else:
        fallback = plan.fallback_note()
        placed = (
            f"all {desired} serving and {wanted_warm} warm pods placed"
            + (f"; {fallback}" if fallback else "")
            + (f"; skipped: {'; '.join(skipped)}" if skipped else "")
        )
        conds.set("Schedulable", "True", "CapacityAvailable", placed)
    starved = unplaced > 0 and serving_total + sum(p.pending for p in pools) == 0
    if starved:
        conds.set("Stalled", "True", "InsufficientCapacity", "; ".join(problems))
    else:
        conds.set("Stalled", "False", "Progressing", "; ".join(skipped) or "no blocking problem")
    counts = f"{serving_total}/{desired} serving, {warm_total}/{wanted_warm} warm"
    ready = serving_total >= max(1, min(desired, svc.spec.scaling.min_replicas)) or desired == 0
    if ready:
        conds.set("Ready", "True", "ServingPodsReady", counts)
    else:
        conds.set("Ready", "False", "WaitingForPods", counts)
    settled = serving_total == desired and warm_total >= wanted_warm and not unplaced
    if settled:
        progress = "Settled"
    elif starved:
        progress = "Stalled"
    elif unplaced:
        progress = "WaitingForCapacity"
        counts += f"; {unplaced} pod(s) wait for capacity"
    else:
        progress = "ScalingPods"
    conds.set("Reconciling", "False" if settled or starved else "True", progress, counts)
    status.conditions = conds.conditions
    status.observed_generation = gen
    status.desired_replicas = desired


def _write_status(body: Obj, status: InferenceServiceStatus, live_status: Obj) -> None:
    meta = body["metadata"]
    rendered: Obj = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    # A field the reconcile cleared (None) goes as null, which a merge patch removes.
    for f in InferenceServiceStatus.model_fields.values():
        if f.alias in live_status and f.alias not in rendered:
            rendered[f.alias] = None
    kube.patch_status(
        plural=SERVICES_PLURAL,
        name=meta["name"],
        namespace=meta.get("namespace"),
        status=rendered,
        live_status=live_status,
        resource_version=meta.get("resourceVersion"),
    )


def as_body(obj: Obj) -> kopf.Body:
    """kopf's posting takes any mapping with metadata; its annotations say Body."""
    return cast(kopf.Body, obj)


def post_events(body: Obj, events: list[Event]) -> None:
    for type_, reason, message in events:
        kopf.event(as_body(body), type=type_, reason=reason, message=message)
