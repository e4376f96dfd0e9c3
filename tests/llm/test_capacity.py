"""The capacity model against the engine it models, and its limits."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from gpuserve.llm.capacity import (
    LoadShape,
    TokenObjectives,
    output_gap_s,
    predict,
    replica_capacity,
    request_work_s,
    time_scale,
)
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import mean_output_gap_s, poisson_requests, replay

OBJECTIVES = TokenObjectives(ttft_s=0.5, tpot_s=0.04, quantile=0.99)


def _mix(seed: int, count: int) -> list[tuple[int, int]]:
    """Chat-like token counts: log-normal prompts (median ~600) and outputs (~150)."""
    rng = random.Random(seed)
    return [
        (
            min(6000, int(rng.lognormvariate(6.4, 0.8))) + 1,
            min(900, int(rng.lognormvariate(5.0, 0.7))) + 1,
        )
        for _ in range(count)
    ]


def _shape(mix: list[tuple[int, int]]) -> LoadShape:
    prompts = np.array([p for p, _ in mix], dtype=float)
    return LoadShape(
        prompt_mean=float(prompts.mean()),
        prompt_high=float(np.quantile(prompts, OBJECTIVES.quantile)),
        output_mean=float(np.mean([o for _, o in mix])),
    )


def _attainment(
    rate: float,
    mix: list[tuple[int, int]],
    params: EngineParams,
    objectives: TokenObjectives = OBJECTIVES,
) -> float:
    run = replay(poisson_requests(mix, rate, seed=7), params, fast=True)
    met = 0
    for timing in run.timings.values():
        tokens = timing.token_s
        tpot = (tokens[-1] - tokens[0]) / (len(tokens) - 1) if len(tokens) > 1 else 0.0
        ttft = timing.ttft_s or 0.0
        met += ttft <= objectives.ttft_s and tpot <= objectives.tpot_s
    return met / len(run.timings)


def test_the_engine_meets_the_objectives_at_the_rate_and_misses_them_above() -> None:
    params = EngineParams()
    mix = _mix(1, 2500)
    capacity = replica_capacity(params, _shape(mix), OBJECTIVES)
    assert capacity.rate > 1.0 and capacity.limit in ("ttft", "tpot")
    assert _attainment(capacity.rate, mix, params) >= OBJECTIVES.quantile - 0.005
    assert _attainment(capacity.rate * 1.3, mix, params) < OBJECTIVES.quantile - 0.02


def test_a_few_long_prompts_are_priced_by_their_square_not_by_the_mean() -> None:
    # 5% of prompts 16-24k tokens among chat-sized ones: their attention is most of the
    # engine's work, which the mean prompt (about 1,650 tokens) hides and the root mean
    # square (about 4,350) does not.
    rng = random.Random(1)
    mix = [
        (
            rng.randint(16_000, 24_000)
            if rng.random() < 0.05
            else min(6000, int(rng.lognormvariate(6.4, 0.8))) + 1,
            min(900, int(rng.lognormvariate(5.0, 0.7))) + 1,
        )
        for _ in range(2500)
    ]
    objectives = TokenObjectives(ttft_s=4.0, tpot_s=0.1, quantile=0.95)
    params = EngineParams(max_model_len=32_768)
    prompts = np.array([p for p, _ in mix], dtype=float)
    mean_only = LoadShape(
        prompt_mean=float(prompts.mean()),
        prompt_high=float(np.quantile(prompts, objectives.quantile)),
        output_mean=float(np.mean([o for _, o in mix])),
    )
    squared = replace(mean_only, prompt_square_mean=float((prompts**2).mean()))
    assert squared.prompt_rms == pytest.approx(4354, rel=0.01)
    rate = replica_capacity(params, squared, objectives).rate
    naive = replica_capacity(params, mean_only, objectives).rate
    assert rate < 0.85 * naive
    assert _attainment(rate, mix, params, objectives) >= objectives.quantile - 0.05
    assert _attainment(naive, mix, params, objectives) < 0.5


def _moments(mix: list[tuple[int, int]], objectives: TokenObjectives) -> LoadShape:
    prompts = np.array([p for p, _ in mix], dtype=float)
    return LoadShape(
        prompt_mean=float(prompts.mean()),
        prompt_high=float(np.quantile(prompts, objectives.quantile)),
        output_mean=float(np.mean([o for _, o in mix])),
        prompt_square_mean=float((prompts**2).mean()),
        prompt_cube_mean=float((prompts**3).mean()),
        prompt_fourth_mean=float((prompts**4).mean()),
    )


def test_prompts_queue_for_a_small_token_budget_under_a_tight_ttft() -> None:
    # With 1,024 tokens a step, prompts wait for each other's chunks: at the rate the
    # step-in-progress figure alone gives (26.6 req/s, TPOT-bound), 74 % of requests get
    # their first token within 0.5 s. The queue puts the rate where the engine meets it.
    params = EngineParams(max_batched_tokens=1024)
    objectives = TokenObjectives(ttft_s=0.5, tpot_s=0.1)
    mix = _mix(1, 2500)
    capacity = replica_capacity(params, _moments(mix, objectives), objectives)
    assert capacity.limit == "ttft"
    assert _attainment(capacity.rate, mix, params, objectives) >= objectives.quantile - 0.005
    assert _attainment(capacity.rate * 1.3, mix, params, objectives) < 0.5


def test_a_wider_spread_of_prompts_queues_longer() -> None:
    # Same mean and mean square, a heavier tail (fourth moment): prompts' prefill times
    # spread more, so they wait longer at the same rate and fewer fit a TTFT objective.
    params = EngineParams(max_batched_tokens=1024)
    objectives = TokenObjectives(ttft_s=2.0, tpot_s=0.2)
    narrow = LoadShape(2000, 8000, 200, prompt_square_mean=2.0e7)
    wide = replace(narrow, prompt_fourth_mean=1.0e16)
    assert narrow.prompt_moment(3) == pytest.approx(2.0e7**1.5)
    assert narrow.prompt_moment(4) == pytest.approx(2.0e7**2)
    rate = replica_capacity(params, narrow, objectives).rate
    assert predict(params, wide, 0.99, rate).ttft_s > predict(params, narrow, 0.99, rate).ttft_s
    assert replica_capacity(params, wide, objectives).rate < 0.9 * rate


def test_unobserved_moments_are_the_least_the_lower_ones_allow() -> None:
    shape = LoadShape(1000, 4000, 200, prompt_square_mean=500.0**2, prompt_cube_mean=-0.0)
    # A square below the mean's square (a histogram's bucket spread) counts as the mean's.
    assert shape.prompt_moment(2) == pytest.approx(1000.0**2)
    assert shape.prompt_moment(3) == pytest.approx(1000.0**3)
    assert shape.prompt_moment(4) == pytest.approx(1000.0**4)
    with pytest.raises(ValueError, match="power"):
        shape.prompt_moment(5)
    with pytest.raises(ValueError, match="prompt_fourth_mean"):
        LoadShape(1000, 4000, 200, prompt_fourth_mean=-1.0)


def test_prefix_hits_raise_the_rate_and_a_faster_engine_too() -> None:
    shape = LoadShape(4000, 12000, 200)
    base = replica_capacity(EngineParams(), shape, OBJECTIVES).rate
    cached = LoadShape(4000, 12000, 200, prefix_hit_rate=0.6)
    assert replica_capacity(EngineParams(), cached, OBJECTIVES).rate > 1.3 * base
    params = EngineParams()
    faster = replace(
        params,
        prefill_s_per_token=params.prefill_s_per_token / 2,
        decode_s_per_seq=params.decode_s_per_seq / 2,
    )
    assert replica_capacity(faster, shape, OBJECTIVES).rate > 1.3 * base


def test_a_small_kv_cache_is_the_limit() -> None:
    shape = LoadShape(3000, 6000, 400)
    small = EngineParams(num_blocks=2000)  # 32k tokens: about ten long sequences
    capacity = replica_capacity(small, shape, TokenObjectives(5.0, 0.5))
    assert capacity.limit == "kv-cache"
    assert capacity.at_rate.kv_usage == pytest.approx(0.9, abs=0.01)
    roomy = replica_capacity(EngineParams(), shape, TokenObjectives(5.0, 0.5))
    assert roomy.rate > 2 * capacity.rate


def test_an_objective_below_one_prompts_prefill_is_unreachable() -> None:
    shape = LoadShape(2000, 8000, 100)  # the p99 prompt alone takes ~0.2 s to prefill
    capacity = replica_capacity(EngineParams(), shape, TokenObjectives(0.1, 0.05))
    assert capacity.rate == 0.0 and capacity.limit == "unreachable"


def test_predictions_grow_with_the_rate_and_saturate() -> None:
    shape = LoadShape(1000, 4000, 200)
    rates = [1.0, 5.0, 10.0, 15.0]
    steps = [predict(EngineParams(), shape, 0.99, r).step_s for r in rates]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert predict(EngineParams(), shape, 0.99, 1000.0).tpot_s == float("inf")


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("ttft_s", {"ttft_s": 0.0, "tpot_s": 0.1}),
        ("quantile", {"ttft_s": 1.0, "tpot_s": 0.1, "quantile": 1.0}),
    ],
)
def test_bad_objectives_name_the_field(field: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=field):
        TokenObjectives(**kwargs)


def _long_prompts(seed: int, count: int) -> list[tuple[int, int]]:
    """Long-tailed prompts (median ~4,000 tokens, some over 50,000) and short outputs."""
    rng = random.Random(seed)
    return [
        (min(100_000, int(rng.lognormvariate(8.3, 1.2))) + 1, int(rng.expovariate(1 / 150)) + 2)
        for _ in range(count)
    ]


@pytest.mark.parametrize("load", [0.3, 0.5])
def test_the_mean_output_gap_is_the_engines_over_its_tokens(load: float) -> None:
    """Poisson arrivals of long-tailed prompts through the engine the model describes: the
    factor fitted from the mean gap between a stream's tokens reads that engine as it is,
    where the mean step (each step's cost shared by the sequences in it) reads it as
    slower: more streams decode in the long steps that prefill the prompts."""
    params = EngineParams(max_model_len=131_072, max_batched_tokens=1024)
    mix = _long_prompts(5, 700)
    prompts = np.array([p for p, _ in mix], dtype=float)
    shape = LoadShape(
        prompt_mean=float(prompts.mean()),
        prompt_high=float(np.quantile(prompts, 0.99)),
        output_mean=float(np.mean([o for _, o in mix])),
        prompt_square_mean=float(np.mean(prompts**2)),
    )
    rate = load / request_work_s(params, shape)
    measured = mean_output_gap_s(replay(poisson_requests(mix, rate, seed=9), params, fast=True))
    fit = time_scale(params, shape, rate, measured)
    assert fit == pytest.approx(1.0, abs=0.06)
    step = predict(params, shape, 0.99, rate).step_s
    assert step < output_gap_s(params, shape, rate) < measured * 1.1
    # The mean step run backwards: k b / (1 - k r w) = measured.
    per_step = measured / (params.decode_base_s + measured * load)
    assert per_step > 1.08


def test_the_output_gap_scales_with_the_engine() -> None:
    """An engine k times slower, offered 1/k of the rate, runs the same steps k times as
    long; at saturation the gap has no bound."""
    shape = LoadShape(8000, 30000, 300, prompt_square_mean=2e8)
    base = EngineParams(max_model_len=131_072)
    rate = 0.4 / request_work_s(base, shape)
    gap = output_gap_s(base, shape, rate)
    assert output_gap_s(base.slower(2.5), shape, rate / 2.5) == pytest.approx(2.5 * gap)
    assert output_gap_s(base, shape, 1.0 / request_work_s(base, shape)) == float("inf")
    assert time_scale(base, shape, rate / 2.5, 2.5 * gap) == pytest.approx(2.5, rel=1e-9)
