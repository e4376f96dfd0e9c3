"""Engine time costs fitted to what a replica was seen to do (gpuserve.llm.calibrating)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpuserve.autoscaling.decision import Decision, PolicyMemory
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.llm.calibrating import (
    SCALE_MEMORY_S,
    contended,
    decide_priced,
    fitted_scale,
    measured_scale,
    remember_fit,
    remember_scale,
    scaled,
)
from gpuserve.llm.capacity import LoadShape, TokenObjectives, predict, replica_capacity, time_scale
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.observing import Observation
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import replay
from gpuserve.sim.llm.cluster import ClusterConfig, simulate_cluster
from gpuserve.sim.llm.scalers import GpuserveLLM
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace

OBJECTIVES = TokenObjectives(ttft_s=2.0, tpot_s=0.2, quantile=0.95)
SHAPE = LoadShape(prompt_mean=600.0, prompt_high=1500.0, output_mean=120.0)


@pytest.mark.parametrize("factor", [0.25, 1.0, 6.0])
@pytest.mark.parametrize("share", [0.1, 0.7])
def test_the_fitted_factor_is_the_one_that_made_the_measured_step(
    factor: float, share: float
) -> None:
    base = EngineParams()
    slow = base.slower(factor)
    rate = share * replica_capacity(slow, SHAPE, OBJECTIVES).rate
    measured = predict(slow, SHAPE, OBJECTIVES.quantile, rate).step_s
    assert time_scale(base, SHAPE, rate, measured) == pytest.approx(factor, rel=1e-9)
    assert time_scale(base, SHAPE, rate, 0.0) is None
    assert time_scale(base, SHAPE, 0.0, measured) is None


def _window(rate: float, params: EngineParams, seconds: float) -> Observation:
    """Poisson traffic of SHAPE-like requests through the engine; what the metrics would
    show of it (the mean output-token gap is what vLLM's TPOT histogram averages)."""
    rng = random.Random(3)
    clock, requests = 0.0, []
    while clock < seconds:
        clock += rng.expovariate(rate)
        prompt = max(1, int(rng.lognormvariate(6.2, 0.6)))
        requests.append((clock, prompt, max(2, int(rng.lognormvariate(4.7, 0.5))), ()))
    run = replay(requests, params, fast=True)
    gaps = [
        b - a
        for timing in run.timings.values()
        for a, b in zip(timing.token_s, timing.token_s[1:], strict=False)
    ]
    prompts = [p for _, p, _, _ in requests]
    outputs = [o for _, _, o, _ in requests]
    shape = LoadShape(
        prompt_mean=sum(prompts) / len(prompts),
        prompt_high=sorted(prompts)[int(0.95 * len(prompts))],
        output_mean=sum(outputs) / len(outputs),
    )
    tpot = sum(gaps) / len(gaps)
    return Observation(
        seconds, seconds, len(requests) / seconds, shape, None, None, tpot, 0.0, 0.0, 0.0, 0.0
    )


def test_a_replica_five_times_slower_than_the_defaults_is_priced_as_such() -> None:
    defaults = EngineParams()
    truth = defaults.slower(5.0)
    rate = 0.6 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    seen = _window(rate, truth, seconds=600.0)
    factor = fitted_scale(LLMPolicy(OBJECTIVES, defaults), seen, replicas=1)
    assert factor is not None and factor == pytest.approx(5.0, rel=0.15)
    fitted = scaled(LLMPolicy(OBJECTIVES, defaults), factor)
    assert seen.shape is not None
    true_rate = replica_capacity(truth, seen.shape, OBJECTIVES).rate
    priced = replica_capacity(fitted.params, seen.shape, OBJECTIVES).rate
    unfitted = replica_capacity(defaults, seen.shape, OBJECTIVES).rate
    assert priced == pytest.approx(true_rate, rel=0.15)
    assert unfitted > 3 * true_rate  # what the defaults alone would promise
    # Two replicas sharing the same traffic each carried half of it.
    halves = fitted_scale(LLMPolicy(OBJECTIVES, defaults), seen, replicas=2)
    assert halves is not None and halves > factor


def test_nothing_measured_leaves_the_policy_as_it_is() -> None:
    policy = LLMPolicy(OBJECTIVES)
    assert fitted_scale(policy, None, replicas=1) is None
    idle = Observation(60.0, 60.0, 0.0, None, None, None, None, 0.0, 0.0, 0.0, 0.0)
    assert fitted_scale(policy, idle, replicas=1) is None
    assert scaled(policy, None) is policy
    assert measured_scale(remember_scale((), 0.0, None)) is None


def test_the_factor_is_the_newest_minutes_and_outlives_its_traffic() -> None:
    """Twelve fits a minute: the minute's geometric mean prices the engine, the newest
    minute that has fits is the one that counts, and minutes past the memory go."""
    minutes: tuple[tuple[float, float, int], ...] = ()
    for step in range(12):
        minutes = remember_scale(minutes, 5.0 * step, 2.0 if step % 2 else 0.5)
    assert len(minutes) == 1 and minutes[0][2] == 12
    assert measured_scale(minutes) == pytest.approx(1.0)
    minutes = remember_scale(minutes, 60.0, 3.0)
    assert measured_scale(minutes) == pytest.approx(3.0)
    # No fit for five minutes (no traffic): the last one still prices the engine.
    minutes = remember_scale(minutes, 360.0, None)
    assert measured_scale(minutes) == pytest.approx(3.0)
    # Past the memory nothing is left.
    assert remember_scale(minutes, 60.0 + SCALE_MEMORY_S + 1.0, None) == ()


def test_a_contended_window_is_fitted_only_while_nothing_else_is_known() -> None:
    """Requests waiting stretch the steps beyond the model's steady state: such a window
    would read the engine as slower than it is. It is fitted only when no other fit is
    known (an engine overloaded from its first minute must still be priced)."""
    defaults = EngineParams()
    truth = defaults.slower(2.0)
    rate = 0.5 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    calm = _window(rate, truth, seconds=300.0)
    queued = replace(calm, waiting=4.0, tpot_mean_s=3 * (calm.tpot_mean_s or 0.0))
    policy = LLMPolicy(OBJECTIVES, defaults)
    _, alone = remember_fit((), 0.0, policy, queued, 1, None)
    assert alone is not None and alone > 3.0  # the only measurement there is
    known, factor = remember_fit((), 0.0, policy, calm, 1, None)
    assert factor is not None and factor == pytest.approx(2.0, rel=0.15)
    after, same = remember_fit(known, 5.0, policy, queued, 1, None)
    assert same == factor and after == known
    assert contended(queued) and not contended(calm)


def test_the_decision_is_priced_at_the_remembered_factor() -> None:
    """The recent window of a 5x-slow engine fits about 5 (the minute's, which measured no
    token time here, is not what is fitted); the next evaluation, with nothing measured,
    still prices the engine so, and the memory carries the minute's fit."""
    defaults = EngineParams()
    truth = defaults.slower(5.0)
    rate = 0.6 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    seen = _window(rate, truth, seconds=600.0)
    minute = replace(seen, tpot_mean_s=None)
    policy = LLMPolicy(OBJECTIVES, defaults)
    pools = PoolState((ClassPool("h100", serving_ready=2, cold_start=45.0),))

    def decide(
        recent: Observation | None, memory: PolicyMemory, replicas: int, now: float = 600.0
    ) -> tuple[Decision, float | None]:
        stable = minute if recent is not None else None
        return decide_priced(
            policy=policy,
            stable=stable,
            recent=recent,
            pools=pools,
            now=now,
            memory=memory,
            replicas=replicas,
        )

    first, factor = decide(seen, PolicyMemory(), replicas=1)
    assert factor is not None and factor == pytest.approx(5.0, rel=0.15)
    assert first.memory.time_scales and first.memory.time_scales[0][2] == 1
    assert first.signals["capacityPerReplica"] == pytest.approx(
        scaled(policy, factor).utilization * replica_capacity(truth, SHAPE, OBJECTIVES).rate,
        rel=0.3,
    )
    unpriced, none = decide(seen, PolicyMemory(), replicas=0)  # no engine reported
    assert none is None
    assert unpriced.signals["capacityPerReplica"] > 3 * first.signals["capacityPerReplica"]
    again, kept = decide(None, first.memory, replicas=0, now=605.0)
    assert kept == factor and again.memory.time_scales == first.memory.time_scales
    restored = PolicyMemory.from_status(first.memory.to_status())
    assert measured_scale(restored.time_scales) == pytest.approx(factor, rel=1e-3)


def test_the_simulated_rule_prices_a_slow_engine_as_the_operator_does() -> None:
    """gpuserve's scaler in the simulator decides through ``decide_priced``: on engines
    twice as slow as its policy says, its memory measures about 2."""
    policy = LLMPolicy(OBJECTIVES, EngineParams(), max_replicas=8)
    rng = random.Random(5)
    clock, requests = 0.0, []
    while clock < 300.0:
        clock += rng.expovariate(1.5)
        requests.append(TokenRequest(clock, rng.randint(200, 1500), rng.randint(80, 160)))
    config = ClusterConfig(EngineParams().slower(2.0), OBJECTIVES, initial_replicas=1, seed=2)
    scaler = GpuserveLLM(policy)
    simulate_cluster(config, TokenTrace("chat", tuple(requests)), scaler)
    factor = measured_scale(scaler.memory.time_scales)
    assert factor is not None and 1.6 < factor < 2.5
