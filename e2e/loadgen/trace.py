"""Reading arrival traces in the Azure LLM inference format, for replay.

The rows are read by the product's reader (``gpuserve.sim.trace_rows``, the one
`gpuserve simulate` and the benches use): a header naming TIMESTAMP, ContextTokens and
GeneratedTokens, TIMESTAMP a date-time or a number of seconds. Arrival offsets are
relative to the earliest arrival of the file, divided by ``compress``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cli.trace_files import trace_lines
from gpuserve.sim.trace_rows import read_azure_rows


class TraceFormatError(ValueError):
    """The file is not in the expected trace format (message names the file and line)."""


@dataclass(frozen=True)
class Arrival:
    """One request of a trace: when to send it (seconds after the replay starts) and its size."""

    offset_s: float
    context_tokens: int
    generated_tokens: int


def read_trace_rows(path: Path) -> list[tuple[float, int, int]]:
    """(seconds since the earliest row, context tokens, generated tokens) for every row,
    sorted by time."""
    try:
        rows = read_azure_rows(trace_lines(path))
    except ValueError as err:
        raise TraceFormatError(f"{path}: {err}") from None
    return [(r.at, r.context_tokens, r.generated_tokens) for r in rows]


def read_trace(
    path: Path,
    *,
    compress: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
) -> list[Arrival]:
    """Arrivals of a trace file, time-compressed and sliced.

    ``compress`` divides the trace's time axis (10 = ten times faster). ``start_s`` and
    ``duration_s`` select a window in *replay* seconds, i.e. after compression: with
    ``compress=10, start_s=60, duration_s=60`` the replay covers trace minutes 10-20 in one
    minute. Offsets of the result start at 0 at the window start. ``max_requests`` keeps the
    first N arrivals of the window.
    """
    if compress <= 0:
        raise ValueError("compress must be > 0")
    if start_s < 0 or (duration_s is not None and duration_s <= 0):
        raise ValueError("start must be >= 0 and duration > 0")
    rows = read_trace_rows(Path(path))
    if not rows:
        return []
    end_s = None if duration_s is None else start_s + duration_s
    arrivals: list[Arrival] = []
    for stamp, context, generated in rows:
        replay_t = stamp / compress  # the rows count from the earliest
        if replay_t < start_s:
            continue
        if end_s is not None and replay_t >= end_s:
            break
        arrivals.append(Arrival(replay_t - start_s, context, generated))
        if max_requests is not None and len(arrivals) >= max_requests:
            break
    return arrivals


def constant_rate_arrivals(rate_per_s: float, duration_s: float) -> list[Arrival]:
    """Evenly spaced arrivals (open loop at a fixed rate) for benchmarks."""
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be > 0")
    count = int(rate_per_s * duration_s)
    return [Arrival(i / rate_per_s, 0, 0) for i in range(count)]
