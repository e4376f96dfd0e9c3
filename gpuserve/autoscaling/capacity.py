"""How many requests per second one replica sustains while meeting the latency SLO.

The model (docs/autoscaling.md has the derivation and its check against the simulator):

A replica with ``c`` instances running batches of ``b`` items serves requests at up to
``r(b) = c * b / (m * S(b))`` per second, where ``S(b)`` is the execution time of a batch
and ``m`` the items per request. A request meets the objective ``L`` when it starts
executing within ``W(b) = L - S(b) - max_queue_delay - overhead`` of its arrival, i.e.
when the backlog it finds ahead of it is at most ``r(b) * W(b)`` requests.

With Poisson arrivals at rate ``lambda`` served at rate ``r``, the backlog is the supremum
of a random walk and its tail is exponential (Cramer-Lundberg):
``P(backlog > x) ~ exp(-theta * x)`` where ``theta`` solves ``lambda * (e^theta - 1) =
r * theta``. Asking the ``q``-quantile of the backlog to fit the budget,
``ln(1 / (1 - q)) / theta <= r * W``, gives the capacity in closed form:

    theta0 = ln(1 / (1 - q)) / (r(b) * W(b))
    lambda*(b) = r(b) * theta0 / (e^theta0 - 1)

and the capacity is the best lambda*(b) over the batch sizes the batcher may form. A loose
SLO (large r*W) lets a replica run close to r(b); a tight one leaves headroom - the
queueing effect a fixed utilisation target misses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuserve.autoscaling.config import ServiceProfile


@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """Sustainable rate of one replica and the operating point that gives it."""

    rate: float  # requests/s within the SLO; 0 when the SLO cannot be met at all
    batch_items: float  # batch size (items) at that operating point
    execution_time: float  # seconds per batch at that point
    queue_budget: float  # seconds a request may queue at that point
    saturation_rate: float  # requests/s at full batches with no SLO (upper bound)

    @property
    def feasible(self) -> bool:
        return self.rate > 0.0


def replica_capacity(
    *,
    profile: ServiceProfile,
    slo_latency: float,
    quantile: float,
    items_per_request: float = 1.0,
    speed: float = 1.0,
    service_scale: float = 1.0,
    overhead: float = 0.0,
) -> CapacityEstimate:
    """Requests/s one replica (of relative ``speed``) sustains within ``slo_latency``.

    ``service_scale`` multiplies every execution time: the measured/predicted ratio the
    policy learns from ``avg_compute_time``.
    """
    return _capacity(
        profile,
        round(slo_latency, 9),
        round(quantile, 6),
        round(max(items_per_request, 1e-3), 3),
        round(speed * 1.0 / max(service_scale, 1e-6), 6),
        round(overhead, 9),
    )


@lru_cache(maxsize=1024)
def _capacity(
    profile: ServiceProfile,
    slo_latency: float,
    quantile: float,
    items: float,
    effective_speed: float,
    overhead: float,
) -> CapacityEstimate:
    tail = math.log(1.0 / (1.0 - quantile))
    hold = profile.max_queue_delay if profile.batching else 0.0
    best = CapacityEstimate(0.0, items, math.inf, 0.0, 0.0)
    saturation = 0.0
    for b in _batch_sizes(profile, items):
        exec_time = profile.execution_time(b, effective_speed)
        rate_cap = profile.instances * b / (items * exec_time)
        saturation = max(saturation, rate_cap)
        budget = slo_latency - exec_time - hold - overhead
        if budget <= 0.0 or rate_cap * budget <= 1e-12:
            continue
        theta = tail / (rate_cap * budget)
        rate = rate_cap * theta / math.expm1(theta) if theta < 700 else 0.0
        if rate > best.rate:
            best = CapacityEstimate(rate, b, exec_time, budget, 0.0)
    return CapacityEstimate(
        best.rate, best.batch_items, best.execution_time, best.queue_budget, saturation
    )


def _batch_sizes(profile: ServiceProfile, items: float) -> list[float]:
    """Batch sizes (items) the batcher can form: one request up to max_batch_size."""
    if not profile.batching:
        return [items]
    top = float(profile.max_batch_size)
    low = min(items, top)
    if top - low <= 256:
        sizes = [low + k for k in range(int(top - low) + 1)]
    else:  # very large batches: a geometric grid is precise enough
        sizes, b = [], low
        while b < top:
            sizes.append(b)
            b *= 1.05
        sizes.append(top)
    return sizes
