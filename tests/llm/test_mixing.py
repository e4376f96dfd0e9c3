"""The token mix a replica is sized for: pooled over ten minutes unless it moved
(gpuserve.llm.mixing)."""

from __future__ import annotations

import random
import statistics

import pytest

from gpuserve.autoscaling.decision import PolicyMemory
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.llm.capacity import LoadShape, TokenObjectives, replica_capacity
from gpuserve.llm.deciding import LLMPolicy, decide_llm
from gpuserve.llm.mixing import MIX_Z, sized_mix
from gpuserve.llm.observing import Observation
from gpuserve.llm.params import EngineParams

OBJECTIVES = TokenObjectives(ttft_s=2.0, tpot_s=0.1, quantile=0.95)
MINUTE = 60.0


def _shape(prompts: list[float], outputs: list[float]) -> LoadShape:
    """The mix of these requests, with every moment the metrics give."""

    def moment(values: list[float], power: int) -> float:
        return statistics.fmean(v**power for v in values)

    return LoadShape(
        prompt_mean=moment(prompts, 1),
        prompt_high=sorted(prompts)[int(OBJECTIVES.quantile * len(prompts))],
        output_mean=moment(outputs, 1),
        prompt_square_mean=moment(prompts, 2),
        prompt_cube_mean=moment(prompts, 3),
        prompt_fourth_mean=moment(prompts, 4),
        output_square_mean=moment(outputs, 2),
    )


def _seen(seconds: float, prompts: list[float], outputs: list[float]) -> Observation:
    rate = len(prompts) / seconds
    shape = _shape(prompts, outputs)
    return Observation(seconds, seconds, rate, shape, None, None, None, 0.0, 0.0, 0.0, 0.0)


def _minutes(
    count: int, per_minute: int, seed: int, scale: float = 1.0
) -> list[tuple[list[float], list[float]]]:
    """Minutes of long-tailed prompts (lognormal, a standard deviation above the mean)
    and geometric-like outputs."""
    rng = random.Random(seed)
    return [
        (
            [scale * rng.lognormvariate(7.0, 1.0) for _ in range(per_minute)],
            [1.0 + rng.expovariate(1 / 150) for _ in range(per_minute)],
        )
        for _ in range(count)
    ]


def _pooled(minutes: list[tuple[list[float], list[float]]]) -> Observation:
    prompts = [p for ps, _ in minutes for p in ps]
    outputs = [o for _, os in minutes for o in os]
    return _seen(MINUTE * len(minutes), prompts, outputs)


def test_a_long_tailed_mix_is_sized_on_ten_minutes_and_steadier_for_it() -> None:
    params = EngineParams()
    minutes = _minutes(10, per_minute=180, seed=1)
    pooled = _pooled(minutes)
    own, sized, pooling = [], [], 0
    for prompts, outputs in minutes:
        window = _seen(MINUTE, prompts, outputs)
        mix = sized_mix(window, pooled)
        assert mix is not None and window.shape is not None
        own.append(replica_capacity(params, window.shape, OBJECTIVES).rate)
        sized.append(replica_capacity(params, mix.shape, OBJECTIVES).rate)
        pooling += mix.seconds == pooled.window_s
    # Most minutes did not move beyond their noise: they are sized on the pooled mix,
    # and the rate a replica is sized for strays far less between minutes.
    assert pooling >= 7
    assert max(sized) / min(sized) < max(own) / min(own)
    assert max(own) / min(own) > 1.2  # the noise pooling removes is real here


def test_a_mix_that_moved_is_sized_on_its_own_window_at_once() -> None:
    params = EngineParams()
    history = _minutes(9, per_minute=1200, seed=2)
    (prompts, outputs) = _minutes(1, per_minute=1200, seed=3, scale=1.5)[0]
    pooled = _pooled([*history, (prompts, outputs)])
    window = _seen(MINUTE, prompts, outputs)
    mix = sized_mix(window, pooled)
    assert mix is not None and mix.shape == window.shape and mix.seconds == MINUTE
    # The pooled mix would have promised more than the new one allows.
    assert pooled.shape is not None and window.shape is not None
    at_pooled = replica_capacity(params, pooled.shape, OBJECTIVES).rate
    assert at_pooled > 1.1 * replica_capacity(params, window.shape, OBJECTIVES).rate


def test_outputs_that_moved_alone_are_enough_and_an_unmeasured_spread_decides_nothing() -> None:
    base = LoadShape(1000.0, 3000.0, 200.0, prompt_square_mean=2e6, output_square_mean=8e4)
    pooled = Observation(600.0, 600.0, 10.0, base, None, None, None, 0.0, 0.0, 0.0, 0.0)

    def window(shape: LoadShape) -> Observation:
        return Observation(60.0, 60.0, 10.0, shape, None, None, None, 0.0, 0.0, 0.0, 0.0)

    # 600 requests: the outputs' standard deviation (200) is 8.2 tokens on their mean.
    error = 200.0 / 600**0.5
    near = LoadShape(1000.0, 3000.0, 200.0 + 0.9 * MIX_Z * error)
    far = LoadShape(1000.0, 3000.0, 200.0 + 1.1 * MIX_Z * error)
    assert sized_mix(window(near), pooled) == sized_mix(pooled, pooled)
    moved = sized_mix(window(far), pooled)
    assert moved is not None and moved.shape is far and moved.seconds == 60.0
    unmeasured = Observation(600.0, 600.0, 10.0, near, None, None, None, 0.0, 0.0, 0.0, 0.0)
    kept = sized_mix(window(base), unmeasured)
    assert kept is not None and kept.shape is base  # no spread: the window's own
    # Whichever measured a mix is used; neither: none.
    empty = Observation(60.0, 60.0, 0.0, None, None, None, None, 0.0, 0.0, 0.0, 0.0)
    assert sized_mix(window(far), None) == moved
    from_pool = sized_mix(empty, pooled)
    assert from_pool is not None and from_pool.shape is base and from_pool.seconds == 600.0
    assert sized_mix(empty, None) is None and sized_mix(empty, empty) is None


def test_the_decision_sizes_for_the_pooled_mix_and_says_so() -> None:
    minutes = _minutes(10, per_minute=180, seed=1)
    pooled = _pooled(minutes)
    prompts, outputs = minutes[-1]
    stable = _seen(MINUTE, prompts, outputs)
    pools = PoolState((ClassPool("h100", serving_ready=2, cold_start=45.0),))
    policy = LLMPolicy(OBJECTIVES)

    def decide(with_pool: Observation | None) -> dict[str, float]:
        return decide_llm(
            policy=policy,
            stable=stable,
            recent=stable,
            pools=pools,
            now=MINUTE,
            memory=PolicyMemory(),
            pooled=with_pool,
        ).signals

    alone, pooling = decide(None), decide(pooled)
    assert alone["mixSeconds"] == MINUTE and pooling["mixSeconds"] == 600.0
    assert pooled.shape is not None
    assert pooling["promptMean"] == pytest.approx(pooled.shape.prompt_mean)
    assert pooling["capacityPerReplica"] != alone["capacityPerReplica"]
