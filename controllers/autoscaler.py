"""The built-in autoscaler: Prometheus -> gpuserve.autoscaling.decide -> status -> converge.

Every evaluation reads the service's Triton signals, asks the (pure) policy, and records
the decision. Status is written only when the decision changes (size, mode or reason), so a
steady service costs no writes. In advisory mode the decision is reported, not applied.
With `scaling.engine: keda` this loop stays out: KEDA owns the replica count.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict, deque
from typing import Any

import kopf
from pydantic import ValidationError

from controllers import kube
from controllers.converging import PLURAL, desired_serving, now_rfc3339
from controllers.inferenceservice import reconcile, view_of
from controllers.prometheus_source import PrometheusSource, Reading
from gpuserve.api.conditions import set_condition
from gpuserve.api.models import AcceleratorClassSpec, InferenceService, parse_inference_service
from gpuserve.api.status import InferenceServiceStatus, ScalingDecisionStatus
from gpuserve.autoscaling import (
    ClassPool,
    Decision,
    MetricHistory,
    MetricSample,
    PolicyMemory,
    PoolState,
    decide,
)
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.placement.capacity import class_capacity
from gpuserve.placement.planning import usable_classes

log = logging.getLogger(__name__)

PROMETHEUS_ENV = "GPUSERVE_PROMETHEUS_URL"
INTERVAL_ENV = "GPUSERVE_AUTOSCALE_INTERVAL"
EVAL_INTERVAL = float(os.environ.get(INTERVAL_ENV, "5"))
WARN_EVERY_S = 300.0
RATE_WINDOW_S = 15.0  # the rate() window of the Prometheus queries
MAX_DECISIONS = 5

_histories: defaultdict[tuple[str, str], deque[MetricSample]] = defaultdict(
    lambda: deque(maxlen=512)
)
_memories: dict[tuple[str, str], PolicyMemory] = {}
_last_warning: dict[tuple[str, str], float] = {}
_source_lock = threading.Lock()
_source: PrometheusSource | None = None


def source() -> PrometheusSource | None:
    global _source
    url = os.environ.get(PROMETHEUS_ENV, "")
    if not url:
        return None
    with _source_lock:
        if _source is None or _source.url != url:
            _source = PrometheusSource(url, window=f"{RATE_WINDOW_S:.0f}s")
        return _source


def pool_state(
    svc: InferenceService,
    classes: dict[str, AcceleratorClassSpec],
    view: Any,
    now: float,
    serving_target: int | None = None,
) -> PoolState:
    """serving_target: the serving pods converge is aiming for. Pods still starting count
    as future capacity only up to it; the rest are the warm pool coming up, and counting
    them would grow the target on every evaluation."""
    order, _ = usable_classes(svc.spec, classes)
    per_pod = svc.spec.accelerators.gpus_per_pod
    live = [p for p in view.pods if p.accelerator_class in order and not p.deleting]
    budget = None
    if serving_target is not None:
        serving = sum(1 for p in live if p.ready and p.role == "serving")
        budget = max(0, serving_target - serving)
    pools = []
    for c in order:
        accel = classes[c]
        mine = [p for p in view.pods if p.accelerator_class == c and not p.deleting]
        cap = class_capacity(accel, nodes=view.nodes, pods=view.gpu_pods, per_pod=per_pod)
        ages = sorted((max(0.0, now - p.created) for p in mine if not p.ready), reverse=True)
        if budget is not None:  # preferred classes' oldest pods first
            ages = ages[:budget]
            budget -= len(ages)
        pools.append(
            ClassPool(
                name=c,
                speed=accel.relative_speed,
                serving_ready=sum(1 for p in mine if p.ready and p.role == "serving"),
                warm_ready=sum(1 for p in mine if p.ready and p.role != "serving"),
                starting=tuple(ages),
                free_capacity=cap.free // per_pod,
                cost_per_hour=accel.cost_per_hour,
            )
        )
    return PoolState(classes=tuple(pools))


def _history(key: tuple[str, str], reading: Reading, window: float) -> MetricHistory:
    samples = _histories[key]
    samples.append(reading.sample)
    while samples and samples[0].at < reading.sample.at - window:
        samples.popleft()
    return MetricHistory.of(samples)


def _warn(body: dict[str, Any], key: tuple[str, str], message: str) -> None:
    """Bounded-rate warning: one event per service per WARN_EVERY_S."""
    now = time.monotonic()
    if now - _last_warning.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
        _last_warning[key] = now
        kopf.warn(body, reason="MetricsUnavailable", message=message)


def evaluate(body: dict[str, Any], kw: dict[str, Any]) -> Decision | None:
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    try:
        svc = parse_inference_service(body)
    except ValidationError:
        return None  # converge reports it as Stalled
    if svc.spec.scaling.engine != "builtin":
        return None
    view = view_of(key, kw)
    classes = {k: v for k, v in view.classes.items() if isinstance(v, AcceleratorClassSpec)}
    live = dict(body.get("status") or {})
    status = InferenceServiceStatus.model_validate(live)
    gen = meta.get("generation")
    now = time.time()
    src = source()
    if src is None:
        reading = Reading(
            MetricSample(at=now), error=f"no Prometheus configured (${PROMETHEUS_ENV})"
        )
    else:
        reading = src.read(namespace=key[0], service=key[1], now=now)
    config = policy_config_from_spec(svc.spec, classes, rate_window=RATE_WINDOW_S)
    history = _history(key, reading, 2 * config.stable_window)
    memory = _memories.get(key) or PolicyMemory.from_status(status.autoscaler_memory)
    decision = decide(
        config=config,
        history=history,
        pools=pool_state(svc, classes, view, now, desired_serving(svc, status)),
        now=now,
        memory=memory,
    )
    _memories[key] = decision.memory
    stamp = now_rfc3339()
    if reading.error or decision.mode == "hold":
        why = reading.error or decision.reason
        status.conditions = set_condition(
            status.conditions,
            type_="MetricsAvailable",
            status="False",
            reason="PrometheusUnreachable" if reading.error else "MetricsMissing",
            message=why,
            generation=gen,
            now=stamp,
        )
        _warn(body, key, why)
    else:
        status.conditions = set_condition(
            status.conditions,
            type_="MetricsAvailable",
            status="True",
            reason="MetricsFresh",
            message="Triton metrics are fresh",
            generation=gen,
            now=stamp,
        )
    p95 = reading.sample.get("p95_latency")
    advisory = svc.spec.scaling.mode == "advisory"
    previous = status.last_decision
    changed = (
        previous is None
        or previous.desired_replicas != decision.desired_replicas
        or previous.reason.split(":")[0] != decision.reason.split(":")[0]
    )
    if changed:
        record = ScalingDecisionStatus(
            time=stamp,
            desired_replicas=decision.desired_replicas,
            reason=decision.reason,
            signals={k: round(v, 6) for k, v in decision.signals.items()},
            applied=not advisory,
        )
        status.last_decision = record
        if previous is None or previous.desired_replicas != decision.desired_replicas:
            status.decisions = [*status.decisions, record][-MAX_DECISIONS:]
            status.autoscaler_memory = decision.memory.to_status()
            verb = (
                "ScaledUp" if decision.delta > 0 else "ScaledDown" if decision.delta < 0 else "Held"
            )
            kopf.event(
                body,
                type="Normal",
                reason=("Advised" + verb) if advisory else verb,
                message=f"{decision.current_replicas} -> {decision.desired_replicas}: "
                f"{decision.reason}",
            )
        if not advisory:
            status.desired_replicas = decision.desired_replicas
    if p95 is not None and (status.p95_ms is None or abs(status.p95_ms - p95 * 1e3) >= 1.0):
        status.p95_ms = round(p95 * 1e3, 1)
    rendered = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    if kube.patch_status(
        plural=PLURAL, name=key[1], namespace=key[0], status=rendered, live_status=live
    ):
        body = {**body, "status": rendered}
        reconcile(body, kw)
    return decision


def autoscale(body: dict[str, Any], kw: dict[str, Any]) -> None:
    """One evaluation; controllers.periodic calls it every EVAL_INTERVAL seconds."""
    evaluate(body, kw)
