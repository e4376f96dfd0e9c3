"""The workload suite: every policy is judged on all of these, each at 1x, 2x and 4x load.

Traces are passed in as parsed rows (gpuserve/ reads no files). Load ``k`` compresses a
trace k times; a generator runs at k times its base rate (5.5 req/s, the Azure
conversation trace's mean at 1x) for 30 minutes. Every generator is seeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpuserve.sim.generators import bursty, diurnal, drift, flash_crowd, periodic
from gpuserve.sim.workload import TraceRequest, Workload, workload_from_trace

BASE_RATE = 5.5  # req/s at 1x
DURATION = 1800.0  # seconds of each generated workload
LOADS = (1.0, 2.0, 4.0)
# Seeds of the histories are these apart from the measured draws' seeds.
HISTORY_SEED = 10_000
Traces = Mapping[str, Sequence[TraceRequest]]


@dataclass(frozen=True, slots=True)
class SuiteWorkload:
    name: str
    description: str
    build: Callable[[Traces, float, int], Workload]  # (traces, load, seed)
    compressed: bool = False  # load compresses a trace's time (else: multiplies a rate)

    @property
    def has_history(self) -> bool:
        """Whether another draw of the same traffic exists: a generator's, with another
        seed. A trace has none (replaying it would be foresight), nor has a flash crowd on
        it (a crowd does not recur)."""
        return not self.compressed

    def yesterday(self, traces: Traces, load: float, seed: int) -> Workload | None:
        """The same kind of traffic served before the measured part (``--history``), or
        None where there is none (``has_history``)."""
        return self.build(traces, load, seed + HISTORY_SEED) if self.has_history else None

    def warmup_span(self, load: float) -> float:
        """Seconds whose mean rate the warm-up runs at: the first minute of the source,
        which a compressed trace plays in 60 / load seconds (as bench/autoscaling.py)."""
        return 60.0 / load if self.compressed else 60.0


def _trace(file: str) -> Callable[[Traces, float, int], Workload]:
    return lambda traces, load, seed: workload_from_trace(traces[file], compress=load)


def _flash(factor: float) -> Callable[[Traces, float, int], Workload]:
    """The conversation trace (first 30 minutes of it at 1x) with one crowd of ``factor``
    times its rate, 2-10 minutes long, starting 5-15 minutes in (seeded)."""

    def build(traces: Traces, load: float, seed: int) -> Workload:
        rng = random.Random(seed * 7919 + int(factor))
        base = workload_from_trace(traces[AZURE], compress=load).window(0.0, DURATION)
        return flash_crowd(
            base,
            factor=factor,
            start=rng.uniform(300.0, 900.0),
            duration=rng.uniform(120.0, 600.0),
            seed=seed,
        )

    return build


AZURE = "azure-llm-conv-2023.csv"
MOONCAKE_CONVERSATION = "mooncake-conversation-2025.jsonl"
MOONCAKE_SYNTHETIC = "mooncake-synthetic-2025.jsonl"
TRACE_FILES = (AZURE, MOONCAKE_CONVERSATION, MOONCAKE_SYNTHETIC)

SUITE: tuple[SuiteWorkload, ...] = (
    SuiteWorkload("azure-conv", "Azure LLM conversation trace (smooth)", _trace(AZURE), True),
    SuiteWorkload(
        "mooncake-conv",
        "Mooncake conversation trace (smooth)",
        _trace(MOONCAKE_CONVERSATION),
        True,
    ),
    SuiteWorkload(
        "mooncake-synth", "Mooncake synthetic trace (Poisson)", _trace(MOONCAKE_SYNTHETIC), True
    ),
    SuiteWorkload(
        "bursty",
        "on/off bursts: ~half of 10 s bins empty, CV ~1.7, peaks ~10x after quiet minutes",
        lambda traces, load, seed: bursty(mean_rate=BASE_RATE * load, duration=DURATION, seed=seed),
    ),
    SuiteWorkload("flash-4x", "Azure trace + a 4x flash crowd of 2-10 min", _flash(4.0), True),
    SuiteWorkload("flash-10x", "Azure trace + a 10x flash crowd of 2-10 min", _flash(10.0), True),
    SuiteWorkload(
        "diurnal",
        "a compressed day: 0.3x -> 1.7x -> 0.3x the mean",
        lambda traces, load, seed: diurnal(
            mean_rate=BASE_RATE * load, duration=DURATION, seed=seed
        ),
    ),
    SuiteWorkload(
        "drift",
        "log-rate random walk, one step per 30 s, within 0.5x-2x",
        lambda traces, load, seed: drift(mean_rate=BASE_RATE * load, duration=DURATION, seed=seed),
    ),
    SuiteWorkload(
        "periodic",
        "a 4x spike of 45-90 s every 5 minutes (start jittered by 30 s) on a steady base",
        lambda traces, load, seed: periodic(
            mean_rate=BASE_RATE * load, duration=DURATION, seed=seed
        ),
    ),
)
