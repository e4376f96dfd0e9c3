"""`scaling.engine: keda`: the autoscaler's pass measures the compute time the
ScaledObject's threshold is sized by (gpuserve.autoscaling.keda_calibration).

The measurement goes to ``status.kedaCalibration``; the reconcile renders the threshold
from it, so the ScaledObject has one writer and a restarted operator keeps what was
measured. Status is written only when the recorded calibration changes.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from controllers import kube
from controllers.converging import ClusterView, as_body, desired_serving, now_rfc3339
from gpuserve.api.models import InferenceService
from gpuserve.api.status import InferenceServiceStatus, KedaCalibrationStatus
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.keda_calibration import KedaCalibration, calibrate_from, describe
from gpuserve.autoscaling.metrics import MetricHistory
from gpuserve.autoscaling.service_scale import ComputeMeasurement
from gpuserve.placement.service_plan import pool_state
from gpuserve.resources.naming import SERVICES_PLURAL

log = logging.getLogger(__name__)


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
    now: float,
) -> KedaCalibration | None:
    """Record a new calibration when the measurement moves it; returns what was written.

    A recorded calibration that stays is described again when the spec's service times
    moved within the band, so its message never quotes times the spec no longer states.
    Raises kube.StaleStatus when the object changed meanwhile: the caller's next pass
    measures again."""
    meta = body["metadata"]
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
    log.info("%s/%s KedaCalibrated %s", meta["namespace"], meta["name"], message)
    kopf.event(as_body(body), type="Normal", reason="KedaCalibrated", message=message)
    return new


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
