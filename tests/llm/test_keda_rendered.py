"""The LLM service's rendered ScaledObject, replayed on the token-level cluster
(``gpuserve.sim.llm.keda_rendered``): each trigger grows the service on its own, the HPA
gives the replicas back when the load goes, and the thresholds follow the measured mix."""

from __future__ import annotations

import random
from dataclasses import replace

from gpuserve.llm.capacity import TokenObjectives
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.params import EngineParams
from gpuserve.resources.keda import KedaScaling, llm_keda_scaling
from gpuserve.sim.llm.cluster import ClusterConfig, ClusterRun, simulate_cluster
from gpuserve.sim.llm.keda_rendered import RenderedKedaLLM
from gpuserve.sim.llm.lineup import contender, keda_replay
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace

OBJECTIVES = TokenObjectives(ttft_s=1.0, tpot_s=0.05)
POLICY = LLMPolicy(OBJECTIVES, EngineParams(), max_replicas=10)


def _chat(
    spans: list[tuple[float, float]], seed: int = 3, prompts: tuple[int, int] = (200, 1800)
) -> TokenTrace:
    """Poisson arrivals at each (rate, seconds) in turn; prompts uniform in ``prompts``
    (by default about the rule's default mix, 1,000 tokens on average), 150-250 output
    tokens."""
    rng = random.Random(seed)
    clock, end, out = 0.0, 0.0, []
    for rate, seconds in spans:
        end += seconds
        while True:
            clock += rng.expovariate(rate)
            if clock >= end:
                clock = end
                break
            out.append(TokenRequest(clock, rng.randint(*prompts), rng.randint(150, 250)))
    return TokenTrace("chat", tuple(out))


def _scaler(measured: bool = True, scaling: KedaScaling | None = None) -> RenderedKedaLLM:
    scaler = RenderedKedaLLM(POLICY, keda_replay(POLICY, calibrate=measured))
    if scaling is not None:
        scaler.scaling = scaling
    return scaler


def _run(trace: TokenTrace, scaler: RenderedKedaLLM) -> ClusterRun:
    config = ClusterConfig(POLICY.params, OBJECTIVES, initial_replicas=1, seed=1)
    return simulate_cluster(config, trace, scaler)


def _most(run: ClusterRun) -> int:
    return max(n for _, n in run.replicas)


def _first(policy: LLMPolicy = POLICY) -> KedaScaling:
    replay = keda_replay(policy)
    return llm_keda_scaling(replay.config, policy, replay.class_name)


def test_arrivals_beyond_one_replica_grow_the_service_and_it_shrinks_after() -> None:
    k = _first()
    busy = 3.0 * k.rate_threshold
    run = _run(_chat([(busy, 300.0), (0.3 * k.rate_threshold, 400.0)]), _scaler())
    # Three replicas' worth of arrivals ask for three (at the threshold's headroom, four).
    assert _most(run) >= 3
    # The scale-down window (120 s) and the 50 % a period later, the load is one replica's.
    assert run.replicas[-1][1] <= 2, run.replicas[-8:]


def test_each_trigger_grows_the_service_on_its_own() -> None:
    k = _first()
    assert k.queue_threshold is not None
    trace = _chat([(3.0 * k.rate_threshold, 300.0)])
    # The waiting requests alone (a rate threshold nothing reaches, as a request-level
    # model's would be for an LLM): the queue one replica cannot admit asks for more.
    waiting_only = replace(k, rate_threshold=1000.0 * k.rate_threshold)
    assert _most(_run(trace, _scaler(False, waiting_only))) >= 2
    # Neither trigger within reach: the service stays at one replica.
    neither = replace(k, rate_threshold=1e6, queue_threshold=1e6)
    assert _most(_run(trace, _scaler(False, neither))) == 1
    arrivals_only = replace(k, queue_threshold=None)
    assert _most(_run(trace, _scaler(False, arrivals_only))) >= 3


def test_the_thresholds_follow_the_measured_mix_of_long_prompts() -> None:
    # Prompts of 5,000-7,800 tokens at a third of the default mix's threshold, which one
    # replica would carry for chat: the measured mix lowers the thresholds, and more
    # replicas serve.
    k = _first()
    trace = _chat([(0.3 * k.rate_threshold, 420.0)], prompts=(5000, 7800))
    unmeasured = _scaler(False)
    as_rendered = _run(trace, unmeasured)
    measured = _scaler(True)
    following = _run(trace, measured)
    assert measured.mix is not None and measured.mix.shape.prompt_mean > 5000
    assert measured.scaling.rate_threshold < 0.5 * unmeasured.scaling.rate_threshold
    assert _most(following) > _most(as_rendered)
    assert following.attainment() > as_rendered.attainment() + 0.2


def test_the_lineup_contender_is_the_rendering_of_the_policy() -> None:
    scaler = contender("gpuserve-keda", POLICY, _chat([(1.0, 10.0)]), peak=1)
    assert isinstance(scaler, RenderedKedaLLM)
    assert scaler.scaling == _first()
    assert scaler.behaviour.down_window == POLICY.scale_down_window_s


def test_engines_slower_than_modelled_are_measured_and_the_thresholds_follow() -> None:
    # The replicas take three times the modelled time costs: the replay fits the factor
    # from their time per output token, as the operator does, and lowers the thresholds.
    k = _first()
    trace = _chat([(0.5 * k.rate_threshold, 420.0)])
    scaler = _scaler(True)
    config = ClusterConfig(POLICY.params.slower(3.0), OBJECTIVES, initial_replicas=1, seed=1)
    run = simulate_cluster(config, trace, scaler)
    assert scaler.mix is not None and scaler.mix.time_scale is not None
    assert 2.4 < scaler.mix.time_scale < 3.6
    assert scaler.scaling.rate_threshold < 0.5 * k.rate_threshold
    unmeasured = _scaler(False)
    as_rendered = simulate_cluster(config, trace, unmeasured)
    assert _most(run) > _most(as_rendered)
    assert run.attainment() > as_rendered.attainment()
