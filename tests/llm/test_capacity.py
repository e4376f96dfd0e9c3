"""The capacity model against the engine it models, and its limits."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from gpuserve.llm.capacity import (
    LoadShape,
    TokenObjectives,
    predict,
    replica_capacity,
)
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import replay

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


def _attainment(rate: float, mix: list[tuple[int, int]], params: EngineParams) -> float:
    rng = random.Random(7)
    clock, requests = 0.0, []
    for prompt, output in mix:
        clock += rng.expovariate(rate)
        requests.append((clock, prompt, output, ()))
    run = replay(requests, params, fast=True)
    met = 0
    for timing in run.timings.values():
        tokens = timing.token_s
        tpot = (tokens[-1] - tokens[0]) / (len(tokens) - 1) if len(tokens) > 1 else 0.0
        ttft = timing.ttft_s or 0.0
        met += ttft <= OBJECTIVES.ttft_s and tpot <= OBJECTIVES.tpot_s
    return met / len(run.timings)


def test_the_engine_meets_the_objectives_at_the_rate_and_misses_them_above() -> None:
    params = EngineParams()
    mix = _mix(1, 2500)
    capacity = replica_capacity(params, _shape(mix), OBJECTIVES)
    assert capacity.rate > 1.0 and capacity.limit in ("ttft", "tpot")
    assert _attainment(capacity.rate, mix, params) >= OBJECTIVES.quantile - 0.005
    assert _attainment(capacity.rate * 1.3, mix, params) < OBJECTIVES.quantile - 0.02


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
