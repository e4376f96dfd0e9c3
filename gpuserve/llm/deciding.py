"""The autoscaling rule for LLM services: replicas from token objectives and the capacity
model, returning the operator's ``Decision``.

Pure and deterministic like ``gpuserve.autoscaling.deciding.decide``, which dispatches
here for LLM formats. Per evaluation:

1. The token mix and prefix-hit rate of the stable window (``LoadShape``) give each class's
   sustainable rate per replica (``replica_capacity``), used up to ``utilization``. Where
   one replica misses the objectives even with no load, no number of replicas meets them:
   the replicas are then sized for throughput, each engine busy ``UNREACHABLE_LOAD`` of
   the time, and the reason says which objective is out of reach.
2. Demand is the stable arrival rate (requests that got their first token plus the
   growth of the queue: under overload the first alone reads as what the replicas admit)
   or, where the recent rate rises beyond its noise
   (Poisson's times the arrivals' index of dispersion, ``gpuserve.llm.dispersion``), the
   recent rate plus that rise carried one start-up time (``startup_s``) ahead; where the
   burst memory's per-minute levels rise steadily (``gpuserve.autoscaling.trend``: a
   significant slope over the last ``TREND_SPAN_S``, no surge among them), the rate
   expected a start-up from now if that is more; plus the requests waiting beyond one per
   ready replica, admitted within ``queue_budget_s``.
3. Measured TTFT (at the quantile) or TPOT (mean gap) over its objective while requests
   wait or are preempted, with no replica starting, asks for one more replica than are
   ready (the model missed something).
4. Burst memory (``gpuserve.autoscaling.bursts``, the request rule's): a rise far beyond
   its noise is recorded per minute over ``burst_memory_s``, and the replicas for the
   stable rate plus the headroom those surges call for (less the miss budget of the
   objectives' quantile) are held. Bursts shorter than a start-up cannot be chased.
5. Growth is immediate; shrinking follows the largest need over ``scale_down_window_s``
   that the stable rate or the burst memory backs (not the lookahead on a rise, the 15-s
   rate or the backlog), and only where the demand is below the replicas kept by more
   than twice the stable rate's noise; never above the replicas committed, kept in the
   policy memory as the operator keeps it in status (the current size counts until a
   whole window has been seen); over one start-up only where the minutes' levels fall and
   their line accounts for every record held (``gpuserve.autoscaling.trend.hold_window``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpuserve.autoscaling.bursts import burst_bound, burst_headroom, remember_minute
from gpuserve.autoscaling.config import SCALE_DOWN_WINDOW_S
from gpuserve.autoscaling.deciding import finish_decision
from gpuserve.autoscaling.decision import Decision, Mode, PolicyMemory
from gpuserve.autoscaling.limits import note_cap
from gpuserve.autoscaling.outruns import OutrunReport, Seen, track_outruns
from gpuserve.autoscaling.pools import PoolState
from gpuserve.autoscaling.trend import hold_window, minute_trend
from gpuserve.llm.capacity import (
    LoadShape,
    TokenObjectives,
    default_shape,
    replica_capacity,
    saturation_rate,
)
from gpuserve.llm.dispersion import dispersion_sample, measured_dispersion, remember_dispersion
from gpuserve.llm.mixing import sized_mix
from gpuserve.llm.observing import Observation
from gpuserve.llm.params import EngineParams

# Standard deviations of noise (Poisson's, times the measured dispersion) a recent rise
# must exceed to count.
SURGE_Z = 2.0
# Whole minutes a trend is fitted over: a ramp must last several of them to be one.
TREND_SPAN_S = 300.0
# A rise recorded in the burst memory must be far beyond its noise: the test runs every
# 5 s, and each false record holds headroom for the whole memory.
BURST_Z = 4.0
# Objectives no replica can meet leave throughput to size for: each replica's engine busy
# half the time, its steps twice their unloaded length (a queue that stays short).
UNREACHABLE_LOAD = 0.5


@dataclass(frozen=True, slots=True)
class LLMPolicy:
    """What the rule needs from the service's spec and its classes."""

    objectives: TokenObjectives
    params: EngineParams = field(default_factory=EngineParams)  # a class not in by_class
    by_class: Mapping[str, EngineParams] = field(default_factory=dict)
    # Before any measurement: the spec's llm.expectedTokens, else the default mix.
    fallback_shape: LoadShape = field(default_factory=default_shape)
    min_replicas: int = 1
    max_replicas: int = 100
    utilization: float = 1.0  # share of the modelled capacity (already at the quantile)
    startup_s: float = 45.0
    queue_budget_s: float = 10.0
    scale_down_window_s: float = SCALE_DOWN_WINDOW_S
    max_sample_age_s: float = 60.0
    burst_memory_s: float = 1800.0  # 0 turns burst memory off

    def params_for(self, class_name: str) -> EngineParams:
        return self.by_class.get(class_name, self.params)


@dataclass(frozen=True, slots=True)
class LLMInputs:
    """What ``gpuserve.autoscaling.deciding.decide`` hands over for an LLM service: the
    policy from its spec and two windows of its vLLM metrics (``observing.observe``)."""

    policy: LLMPolicy
    stable: Observation | None  # the last minute
    recent: Observation | None  # the last 15 seconds


def decide_llm(
    *,
    policy: LLMPolicy,
    stable: Observation | None,
    recent: Observation | None,
    pools: PoolState,
    now: float,
    memory: PolicyMemory,
    pooled: Observation | None = None,
) -> Decision:
    """How many serving replicas the LLM service needs now, and how to get there.
    ``pooled``: the last ten minutes of traffic, whose mix is sized for unless
    the stable window's moved (``mixing.sized_mix``)."""
    committed = pools.committed
    if stable is None or recent is None:
        return _decision(policy, pools, memory, now, "hold", committed, "no metrics yet", {})
    age = now - recent.at
    if age > policy.max_sample_age_s:
        why = f"metrics stale: newest window ended {age:.0f}s ago"
        return _decision(policy, pools, memory, now, "hold", committed, why, {})
    mix = sized_mix(stable, pooled)
    shape = mix.shape if mix else recent.shape or policy.fallback_shape
    sized = sizing(policy, pools.classes[0].name, shape) if pools.classes else None
    per_replica = sized.per_replica if sized else 0.0
    # The recent window counts only where it rises beyond its own noise: a 15-second
    # count is noisy, and each false rise buys a replica for a whole scale-down window.
    # The noise is Poisson's times the arrivals' measured dispersion: clumped arrivals
    # rise beyond Poisson noise with nothing to chase.
    # Arrivals, not admissions: while the replicas are overloaded, the first-token rate
    # is what they admit, and a spike would read as the capacity it overloads.
    recent_rate, stable_rate = recent.arrival_rate, stable.arrival_rate
    rise = recent_rate - stable_rate
    noise = math.sqrt(max(recent_rate, stable_rate) / max(recent.window_s, 1e-9))
    dispersion = measured_dispersion(memory.dispersions, now)
    # Against Poisson noise alone: on bursty traffic the rises a dispersion would explain
    # are the bursts to hold headroom for.
    surge = rise if rise > BURST_Z * noise else 0.0
    surges = remember_minute(memory.surges, now, surge, stable_rate, memory_s=policy.burst_memory_s)
    burst = burst_headroom(
        surges, policy.startup_s, stable_rate, quantile=policy.objectives.quantile
    )
    bound = burst_bound(
        surges,
        now,
        policy.startup_s,
        stable_rate,
        level_window_s=stable.window_s,
        window_s=recent.window_s,
    )
    # The arrivals now against what the replicas able to serve within seconds (ready or
    # warm) serve.
    able = pools.serving_ready + pools.warm_ready
    seen = Seen(recent_rate, recent.window_s, surge > 0.0, able, able * per_replica)
    outruns, outran_report = track_outruns(
        memory.outruns,
        seen,
        now=now,
        memory_s=policy.burst_memory_s,
        gap_s=recent.window_s,
        horizon_s=policy.startup_s,
        pods_for=lambda rate: replicas_for(rate, per_replica) if per_replica > 0 else 0,
    )
    if rise > SURGE_Z * noise * math.sqrt(dispersion):
        demand = recent_rate + rise * min(1.0, policy.startup_s / stable.window_s)
        if burst > 0.0:
            # A rate within its noise of the height the bursts seen reached is one of
            # them: neither it nor its extrapolation asks for more than that height.
            demand = bound.extrapolate(demand, recent_rate, stable_rate)
    else:
        demand = stable_rate
    # A rise too slow for the recent window to tell from noise shows in the minutes' levels:
    # the minute's rate stands half a window back, and a replica started now serves a
    # start-up later.
    level_slope = minute_trend(memory.surges, now, TREND_SPAN_S)
    trend = max(0.0, level_slope)
    ahead = stable_rate + trend * (stable.window_s / 2 + policy.startup_s)
    trending = trend > 0 and ahead > demand
    if trending:
        demand = ahead
    # A request or so waiting per replica is normal (it waits a step, or behind a long
    # prompt's chunks); only the excess is a backlog more replicas would drain.
    excess = max(0.0, recent.waiting - max(1, pools.serving_ready))
    backlog = excess / policy.queue_budget_s
    signals = {
        "capacityPerReplica": per_replica,
        "demand": demand,
        "backlogRate": backlog,
        "promptMean": shape.prompt_mean,
        "promptRms": shape.prompt_rms,
        "outputMean": shape.output_mean,
        "prefixHitRate": shape.prefix_hit_rate,
        # the window the mix was measured over, in seconds (0: the recent window's or the
        # assumed one)
        "mixSeconds": mix.seconds if mix else 0.0,
        "kvUsage": recent.kv_usage,
        "waiting": recent.waiting,
        "arrivalRate": recent_rate,  # the last 15 s: first tokens plus the queue's growth
        "admittedRate": recent.rate,  # the last 15 s: first tokens alone
        "arrivalDispersion": dispersion,
        "levelTrend": trend,
    }
    if per_replica <= 0:
        why = "no AcceleratorClass to size for: holding"
        return _decision(policy, pools, memory, now, "steady", committed, why, signals)
    need = replicas_for(demand + backlog, per_replica)
    bound_by = sized.bound_by if sized else "-bound"
    reason = (
        f"{demand:.2f} req/s + backlog {backlog:.2f} req/s at {per_replica:.2f} req/s per "
        f"replica ({bound_by})"
    )
    if trending:
        reason += f"; demand rising {60 * trend:.2f} req/s a minute"
    need_burst = replicas_for(bound.provision(stable_rate, burst), per_replica) if burst > 0 else 0
    signals.update(burstHeadroom=burst, needBurst=float(need_burst))
    if math.isfinite(bound.reach):
        signals["burstReach"] = bound.reach
    if need_burst > need:
        need = need_burst
        reason += f"; {burst:.2f} req/s of burst headroom"
    over = _over_objective(policy.objectives, recent)
    # Replicas only help latency that comes from contention: requests waiting for
    # admission or preempted. A long prompt alone is slow on any number of replicas.
    contended = excess > 0 or recent.preemptions > 0
    mode: Mode = "steady"
    if over and contended and pools.starting == 0 and pools.serving_ready + 1 > need:
        need = pools.serving_ready + 1
        reason += f"; measured {over} over its objective: one more replica"
        mode = "panic"
    # What is remembered for scale-down is the evidence of demand (the stable rate, the
    # burst headroom), not the lookahead on a rise, the 15-s rate or the backlog: replicas
    # bought to chase a burst or drain a queue go once it is over, instead of a window
    # later. The 15-s rate rises beyond 2 sigma in some evaluation of most windows (one
    # every 5 s) on Poisson traffic alone; a rise that lasts is in the stable rate within
    # a minute, and one far beyond its noise is in the burst memory.
    evidence = max(need_burst, replicas_for(stable_rate, per_replica))
    window_s = policy.scale_down_window_s
    kept = (
        *((t, n) for t, n in memory.recommendations if t > now - window_s),
        (now, min(need, evidence)),
    )
    # Until a whole window has been seen (a restarted operator), the current size counts
    # as a recommendation: what was recommended before is unknown.
    since = memory.since if memory.since is not None else now
    held_for = hold_window(
        kept,
        now,
        since=since,
        window_s=window_s,
        startup_s=policy.startup_s,
        slope=level_slope,
        burst_headroom=burst,
        # A record is made from the stable rate, which stands where the minutes' line
        # does for a record made now.
        line_now=stable_rate,
        replicas_for=lambda rate: replicas_for(rate, per_replica),
    )
    if held_for < window_s and need < committed:
        reason += f"; demand falling: scale-down held over {held_for:.0f}s"
    remembered = [n for t, n in kept if t > now - held_for] + (
        [committed] if now - since < window_s else []
    )
    # Holding a scale-down never grows: a record above the replicas committed was a need
    # they could not all be placed for, and the evidence now asks for fewer.
    target = need if need >= committed else min(committed, max(remembered))
    if need < committed:
        # A cut needs demand below the replicas it keeps by more than the stable rate's
        # noise: a need that crosses a whole replica and back with that noise alone
        # started a replica and cancelled it at the next evaluation, over and over.
        band = SURGE_Z * math.sqrt(dispersion * stable_rate / max(stable.window_s, 1e-9))
        signals["scaleDownBand"] = band
        within = min(committed, replicas_for(demand + backlog + band, per_replica))
        if within > target:
            target = within
            fewer = within - 1
            reason += (
                f"; scale-down held at {within}: {demand + backlog:.2f} req/s is within its "
                f"noise ({band:.2f} req/s) of the {fewer * per_replica:.2f} req/s {fewer} "
                f"replica{'s' if fewer != 1 else ''} serve"
            )
    signals["need"] = float(need)
    memory = replace(
        memory,
        recommendations=kept,
        since=since,
        surges=surges,
        outruns=outruns,
        dispersions=remember_dispersion(
            memory.dispersions,
            now,
            dispersion_sample(recent_rate, recent.window_s, stable_rate, stable.window_s),
            memory_s=policy.burst_memory_s,
        ),
    )
    reason = note_cap(reason, signals, wanted=target, max_replicas=policy.max_replicas)
    return _decision(policy, pools, memory, now, mode, target, reason, signals, outran_report)


@dataclass(frozen=True, slots=True)
class Sizing:
    """What one replica of a class serves within the objectives, and what bounds it."""

    per_replica: float  # requests/s, at the policy's utilization
    unreachable: str | None  # the objective one replica breaks with no load, if any
    limit: str  # what sets the rate where the objectives are reachable

    @property
    def bound_by(self) -> str:
        if self.unreachable is None:
            return f"{self.limit}-bound"
        return (
            f"objectives unreachable: {self.unreachable.upper()} missed on one replica with "
            f"no load; sized for throughput, each replica's engine busy "
            f"{UNREACHABLE_LOAD:.0%} of the time"
        )


def sizing(policy: LLMPolicy, class_name: str, shape: LoadShape) -> Sizing:
    """The request rate a replica of ``class_name`` is sized for on ``shape``: the capacity
    model's within the objectives, used up to ``utilization``; where one replica misses
    the objectives even with no load, throughput at ``UNREACHABLE_LOAD``. The one rule for
    the builtin engine's need and a KEDA service's rendered threshold."""
    params = policy.params_for(class_name)
    capacity = replica_capacity(params, shape, policy.objectives)
    if capacity.rate > 0:
        return Sizing(capacity.rate * policy.utilization, None, capacity.limit)
    broken = capacity.at_rate.broken(policy.objectives, params) or capacity.limit
    return Sizing(saturation_rate(params, shape) * UNREACHABLE_LOAD, broken, capacity.limit)


def replicas_for(rate: float, per_replica: float) -> int:
    """Replicas that serve ``rate`` at ``per_replica`` each (a rate that is a whole multiple
    of the capacity, up to rounding, needs no extra replica)."""
    return math.ceil(rate / per_replica - 1e-9)


def _over_objective(objectives: TokenObjectives, recent: Observation) -> str | None:
    if recent.ttft_high_s is not None and recent.ttft_high_s > objectives.ttft_s:
        return "TTFT"
    # vLLM's TPOT histogram holds single gaps, whose tail is the steps that prefilled a
    # long prompt; the objective is a request's mean gap, so the mean is compared.
    if recent.tpot_mean_s is not None and recent.tpot_mean_s > objectives.tpot_s:
        return "TPOT"
    return None


def _decision(
    policy: LLMPolicy,
    pools: PoolState,
    memory: PolicyMemory,
    now: float,
    mode: Mode,
    target: int,
    reason: str,
    signals: dict[str, float],
    outran: OutrunReport | None = None,
) -> Decision:
    return finish_decision(
        pools=pools,
        memory=memory,
        now=now,
        mode=mode,
        target=max(policy.min_replicas, min(policy.max_replicas, target)),
        panic_until=memory.panic_until,
        reason=reason,
        signals=signals,
        outran=outran,
    )
