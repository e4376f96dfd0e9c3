"""Engine.fast_forward crosses decode stretches with the timings of step-by-step serving."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuserve.llm.engine import Engine, Request
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import replay


# Ample blocks, tight enough to preempt, and a budget that chunks most prompts.
@pytest.mark.parametrize(("num_blocks", "budget"), [(27_000, 8192), (150, 8192), (27_000, 128)])
def test_fast_replay_gives_the_same_timings(
    num_blocks: int,
    budget: int,
    random_arrivals: Callable[..., list[tuple[float, int, int, tuple[int, ...]]]],
) -> None:
    params = EngineParams(num_blocks=num_blocks, max_model_len=1000, max_batched_tokens=budget)
    requests = random_arrivals(3, 120, rate=8.0, prompts=(20, 700), most_output=300, shared=3)
    slow = replay(requests, params, fast=False)
    fast = replay(requests, params, fast=True)
    assert (slow.engine.stats().preemptions > 0) == (num_blocks < 1000)
    assert len(fast.steps) < len(slow.steps)  # it did skip steps
    assert fast.timings.keys() == slow.timings.keys()
    for rid, timing in slow.timings.items():
        assert fast.timings[rid].token_s == pytest.approx(timing.token_s, abs=1e-9)
        assert fast.timings[rid].preemptions == timing.preemptions
    assert fast.engine.stats().generation_tokens == slow.engine.stats().generation_tokens
    assert fast.engine.stats().steps == slow.engine.stats().steps


def test_it_stops_before_the_next_arrival_and_ends_finished_requests() -> None:
    engine = Engine(EngineParams())
    engine.add(Request("a", 16, 50, 0.0))
    engine.add(Request("b", 16, 20, 0.0))
    engine.begin_step()
    engine.end_step(0.01)  # prefill done, first tokens out
    assert engine.fast_forward(0.01, 0.01) == (0.01, [])  # nothing starts before the arrival
    clock, done = engine.fast_forward(0.01, 0.05)
    assert done == [] and 0.05 <= clock < 0.07  # stopped at the first step starting later
    clock, done = engine.fast_forward(clock, 1e9)
    assert [t.request_id for t in done] == ["b", "a"] and engine.idle
    assert [len(t.token_s) for t in done] == [20, 50] and clock == done[1].finish_s
    engine.add(Request("c", 16, 5, clock))
    assert engine.fast_forward(clock, 1e9) == (clock, [])  # a waiting request: ordinary steps
