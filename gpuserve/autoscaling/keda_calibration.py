"""Under `scaling.engine: keda`, the ScaledObject's threshold follows what Triton measures.

The rendered trigger is a per-replica request-rate threshold that the capacity model
derives from the spec's service times. KEDA sees request rates, not latency, so a model
slower than its spec states would stay short of pods by the whole factor, and nothing
would correct it. The builtin engine corrects its model from Triton's compute time at
every evaluation; under KEDA the operator takes the same measurement
(``gpuserve.autoscaling.service_scale``), records it in status, and the reconcile renders
the threshold from it. A new measurement replaces the recorded one only when it moves
the threshold by more than ``BAND``: the ScaledObject is not rewritten on noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuserve.api.models import InferenceServiceSpec
from gpuserve.autoscaling.config import ServiceProfile
from gpuserve.autoscaling.from_spec import TIME_PARAMS
from gpuserve.autoscaling.metrics import MetricSample
from gpuserve.autoscaling.pools import PoolState
from gpuserve.autoscaling.service_scale import (
    SCALE_BOUNDS,
    ComputeMeasurement,
    measured_compute,
    predicted_band,
    ready_speed,
    service_scale,
)

# A measured scale within this factor of the recorded one keeps the recorded threshold.
BAND = 1.15


def threshold_measured(spec: InferenceServiceSpec) -> bool:
    """Whether the service's ScaledObject threshold follows the measured compute time: a
    KEDA service that is not an LLM's. Triton's compute time for a streamed generation
    spans the whole generation, which the request-level service times do not describe."""
    return spec.scaling.engine == "keda" and not spec.is_llm


@dataclass(frozen=True, slots=True)
class KedaCalibration:
    """A measurement, the relative speed of the pods it was taken on, and the scale it
    gives the spec's profile (1.0: the measurement agrees with the spec)."""

    measured: ComputeMeasurement
    speed: float
    scale: float


def calibrate_from(
    recorded: KedaCalibration | None,
    stable: Sequence[MetricSample],
    pools: PoolState,
    profile: ServiceProfile,
) -> KedaCalibration | None:
    """The calibration to record now from the stable window's scrapes, or None to keep
    ``recorded`` (the operator's pass and the replay both judge by this)."""
    # Executions seen while no serving pod is ready (all gone since) say nothing of the
    # speed they ran at: only the recorded measurement is judged again then.
    fresh = measured_compute(stable) if pools.serving_ready > 0 else None
    return recalibrate(recorded, fresh, speed=ready_speed(pools), profile=profile)


def recalibrate(
    recorded: KedaCalibration | None,
    fresh: ComputeMeasurement | None,
    *,
    speed: float,
    profile: ServiceProfile,
) -> KedaCalibration | None:
    """The calibration to record now, or None to keep ``recorded``.

    ``fresh`` is this window's measurement on pods of relative ``speed`` (None: no
    execution in the window). Without one, the recorded measurement is judged again
    against ``profile``: a spec whose service times changed moves the threshold at once.
    """
    if fresh is not None:
        measured, at_speed = fresh, speed
    elif recorded is not None:
        measured, at_speed = recorded.measured, recorded.speed
    else:
        return None
    scale = service_scale(profile, measured, at_speed)
    if recorded is not None and max(scale / recorded.scale, recorded.scale / scale) <= BAND:
        return None
    return KedaCalibration(measured=measured, speed=at_speed, scale=round(scale, 4))


def describe(calibration: KedaCalibration, profile: ServiceProfile) -> str:
    """What was measured and what it does to the threshold, for status and events."""
    m = calibration.measured
    low, high = predicted_band(profile, m.mean_batch, calibration.speed)
    seen = (
        f"Triton measured {m.compute * 1e3:.1f} ms of compute per request at a mean batch "
        f"of {m.mean_batch:.1f} (pods of relative speed {calibration.speed:g}), where the "
        f"spec's service times predict {low * 1e3:.1f}-{high * 1e3:.1f} ms"
    )
    scale = calibration.scale
    if scale == 1.0:
        return f"{seen}: the threshold rests on them"
    bound = (
        " (the most the measurement corrects: state the model's times in its parameters "
        f"{' and '.join(TIME_PARAMS)})"
        if scale in SCALE_BOUNDS
        else ""
    )
    return (
        f"{seen}: the ScaledObject's request-rate threshold per replica is rendered for "
        f"executions {scale:g}x as long{bound}"
    )
