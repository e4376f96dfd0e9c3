"""Shared by the engine's tests: seeded random workloads."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

Arrival = tuple[float, int, int, tuple[int, ...]]  # arrival_s, prompt, output, block hashes


def _random_arrivals(
    seed: int, count: int, *, rate: float, prompts: tuple[int, int], most_output: int, shared: int
) -> list[Arrival]:
    """``count`` Poisson arrivals at ``rate`` per second, with uniform prompt and output
    lengths, each sharing up to ``shared`` common leading blocks."""
    rng = random.Random(seed)
    clock, out = 0.0, []
    for _ in range(count):
        clock += rng.expovariate(rate)
        prompt = rng.randint(*prompts)
        hashes = tuple(range(rng.randint(0, shared)))
        out.append((clock, prompt, rng.randint(1, most_output), hashes))
    return out


@pytest.fixture
def random_arrivals() -> Callable[..., list[Arrival]]:
    return _random_arrivals
