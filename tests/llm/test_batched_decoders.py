"""The engine's batched decoders serve exactly as visiting every sequence at every step does.

``Engine(batch_decoders=False)`` plans every step sequence by sequence (the rule the module
docstring states); the default keeps the decoding sequences as sums. Both are driven here
through the same arrivals, aborts (some between a step's two halves), timing reads and
fast-forwards, and must agree to the last bit: plans, tokens, timings and counters.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gpuserve.llm.engine import Engine, Request, RequestTiming, StepPlan, Token
from gpuserve.llm.params import EngineParams


def _plan_view(plan: StepPlan) -> tuple[object, ...]:
    return (
        plan.cost_s,
        plan.prefill_tokens,
        plan.decode_seqs,
        plan.context_tokens,
        plan.prefill_pairs,
        plan.scheduled,
        plan.admitted,
        plan.preempted,
    )


def _timing_view(timing: RequestTiming) -> tuple[object, ...]:
    return (
        timing.request_id,
        list(timing.token_s),
        timing.finish_s,
        timing.cached_tokens,
        timing.preemptions,
    )


@dataclass
class _Log:
    plans: list[tuple[object, ...]] = field(default_factory=list)
    tokens: list[Token] = field(default_factory=list)
    finished: list[tuple[object, ...]] = field(default_factory=list)
    peeks: list[tuple[object, ...]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    batched_most: int = 0  # the largest batch seen (0 when not batching)
    chunk_steps: int = 0  # steps run by ``Engine.run_chunks``


Arrivals = Callable[..., list[tuple[float, int, int, tuple[int, ...]]]]  # conftest.py's


def _drive(
    engine: Engine,
    drawn: Arrivals,
    seed: int,
    *,
    fast: bool,
    every_token: bool | None,
    chaos: bool,
    chunks: bool = False,
) -> _Log:
    """Serves 150 requests drawn from ``seed``, with (``chaos``) aborts and timing reads
    drawn at each step; ``every_token`` None draws it at each step. ``chunks`` runs a
    prompt's chunks ahead before each step, up to the next arrival, a moment drawn, or
    across arrivals (they wait, as in the cluster simulator with random routing)."""
    arrivals = [
        Request(str(i), prompt, output, at, hashes)
        for i, (at, prompt, output, hashes) in enumerate(
            drawn(seed, 150, rate=15.0, prompts=(5, 600), most_output=200, shared=4)
        )
    ]
    rng = random.Random(seed + 1)
    bounds = random.Random(seed + 2)  # apart from ``rng``: the reference draws no bounds
    log = _Log()
    live: list[str] = []  # added, neither finished nor aborted, in order of arrival
    clock, next_arrival = 0.0, 0

    def finish(timings: list[RequestTiming] | tuple[RequestTiming, ...]) -> None:
        for timing in timings:
            log.finished.append(_timing_view(timing))
            live.remove(timing.request_id)

    def maybe_abort() -> None:
        if chaos and live and rng.random() < 0.02:
            rid = live.pop(rng.randrange(len(live)))
            assert engine.abort(rid)
            log.aborted.append(rid)

    for _ in range(100_000):  # bounded: the workload ends far sooner
        if next_arrival == len(arrivals) and engine.idle:
            break
        if engine.idle:
            clock = max(clock, arrivals[next_arrival].arrival_s)
        while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_s <= clock:
            engine.add(arrivals[next_arrival])
            live.append(arrivals[next_arrival].request_id)
            next_arrival += 1
        if chaos and live and rng.random() < 0.05:
            peek = engine.timing(live[rng.randrange(len(live))])
            assert peek is not None
            log.peeks.append(_timing_view(peek))
        maybe_abort()
        if fast:
            until = arrivals[next_arrival].arrival_s if next_arrival < len(arrivals) else 1e9
            clock, done = engine.fast_forward(clock, until)
            finish(done)
            if engine.idle or clock >= until:
                continue
        if chunks:
            arrival = arrivals[next_arrival].arrival_s if next_arrival < len(arrivals) else 1e9
            until = bounds.choice([arrival, 1e9, clock + bounds.uniform(0.0, 0.3)])
            steps = engine.stats().steps
            ahead = engine.run_chunks(clock, until)
            assert ahead < until or ahead == clock
            log.chunk_steps += engine.stats().steps - steps
            if ahead > clock:
                clock = ahead
                continue  # the arrivals meanwhile join the queue first
        plan = engine.begin_step()
        if plan is None:
            continue  # everything left was aborted
        log.plans.append(_plan_view(plan))
        log.batched_most = max(log.batched_most, engine._batched)
        maybe_abort()  # between the step's halves
        clock += plan.cost_s
        listed = rng.random() < 0.5 if every_token is None else every_token
        result = engine.end_step(clock, every_token=listed)
        log.tokens += result.tokens
        finish(result.finished)
    else:
        raise AssertionError("the workload did not end")
    assert engine.idle and not live
    return log


LIMITS = [
    dict(num_blocks=27_000),  # ample
    dict(num_blocks=150),  # tight: preemptions and recomputes
    dict(num_blocks=400, max_batched_tokens=96, max_running=40),  # chunked, budget-bound
    dict(num_blocks=3000, block_size=3),  # a block every third token
]


def _params(limits: dict[str, int]) -> EngineParams:
    return EngineParams(**{"block_size": 16, "max_model_len": 1000, **limits})  # type: ignore[arg-type]


@pytest.mark.parametrize("every_token", [False, True, None])
@pytest.mark.parametrize("limits", LIMITS)
def test_batched_steps_are_the_reference_steps(
    every_token: bool | None, limits: dict[str, int], random_arrivals: Arrivals
) -> None:
    params = _params(limits)
    batched, reference = Engine(params), Engine(params, batch_decoders=False)
    got = _drive(batched, random_arrivals, 7, fast=False, every_token=every_token, chaos=True)
    want = _drive(reference, random_arrivals, 7, fast=False, every_token=every_token, chaos=True)
    assert got.batched_most > 8 and want.batched_most == 0  # the two paths both ran
    assert got.aborted == want.aborted and got.aborted  # aborts happened, the same ones
    assert len(got.peeks) > 20
    assert got.plans == want.plans
    assert got.tokens == want.tokens
    assert got.finished == want.finished
    assert got.peeks == want.peeks
    assert batched.stats() == reference.stats()
    assert batched.cache.held_blocks == reference.cache.held_blocks == 0
    if limits["num_blocks"] == 150:
        assert batched.stats().preemptions > 0


@pytest.mark.parametrize("limits", LIMITS)
def test_fast_forwarding_the_batch_gives_the_reference_timings(
    limits: dict[str, int], random_arrivals: Arrivals
) -> None:
    # Fast-forwarded steps are not planned one by one: timings and counters are compared.
    params = _params(limits)
    batched, reference = Engine(params), Engine(params, batch_decoders=False)
    got = _drive(batched, random_arrivals, 11, fast=True, every_token=False, chaos=False)
    want = _drive(reference, random_arrivals, 11, fast=False, every_token=False, chaos=False)
    assert len(got.plans) < len(want.plans)  # some steps were fast-forwarded
    assert got.finished == want.finished
    assert batched.stats() == reference.stats()


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(
    "limits", [*LIMITS[1:3], dict(num_blocks=300, max_batched_tokens=40, block_size=4)]
)
def test_running_chunks_ahead_gives_the_reference_timings(
    fast: bool, limits: dict[str, int], random_arrivals: Arrivals
) -> None:
    # Prompts longer than the steps' budget, preemptions (tight blocks) and prefix hits: the
    # chunks run ahead are the steps the reference runs. (Steps are not planned one by one,
    # so aborts drawn per step would differ: timings and counters are compared.)
    params = _params(limits)
    batched, reference = Engine(params), Engine(params, batch_decoders=False)
    got = _drive(
        batched, random_arrivals, 5, fast=fast, every_token=False, chaos=False, chunks=True
    )
    want = _drive(reference, random_arrivals, 5, fast=False, every_token=False, chaos=False)
    budget = limits.get("max_batched_tokens", 8192)
    assert (got.chunk_steps > 100) == (budget < 600)  # chunks ran ahead wherever prompts had any
    assert got.finished == want.finished
    assert batched.stats() == reference.stats()
    assert batched.cache.evictions == reference.cache.evictions


def test_a_stretch_crosses_block_boundaries_with_the_blocks_the_steps_would_take() -> None:
    # Three sequences decoding from different offsets in their blocks: fast-forwarded to
    # each checkpoint, the KV cache holds what it holds when stepped there.
    params = EngineParams(block_size=4, num_blocks=64, max_model_len=256)
    held: dict[bool, list[tuple[float, int, int]]] = {}
    for batching in (True, False):
        engine = Engine(params, batch_decoders=batching)
        for rid, prompt, output in (("a", 5, 30), ("b", 8, 17), ("c", 10, 9)):
            engine.add(Request(rid, prompt, output, 0.0))
        clock, trail, checkpoint = 0.0, [], 0.0
        while not engine.idle:
            checkpoint += 0.013
            while clock < checkpoint and not engine.idle:
                clock, _ = engine.fast_forward(clock, checkpoint)
                if clock < checkpoint and not engine.idle:
                    plan = engine.begin_step()
                    assert plan is not None
                    clock += plan.cost_s
                    engine.end_step(clock)
            trail.append((clock, engine.cache.held_blocks, engine.stats().generation_tokens))
        held[batching] = trail
    assert held[True] == held[False]
    assert len({blocks for _, blocks, _ in held[True]}) > 5  # blocks grew and were freed


def test_a_batch_that_never_empties_keeps_bounded_bookkeeping() -> None:
    # A long-lived server (the emulator) steps without ever fast-forwarding, and under
    # steady load its batch never empties: the step times and ending steps it keeps for
    # the batch stay bounded, and its requests' tokens are all there.
    engine = Engine(EngineParams())
    clock, added, finished = 0.0, 0, 0
    for step in range(6000):
        if step % 4 == 0:
            engine.add(Request(str(added), 64, 40 + added % 23, clock))
            added += 1
        plan = engine.begin_step()
        assert plan is not None
        clock += plan.cost_s
        for timing in engine.end_step(clock).finished:
            assert len(timing.token_s) == timing.output_tokens
            finished += 1
        assert engine._batched > 0 or step < 3
        assert len(engine._times) <= 1024 + 4 * engine._batched
        assert len(engine._ending) <= engine._batched  # no ending step kept once past
    assert finished > 1000
