"""The LLM service's rendered ScaledObject, replayed on the token-level cluster
(``gpuserve.sim.llm.keda_rendered``): each trigger grows the service on its own, and the
HPA gives the replicas back when the load goes."""

from __future__ import annotations

import random
from dataclasses import replace

from gpuserve.llm.capacity import TokenObjectives
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.params import EngineParams
from gpuserve.resources.keda import KedaScaling
from gpuserve.sim.llm.cluster import ClusterConfig, ClusterRun, simulate_cluster
from gpuserve.sim.llm.keda_rendered import RenderedKedaLLM
from gpuserve.sim.llm.lineup import contender, rendered_scaling
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace

OBJECTIVES = TokenObjectives(ttft_s=1.0, tpot_s=0.05)
POLICY = LLMPolicy(OBJECTIVES, EngineParams(), max_replicas=10)


def _chat(spans: list[tuple[float, float]], seed: int = 3) -> TokenTrace:
    """Poisson arrivals at each (rate, seconds) in turn; prompts about the rule's default
    mix (1,000 tokens on average), 150-250 output tokens."""
    rng = random.Random(seed)
    clock, end, out = 0.0, 0.0, []
    for rate, seconds in spans:
        end += seconds
        while True:
            clock += rng.expovariate(rate)
            if clock >= end:
                clock = end
                break
            out.append(TokenRequest(clock, rng.randint(200, 1800), rng.randint(150, 250)))
    return TokenTrace("chat", tuple(out))


def _run(trace: TokenTrace, scaling: KedaScaling) -> ClusterRun:
    scaler = RenderedKedaLLM(scaling, 1, POLICY.max_replicas, OBJECTIVES.quantile)
    config = ClusterConfig(POLICY.params, OBJECTIVES, initial_replicas=1, seed=1)
    return simulate_cluster(config, trace, scaler)


def _most(run: ClusterRun) -> int:
    return max(n for _, n in run.replicas)


def test_arrivals_beyond_one_replica_grow_the_service_and_it_shrinks_after() -> None:
    k = rendered_scaling(POLICY)
    assert k.queue_threshold is not None
    busy = 3.0 * k.rate_threshold
    run = _run(_chat([(busy, 300.0), (0.3 * k.rate_threshold, 400.0)]), k)
    # Three replicas' worth of arrivals ask for three (at the threshold's headroom, four).
    assert _most(run) >= 3
    # The scale-down window (120 s) and the 50 % a period later, the load is one replica's.
    assert run.replicas[-1][1] <= 2, run.replicas[-8:]


def test_each_trigger_grows_the_service_on_its_own() -> None:
    k = rendered_scaling(POLICY)
    assert k.queue_threshold is not None
    trace = _chat([(3.0 * k.rate_threshold, 300.0)])
    # The waiting requests alone (a rate threshold nothing reaches, as a request-level
    # model's would be for an LLM): the queue one replica cannot admit asks for more.
    waiting_only = _run(trace, replace(k, rate_threshold=1000.0 * k.rate_threshold))
    assert _most(waiting_only) >= 2
    # Neither trigger within reach: the service stays at one replica.
    neither = _run(trace, replace(k, rate_threshold=1e6, queue_threshold=1e6))
    assert _most(neither) == 1
    assert _most(_run(trace, replace(k, queue_threshold=None))) >= 3


def test_the_lineup_contender_is_the_rendering_of_the_policy() -> None:
    scaler = contender("gpuserve-keda", POLICY, _chat([(1.0, 10.0)]), peak=1)
    assert isinstance(scaler, RenderedKedaLLM)
    assert scaler.scaling == rendered_scaling(POLICY)
    assert scaler.behaviour.down_window == POLICY.scale_down_window_s
