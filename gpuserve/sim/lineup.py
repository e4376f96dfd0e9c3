"""The policies compared in the simulator, built the same way for the bench and the CLI.

Thresholds of the peers' autoscalers come from a single-replica load test in the
simulator (what a competent user does): the highest Poisson rate one replica sustains with
its p-quantile latency within the SLO (``slo_rate``), and the metric each autoscaler
watches read at that rate or at 70% of it:

* HPA on queue depth: target averageValue = mean pending requests per pod at 70% of
  slo_rate (70% = the utilisation Knative uses by default; HPA has no such factor).
* KEDA on request rate: threshold = 70% of slo_rate requests/s per pod.
* KPA on concurrency: target = mean in-flight requests per pod at slo_rate; KPA itself
  applies its default 70% target utilisation.
* static: the oracle plan's peak window, all the time.

``gpuserve-keda`` is no peer: it is gpuserve's own `scaling.engine: keda`, the ScaledObject
the operator renders (``gpuserve.sim.keda_engine``), left out of the default lineup.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from gpuserve.api.models import AcceleratorClassSpec
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.query_windows import DEFAULT_SCRAPE_INTERVAL_S
from gpuserve.sim.baselines import HpaQueueDepth, KedaPrometheus, KnativeKpa, StaticPeak
from gpuserve.sim.calibrating import read_replica, slo_capacity
from gpuserve.sim.config import SimConfig
from gpuserve.sim.keda_engine import RENDERED_KEDA, RenderedKeda
from gpuserve.sim.oracle import OraclePlan, OracleScaler
from gpuserve.sim.scalers import GpuserveScaler, Scaler

PolicyName = Literal["gpuserve", "hpa", "kpa", "keda", "static", "oracle", "gpuserve-keda"]
POLICIES: tuple[PolicyName, ...] = ("gpuserve", "hpa", "kpa", "keda", "static", "oracle")
# The class a bench's pods are (speed 1, as the simulated pools' are).
REFERENCE_CLASS = AcceleratorClassSpec(gpu_product="reference")
UTILISATION = 0.7


@dataclass(frozen=True, slots=True)
class Calibration:
    slo_rate: float  # req/s one replica sustains within the SLO
    queue_at_70: float  # mean pending per pod at 70% of slo_rate
    in_flight_at_slo: float  # mean in-flight per pod at slo_rate


def calibrate(*, config: SimConfig, items: int = 1, duration: float = 300.0) -> Calibration:
    rate = slo_capacity(config=config, duration=duration, items=items)
    at_70 = read_replica(config=config, rate=UTILISATION * rate, duration=duration, items=items)
    at_slo = read_replica(config=config, rate=rate, duration=duration, items=items)
    return Calibration(
        slo_rate=rate,
        queue_at_70=max(at_70.mean_pending, 0.1),
        in_flight_at_slo=max(at_slo.mean_in_flight, 0.1),
    )


def make_scaler(
    name: PolicyName,
    *,
    policy: PolicyConfig,
    calibration: Calibration | None,
    plan: OraclePlan | None,
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S,
    accel: AcceleratorClassSpec = REFERENCE_CLASS,
    keda_calibration: bool = True,
) -> Scaler:
    """``scrape_interval`` and ``accel``: the Prometheus scrape interval and the class
    the rendered KEDA trigger (``gpuserve-keda``) is derived for, as the operator's is;
    ``keda_calibration``: whether its threshold follows the measured compute time."""
    lo, hi = max(1, policy.min_replicas), policy.max_replicas
    if name == "gpuserve":
        return GpuserveScaler(config=policy)
    if name == RENDERED_KEDA:
        return RenderedKeda(
            policy=policy,
            accel=accel,
            scrape_interval=scrape_interval,
            min_replicas=lo,
            max_replicas=hi,
            calibrate=keda_calibration,
        )
    if name == "oracle" or name == "static":
        if plan is None:
            raise ValueError(f"{name} needs the oracle plan")
        return OracleScaler(plan) if name == "oracle" else StaticPeak(replicas=plan.peak)
    if calibration is None:
        raise ValueError(f"{name} needs a calibration")
    if name == "hpa":
        return HpaQueueDepth(
            target_per_pod=calibration.queue_at_70, min_replicas=lo, max_replicas=hi
        )
    if name == "keda":
        return KedaPrometheus(
            threshold=UTILISATION * calibration.slo_rate, min_replicas=lo, max_replicas=hi
        )
    return KnativeKpa(
        target_concurrency=calibration.in_flight_at_slo, min_replicas=lo, max_replicas=hi
    )


def sim_config_for(name: PolicyName, config: SimConfig, warm_pool: int) -> SimConfig:
    """Peers keep no warm pool; the oracle starts pods instantly and needs none either."""
    return replace(config, warm_pool=warm_pool if name == "gpuserve" else 0)
