"""`scaling.engine: keda`: the autoscaler's pass measures what the ScaledObject's
thresholds are sized by: the compute time of a request-level service
(gpuserve.autoscaling.keda_calibration, ``status.kedaCalibration``), the token mix of an
LLM service (gpuserve.llm.keda_mix, ``status.kedaTokenMix``).

The reconcile renders the thresholds from the record, so the ScaledObject has one writer
and a restarted operator keeps what was measured. Status is written only when the record
or its message changes.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from pydantic import ValidationError

from controllers import kube
from controllers.converging import ClusterView, as_body, desired_serving, now_rfc3339
from controllers.prometheus_source import VllmReadings, service_windows
from controllers.state import ScalingMemory
from gpuserve.api.models import InferenceService, parse_inference_service
from gpuserve.api.status import (
    InferenceServiceStatus,
    KedaCalibrationStatus,
    KedaTokenMixStatus,
)
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.keda_calibration import (
    KedaCalibration,
    calibrate_from,
    describe,
    threshold_measured,
)
from gpuserve.autoscaling.metrics import MetricHistory
from gpuserve.autoscaling.service_scale import ComputeMeasurement
from gpuserve.llm.calibrating import fit_or_known
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.keda_mix import (
    KedaTokenMix,
    describe_mix,
    measure_mix,
    mix_measured,
    recorded_mix,
)
from gpuserve.placement.service_plan import pool_state
from gpuserve.resources.naming import SERVICES_PLURAL

log = logging.getLogger(__name__)
# How long a record the installed CRD did not keep waits before it is written again: a
# CRD applied meanwhile is then picked up without a restart.
UNKEPT_RETRY_S = 600.0
UNKEPT = (
    "status.kedaCalibration was not kept: the installed InferenceService CRD predates it "
    "(helm upgrade leaves CRDs as they are; apply this release's crds/). The ScaledObject's "
    "threshold stays as rendered from the spec's service times; measured again in "
    f"{UNKEPT_RETRY_S / 60:g} min or when the spec changes"
)
MIX_FIELD = "kedaTokenMix"
UNKEPT_MIX = (
    "status.kedaTokenMix was not kept: the installed InferenceService CRD predates it "
    "(helm upgrade leaves CRDs as they are; apply this release's crds/). The ScaledObject's "
    "thresholds stay as rendered for the stated token mix (llm.expectedTokens); measured "
    f"again in {UNKEPT_RETRY_S / 60:g} min or when the spec changes"
)


def recorded_calibration(status: InferenceServiceStatus) -> KedaCalibration | None:
    found = status.keda_calibration
    if found is None:
        return None
    return KedaCalibration(
        measured=ComputeMeasurement(compute=found.compute_ms / 1e3, mean_batch=found.mean_batch),
        speed=found.relative_speed,
        scale=found.service_scale,
    )


def calibrate(
    body: dict[str, Any],
    svc: InferenceService,
    config: PolicyConfig,
    view: ClusterView,
    history: MetricHistory,
    memory: ScalingMemory,
    now: float,
) -> KedaCalibration | None:
    """Record a new calibration when the measurement moves it; returns what was written.

    A recorded calibration that stays is described again when the spec's service times
    moved within the band, so its message never quotes times the spec no longer states.
    Raises kube.StaleStatus when the object changed meanwhile: the caller's next pass
    measures again. A record the API server does not keep (a CRD older than this
    operator) is reported once, and not written again for ``UNKEPT_RETRY_S`` or until the
    spec moves."""
    meta = body["metadata"]
    if _waiting_after_unkept(memory, meta, now):
        return None
    live = dict(body.get("status") or {})
    status = InferenceServiceStatus.model_validate(live)
    found = status.keda_calibration
    recorded = recorded_calibration(status)
    stable = history.between(now - config.stable_window, now + 1e-9)
    pools = pool_state(
        svc.spec, cluster=view.cluster, now=now, serving_target=desired_serving(svc, status)
    )
    new = calibrate_from(recorded, stable, pools, config.profile)
    if new is None:
        if found is None or recorded is None:
            return None
        message = describe(recorded, config.profile)
        if message == found.message:
            return None
        found.message = message  # the same threshold, told against the spec's new times
        _write(body, status, live)
        return None
    message = describe(new, config.profile)
    status.keda_calibration = KedaCalibrationStatus(
        # A record judged again against a new spec keeps the time of its measurement.
        time=found.time
        if found and recorded and new.measured == recorded.measured
        else now_rfc3339(),
        compute_ms=round(new.measured.compute * 1e3, 3),
        mean_batch=round(new.measured.mean_batch, 3),
        relative_speed=new.speed,
        service_scale=new.scale,
        message=message,
    )
    if not _written_and_kept(body, status, live, memory, now, "kedaCalibration", UNKEPT):
        return None
    log.info("%s/%s KedaCalibrated %s", meta["namespace"], meta["name"], message)
    kopf.event(as_body(body), type="Normal", reason="KedaCalibrated", message=message)
    return new


def calibrate_mix(
    body: dict[str, Any],
    svc: InferenceService,
    view: ClusterView,
    readings: VllmReadings | None,
    memory: ScalingMemory,
    now: float,
) -> KedaTokenMix | None:
    """Record the token mix of the stable window when it moves the per-replica rate
    beyond the band (``calibrate``'s rules otherwise: the message told again, stale
    status raised, a record the CRD drops reported once); returns what was written."""
    meta = body["metadata"]
    policy = llm_policy_from_spec(svc.spec, classes=view.cluster.valid_classes())
    if policy is None or _waiting_after_unkept(memory, meta, now):
        return None
    live = dict(body.get("status") or {})
    status = InferenceServiceStatus.model_validate(live)
    found = status.keda_token_mix
    recorded = recorded_mix(status.keda_token_mix)
    pools = pool_state(
        svc.spec, cluster=view.cluster, now=now, serving_target=desired_serving(svc, status)
    )
    if not pools.classes:
        return None
    class_name, q = pools.classes[0].name, policy.objectives.quantile
    windows = service_windows(readings, (meta["namespace"], meta["name"]), q)
    stable = windows.stable
    # The engines' time scale as the builtin engine measures it (gpuserve.llm.calibrating).
    factor = fit_or_known(
        policy,
        stable,
        windows.replicas,
        class_name,
        recorded.time_scale if recorded is not None else None,
    )
    new = measure_mix(
        recorded,
        stable,
        serving_ready=pools.serving_ready,
        policy=policy,
        class_name=class_name,
        time_scale=factor,
    )
    if new is None:
        if found is None or recorded is None:
            return None
        message = describe_mix(recorded, policy, class_name, q)
        if message == found.message:
            return None
        found.message = message  # the same thresholds, told against the spec's new mix
        _write(body, status, live)
        return None
    message = describe_mix(new, policy, class_name, q)
    s = new.shape
    status.keda_token_mix = KedaTokenMixStatus(
        # A record judged again against a new spec keeps the time of its measurement.
        time=(
            found.time
            if found and recorded and (s, new.time_scale) == (recorded.shape, recorded.time_scale)
            else now_rfc3339()
        ),
        prompt_tokens=round(s.prompt_mean, 1),
        prompt_tokens_high=round(s.prompt_high, 1),
        output_tokens=round(s.output_mean, 1),
        prefix_hit_rate=round(s.prefix_hit_rate, 4),
        prompt_square_mean=s.prompt_square_mean,
        prompt_cube_mean=s.prompt_cube_mean,
        prompt_fourth_mean=s.prompt_fourth_mean,
        time_scale=new.time_scale,
        requests_per_replica=new.per_replica,
        message=message,
    )
    if not _written_and_kept(body, status, live, memory, now, MIX_FIELD, UNKEPT_MIX):
        return None
    log.info("%s/%s KedaCalibrated %s", meta["namespace"], meta["name"], message)
    kopf.event(as_body(body), type="Normal", reason="KedaCalibrated", message=message)
    return new


def _waiting_after_unkept(memory: ScalingMemory, meta: dict[str, Any], now: float) -> bool:
    """Whether a record the CRD did not keep still waits to be written again."""
    if memory.keda_unkept is not None:
        generation, retry_at = memory.keda_unkept
        if generation == meta.get("generation") and now < retry_at:
            return True
        memory.keda_unkept = None
    return False


def _written_and_kept(
    body: dict[str, Any],
    status: InferenceServiceStatus,
    live: dict[str, Any],
    memory: ScalingMemory,
    now: float,
    field: str,
    unkept: str,
) -> bool:
    """Writes ``status``; False when nothing was written, or when the object read back
    lacks ``field`` (then reported once, and not written again for ``UNKEPT_RETRY_S`` or
    until the spec moves)."""
    meta = body["metadata"]
    if not _write(body, status, live):
        return False
    if _kept(meta, field):
        return True
    memory.keda_unkept = (meta.get("generation"), now + UNKEPT_RETRY_S)
    log.warning("%s/%s %s", meta["namespace"], meta["name"], unkept)
    kopf.warn(as_body(body), reason="KedaCalibrationNotKept", message=unkept)
    return False


def _kept(meta: dict[str, Any], field: str) -> bool:
    """Whether the object read back holds the record just written (``field`` of status).
    A CRD that predates the field prunes it; so does nothing else, save the reconcile
    dropping a record whose service switched engine or format meanwhile."""
    live = kube.get_custom(SERVICES_PLURAL, meta["name"], meta["namespace"])
    if live is None or (live.get("metadata") or {}).get("uid") != meta.get("uid"):
        return True  # gone or made anew: nothing to report
    if (live.get("status") or {}).get(field) is not None:
        return True
    try:
        spec = parse_inference_service(live).spec
    except ValidationError:
        return True  # the reconcile reports the spec
    return not (mix_measured(spec) if field == MIX_FIELD else threshold_measured(spec))


def _write(body: dict[str, Any], status: InferenceServiceStatus, live: dict[str, Any]) -> bool:
    meta = body["metadata"]
    return kube.patch_status(
        plural=SERVICES_PLURAL,
        name=meta["name"],
        namespace=meta["namespace"],
        status=status.model_dump(by_alias=True, exclude_none=True, mode="json"),
        live_status=live,
        resource_version=meta.get("resourceVersion"),
    )
