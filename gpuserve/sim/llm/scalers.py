"""The scalers compared on LLM traffic: gpuserve's rule and what LLM platforms use today.

Each reads only the vLLM-named metrics the cluster scrapes (``ClusterView.snapshots``), as
its real counterpart reads Prometheus. docs/llm.md describes each baseline and its source.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpuserve.autoscaling.decision import Decision, PolicyMemory
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.autoscaling.query_windows import LLM_MIX_S
from gpuserve.llm import metrics as vllm
from gpuserve.llm.calibrating import decide_priced
from gpuserve.llm.capacity import TokenObjectives, replica_capacity
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.observing import Observation, VllmSnapshot, observe
from gpuserve.sim.llm.cluster import ClusterScaler, ClusterView

CLASS = "gpu"  # one accelerator class in these runs


def _since(snapshots: Sequence[VllmSnapshot], at: float) -> tuple[VllmSnapshot, list[int]]:
    """The newest snapshot taken at or before ``at`` (the oldest where none is), and the
    engines each later scrape counted, newest first (scrapes are sorted by time)."""
    counts: list[int] = []
    for snapshot in reversed(snapshots):
        if snapshot.at <= at + 1e-9:
            return snapshot, counts
        counts.append(snapshot.replicas)
    return snapshots[0], counts[:-1]


def window(view: ClusterView, seconds: float, quantile: float) -> Observation | None:
    """The last ``seconds`` of scrapes as one observation (shorter at the very start), with
    the engines that served over it: the mean over its scrapes of those that answered, as
    the operator reads it from Prometheus."""
    if len(view.snapshots) < 2:
        return None
    latest = view.snapshots[-1]
    earlier, counts = _since(view.snapshots, latest.at - seconds)
    engines = sum(counts) / len(counts) if counts else None
    return replace(observe(earlier, latest, quantile), engines=engines)


def pooled_window(view: ClusterView, quantile: float) -> Observation | None:
    """The last ``LLM_MIX_S`` of scrapes, where the run is that old (as the operator, which
    finds no series that far back for a younger service)."""
    if not view.snapshots or view.snapshots[0].at > view.snapshots[-1].at - LLM_MIX_S:
        return None
    return window(view, LLM_MIX_S, quantile)


def pool_of(view: ClusterView, policy: LLMPolicy) -> PoolState:
    """The cluster's one class of replicas as the rule sees a pool: those serving, those
    still starting (each a whole start-up from ready)."""
    return PoolState(
        (
            ClassPool(
                CLASS,
                serving_ready=view.serving,
                starting=(0.0,) * view.starting,
                cold_start=policy.startup_s,
            ),
        )
    )


@dataclass
class GpuserveLLM(ClusterScaler):
    """gpuserve's LLM rule (``gpuserve.llm.deciding.decide_llm``), called as the operator
    calls it: a stable (60 s), a recent (15 s) and a pooled (10 min) window, the pool, the
    memory, the engines priced by the time per output token measured
    (``decide_priced``)."""

    policy: LLMPolicy
    name: str = "gpuserve"
    interval_s: float = 5.0
    offset_s: float = 0.5
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    keep_decisions: bool = False

    def target(self, view: ClusterView) -> int | None:
        q = self.policy.objectives.quantile
        pools = pool_of(view, self.policy)
        decision, _ = decide_priced(
            policy=self.policy,
            stable=window(view, 60.0, q),
            recent=window(view, 15.0, q),
            pools=pools,
            now=view.now,
            memory=self.memory,
            replicas=view.snapshots[-1].replicas if view.snapshots else 0,
            pooled=pooled_window(view, q),
        )
        self.memory = decision.memory
        if self.keep_decisions:
            self.decisions.append((view.now, decision))
        return decision.desired_replicas


@dataclass
class HpaRule:
    """The HorizontalPodAutoscaler's rule on an average-value metric: desired =
    ceil(current x metric / target) outside a 10% tolerance; growth at most
    max(4 pods, 100%) per period; shrinking to the largest recommendation of the last
    ``scale_down_window_s`` (the defaults of autoscaling/v2)."""

    min_replicas: int = 1
    max_replicas: int = 100
    tolerance: float = 0.1
    scale_down_window_s: float = 300.0
    history: list[tuple[float, int]] = field(default_factory=list)

    def desired(self, now: float, current: int, ratio: float) -> int:
        proposal = current if abs(ratio - 1.0) <= self.tolerance else math.ceil(current * ratio)
        proposal = min(proposal, max(current + 4, 2 * current))
        proposal = max(self.min_replicas, min(self.max_replicas, proposal))
        self.history = [(t, n) for t, n in self.history if t > now - self.scale_down_window_s]
        self.history.append((now, proposal))
        if proposal < current:
            return max(n for _, n in self.history)
        return proposal


@dataclass
class HpaOnGauge(ClusterScaler):
    """The HPA rule on one vLLM gauge. ``summed``: the gauge is added up over replicas and
    the target is per replica (KEDA's AverageValue on a sum); otherwise it is the mean of
    the serving replicas (replicas still starting report nothing)."""

    metric: str
    target_value: float
    summed: bool
    name: str
    interval_s: float = 15.0
    offset_s: float = 1.0
    hpa: HpaRule = field(default_factory=HpaRule)

    def target(self, view: ClusterView) -> int | None:
        if not view.snapshots:
            return None
        value = view.snapshots[-1].gauges.get(self.metric, 0.0)
        if self.summed:
            current = max(1, view.committed)
            return self.hpa.desired(view.now, current, value / (self.target_value * current))
        ready = max(1, view.serving)
        wanted = self.hpa.desired(view.now, ready, value / self.target_value) + view.starting
        return min(self.hpa.max_replicas, wanted)


def keda_waiting(per_replica: float, most: int) -> HpaOnGauge:
    """KEDA's Prometheus scaler on ``sum(vllm:num_requests_waiting)`` with an AverageValue
    target per replica (KServe's and the vLLM production stack's KEDA path), feeding the
    HPA rule; polled every 15 s."""
    waiting = vllm.NUM_REQUESTS_WAITING.name
    return HpaOnGauge(waiting, per_replica, True, "keda-waiting", hpa=HpaRule(max_replicas=most))


def hpa_kv_usage(target: float, most: int) -> HpaOnGauge:
    """HPA on the replicas' mean KV-cache usage (AIBrix / KubeAI style)."""
    usage = vllm.KV_CACHE_USAGE.name
    return HpaOnGauge(usage, target, False, "hpa-kv", offset_s=2.0, hpa=HpaRule(max_replicas=most))


@dataclass
class PlannerLike(ClusterScaler):
    """Like NVIDIA Dynamo's SLA planner in aggregated form: every adjustment interval it
    predicts the next interval's request rate and mean input/output lengths (constant
    predictor: the last interval's), takes a replica's throughput at the TTFT/ITL targets
    from its profile (here the engine model at mean lengths, targets met on average) and
    asks for predicted rate / that throughput, corrected by measured over expected
    latency. No backlog term, no scale-down window."""

    objectives: TokenObjectives
    policy: LLMPolicy
    name: str = "planner-like"
    interval_s: float = 60.0
    offset_s: float = 3.0

    def target(self, view: ClusterView) -> int | None:
        last = window(view, self.interval_s, 0.5)
        if last is None or last.shape is None:
            return None
        mean_targets = TokenObjectives(self.objectives.ttft_s, self.objectives.tpot_s, 0.5)
        capacity = replica_capacity(self.policy.params, last.shape, mean_targets)
        if capacity.rate <= 0:
            return None
        correction = 1.0
        expected = capacity.at_rate
        if last.ttft_high_s is not None and expected.ttft_s > 0:
            correction = max(correction, last.ttft_high_s / expected.ttft_s)
        # The planner counts requests at its frontend as they arrive: what the replicas
        # admitted plus the growth of their queues.
        needed = last.arrival_rate / capacity.rate * min(correction, 2.0)
        return max(1, min(self.policy.max_replicas, math.ceil(needed - 1e-9)))


@dataclass
class Static(ClusterScaler):
    """A fixed replica count (provisioned for the peak)."""

    replicas: int = 1
    name: str = "static-peak"
    interval_s: float = 3600.0
    offset_s: float = 0.0

    def target(self, view: ClusterView) -> int | None:
        return self.replicas


@dataclass
class Planned(ClusterScaler):
    """Follows a per-window plan with replicas that serve at once (the oracle)."""

    window_s: float
    plan: tuple[int, ...]
    name: str = "oracle"
    instant: bool = True
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        self.interval_s = self.window_s

    def target(self, view: ClusterView) -> int | None:
        k = min(len(self.plan) - 1, int((view.now + 1e-6) // self.window_s))
        return self.plan[k]
