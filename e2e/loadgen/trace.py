"""Reading arrival traces in the Azure LLM inference format.

Format: a CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``; TIMESTAMP is either
``YYYY-MM-DD HH:MM:SS[.fraction]`` (any number of fraction digits) or a number of seconds.
Arrival offsets are relative to the first arrival of the file, divided by ``compress``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

HEADER = ("timestamp", "contexttokens", "generatedtokens")


class TraceFormatError(ValueError):
    """The file is not in the expected trace format (message names the line)."""


@dataclass(frozen=True)
class Arrival:
    """One request of a trace: when to send it (seconds after the replay starts) and its size."""

    offset_s: float
    context_tokens: int
    generated_tokens: int


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch for an Azure-trace TIMESTAMP (naive times are taken as UTC).

    Fractions longer than microseconds (the trace has 7 digits) are kept exactly as a float.
    """
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    whole, _, fraction = text.partition(".")
    if fraction and not fraction.isdigit():
        raise ValueError(f"bad fractional seconds in {text!r}")
    moment = datetime.fromisoformat(whole)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() + (float("0." + fraction) if fraction else 0.0)


def read_trace_rows(path: Path) -> list[tuple[float, int, int]]:
    """(epoch seconds, context tokens, generated tokens) for every row, sorted by time."""
    rows: list[tuple[float, int, int]] = []
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or tuple(h.strip().lower() for h in header[:3]) != HEADER:
            raise TraceFormatError(f"{path}: line 1: expected header {','.join(HEADER)}")
        for number, row in enumerate(reader, start=2):
            if not row or not "".join(row).strip():
                continue
            try:
                rows.append((parse_timestamp(row[0]), int(row[1]), int(row[2])))
            except (ValueError, IndexError) as err:
                raise TraceFormatError(f"{path}: line {number}: {err}") from None
    rows.sort(key=lambda r: r[0])
    return rows


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
    origin = rows[0][0]
    end_s = None if duration_s is None else start_s + duration_s
    arrivals: list[Arrival] = []
    for stamp, context, generated in rows:
        replay_t = (stamp - origin) / compress
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
