"""Single-replica load tests in the simulator: what a competent user does before setting a
threshold for a generic autoscaler (find the highest rate one replica sustains within the
SLO, then read the metric the autoscaler watches at a chosen share of that rate)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuserve.sim.config import SimConfig
from gpuserve.sim.scalers import HoldScaler
from gpuserve.sim.simulating import Simulation
from gpuserve.sim.workload import poisson_workload


@dataclass(frozen=True, slots=True)
class ReplicaReading:
    rate: float
    p95: float
    attainment: float
    mean_pending: float  # average of the queue-depth gauge over scrapes
    mean_in_flight: float  # time-averaged requests queued + executing


# Enough requests for a stable p95, few enough to stay fast for fast models.
_REQUESTS_PER_READING = 20_000


def reading_duration(rate: float, longest: float) -> float:
    """Seconds of load for one reading: ~20k requests, between 5 s and ``longest``."""
    return max(5.0, min(longest, _REQUESTS_PER_READING / max(rate, 1e-9)))


def read_replica(
    *, config: SimConfig, rate: float, duration: float = 120.0, items: int = 1, seed: int = 7
) -> ReplicaReading:
    """Poisson load at ``rate`` on one ready replica for at most ``duration`` seconds
    (fewer when ~20k requests arrive sooner), no autoscaler."""
    duration = reading_duration(rate, duration)
    single = replace(config, initial_replicas=1, warm_pool=0, scrape_interval=1.0, measure_from=0.0)
    workload = poisson_workload(rate=rate, duration=duration, seed=seed, items=items)
    sim = Simulation(config=single, workload=workload, scaler=HoldScaler())
    result = sim.run()
    scrapes = [s for s in (sim.store.latest_scrape(t) for t in range(1, int(duration))) if s]
    pending = sum(s.pending for s in scrapes) / len(scrapes) if scrapes else 0.0
    in_flight = sim.store.concurrency(duration, duration) or 0.0
    return ReplicaReading(
        rate=rate,
        p95=result.percentile(config.slo_quantile * 100),
        attainment=result.attainment(),
        mean_pending=pending,
        mean_in_flight=in_flight,
    )


def slo_capacity(
    *, config: SimConfig, duration: float = 120.0, items: int = 1, seed: int = 7
) -> float:
    """Highest Poisson rate (req/s) at which one replica's p-quantile latency meets the SLO."""
    svc = config.service
    one = (svc.per_batch + svc.per_item * items) * svc.precision_factor / config.classes[0].speed
    batch = max(1, config.batcher.max_batch_size) if config.batcher.batching else items
    full = (svc.per_batch + svc.per_item * batch) * svc.precision_factor / config.classes[0].speed
    hi = config.instances * max(1.0 / one, batch / items / full) * 1.05
    lo = 0.0
    for _ in range(14):
        mid = (lo + hi) / 2
        reading = read_replica(config=config, rate=mid, duration=duration, items=items, seed=seed)
        if reading.p95 <= config.slo_latency:
            lo = mid
        else:
            hi = mid
    return lo
