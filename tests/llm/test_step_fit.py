"""The engine's costs fitted to step times: recovered from timings the cost rule produced,
never negative, and refused on too little data."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpuserve.llm.params import EngineParams, prompt_pairs
from gpuserve.llm.step_fit import (
    DecodeTiming,
    PrefillTiming,
    fit_record,
    fit_step_costs,
    prefill_timings,
)

RECORD = Path(__file__).resolve().parents[2] / "docs/bench-notes/gpu-engine-timing-h100-prefix.json"
TRUTH = EngineParams(
    decode_base_s=6e-3,
    decode_s_per_seq=12e-6,
    decode_s_per_context_token=50e-9,
    prefill_s_per_token=25e-6,
    prefill_s_per_token_pair=2e-9,
)


def _timings(noise: float, seed: int) -> tuple[list[DecodeTiming], list[PrefillTiming]]:
    rng = random.Random(seed)
    decode = [
        DecodeTiming(b, c, TRUTH.step_cost_s(0, b, b * c) * rng.uniform(1 - noise, 1 + noise))
        for c in (256, 1024, 4096)
        for b in (1, 4, 16, 64, 256)
    ]
    prefill = [
        PrefillTiming(
            n,
            TRUTH.step_cost_s(n, 0, 0, prompt_pairs(n, k)) * rng.uniform(1 - noise, 1 + noise),
            k,
        )
        for n in (512, 1024, 2048, 4096, 8192)
        for k in (0, 4096, 16384)
    ]
    return decode, prefill


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_costs_the_rule_produced_are_recovered(seed: int) -> None:
    costs = fit_step_costs(*_timings(noise=0.02, seed=seed))
    assert costs.decode_base_s == pytest.approx(TRUTH.decode_base_s, rel=0.05)
    assert costs.decode_s_per_seq == pytest.approx(TRUTH.decode_s_per_seq, rel=0.25)
    assert costs.decode_s_per_context_token == pytest.approx(
        TRUTH.decode_s_per_context_token, rel=0.05
    )
    assert costs.prefill_s_per_token == pytest.approx(TRUTH.prefill_s_per_token, rel=0.05)
    assert costs.prefill_s_per_token_pair == pytest.approx(TRUTH.prefill_s_per_token_pair, rel=0.05)
    assert costs.decode_worst_error < 0.05
    fitted = costs.applied_to(EngineParams())
    assert fitted.num_blocks == EngineParams().num_blocks  # sizes are not the fit's


def test_exact_timings_give_the_exact_costs() -> None:
    costs = fit_step_costs(*_timings(noise=0.0, seed=0))
    assert costs.decode_s_per_seq == pytest.approx(TRUTH.decode_s_per_seq, rel=1e-6)
    assert costs.prefill_s_per_token_pair == pytest.approx(TRUTH.prefill_s_per_token_pair, rel=1e-6)
    assert costs.decode_worst_error == pytest.approx(0.0, abs=1e-9)
    assert costs.prefill_worst_error == pytest.approx(0.0, abs=1e-9)


def test_a_cost_the_data_contradict_is_zero_not_negative() -> None:
    # Larger batches measured faster: no positive per-sequence cost explains that.
    decode = [DecodeTiming(b, 100, 0.010 - 1e-5 * b) for b in (1, 8, 64, 128)]
    costs = fit_step_costs(decode, [PrefillTiming(1000, 0.04)])
    assert costs.decode_s_per_seq == 0.0
    assert costs.decode_s_per_context_token == 0.0
    assert costs.decode_base_s > 0


def test_too_little_or_impossible_data_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="decode: need at least 3"):
        fit_step_costs([DecodeTiming(1, 1, 0.01)], [PrefillTiming(10, 0.01)])
    with pytest.raises(ValueError, match="prefill"):
        fit_step_costs(_timings(0.0, 0)[0], [])
    with pytest.raises(ValueError, match="seconds"):
        fit_step_costs(_timings(0.0, 0)[0], [PrefillTiming(10, 0.0)])


def test_the_recorded_h100_run_fits_within_its_documented_errors() -> None:
    costs = fit_record(json.loads(RECORD.read_text()))
    # docs/bench-notes/gpu-engine-timing.md quotes these figures.
    assert costs.decode_base_s == pytest.approx(7.9e-3, rel=0.02)
    assert costs.prefill_s_per_token == pytest.approx(23.3e-6, rel=0.02)
    assert costs.prefill_s_per_token_pair == pytest.approx(1.61e-9, rel=0.02)
    assert costs.decode_worst_error < 0.25
    assert costs.prefill_worst_error < 0.40


def test_only_chunks_timed_with_the_engines_attention_kernel_are_fitted() -> None:
    record = json.loads(RECORD.read_text())
    timings = prefill_timings(record)
    # Of the 33 chunks timed through the mask path, the 15 of the grouped-query kernel,
    # less its two prompts longer than the longest prefill step (16,384 and 32,768 tokens).
    assert len(record["prefixed"]) == 33
    assert len(timings) == len(record["prefill"]) + 13
    assert max(t.tokens for t in timings) == max(p["tokens"] for p in record["prefill"])
    assert sum(1 for t in timings if t.cached) == 9
