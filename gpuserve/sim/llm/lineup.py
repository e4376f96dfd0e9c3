"""One comparison: the oracle, static at peak, gpuserve and the LLM baselines on a trace.

Every contender starts with the oracle's first-window size (a service already running at
its level) and may grow to twice the oracle's peak (a ``maxReplicas`` a platform team sets).
The baselines' settings are those a team would choose from a load test of the same trace:
docs/llm.md says which and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Literal, get_args

import numpy as np

from gpuserve.autoscaling.config import SCALE_DOWN_WINDOW_S, PolicyConfig, ServiceProfile
from gpuserve.autoscaling.from_spec import DEFAULT_TIME_PER_BATCH_S, DEFAULT_TIME_PER_ITEM_S
from gpuserve.llm.capacity import LoadShape, replica_capacity
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.params import EngineParams
from gpuserve.sim.keda_engine import RENDERED_KEDA
from gpuserve.sim.llm.cluster import ClusterConfig, ClusterRun, ClusterScaler, simulate_cluster
from gpuserve.sim.llm.keda_rendered import KedaReplay, RenderedKedaLLM
from gpuserve.sim.llm.oracle import plan_oracle
from gpuserve.sim.llm.scalers import (
    CLASS,
    GpuserveLLM,
    PlannerLike,
    Static,
    hpa_kv_usage,
    keda_waiting,
)
from gpuserve.sim.llm.traces import TokenTrace
from gpuserve.sim.oracle import windows_overlapping
from gpuserve.sim.start_costs import start_cost_s

KEDA_WAITING_PER_REPLICA = 2.0
LLMPolicyName = Literal[
    "gpuserve",
    "gpuserve-keda",
    "keda-waiting",
    "hpa-kv",
    "planner-like",
    "static-peak",
    "oracle",
]
LLM_POLICIES: tuple[LLMPolicyName, ...] = get_args(LLMPolicyName)


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    run: ClusterRun
    seconds: float  # wall time of the simulation
    # The oracle's: GPU-hours its plan costs beyond its run once it pays for its start-ups
    # (gpuserve.sim.start_costs); 0 for the other policies, whose runs pay them.
    start_cost_hours: float = 0.0


def trace_shape(trace: TokenTrace, quantile: float) -> LoadShape:
    """The token mix of a whole trace (what a load test would have used)."""
    prompts = np.array([r.prompt_tokens for r in trace.requests], dtype=float)
    outputs = np.array([r.output_tokens for r in trace.requests], dtype=float)
    return LoadShape(
        float(prompts.mean()),
        float(np.quantile(prompts, quantile)),
        float(outputs.mean()),
        prompt_square_mean=float((prompts**2).mean()),
        prompt_cube_mean=float((prompts**3).mean()),
        prompt_fourth_mean=float((prompts**4).mean()),
    )


# The contenders that run as scalers (the oracle is planned, not a scaler).
SCALED: tuple[LLMPolicyName, ...] = (
    "static-peak",
    "gpuserve",
    "keda-waiting",
    "hpa-kv",
    "planner-like",
)


def contender(
    name: LLMPolicyName,
    policy: LLMPolicy,
    trace: TokenTrace,
    *,
    peak: int,
    keda: KedaReplay | None = None,
) -> ClusterScaler:
    """One scaler of the lineup within ``policy``'s bounds; ``peak`` is the oracle's peak
    (what static provisioning holds). The baselines' targets are what a load test of
    ``trace`` on ``policy.params`` would give a team. ``keda``: the service's scaling
    fields and class for ``gpuserve-keda`` (default: ``keda_replay(policy)``)."""
    most = policy.max_replicas
    if name == "static-peak":
        return Static(peak)
    if name == "gpuserve":
        return GpuserveLLM(policy)
    if name == RENDERED_KEDA:
        return RenderedKedaLLM(policy, keda if keda is not None else keda_replay(policy))
    if name == "planner-like":
        return PlannerLike(policy.objectives, policy)
    if name == "keda-waiting":
        scaler = keda_waiting(KEDA_WAITING_PER_REPLICA, most)
    elif name == "hpa-kv":
        shape = trace_shape(trace, policy.objectives.quantile)
        at_capacity = replica_capacity(policy.params, shape, policy.objectives).at_rate
        scaler = hpa_kv_usage(max(0.05, at_capacity.kv_usage * policy.utilization), most)
    else:
        raise ValueError(f"policy: {name!r} is not a scaler (one of {', '.join(SCALED)})")
    scaler.hpa.min_replicas = policy.min_replicas
    return scaler


def keda_replay(policy: LLMPolicy, *, calibrate: bool = True) -> KedaReplay:
    """The ScaledObject gpuserve renders for a service of ``policy`` whose other scaling
    fields are the API's defaults (windows and step limits; the request-level service
    times, which an LLM service's rendering does not read, at their priors)."""
    config = PolicyConfig(
        profile=ServiceProfile(DEFAULT_TIME_PER_BATCH_S, DEFAULT_TIME_PER_ITEM_S),
        slo_latency=policy.objectives.ttft_s,
        min_replicas=policy.min_replicas,
        max_replicas=policy.max_replicas,
        scale_down_window=policy.scale_down_window_s,
    )
    return KedaReplay(config, CLASS, calibrate)


# The rendered ScaledObject with its thresholds as first rendered, for the default mix
# and for the trace's mix stated in the spec: what the measurement changes.
UNMEASURED_KEDA = "gpuserve-keda-unmeasured"
STATED_KEDA = "gpuserve-keda-stated"


# With a history: static sized on the history's busiest minute, beside static-peak sized
# on the measured part's (foresight).
YESTERDAY_STATIC = "static-yesterday"


@dataclass(frozen=True, slots=True)
class Yardsticks:
    """What a comparison measures gpuserve against, which gpuserve's rule does not change:
    the oracle's run and plan, and every baseline's run. A rerun after a change to the rule
    may reuse them (``compare(reuse=...)``) and simulate gpuserve alone."""

    first: int  # the oracle's first-window size: where every scaled contender starts
    peak: int  # the oracle's peak over the whole trace: half of everyone's maxReplicas
    entries: tuple[Entry, ...]  # the oracle's, then the baselines' in ``SCALED`` order


def _policy(config: ClusterConfig, peak: int, scale_down_window_s: float) -> LLMPolicy:
    return LLMPolicy(
        config.objectives,
        config.params,
        max_replicas=2 * peak,
        startup_s=config.startup_s,
        scale_down_window_s=scale_down_window_s,
    )


def _run(config: ClusterConfig, trace: TokenTrace, scaler: ClusterScaler, first: int) -> Entry:
    """One scaler from the oracle's first size (static from its own)."""
    start = first if not isinstance(scaler, Static) else scaler.replicas
    began = time.perf_counter()
    run = simulate_cluster(replace(config, initial_replicas=start), trace, scaler)
    return Entry(scaler.name, run, time.perf_counter() - began)


def yardsticks(
    config: ClusterConfig, trace: TokenTrace, *, window_s: float = 60.0, history_s: float = 0.0
) -> Yardsticks:
    """The oracle's plan and run, then every baseline's run (all but gpuserve). With
    ``history_s``, the trace's first seconds are a history every contender serves before
    the part measured (``ClusterRun.measured_from``): static-peak is sized on the measured part's
    busiest minute, and static-yesterday on the history's."""
    started = time.perf_counter()
    planned = plan_oracle(config, trace, window_s=window_s, target=config.objectives.quantile)
    plan = planned.scaler.plan
    measured = windows_overlapping(len(plan), window_s, history_s)
    starts = start_cost_s(plan, window_s, config.startup_s, from_window=measured.start) / 3600.0
    entries = [Entry("oracle", planned.run, time.perf_counter() - started, starts)]
    # The baselines keep their own settings: gpuserve's scale-down window is not theirs.
    policy = _policy(config, planned.peak, SCALE_DOWN_WINDOW_S)
    static_size = planned.peak_within(history_s)
    for name in SCALED:
        if name != "gpuserve":
            scaler = contender(name, policy, trace, peak=static_size)
            entries.append(_run(config, trace, scaler, plan[0]))
    if history_s > 0:
        yesterday = Static(planned.peak_within(0.0, history_s), name=YESTERDAY_STATIC)
        entries.append(_run(config, trace, yesterday, plan[0]))
    return Yardsticks(plan[0], planned.peak, tuple(entries))


def compare(
    config: ClusterConfig,
    trace: TokenTrace,
    *,
    window_s: float = 60.0,
    scale_down_window_s: float = SCALE_DOWN_WINDOW_S,
    reuse: Yardsticks | None = None,
    history_s: float = 0.0,
    rendered_keda: bool = False,
    stated_params: EngineParams | None = None,
) -> list[Entry]:
    """The oracle first, then static at its peak, gpuserve and the baselines (and
    static-yesterday after them, with a history). ``scale_down_window_s``: gpuserve's
    scaleDownStabilization (the baselines keep theirs). ``reuse``: the yardsticks of an
    earlier comparison of the same config and trace (computed here when None); only
    gpuserve is simulated then. ``history_s``: as for ``yardsticks``; the runs are whole
    (``ClusterRun.measured_from`` measures them after the history). ``rendered_keda``:
    ``gpuserve-keda``, ``gpuserve-keda-unmeasured`` and ``gpuserve-keda-stated`` too,
    after gpuserve (simulated every time, as gpuserve is: they are gpuserve's own
    rendering)."""
    sticks = (
        reuse
        if reuse is not None
        else yardsticks(config, trace, window_s=window_s, history_s=history_s)
    )
    told = config if stated_params is None else replace(config, params=stated_params)
    policy = _policy(told, sticks.peak, scale_down_window_s)
    ours = _run(config, trace, contender("gpuserve", policy, trace, peak=sticks.peak), sticks.first)
    by_name = {e.name: e for e in sticks.entries}
    by_name["gpuserve"] = ours
    order: list[str] = list(SCALED)
    if rendered_keda:
        # As the operator runs it (the thresholds following the measured mix), as first
        # rendered for the default mix, and as first rendered for the trace's own mix as
        # a load test would state it (spec.llm.expectedTokens).
        stated = replace(policy, fallback_shape=trace_shape(trace, policy.objectives.quantile))
        rows = (
            (RENDERED_KEDA, policy, True),
            (UNMEASURED_KEDA, policy, False),
            (STATED_KEDA, stated, False),
        )
        for name, sized, measured in rows:
            keda = RenderedKedaLLM(sized, keda_replay(sized, calibrate=measured), name=name)
            by_name[name] = _run(config, trace, keda, sticks.first)
        at = order.index("gpuserve") + 1
        order[at:at] = [name for name, _, _ in rows]
    extra = [by_name[YESTERDAY_STATIC]] if YESTERDAY_STATIC in by_name else []
    return [by_name["oracle"], *(by_name[name] for name in order), *extra]
