"""Runs one engine over a list of requests on a virtual clock.

The clock jumps to the next arrival while the engine is idle and advances by each step's
cost otherwise; a request arriving during a step waits for the next one, as in the
emulator, whose engine loop sleeps the cost while new requests queue.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from gpuserve.llm.engine import Engine, Request, RequestTiming, StepPlan
from gpuserve.llm.params import EngineParams


@dataclass(frozen=True)
class Replay:
    timings: dict[str, RequestTiming]  # by request id
    steps: tuple[tuple[float, StepPlan], ...]  # (start time, plan) of each step
    engine: Engine  # final state, for its counters and cache


def replay(
    requests: Iterable[tuple[float, int, int, tuple[int, ...]]],
    params: EngineParams | None = None,
    *,
    fast: bool = False,
) -> Replay:
    """Serves ``(arrival_s, prompt_tokens, output_tokens, block_hashes)`` requests, named
    by their position ("0", "1", ...), until all have finished. ``fast`` crosses decode
    stretches with ``Engine.fast_forward`` and a long prompt's chunks with
    ``Engine.run_chunks`` (same timings; those steps are not listed)."""
    engine = Engine(params)
    given = [
        Request(str(i), prompt, output, arrival, hashes)
        for i, (arrival, prompt, output, hashes) in enumerate(requests)
    ]
    queue = sorted(given, key=lambda r: r.arrival_s)
    timings: dict[str, RequestTiming] = {}
    steps: list[tuple[float, StepPlan]] = []
    clock, next_arrival = 0.0, 0
    while next_arrival < len(queue) or not engine.idle:
        if engine.idle:
            clock = max(clock, queue[next_arrival].arrival_s)
        while next_arrival < len(queue) and queue[next_arrival].arrival_s <= clock:
            engine.add(queue[next_arrival])
            next_arrival += 1
        if fast:
            until = queue[next_arrival].arrival_s if next_arrival < len(queue) else math.inf
            clock, done = engine.fast_forward(clock, until)
            timings.update((timing.request_id, timing) for timing in done)
            if engine.idle or clock >= until:
                continue  # an arrival came during the stretch: it joins the next step
            ahead = engine.run_chunks(clock, math.inf)  # arrivals meanwhile wait: see there
            if ahead > clock:
                clock = ahead
                continue
        plan = engine.begin_step()
        if plan is None:  # cannot happen: the engine holds a request it can admit
            raise RuntimeError("replay: the engine has requests but planned no step")
        steps.append((clock, plan))
        clock += plan.cost_s
        for timing in engine.end_step(clock, every_token=False).finished:
            timings[timing.request_id] = timing
    return Replay(timings, tuple(steps), engine)


def poisson_requests(
    tokens: Iterable[tuple[int, int]], rate: float, seed: int
) -> list[tuple[float, int, int, tuple[int, ...]]]:
    """``(prompt, output)`` token counts arriving one by one as a Poisson process of
    ``rate`` requests/s (its gaps drawn from ``seed``), as ``replay`` takes them."""
    rng = random.Random(seed)
    clock = 0.0
    requests: list[tuple[float, int, int, tuple[int, ...]]] = []
    for prompt, output in tokens:
        clock += rng.expovariate(rate)
        requests.append((clock, prompt, output, ()))
    return requests


def mean_output_gap_s(run: Replay) -> float:
    """The mean gap between a stream's tokens over all of ``run``'s tokens, as vLLM's TPOT
    histogram averages it; 0 where no request had a second token."""
    timings = run.timings.values()
    gaps = sum(len(t.token_s) - 1 for t in timings if t.token_s)
    decoding = sum(t.token_s[-1] - t.token_s[0] for t in timings if t.token_s)
    return decoding / gaps if gaps else 0.0
