"""Per-request records of a load run and the statistics derived from them."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    """One request. Times are seconds after the run started (monotonic clock)."""

    send_s: float
    latency_s: float | None  # None when no answer came (failure before a response)
    ok: bool
    endpoint: str = ""
    error: str = ""
    scheduled_s: float | None = None  # open loop: when the trace wanted it sent

    @property
    def done_s(self) -> float | None:
        return None if self.latency_s is None else self.send_s + self.latency_s


@dataclass(frozen=True)
class SecondStats:
    """One bucket of the time series (by default one second)."""

    second: int
    arrivals: int  # requests sent in this bucket
    completions: int  # successful responses received in this bucket
    failures: int  # failures recorded (by send time) in this bucket
    p95_ms: float | None  # p95 latency of the completions of this bucket


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


@dataclass
class LoadResult:
    """Outcome of one run: raw records plus summary statistics (latencies of successes)."""

    mode: str
    model: str
    duration_s: float  # measured window (sending start to last completion or hard stop)
    records: list[RequestRecord] = field(default_factory=list)
    stopped_by: str = "done"  # done | max_requests | max_wall | duration
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return len(self.records)

    @property
    def successes(self) -> int:
        return sum(1 for r in self.records if r.ok)

    @property
    def failures(self) -> int:
        return sum(1 for r in self.records if not r.ok)

    def latencies_s(self) -> list[float]:
        return [r.latency_s for r in self.records if r.ok and r.latency_s is not None]

    def percentile_ms(self, q: float) -> float | None:
        return _ms(percentile(self.latencies_s(), q))

    @property
    def p50_ms(self) -> float | None:
        return self.percentile_ms(50)

    @property
    def p95_ms(self) -> float | None:
        return self.percentile_ms(95)

    @property
    def p99_ms(self) -> float | None:
        return self.percentile_ms(99)

    @property
    def mean_ms(self) -> float | None:
        values = self.latencies_s()
        return _ms(sum(values) / len(values)) if values else None

    @property
    def max_ms(self) -> float | None:
        values = self.latencies_s()
        return _ms(max(values)) if values else None

    @property
    def throughput(self) -> float:
        """Successful responses per second over the measured window."""
        return self.successes / self.duration_s if self.duration_s > 0 else 0.0

    def error_counts(self) -> Counter[str]:
        return Counter(r.error for r in self.records if not r.ok)

    def fraction_slower_than(self, ms: float) -> float:
        """Share of successful requests whose latency exceeded ``ms``."""
        values = self.latencies_s()
        return sum(1 for v in values if v * 1000 > ms) / len(values) if values else 0.0

    def time_series(self, bucket_s: float = 1.0) -> list[SecondStats]:
        """Per-bucket arrivals, completions, failures and p95, from 0 to the last event."""
        if not self.records:
            return []
        last = max((r.done_s or r.send_s) for r in self.records)
        buckets = int(last // bucket_s) + 1
        arrivals = [0] * buckets
        failures = [0] * buckets
        done: list[list[float]] = [[] for _ in range(buckets)]
        for r in self.records:
            index = min(int(r.send_s // bucket_s), buckets - 1)
            arrivals[index] += 1
            if not r.ok:
                failures[index] += 1
            elif r.done_s is not None and r.latency_s is not None:
                done[min(int(r.done_s // bucket_s), buckets - 1)].append(r.latency_s)
        return [
            SecondStats(i, arrivals[i], len(done[i]), failures[i], _ms(percentile(done[i], 95)))
            for i in range(buckets)
        ]

    def summary(self) -> dict[str, Any]:
        """Headline numbers as a JSON-friendly dict."""
        return {
            "mode": self.mode,
            "model": self.model,
            "sent": self.sent,
            "ok": self.successes,
            "failed": self.failures,
            "duration_s": round(self.duration_s, 3),
            "throughput_rps": round(self.throughput, 2),
            "p50_ms": _round(self.p50_ms),
            "p95_ms": _round(self.p95_ms),
            "p99_ms": _round(self.p99_ms),
            "mean_ms": _round(self.mean_ms),
            "max_ms": _round(self.max_ms),
            "stopped_by": self.stopped_by,
            "errors": dict(self.error_counts().most_common(5)),
            "params": self.params,
        }

    def summary_table(self) -> str:
        """A small aligned text table of :meth:`summary` (for the CLI and logs)."""
        data = self.summary()
        rows = [(k, data[k]) for k in data if k not in ("errors", "params")]
        rows += [(f"error: {k}", v) for k, v in data["errors"].items()]
        rows += [(f"param {k}", v) for k, v in data["params"].items()]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {'-' if v is None else v}" for k, v in rows)

    def to_dict(self) -> dict[str, Any]:
        """Summary, time series and every record (for saving as JSON)."""
        return {
            "summary": self.summary(),
            "time_series": [asdict(s) for s in self.time_series()],
            "records": [asdict(r) for r in self.records],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
