"""Builders of synthetic metric histories and pool states for the policy tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpuserve.autoscaling import (
    ClassPool,
    MetricHistory,
    MetricSample,
    PolicyConfig,
    PoolState,
    ServiceProfile,
    replica_capacity,
)

# The sleeper model: 5 ms per execution + 0.2 ms per item, max batch 32, 2 ms delay.
SLEEPER = ServiceProfile(
    time_per_batch=0.005, time_per_item=0.0002, max_batch_size=32, max_queue_delay=0.002
)
# A slow model where a replica sustains a few requests per second.
HEAVY = ServiceProfile(
    time_per_batch=0.06, time_per_item=0.12, max_batch_size=8, max_queue_delay=0.02
)


def config(**overrides: object) -> PolicyConfig:
    base = PolicyConfig(profile=HEAVY, slo_latency=2.0, min_replicas=1, max_replicas=20)
    return replace(base, **overrides)  # type: ignore[arg-type]


def capacity() -> float:
    """Requests/s one replica of the default config sustains within its SLO."""
    cfg = config()
    return replica_capacity(
        profile=cfg.profile, slo_latency=cfg.slo_latency, quantile=cfg.plan_quantile
    ).rate


def history(
    rate: Callable[[float], float] | float,
    *,
    start: float,
    end: float,
    step: float = 5.0,
    queue: Callable[[float], float] | float = 0.0,
    queue_time: float | None = 0.2,
    p95: float | None = 1.0,
    recent: Callable[[float], float] | None = None,
) -> MetricHistory:
    """Samples every ``step`` seconds in [start, end] with the given demand and queue;
    ``recent``: completions and failures per second since the scrape before (irate)."""
    samples = []
    t = start
    while t <= end + 1e-9:
        r = rate(t) if callable(rate) else rate
        q = queue(t) if callable(queue) else queue
        samples.append(
            MetricSample(
                at=t,
                queue_depth=q,
                arrival_rate=r,
                success_rate=r,
                item_rate=r,
                exec_rate=r / 3 if r > 0 else 0.0,
                avg_queue_time=queue_time,
                avg_request_time=None if queue_time is None else queue_time + 0.4,
                avg_compute_time=HEAVY.execution_time(3),
                p95_latency=p95,
                recent_completion_rate=None if recent is None else recent(t),
            )
        )
        t += step
    return MetricHistory(tuple(samples))


def pools(
    serving: int,
    *,
    warm: int = 0,
    starting: tuple[float, ...] = (),
    free: int | None = None,
    cold_start: float = 45.0,
) -> PoolState:
    return PoolState(
        (
            ClassPool(
                name="a100",
                serving_ready=serving,
                warm_ready=warm,
                starting=starting,
                free_capacity=free,
                cold_start=cold_start,
                warm_start=2.0,
            ),
        )
    )
