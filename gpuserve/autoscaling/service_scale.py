"""How far Triton's measured compute time contradicts the service times a spec states.

Both engines correct their capacity model by it: the builtin policy at every evaluation
(``gpuserve.autoscaling.deciding``), and under KEDA the operator, which records the
measurement in status and renders the ScaledObject's threshold from it
(``gpuserve.autoscaling.keda_calibration``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuserve.autoscaling.config import ServiceProfile
from gpuserve.autoscaling.metrics import MetricSample, mean_of
from gpuserve.autoscaling.pools import PoolState

# Bounds of the measured/assumed service-time ratio: a wild measurement (warm-up, a
# stalled pod) must not make the model promise 10x the capacity.
SCALE_BOUNDS = (0.5, 4.0)
# A measurement inside the band a correct profile explains, widened by this much, leaves
# the profile as it is (the per-request average is itself noisy).
_SLACK = 0.1


@dataclass(frozen=True, slots=True)
class ComputeMeasurement:
    """Triton's compute time per request and the mean batch it ran in, over a window."""

    compute: float  # seconds; Triton adds a batch's compute time to each of its requests
    mean_batch: float


def measured_compute(samples: Sequence[MetricSample]) -> ComputeMeasurement | None:
    """The window's measurement, or None where it saw no execution."""
    compute = mean_of(samples, "avg_compute_time")
    batches = [b for s in samples if (b := s.avg_batch_size) is not None]
    if compute is None or not batches or compute <= 0.0:
        return None
    return ComputeMeasurement(compute=compute, mean_batch=sum(batches) / len(batches))


def ready_speed(pools: PoolState) -> float:
    """The relative speed of the ready serving pods, weighted by their number."""
    ready = [(p.serving_ready, p.speed) for p in pools.classes if p.serving_ready > 0]
    return sum(n * s for n, s in ready) / sum(n for n, _ in ready) if ready else 1.0


def service_scale(
    profile: ServiceProfile, measured: ComputeMeasurement | None, speed: float
) -> float:
    """Measured / assumed execution time, only when the measurement contradicts the profile.

    Triton adds a batch's compute time to every request in it, so the per-request average
    weighs big batches more: it lies between S(mean batch) and S(max batch) for a correct
    profile. Only a measurement outside that band (with 10% slack) rescales the model.
    """
    if measured is None:
        return 1.0
    low, high = predicted_band(profile, measured.mean_batch, speed)
    lo_bound, hi_bound = SCALE_BOUNDS
    if measured.compute < (1.0 - _SLACK) * low:
        return max(lo_bound, measured.compute / low)
    if measured.compute > (1.0 + _SLACK) * high:
        return min(hi_bound, measured.compute / high)
    return 1.0


def predicted_band(profile: ServiceProfile, mean_batch: float, speed: float) -> tuple[float, float]:
    """The per-request compute time a correct profile explains at this mean batch:
    from S(mean batch) to S(max batch) (seconds)."""
    top = max(mean_batch, float(profile.max_batch_size)) if profile.batching else mean_batch
    return profile.execution_time(mean_batch, speed), profile.execution_time(top, speed)
