"""`scaling.engine: keda`: the autoscaler's pass measures the compute time the
ScaledObject's threshold is sized by (gpuserve.autoscaling.keda_calibration).

The measurement goes to ``status.kedaCalibration``; the reconcile renders the threshold
from it, so the ScaledObject has one writer and a restarted operator keeps what was
measured. Status is written only when the record or its message changes.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from pydantic import ValidationError

from controllers import kube
from controllers.converging import ClusterView, as_body, desired_serving, now_rfc3339
from controllers.state import ScalingMemory
from gpuserve.api.models import InferenceService, parse_inference_service
from gpuserve.api.status import InferenceServiceStatus, KedaCalibrationStatus
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.keda_calibration import (
    KedaCalibration,
    calibrate_from,
    describe,
    threshold_measured,
)
from gpuserve.autoscaling.metrics import MetricHistory
from gpuserve.autoscaling.service_scale import ComputeMeasurement
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
    if memory.keda_unkept is not None:
        generation, retry_at = memory.keda_unkept
        if generation == meta.get("generation") and now < retry_at:
            return None
        memory.keda_unkept = None
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
    if not _write(body, status, live):
        return None
    if not _kept(meta):
        memory.keda_unkept = (meta.get("generation"), now + UNKEPT_RETRY_S)
        log.warning("%s/%s %s", meta["namespace"], meta["name"], UNKEPT)
        kopf.warn(as_body(body), reason="KedaCalibrationNotKept", message=UNKEPT)
        return None
    log.info("%s/%s KedaCalibrated %s", meta["namespace"], meta["name"], message)
    kopf.event(as_body(body), type="Normal", reason="KedaCalibrated", message=message)
    return new


def _kept(meta: dict[str, Any]) -> bool:
    """Whether the object read back holds the record just written. A CRD that predates
    status.kedaCalibration prunes it; so does nothing else, save the reconcile dropping a
    record whose service switched engine or format meanwhile."""
    live = kube.get_custom(SERVICES_PLURAL, meta["name"], meta["namespace"])
    if live is None or (live.get("metadata") or {}).get("uid") != meta.get("uid"):
        return True  # gone or made anew: nothing to report
    if (live.get("status") or {}).get("kedaCalibration") is not None:
        return True
    try:
        return not threshold_measured(parse_inference_service(live).spec)
    except ValidationError:
        return True  # the reconcile reports the spec


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
