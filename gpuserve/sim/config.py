"""Configuration of one simulated service: Triton's batcher, service times, pods, scraping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TimeoutAction = Literal["reject", "delay"]
Balancing = Literal["random", "round_robin", "least_loaded"]


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Triton's ModelQueuePolicy for one priority level (times in seconds, 0 = none)."""

    max_queue_size: int = 0
    timeout: float = 0.0
    action: TimeoutAction = "reject"


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    """Triton's scheduler for the model (dynamic_batching and the batch limits).

    max_batch_size counts items (the batch dimension); 0 disables batching.
    priority_levels 0 = priorities off; otherwise level 1 is served first.
    level_policies: per-level overrides of default_policy, as (level, policy) pairs.
    prefetch: Triton's payload prefetching. With no priority levels and no queue policy
        (no timeout, no max queue size) Triton's dynamic batcher does not wait for a free
        instance: it forms the next batch while the instances are busy and queues it
        (up to two per instance); requests that arrive later join that waiting batch only
        in groups that reach the next preferred batch size, otherwise they wait for the
        batch after it. False models a batcher that forms a batch only when an instance is
        free (Triton's behaviour with priorities or a queue policy).
    """

    max_batch_size: int = 0
    dynamic_batching: bool = True
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay: float = 0.0
    priority_levels: int = 0
    default_priority: int = 1
    default_policy: QueuePolicy = QueuePolicy()
    level_policies: tuple[tuple[int, QueuePolicy], ...] = ()
    prefetch: bool = True

    @property
    def batching(self) -> bool:
        return self.dynamic_batching and self.max_batch_size > 0

    @property
    def prefetching(self) -> bool:
        """Whether Triton would prefetch batches for this configuration (see prefetch)."""
        p = self.default_policy
        return (
            self.prefetch
            and self.batching
            and self.priority_levels == 0
            and not self.level_policies
            and p.timeout == 0
            and p.max_queue_size == 0
        )

    @property
    def levels(self) -> int:
        return max(1, self.priority_levels)

    def policy_for(self, level: int) -> QueuePolicy:
        for key, policy in self.level_policies:
            if key == level:
                return policy
        return self.default_policy


@dataclass(frozen=True, slots=True)
class ServiceTimes:
    """How long one execution holds a model instance.

    A batch of n items in r requests takes
    (per_batch + n * per_item) * precision_factor / speed + r * per_request, times a
    log-normal factor with mean 1 and coefficient of variation jitter_cv (0 = exact).

    per_request is the serving stack's own cost per request inside an execution (a
    backend reading inputs and building one response per request: Triton's
    compute_input and compute_output, the Python backend's IPC); it is host work, so
    neither the precision nor the accelerator's speed scales it.
    """

    per_batch: float
    per_item: float
    precision_factor: float = 1.0
    jitter_cv: float = 0.0
    per_request: float = 0.0

    def __post_init__(self) -> None:
        if min(self.per_batch, self.per_item, self.per_request, self.jitter_cv) < 0:
            raise ValueError("service times and jitter must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassTimes:
    """Times measured on one class; None = derive from the service's reference times.

    per_batch and per_item, when set, replace the reference times divided by speed;
    per_request and jitter_cv replace the service's for this class (a different host or
    runtime).
    """

    per_batch: float | None = None
    per_item: float | None = None
    per_request: float | None = None
    jitter_cv: float | None = None


@dataclass(frozen=True, slots=True)
class AcceleratorPool(ClassTimes):
    """One AcceleratorClass as the simulator sees it, with its measured times (already at
    the service's precision; keyword arguments after the class's own fields)."""

    name: str
    speed: float = 1.0
    cost_per_hour: float = 1.0
    capacity: int | None = None  # most pods of this class at once; None = unbounded
    cold_start: float = 60.0  # creation -> ready (image pull, model load, warm-up)
    warm_start: float = 2.0  # promotion -> in the Service's endpoints


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything the simulator needs besides the workload and the scaler.

    latency_overhead: seconds added to each request outside Triton (client, network).
    scrape_interval / rate_window / summary_max_age: how Prometheus sees Triton: gauges
        read at scrape time, counters turned into rates over rate_window, p95 from a
        summary whose quantiles cover the last summary_max_age seconds.
    scrape_outages: (start, end) intervals in which scrapes fail (no samples).
    measure_from: results (latency, GPU time, cost, scale events) count from here on;
        the time before is a warm-up.
    """

    batcher: BatcherConfig
    service: ServiceTimes
    classes: tuple[AcceleratorPool, ...]
    slo_latency: float
    slo_quantile: float = 0.95
    instances: int = 1
    initial_replicas: int = 1
    warm_pool: int = 0
    balancing: Balancing = "random"
    latency_overhead: float = 0.0
    scrape_interval: float = 5.0
    rate_window: float = 20.0
    summary_max_age: float = 60.0
    history_span: float = 120.0
    scrape_outages: tuple[tuple[float, float], ...] = ()
    seed: int = 1
    measure_from: float = 0.0

    def class_index(self, name: str) -> int:
        for i, pool in enumerate(self.classes):
            if pool.name == name:
                return i
        raise KeyError(name)
