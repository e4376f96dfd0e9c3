"""The built-in autoscaler: Prometheus -> gpuserve.autoscaling.decide -> status -> converge.

Every evaluation reads the service's Triton signals, asks the (pure) policy, and records
the decision. Status is written only when the decision changes (size, mode or reason), so a
steady service costs no writes. In advisory mode the decision is reported, not applied.
With `scaling.engine: keda` KEDA owns the replica count: this loop only measures the
compute time the ScaledObject's threshold is sized by (controllers.keda_calibrating).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import kopf
from pydantic import ValidationError

from controllers import keda_calibrating, kube
from controllers.converging import (
    ClusterView,
    as_body,
    desired_serving,
    now_rfc3339,
    wanted_warm_pool,
)
from controllers.indexes import epoch
from controllers.inferenceservice import view_of
from controllers.prometheus_source import Reading, Readings, VllmReadings, service_windows
from controllers.settings import PROMETHEUS_URL
from controllers.state import OperatorState, ScalingMemory, state_of, uid_of
from gpuserve.api.conditions import ConditionWriter
from gpuserve.api.models import (
    LLM_FORMATS,
    InferenceService,
    InferenceServiceSpec,
    parse_inference_service,
)
from gpuserve.api.status import InferenceServiceStatus, RoutedAroundStatus, ScalingDecisionStatus
from gpuserve.autoscaling import Decision, MetricHistory, MetricSample, PolicyMemory, decide
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.autoscaling.keda_calibration import threshold_measured
from gpuserve.autoscaling.limits import limited_condition
from gpuserve.autoscaling.outruns import covered_condition
from gpuserve.autoscaling.pools import PoolState
from gpuserve.autoscaling.shedding import PodQueue
from gpuserve.llm.calibrating import decide_priced
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.keda_mix import mix_measured
from gpuserve.placement.service_plan import (
    ServicePlan,
    first_pods_unseen,
    plan_service,
    pool_state,
)
from gpuserve.resources.naming import SERVICES_PLURAL, serves

log = logging.getLogger(__name__)
MAX_DECISIONS = 5
# How long a new object's first decision waits for the pods its spec's lower bound asked
# for: the Deployment controller makes them within seconds; a quota or admission webhook
# that refuses them should not also keep the autoscaler silent.
FIRST_PODS_GRACE_S = 60.0


def _history(memory: ScalingMemory, reading: Reading, window: float) -> MetricHistory:
    samples = memory.samples
    samples.append(reading.sample)
    while samples and samples[0].at < reading.sample.at - window:
        samples.popleft()
    return MetricHistory.of(samples)


def _warn(body: dict[str, Any], message: str) -> None:
    kopf.warn(as_body(body), reason="MetricsUnavailable", message=message)


def _shortfall(plan: ServicePlan) -> str:
    """What of a decision the cluster cannot carry out now, for its recorded reason."""
    if not plan.unplaced or plan.pools is None:
        return ""
    return f"; {plan.unplaced} cannot be placed now: " + "; ".join(plan.pools.problems)


def evaluate(
    body: dict[str, Any],
    kw: dict[str, Any],
    readings: Readings | None,
    vllm: Callable[[], VllmReadings | None] = lambda: None,
) -> Decision | None:
    """One service's evaluation from this pass's ``readings`` (None: no Prometheus);
    ``vllm`` reads the pass's vLLM series, for LLM services, when first asked."""
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    state: OperatorState = state_of(kw)
    memory = state.scaling.get(uid_of(body))
    if readings is None:
        error = f"no Prometheus configured (${PROMETHEUS_URL})"
        reading = Reading(MetricSample(at=time.time()), error=error)
    else:
        reading = readings.of(*key)
    # Nothing to learn (no series, or no Prometheus, as on the last pass, with the same
    # spec and pods): the policy would hold again. Checked before anything is parsed, so a
    # pass over thousands of idle services stays cheap.
    silent = _silent(reading, readings, key)
    if silent and _llm_format(body):
        # An LLM service is sized from its vLLM series: silent only without those too.
        found = vllm()
        silent = found is None or not found.of(*key)
    pods = list(kw["service_pods"].get(key, []))
    ready = sum(1 for p in pods if p.ready)
    quiet = (meta.get("generation"), reading.error, len(pods), ready)
    if silent and memory.quiet == quiet:
        return None
    memory.quiet = None  # set again only once this evaluation has been written
    try:
        svc = parse_inference_service(body)
    except ValidationError:
        return None  # converge reports it as Stalled
    engine = svc.spec.scaling.engine
    by_mix = mix_measured(svc.spec)
    if engine != "builtin" and not (threshold_measured(svc.spec) or by_mix):
        return None
    view = view_of(key, kw)
    windows = state.settings.windows  # the scrape interval and the windows behind it
    classes = view.cluster.valid_classes()

    def policy_config(spec: InferenceServiceSpec) -> PolicyConfig:
        return policy_config_from_spec(
            spec,
            classes,
            rate_window=windows.rate_window_s,
            scrape_interval=windows.scrape_interval_s,
        )

    config = policy_config(svc.spec)
    if engine == "keda":
        # KEDA sizes the service; what is left here is the thresholds' measurement.
        try:
            if by_mix:
                found = vllm()
                keda_calibrating.calibrate_mix(
                    body, svc, view, found, memory, found.at if found else time.time()
                )
            else:
                history = _history(memory, reading, 2 * config.stable_window)
                keda_calibrating.calibrate(
                    body, svc, config, view, history, memory, reading.sample.at
                )
        except kube.StaleStatus:
            return None  # the reconcile wrote first; quiet stays unset, so the next pass tries
        memory.quiet = quiet if silent else None
        return None
    if _awaiting_first_pods(body, svc, view, reading.sample.at):
        return None  # the first decision starts from the pods the spec asked for
    history = _history(memory, reading, 2 * config.stable_window)
    try:
        decision = _decide_and_record(
            body, svc, config, view, reading, history, memory, ready, vllm
        )
    except kube.StaleStatus:
        # The reconcile wrote status after the index's copy was taken. Deciding again
        # from the live object now, with the same reading, beats losing this pass: under
        # load the two writers meet often, and a lost pass is a scale-up 1-2 s later.
        live = kube.get_custom(SERVICES_PLURAL, key[1], key[0])
        if live is None or uid_of(live) != uid_of(body):
            return None
        try:
            svc = parse_inference_service(live)
        except ValidationError:
            return None
        if svc.spec.scaling.engine != "builtin":
            return None  # switched to KEDA meanwhile: its reconcile dropped our conditions
        config = policy_config(svc.spec)
        decision = _decide_and_record(
            live, svc, config, view, reading, history, memory, ready, vllm
        )
    memory.quiet = quiet if silent else None
    return decision


def _awaiting_first_pods(
    body: dict[str, Any], svc: InferenceService, view: ClusterView, now: float
) -> bool:
    """A young object never decided on, whose first pods fit and are not all seen yet.
    The raw body is read first: on every later evaluation that is all this costs."""
    if (body.get("status") or {}).get("lastDecision") is not None:
        return False
    if now - epoch(body["metadata"].get("creationTimestamp")) >= FIRST_PODS_GRACE_S:
        return False
    status = InferenceServiceStatus.model_validate(body.get("status") or {})
    return first_pods_unseen(
        svc.spec,
        owner=f"{body['metadata']['namespace']}/{body['metadata']['name']}",
        cluster=view.cluster,
        now=now,
        target=desired_serving(svc, status),
    )


def _decide_and_record(
    body: dict[str, Any],
    svc: InferenceService,
    config: PolicyConfig,
    view: ClusterView,
    reading: Reading,
    history: MetricHistory,
    memory: ScalingMemory,
    ready: int,
    vllm: Callable[[], VllmReadings | None],
) -> Decision:
    """Decide from ``body``'s status and write the outcome. Nothing of the decision (the
    policy's memory, the log line, the events) takes effect unless the write does: a
    refused write (kube.StaleStatus) leaves everything as it was, to be decided again."""
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    gen = meta.get("generation")
    now = reading.sample.at
    live = dict(body.get("status") or {})
    status = InferenceServiceStatus.model_validate(live)
    owner = f"{key[0]}/{key[1]}"
    target = desired_serving(svc, status)
    remembered = (  # from status on this process's first evaluation of the object
        memory.policy
        if memory.policy is not None
        else PolicyMemory.from_status(status.autoscaler_memory)
    )
    pools = pool_state(svc.spec, cluster=view.cluster, now=now, serving_target=target)
    llm = llm_policy_from_spec(svc.spec, classes=view.cluster.valid_classes())
    if llm is not None:  # sized on its token objectives, from its vLLM series
        decision = _decide_llm(llm, vllm(), key, pools, now=now, memory=remembered)
    else:
        decision = decide(
            config=config,
            history=history,
            pools=pools,
            now=now,
            memory=remembered,
            queues=_pod_queues(view, reading),
        )
    after_write: list[Callable[[], None]] = []
    stamp = now_rfc3339()
    conds = ConditionWriter(status.conditions, generation=gen, now=stamp)
    if reading.error or decision.mode == "hold":
        why = reading.error or decision.reason
        missing = "PrometheusUnreachable" if reading.error else "MetricsMissing"
        # A warning when the metrics go missing, not on every pass while they stay so; a
        # service with no ready pod has no Triton to scrape, and that is no surprise.
        if (reading.error or ready) and not _already(status, missing):
            after_write.append(lambda: _warn(body, why))
        conds.set("MetricsAvailable", "False", missing, why)
    else:
        conds.set("MetricsAvailable", "True", "MetricsFresh", "Triton metrics are fresh")
        # Only a decision made on fresh metrics says whether the bound held it back.
        conds.set(
            "ScalingLimited",
            *limited_condition(decision.signals, max_replicas=svc.spec.scaling.max_replicas),
        )
    if decision.outran is not None:
        scaling = svc.spec.scaling
        conds.set(
            "BurstsCovered",
            *covered_condition(
                decision.outran,
                min_replicas=scaling.min_replicas,
                max_replicas=scaling.max_replicas,
            ),
        )
    status.conditions = conds.conditions
    advisory = svc.spec.scaling.mode == "advisory"
    p95 = reading.sample.get("p95_latency")
    previous = status.last_decision
    auto_warm = svc.spec.scaling.warm_pool_mode == "auto" and decision.warm_pool is not None
    changed = (
        previous is None
        or previous.desired_replicas != decision.desired_replicas
        or previous.reason.split(":")[0] != decision.reason.split(":")[0]
        or (auto_warm and not advisory and status.desired_warm_pool != decision.warm_pool)
    )
    if changed:
        if auto_warm and not advisory:
            status.desired_warm_pool = decision.warm_pool
        after = plan_service(
            svc.spec,
            owner=owner,
            cluster=view.cluster,
            desired=decision.desired_replicas,
            warm_pool=wanted_warm_pool(svc, status),
        )
        record = ScalingDecisionStatus(
            time=stamp,
            desired_replicas=decision.desired_replicas,
            reason=decision.reason + _shortfall(after),
            signals={k: round(v, 6) for k, v in decision.signals.items()},
            applied=not advisory,
        )
        status.last_decision = record
        if previous is None or previous.desired_replicas != decision.desired_replicas:
            status.decisions = [*status.decisions, record][-MAX_DECISIONS:]
            status.autoscaler_memory = decision.memory.to_status()
            after_write.append(lambda: _announce(body, decision, record, advisory))
        if not advisory:
            status.desired_replicas = decision.desired_replicas
    around = [] if advisory else _routed_around(decision)
    if {r.pod for r in around} != {r.pod for r in status.routed_around}:
        # Written when the pods change, not their figures or their order (two queues
        # trading places): the reconcile relabels them.
        status.routed_around = around
    if p95 is not None and (status.p95_ms is None or abs(status.p95_ms - p95 * 1e3) >= 1.0):
        status.p95_ms = round(p95 * 1e3, 1)
    rendered = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    # A new status.desiredReplicas reaches the reconcile through the service's watch event
    # (inferenceservice.on_service_event), once the index holds it.
    kube.patch_status(
        plural=SERVICES_PLURAL,
        name=key[1],
        namespace=key[0],
        status=rendered,
        live_status=live,
        resource_version=meta.get("resourceVersion"),
    )
    memory.policy = decision.memory
    for announce in after_write:
        announce()
    return decision


def _pod_queues(view: ClusterView, reading: Reading) -> list[PodQueue]:
    """The queue of each ready serving pod Prometheus has a figure for (routed around or
    not): the rule names those to route around (gpuserve.autoscaling.shedding)."""
    return [
        PodQueue(p.name, p.accelerator_class, reading.pod_queues[p.name])
        for p in view.cluster.pods
        if p.ready and not p.deleting and serves(p.role) and p.name in reading.pod_queues
    ]


def _routed_around(decision: Decision) -> list[RoutedAroundStatus]:
    return [
        RoutedAroundStatus(pod=r.pod, queued=round(r.queued, 1), clears=round(r.clears, 1))
        for r in decision.routed_around
    ]


def _decide_llm(
    policy: LLMPolicy,
    readings: VllmReadings | None,
    key: tuple[str, str],
    pools: PoolState,
    *,
    now: float,
    memory: PolicyMemory,
) -> Decision:
    """The LLM rule on the stable, recent and pooled windows of the service's vLLM
    series, its engines priced by what the stable window measured
    (gpuserve.llm.calibrating)."""
    windows = service_windows(readings, key, policy.objectives.quantile)
    decision, _ = decide_priced(
        policy=policy,
        stable=windows.stable,
        recent=windows.recent,
        pools=pools,
        now=now,
        memory=memory,
        replicas=windows.replicas,
        pooled=windows.pooled,
    )
    return decision


def _announce(
    body: dict[str, Any], decision: Decision, record: ScalingDecisionStatus, advisory: bool
) -> None:
    meta = body["metadata"]
    verb = "ScaledUp" if decision.delta > 0 else "ScaledDown" if decision.delta < 0 else "Held"
    log.info("%s/%s %s %s", meta["namespace"], meta["name"], verb, record.reason)
    if decision.delta:  # a hold changes nothing: status.decisions records it
        kopf.event(
            as_body(body),
            type="Normal",
            reason=("Advised" + verb) if advisory else verb,
            message=f"{decision.current_replicas} -> {decision.desired_replicas}: {record.reason}",
        )


def _llm_format(body: dict[str, Any]) -> bool:
    """Whether the raw body names an LLM format (read before the body is parsed)."""
    model = ((body.get("spec") or {}).get("model")) or {}
    return model.get("format") in LLM_FORMATS


def _silent(reading: Reading, readings: Readings | None, key: tuple[str, str]) -> bool:
    return readings is None or reading.error is not None or not readings.has_series(*key)


def _already(status: InferenceServiceStatus, reason: str) -> bool:
    return any(
        c.type == "MetricsAvailable" and c.status == "False" and c.reason == reason
        for c in status.conditions
    )


def autoscale_pass(kw: dict[str, Any]) -> Callable[[dict[str, Any]], object]:
    """One pass's work: every service's signals are read once, here, for the whole pass;
    controllers.periodic then calls the result for each service."""
    source = state_of(kw).prometheus
    readings = source.read_all() if source is not None else None
    vllm: list[VllmReadings | None] = []

    def vllm_once() -> VllmReadings | None:
        # Read on the first LLM service of the pass, for all of them; never without one.
        if not vllm:
            at = readings.at if readings is not None else time.time()
            vllm.append(source.read_vllm(at=at) if source is not None else None)
        return vllm[0]

    return lambda body: evaluate(body, kw, readings, vllm_once)
