"""Configuration of the autoscaling policy: the service-time profile and the knobs."""

from __future__ import annotations

from dataclasses import dataclass

# The API's default for ``scaling.scaleDownStabilization`` (tests hold the two equal), so
# a policy built without a spec (benchmarks, tests) behaves as the operator's would.
SCALE_DOWN_WINDOW_S = 120.0


@dataclass(frozen=True, slots=True)
class ServiceProfile:
    """How long one model execution takes on the reference class (relative speed 1.0).

    An execution of n items takes ``time_per_batch + n * time_per_item`` seconds (at the
    service's precision), divided by the class's relative speed. ``max_batch_size`` counts
    items (Triton's batch dimension); 0 or 1, or ``dynamic_batching=False``, means every
    request executes on its own.
    """

    time_per_batch: float
    time_per_item: float
    max_batch_size: int = 0
    max_queue_delay: float = 0.0
    instances: int = 1
    dynamic_batching: bool = True
    preferred_batch_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.time_per_batch < 0 or self.time_per_item < 0:
            raise ValueError("service times must be >= 0")
        if self.time_per_batch + self.time_per_item <= 0:
            raise ValueError("an execution must take some time")
        if self.instances < 1:
            raise ValueError("instances must be >= 1")
        if self.max_batch_size < 0 or self.max_queue_delay < 0:
            raise ValueError("max_batch_size and max_queue_delay must be >= 0")

    @property
    def batching(self) -> bool:
        return self.dynamic_batching and self.max_batch_size > 1

    def execution_time(self, items: float, speed: float = 1.0) -> float:
        return (self.time_per_batch + items * self.time_per_item) / speed


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Knobs of :func:`gpuserve.autoscaling.decide`; times in seconds.

    slo_latency/slo_quantile: the objective (e.g. 0.050 at 0.95).
    planning_quantile: the backlog quantile capacity is planned for; stricter than the
        SLO's so the objective holds in every window while demand moves inside the
        averaging window. None: 1 - (1 - slo_quantile) / 5 (p95 -> p99).
    latency_overhead: time a request spends outside Triton's queue and execution
        (serialisation, network) that still counts against the objective.
    items_per_request: prior for the batch items one request carries, used until
        ``nv_inference_count`` / ``nv_inference_request_success`` is measured.
    stable_window / panic_window: averaging windows of demand.
    panic_threshold: panic when short-window demand exceeds this multiple of what the
        ready pods sustain within the SLO.
    panic_hold: how long panic (no scale-down) lasts after it last triggered.
    scale_down_window: scale down only to the highest recommendation over this window.
    warm_scale_down_window: the (shorter) window used when ready warm pods could undo
        the whole cut: a wrong scale-down then costs a promotion (seconds), not a cold
        start. Never longer than scale_down_window.
    scale_up_max_factor / scale_up_min_step: one step grows to at most
        max(committed * factor, committed + min_step) pods.
    scale_down_max_fraction: one step removes at most this share of the pods.
    max_sample_age: samples older than this are stale and ignored.
    rate_window: the window of the controller's rate() queries. Samples closer than it
        overlap, so they count as fewer independent points when judging a trend.
    scrape_interval: how often Prometheus scrapes (0: as often as the policy is called).
        A gauge changes once per scrape, so two samples closer than it may hold one
        scrape's worth of change; growth between them is measured over at least this.
    cold_start / warm_start: priors for start-up and promotion times when the pool
        carries no measurement.
    lookahead: scale up for the demand expected when new pods become ready
        (slope of the stable window times the start-up time).
    target_queue_depth: explicit pending requests per serving pod (spec override);
        None derives everything from the SLO.
    burst_memory: how long measured surges (rises of demand within one start-up time
        beyond the measured noise, and queue clumps) are remembered; headroom covers them
        less what the miss budget (1 - planning quantile) absorbs. 0 turns it off.
    warm_pool_auto: size the warm pool from the remembered surges (Decision.warm_pool):
        serving pods keep the headroom a promotion (warm_start plus one panic window to
        notice) leaves room for; standby pods hold the rest of what a cold start needs.
    warm_pool_max: the most standby pods auto may keep (None: max_replicas).
    route_around_backlogs: name the ready pods whose queues they cannot clear within the
        queue budget, for the Service to route around (``gpuserve.autoscaling.shedding``).
    """

    profile: ServiceProfile
    slo_latency: float
    slo_quantile: float = 0.95
    planning_quantile: float | None = None
    latency_overhead: float = 0.0
    items_per_request: float = 1.0
    min_replicas: int = 1
    max_replicas: int = 4
    stable_window: float = 60.0
    panic_window: float = 6.0
    panic_threshold: float = 1.0
    panic_hold: float = 60.0
    scale_down_window: float = SCALE_DOWN_WINDOW_S
    warm_scale_down_window: float = 30.0
    scale_up_max_factor: float = 2.0
    scale_up_min_step: int = 4
    scale_down_max_fraction: float = 0.5
    max_sample_age: float = 30.0
    rate_window: float = 20.0
    scrape_interval: float = 0.0
    cold_start: float = 60.0
    warm_start: float = 2.0
    lookahead: bool = True
    target_queue_depth: int | None = None
    burst_memory: float = 1800.0
    warm_pool_auto: bool = False
    warm_pool_max: int | None = None
    route_around_backlogs: bool = True

    @property
    def plan_quantile(self) -> float:
        if self.planning_quantile is not None:
            return self.planning_quantile
        return 1.0 - (1.0 - self.slo_quantile) / 5.0

    def __post_init__(self) -> None:
        if self.planning_quantile is not None and not 0.5 <= self.planning_quantile < 1.0:
            raise ValueError("planning_quantile must be in [0.5, 1)")
        if self.slo_latency <= 0:
            raise ValueError("slo_latency must be > 0")
        if not 0.5 <= self.slo_quantile < 1.0:
            raise ValueError("slo_quantile must be in [0.5, 1)")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 0 <= min_replicas <= max_replicas")
        if self.panic_window <= 0 or self.stable_window < self.panic_window:
            raise ValueError("need 0 < panic_window <= stable_window")
        if self.scale_up_max_factor < 1.0 or not 0.0 < self.scale_down_max_fraction <= 1.0:
            raise ValueError("scale rate limits out of range")
