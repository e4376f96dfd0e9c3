"""The replay helpers: Poisson arrivals, and the mean gap over a run's tokens."""

from __future__ import annotations

import statistics

import pytest

from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import mean_output_gap_s, poisson_requests, replay


def test_the_mean_output_gap_is_over_the_tokens_not_the_requests() -> None:
    """Two streams, each alone: a short prompt with thirty gaps, a long one with one. Each
    gap is a decode step (the fixed cost, the sequence and its context); the mean weighs
    every gap once, so the long prompt's one slow step counts a fifteenth as much as a
    mean over the requests would count it."""
    params = EngineParams(max_model_len=131_072)
    run = replay([(0.0, 100, 31, ()), (100.0, 60_000, 2, ())], params)
    decode = [plan for _, plan in run.steps if plan.prefill_tokens == 0]
    assert len(decode) == 31
    short = [p.cost_s for p in decode if p.context_tokens < 1000]
    (long,) = [p.cost_s for p in decode if p.context_tokens >= 1000]
    assert long > 1.3 * max(short)
    assert mean_output_gap_s(run) == pytest.approx((sum(short) + long) / 31)
    per_request = (statistics.mean(short) + long) / 2
    assert mean_output_gap_s(run) < 0.9 * per_request
    assert mean_output_gap_s(replay([(0.0, 50, 1, ())], params)) == 0.0


def test_poisson_arrivals_keep_the_tokens_and_their_order_at_the_rate() -> None:
    tokens = [(100 + i % 7, 1 + i % 5) for i in range(20_000)]
    requests = poisson_requests(tokens, rate=5.0, seed=3)
    assert [(p, o) for _, p, o, _ in requests] == tokens
    times = [t for t, *_ in requests]
    assert times == sorted(times) and times[0] > 0
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.03)
    assert poisson_requests(tokens[:50], 5.0, seed=3) == requests[:50]
    assert poisson_requests(tokens[:50], 5.0, seed=4) != requests[:50]
