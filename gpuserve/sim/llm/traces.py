"""Token-level request streams: the Azure and Mooncake conversation traces, and synthetic
arrivals (bursty, flash crowd, diurnal, drift) carrying token counts drawn from a trace.

Parsing takes lines, never paths (gpuserve/ does no I/O). Time compression divides the
arrival times, so ``compress=2`` doubles the load with the same token mix.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpuserve.sim.generators import flash_crowd
from gpuserve.sim.trace_rows import MooncakeRow, read_azure_rows, read_mooncake_rows
from gpuserve.sim.workload import Workload, poisson_workload


@dataclass(frozen=True, slots=True)
class TokenRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()  # content hash per prompt block (Mooncake only)


@dataclass(frozen=True, slots=True)
class TokenTrace:
    name: str
    requests: tuple[TokenRequest, ...]  # sorted by arrival
    block_size: int = 16  # tokens per hashed block (the engine's block size must match)

    @property
    def duration(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0

    @property
    def hashed(self) -> bool:
        """Whether any request carries prefix hashes (then the engine must count its cache
        in ``block_size`` blocks)."""
        return any(r.block_hashes for r in self.requests)

    def after(self, history: TokenTrace, *, seconds: float) -> TokenTrace:
        """``history`` (its first ``seconds``) and then this trace, shifted by ``seconds``:
        a service that already served ``history`` meets this one."""
        if history.block_size != self.block_size:
            raise ValueError(
                f"history: {history.block_size}-token hash blocks, this trace {self.block_size}"
            )
        before = tuple(r for r in history.requests if r.arrival_s < seconds)
        shifted = tuple(replace(r, arrival_s=r.arrival_s + seconds) for r in self.requests)
        return replace(self, requests=before + shifted)


def azure_conversation(
    lines: Iterable[str], *, compress: float = 1.0, name: str = "azure-conv"
) -> TokenTrace:
    """Rows under a header naming TIMESTAMP, ContextTokens and GeneratedTokens (in any
    order), TIMESTAMP a date-time or a number of seconds
    (``gpuserve.sim.trace_rows.read_azure_rows``; its errors name the line and column).
    Every request has a prompt and yields a token."""
    # Sorted as tuples: requests at the same instant in token order, as this parser always
    # gave them (random routing draws follow the order, so the benches' figures do too).
    parsed = sorted(
        (row.at / compress, row.context_tokens, max(1, row.generated_tokens))
        for row in read_azure_rows(lines)
    )
    return TokenTrace(
        f"{name} x{compress:g}",
        tuple(TokenRequest(t, max(1, p), o) for t, p, o in parsed),
    )


MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake traces


def hash_block_size(rows: Iterable[MooncakeRow]) -> int:
    """Tokens per hash id: a size every hashed row agrees on, whether its ids cover the
    whole prompt (Mooncake's: ``ceil(input_length / size)`` ids) or its full blocks only
    (vLLM's: ``input_length // size``). Mooncake's 512 where it fits, else the power of two
    nearest it, else the smallest size that fits. A trace hashed in other blocks, read as
    512-token ones, would share the wrong prefixes without a word; one no size fits is
    refused, naming the first line that no size fits together with the lines before it."""
    ordered = sorted(rows, key=lambda r: r.line)
    agreed = [_sizes_agreed(ordered, whole_prompt=True), _sizes_agreed(ordered, whole_prompt=False)]
    fitting = [(low, high) for low, high, broken in agreed if broken is None]
    if not fitting:
        row = max((b for _, _, b in agreed if b is not None), key=lambda r: r.line)
        raise ValueError(
            f"line {row.line}: {len(row.hash_ids)} hash_ids for input_length "
            f"{row.input_length or 0}: no number of tokens per id fits it and the lines "
            "before it, whether the ids cover the whole prompt (the last block partly) or "
            "its full blocks only"
        )
    # One id per prompt leaves no upper bound: any size from the longest prompt on.
    powers = [
        2**k
        for k in range(31)
        for low, high in fitting
        if low <= 2**k and (high is None or 2**k <= high)
    ]
    return min(powers, key=lambda size: abs(size - MOONCAKE_BLOCK), default=fitting[0][0])


def _sizes_agreed(
    rows: Sequence[MooncakeRow], *, whole_prompt: bool
) -> tuple[int, int | None, MooncakeRow | None]:
    """The sizes [low, high] (None: unbounded) the hashed rows agree on, and the first row
    none fits together with those before it (None when every row fits)."""
    low, high = 1, None
    for row in rows:
        ids = len(row.hash_ids)
        if not ids:
            continue
        tokens = row.input_length or 0
        if whole_prompt:  # (ids - 1) * size < tokens <= ids * size
            row_low = -(-tokens // ids)
            row_high = (tokens - 1) // (ids - 1) if ids > 1 else None
        else:  # ids * size <= tokens < (ids + 1) * size
            row_low, row_high = tokens // (ids + 1) + 1, tokens // ids
        low = max(low, row_low)
        if row_high is not None:
            high = row_high if high is None else min(high, row_high)
        if tokens == 0 or (high is not None and low > high):
            return low, high, row
    return low, high, None


def mooncake(
    lines: Iterable[str], *, compress: float = 1.0, name: str = "mooncake-conv"
) -> TokenTrace:
    """JSON lines with ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
    (one per prompt block: 512 tokens in Mooncake's traces, else the size the rows agree
    on, ``hash_block_size``); both lengths are required here
    (``gpuserve.sim.trace_rows.read_mooncake_rows``; its errors name the line and field)."""
    rows = read_mooncake_rows(lines)
    requests = [
        TokenRequest(
            row.at_s / compress,
            max(1, _required(row.input_length, row.line, "input_length")),
            max(1, _required(row.output_length, row.line, "output_length")),
            row.hash_ids,
        )
        for row in rows
    ]
    return TokenTrace(f"{name} x{compress:g}", tuple(requests), hash_block_size(rows))


def _required(value: int | None, line: int, field: str) -> int:
    if value is None:
        raise ValueError(f"line {line}: missing field {field!r}")
    return value


def _with_tokens(name: str, arrivals: Sequence[float], mix: TokenTrace, seed: int) -> TokenTrace:
    """Arrivals carrying the (prompt, output) pairs of requests drawn from ``mix``."""
    rng = random.Random(seed)
    pool = mix.requests
    drawn = (pool[rng.randrange(len(pool))] for _ in arrivals)
    return TokenTrace(
        name,
        tuple(
            TokenRequest(t, r.prompt_tokens, r.output_tokens)
            for t, r in zip(arrivals, drawn, strict=False)
        ),
    )


class RateShape(Protocol):
    """A generator of arrivals at a mean rate (``gpuserve.sim.generators``: bursty,
    diurnal, drift); its name names the trace."""

    __name__: str

    def __call__(self, *, mean_rate: float, duration: float, seed: int) -> Workload: ...


def shaped_tokens(
    shape: RateShape, mix: TokenTrace, *, mean_rate: float, duration: float, seed: int
) -> TokenTrace:
    """The arrivals ``shape`` makes at ``mean_rate`` (``gpuserve.sim.generators.bursty``:
    on/off bursts; ``diurnal``: a compressed day peaking at 1.7 times the mean; ``drift``:
    a random walk of the log-rate) with ``mix``'s token counts."""
    arrivals = shape(mean_rate=mean_rate, duration=duration, seed=seed).arrivals
    return _with_tokens(f"{shape.__name__} {mean_rate:g}/s", arrivals, mix, seed)


def flash_crowd_tokens(
    mix: TokenTrace, *, mean_rate: float, duration: float, factor: float, seed: int
) -> TokenTrace:
    """Poisson load with a crowd of ``factor`` times the rate over the middle sixth of the
    run (``gpuserve.sim.generators.flash_crowd``), with ``mix``'s token counts."""
    base = poisson_workload(rate=mean_rate, duration=duration, seed=seed)
    crowd = flash_crowd(
        base, factor=factor, start=duration * 5 / 12, duration=duration / 6, seed=seed + 7
    )
    return _with_tokens(f"flash x{factor:g} {mean_rate:g}/s", crowd.arrivals, mix, seed)
