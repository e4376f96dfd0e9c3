"""Engine time costs fitted to what a replica was seen to do (gpuserve.llm.calibrating)."""

from __future__ import annotations

import random

import pytest

from gpuserve.llm.calibrating import calibrated
from gpuserve.llm.capacity import LoadShape, TokenObjectives, predict, replica_capacity, time_scale
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.observing import Observation
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import replay

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
    return Observation(seconds, seconds, len(requests) / seconds, shape, None, None, tpot,
                       0.0, 0.0, 0.0, 0.0)


def test_a_replica_five_times_slower_than_the_defaults_is_priced_as_such() -> None:
    defaults = EngineParams()
    truth = defaults.slower(5.0)
    rate = 0.6 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    seen = _window(rate, truth, seconds=600.0)
    fitted, factor = calibrated(LLMPolicy(OBJECTIVES, defaults), seen, replicas=1)
    assert factor is not None and factor == pytest.approx(5.0, rel=0.15)
    assert seen.shape is not None
    true_rate = replica_capacity(truth, seen.shape, OBJECTIVES).rate
    priced = replica_capacity(fitted.params, seen.shape, OBJECTIVES).rate
    unfitted = replica_capacity(defaults, seen.shape, OBJECTIVES).rate
    assert priced == pytest.approx(true_rate, rel=0.15)
    assert unfitted > 3 * true_rate  # what the defaults alone would promise
    # Two replicas sharing the same traffic each carried half of it.
    _, halves = calibrated(LLMPolicy(OBJECTIVES, defaults), seen, replicas=2)
    assert halves is not None and halves > factor


def test_nothing_measured_leaves_the_policy_as_it_is() -> None:
    policy = LLMPolicy(OBJECTIVES)
    assert calibrated(policy, None, replicas=1) == (policy, None)
    idle = Observation(60.0, 60.0, 0.0, None, None, None, None, 0.0, 0.0, 0.0, 0.0)
    assert calibrated(policy, idle, replicas=1) == (policy, None)
