"""Peers' autoscalers, from their documented behaviour and defaults (shared reference
peers.md and the projects' docs), for comparison in the simulator.

None of them keeps a warm pool (nobody does). Their thresholds are what a competent user
would set after a single-replica load test (see gpuserve.sim.calibrating); the defaults of
the algorithms themselves are not changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuserve.sim.oracle import OraclePlan, OracleScaler
from gpuserve.sim.scalers import ScaleOrder, ScalerView, resize_to

__all__ = [
    "HpaBehaviour",
    "HpaFed",
    "HpaQueueDepth",
    "KedaPrometheus",
    "KnativeKpa",
    "KpaConfig",
    "OraclePlan",
    "OracleScaler",
    "StaticPeak",
]


@dataclass
class HpaBehaviour:
    """Kubernetes HPA v2 defaults: 10% tolerance; scale-up policies 4 pods or 100% per 15s
    (the larger), no up-stabilisation; scale-down 100% per 15s after a 300s stabilisation
    window (the highest recommendation over the window wins)."""

    min_replicas: int
    max_replicas: int
    tolerance: float = 0.1
    down_window: float = 300.0
    up_pods: int = 4
    up_percent: float = 100.0
    down_percent: float = 100.0  # one period removes at most this share of the replicas
    recommendations: list[tuple[float, int]] = field(default_factory=list)

    def next_size(self, *, now: float, current: int, ready: int, usage_ratio: float | None) -> int:
        if usage_ratio is None:
            return current  # metric unavailable: the HPA skips scaling
        if abs(usage_ratio - 1.0) <= self.tolerance:
            desired = current
        else:
            desired = math.ceil(usage_ratio * max(ready, 1))
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        if not self.recommendations:
            # Primed as if it had been running at the current size (steady-state start).
            self.recommendations.append((now, current))
        self.recommendations = [
            (t, n) for t, n in self.recommendations if t > now - self.down_window
        ]
        self.recommendations.append((now, desired))
        if desired < current:
            desired = min(current, max(n for _, n in self.recommendations))
            # The HPA's Percent policy keeps int(current x (1 - percent)): rounded down,
            # unlike the builtin engine's own step (calculateScaleDownLimitWithBehaviors).
            desired = max(desired, int(current * (1 - self.down_percent / 100)))
        up_limit = max(current + self.up_pods, math.ceil(current * (1 + self.up_percent / 100)))
        return max(self.min_replicas, min(self.max_replicas, min(desired, up_limit)))


@dataclass(kw_only=True)
class HpaFed:
    """An HPA fed one usage ratio per sync (15s): its own Pods metric, or the external
    metric KEDA serves to the HPA it creates. A subclass says how it reads the ratio."""

    min_replicas: int
    max_replicas: int
    interval: float = 15.0
    behaviour: HpaBehaviour = field(init=False)

    def __post_init__(self) -> None:
        self.behaviour = HpaBehaviour(self.min_replicas, self.max_replicas)

    def usage(self, view: ScalerView) -> tuple[float | None, str]:
        """The usage ratio (None: no metric) and what it was read from, for the reason."""
        raise NotImplementedError

    def step(self, view: ScalerView) -> ScaleOrder:
        ratio, reading = self.usage(view)
        size = self.behaviour.next_size(
            now=view.now,
            current=view.pools.committed,
            ready=view.pools.serving_ready,
            usage_ratio=ratio,
        )
        return resize_to(view.pools, size, reason=reading)


@dataclass(kw_only=True)
class HpaQueueDepth(HpaFed):
    """HPA with a Pods metric from prometheus-adapter: nv_inference_pending_request_count,
    target averageValue per pod; synced every 15s."""

    target_per_pod: float
    offset: float = 0.7
    name: str = "hpa-queue"

    def usage(self, view: ScalerView) -> tuple[float | None, str]:
        scrape = view.store.latest_scrape(view.now)
        ready = view.pools.serving_ready
        ratio = None
        if scrape is not None and ready > 0:
            ratio = (scrape.pending / ready) / self.target_per_pod
        return ratio, f"hpa: queue/pod ratio {ratio}"


@dataclass(kw_only=True)
class KedaPrometheus(HpaFed):
    """KEDA ScaledObject with a Prometheus trigger,
    query sum(rate(nv_inference_request_success[1m]) + rate(nv_inference_request_failure[1m])),
    metricType AverageValue: desired = ceil(value / threshold). KEDA feeds the HPA it
    creates, so HPA's sync (15s) and behaviour (300s scale-down window) apply; the 30s
    polling interval and 300s cooldown govern activation to and from zero only, which
    min_replicas >= 1 never reaches."""

    threshold: float
    query_window: float = 60.0
    offset: float = 0.9
    name: str = "keda-prom"

    def usage(self, view: ScalerView) -> tuple[float | None, str]:
        value = view.store.request_rate(view.now, self.query_window)
        ratio = None
        if value is not None:
            # AverageValue: the HPA compares value/ready with the threshold.
            ratio = value / (max(view.pools.serving_ready, 1) * self.threshold)
        return ratio, f"keda: rate {value}"


@dataclass(frozen=True, slots=True)
class KpaConfig:
    """Knative's config-autoscaler defaults: target utilisation 70% of the per-pod
    concurrency target; stable window 60s; panic window 6s (10%); panic threshold 200%;
    max scale-up rate 1000x, max scale-down rate 2x per tick."""

    utilisation: float = 0.7
    stable_window: float = 60.0
    panic_window: float = 6.0
    panic_threshold: float = 2.0
    max_up_rate: float = 1000.0
    max_down_rate: float = 2.0


@dataclass
class KnativeKpa:
    """Knative KPA on concurrency (``config``: Knative's defaults), ticking every 2s; panic
    mode lasts until a stable window has passed without the panic condition and never
    scales down."""

    target_concurrency: float
    min_replicas: int
    max_replicas: int
    config: KpaConfig = field(default_factory=KpaConfig)
    interval: float = 2.0
    offset: float = 0.3
    name: str = "kpa"
    panic_since: float | None = None
    max_panic_pods: int = 0
    first_seen: float | None = None

    def step(self, view: ScalerView) -> ScaleOrder:
        knative = self.config
        ready = max(1, view.pools.serving_ready)
        current = view.pools.committed
        stable = view.store.concurrency(view.now, knative.stable_window)
        panic = view.store.concurrency(view.now, knative.panic_window)
        if self.first_seen is None:
            self.first_seen = view.now
        if stable is None or panic is None:
            return ScaleOrder(reason="kpa: no data")
        per_pod = self.target_concurrency * knative.utilisation
        want_stable = math.ceil(stable / per_pod)
        want_panic = math.ceil(panic / per_pod)
        up = math.ceil(knative.max_up_rate * ready)
        down = math.floor(ready / knative.max_down_rate)
        want_stable = max(down, min(up, want_stable))
        want_panic = max(down, min(up, want_panic))
        if want_panic / ready >= knative.panic_threshold:
            self.panic_since = view.now  # (re)enter panic
        elif self.panic_since is not None and view.now - self.panic_since >= knative.stable_window:
            self.panic_since = None
            self.max_panic_pods = 0
        if self.panic_since is not None:
            self.max_panic_pods = max(self.max_panic_pods, want_panic, current)
            desired = self.max_panic_pods
        else:
            desired = want_stable
        if view.now - self.first_seen < knative.stable_window:
            # Primed as if in steady state: no scale-down before one stable window of data.
            desired = max(desired, current)
        desired = max(self.min_replicas, min(self.max_replicas, desired))
        return resize_to(view.pools, desired, reason=f"kpa: concurrency {stable:.1f}")


@dataclass
class StaticPeak:
    """Provisioned once for the peak (the oracle plan's largest window), never scaled."""

    replicas: int
    interval: float = 3600.0
    offset: float = 0.0
    name: str = "static-peak"

    def step(self, view: ScalerView) -> ScaleOrder:
        return resize_to(view.pools, self.replicas, reason="static")
