"""Request streams for the simulator: a replayed trace or synthetic Poisson load.

Parsing takes lines, never paths: reading files is the caller's business (gpuserve/ does
no I/O).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gpuserve.sim.trace_rows import is_mooncake, read_azure_rows, read_mooncake_rows


@dataclass(frozen=True, slots=True)
class Workload:
    """Arrival times (seconds from 0, sorted), items per request, priority level per request."""

    arrivals: tuple[float, ...]
    items: tuple[int, ...]
    priorities: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.items) != len(self.arrivals):
            raise ValueError("items and arrivals differ in length")
        if self.priorities and len(self.priorities) != len(self.arrivals):
            raise ValueError("priorities and arrivals differ in length")

    def __len__(self) -> int:
        return len(self.arrivals)

    @property
    def duration(self) -> float:
        return self.arrivals[-1] if self.arrivals else 0.0

    def with_warmup(self, *, seconds: float, rate: float, seed: int = 0) -> Workload:
        """Poisson arrivals at ``rate`` for ``seconds`` before the workload (which shifts).

        Benchmarks measure from ``seconds`` on, so every policy meets the workload with
        metric history and primed windows, as a running service would.
        """
        lead = poisson_workload(rate=rate, duration=seconds, seed=seed, items=1)
        sizes = self.items[: len(lead)] if len(self.items) >= len(lead) else (1,) * len(lead)
        return Workload(
            arrivals=lead.arrivals + tuple(t + seconds for t in self.arrivals),
            items=tuple(sizes) + self.items,
            priorities=(
                (self.priorities[0],) * len(lead) + self.priorities if self.priorities else ()
            ),
        )

    def after(self, history: Workload, *, seconds: float) -> Workload:
        """``history`` (its first ``seconds``) and then this workload, shifted by
        ``seconds``: a service that already served ``history`` meets this one."""
        before = history.window(0.0, seconds)
        if self.priorities and not before.priorities:
            before = replace(before, priorities=(self.priorities[0],) * len(before))
        return Workload(
            arrivals=before.arrivals + tuple(t + seconds for t in self.arrivals),
            items=before.items + self.items,
            priorities=before.priorities + self.priorities if self.priorities else (),
        )

    def rate_between(self, start: float, end: float) -> float:
        count = sum(1 for t in self.arrivals if start <= t < end)
        return count / (end - start) if end > start else 0.0

    def window(self, start: float, end: float) -> Workload:
        """Requests arriving in [start, end), re-based to start at 0."""
        idx = [i for i, t in enumerate(self.arrivals) if start <= t < end]
        return Workload(
            arrivals=tuple(self.arrivals[i] - start for i in idx),
            items=tuple(self.items[i] for i in idx),
            priorities=tuple(self.priorities[i] for i in idx) if self.priorities else (),
        )


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float  # seconds since the earliest request
    context_tokens: int
    generated_tokens: int


def parse_azure_trace(lines: Iterable[str]) -> list[TraceRequest]:
    """Rows of the Azure LLM inference trace: TIMESTAMP, ContextTokens and
    GeneratedTokens under a header naming them (in any order), TIMESTAMP a date-time or a
    number of seconds
    (``gpuserve.sim.trace_rows.read_azure_rows``; its errors name the line and column)."""
    return [
        TraceRequest(r.at, r.context_tokens, r.generated_tokens) for r in read_azure_rows(lines)
    ]


def parse_mooncake_trace(lines: Iterable[str]) -> list[TraceRequest]:
    """Rows of a Mooncake trace (JSON lines): ``timestamp`` in ms, ``input_length`` and
    ``output_length`` in tokens (read as context and generated tokens; 0 where absent)."""
    return [
        TraceRequest(r.at_s, r.input_length or 0, r.output_length or 0)
        for r in read_mooncake_rows(lines)
    ]


def parse_trace(lines: Sequence[str]) -> list[TraceRequest]:
    """Mooncake's JSON lines or Azure's CSV, told apart by the content (``is_mooncake``)."""
    return parse_mooncake_trace(lines) if is_mooncake(lines) else parse_azure_trace(lines)


def workload_from_trace(
    rows: Sequence[TraceRequest],
    *,
    compress: float = 1.0,
    tokens_per_item: int = 0,
    max_items: int = 1,
) -> Workload:
    """One request per trace row; time divided by ``compress``.

    With ``tokens_per_item`` > 0 a request carries ceil(context tokens / tokens_per_item)
    items (at most ``max_items``, the model's max batch): e.g. 512-token chunks of the
    conversation context. Otherwise every request is one item.
    """
    if compress <= 0:
        raise ValueError("compress must be > 0")
    items = tuple(
        min(max_items, max(1, math.ceil(r.context_tokens / tokens_per_item)))
        if tokens_per_item > 0
        else 1
        for r in rows
    )
    return Workload(arrivals=tuple(r.at / compress for r in rows), items=items)


def poisson_workload(
    *, rate: float, duration: float, seed: int = 0, items: int = 1, start: float = 0.0
) -> Workload:
    """Poisson arrivals at ``rate`` req/s for ``duration`` seconds, fixed items per request."""
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = start
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= start + duration:
            break
        arrivals.append(t)
    return Workload(arrivals=tuple(arrivals), items=(items,) * len(arrivals))


def rate_profile_workload(
    *, rates: Sequence[tuple[float, float]], seed: int = 0, items: int = 1
) -> Workload:
    """Piecewise-constant Poisson load: (duration, rate) segments one after the other."""
    arrivals: list[float] = []
    start = 0.0
    for k, (length, rate) in enumerate(rates):
        arrivals.extend(
            poisson_workload(rate=rate, duration=length, seed=seed * 1000 + k, start=start).arrivals
        )
        start += length
    return Workload(arrivals=tuple(arrivals), items=(items,) * len(arrivals))
