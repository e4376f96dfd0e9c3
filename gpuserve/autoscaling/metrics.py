"""Metric samples as Prometheus presents them to the autoscaler, one service at a time.

Every field may be missing (None) or NaN: an idle window gives 0/0 averages, a scrape can
fail, a query can return nothing. Readers go through :meth:`MetricSample.get`, which
turns both into None so no NaN ever leaks into arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

SignalName = Literal[
    "queue_depth",
    "arrival_rate",
    "success_rate",
    "recent_completion_rate",
    "item_rate",
    "exec_rate",
    "avg_queue_time",
    "avg_request_time",
    "avg_compute_time",
    "p95_latency",
]


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One evaluation step of the service's PromQL queries (times in seconds, rates per second).

    queue_depth: sum(nv_inference_pending_request_count), the gauge at scrape time.
    arrival_rate: rate(success) + rate(failure) + deriv(pending): Triton counts no
        arrivals, so demand is completions plus queue growth.
    success_rate: rate(nv_inference_request_success).
    recent_completion_rate: irate(success) + irate(failure): requests that left the queue
        per second between the last two scrapes, completed or failed (a queue policy's
        timeouts fail requests that waited too long).
    item_rate / exec_rate: rate(nv_inference_count) / rate(nv_inference_exec_count);
        their ratio is the average batch size.
    avg_queue_time / avg_request_time / avg_compute_time: rate of the *_duration_us
        counters over rate(success), converted to seconds (compute = compute_infer).
    p95_latency: max over pods of nv_inference_request_summary_us{quantile="0.95"}.
    """

    at: float
    queue_depth: float | None = None
    arrival_rate: float | None = None
    success_rate: float | None = None
    recent_completion_rate: float | None = None
    item_rate: float | None = None
    exec_rate: float | None = None
    avg_queue_time: float | None = None
    avg_request_time: float | None = None
    avg_compute_time: float | None = None
    p95_latency: float | None = None

    def get(self, name: SignalName) -> float | None:
        value: float | None = getattr(self, name)
        if value is None or math.isnan(value) or math.isinf(value):
            return None
        return value

    @property
    def demand(self) -> float | None:
        """Requests per second offered to the service; completions when arrivals are unknown."""
        arrivals = self.get("arrival_rate")
        if arrivals is not None:
            return max(0.0, arrivals)
        done = self.get("success_rate")
        return None if done is None else max(0.0, done)

    def ratio(self, numerator: SignalName, denominator: SignalName) -> float | None:
        """One signal over another; None when either is missing or the denominator is 0."""
        top, bottom = self.get(numerator), self.get(denominator)
        if top is None or bottom is None or bottom <= 0.0:
            return None
        return top / bottom

    @property
    def avg_batch_size(self) -> float | None:
        return self.ratio("item_rate", "exec_rate")

    @property
    def items_per_request(self) -> float | None:
        return self.ratio("item_rate", "success_rate")


@dataclass(frozen=True, slots=True)
class MetricHistory:
    """Samples of one service, oldest first (the caller keeps a bounded tail)."""

    samples: tuple[MetricSample, ...] = ()

    @classmethod
    def of(cls, samples: Iterable[MetricSample]) -> MetricHistory:
        return cls(tuple(sorted(samples, key=lambda s: s.at)))

    def between(self, start: float, end: float) -> tuple[MetricSample, ...]:
        return tuple(s for s in self.samples if start <= s.at <= end)

    @property
    def latest(self) -> MetricSample | None:
        return self.samples[-1] if self.samples else None


def mean_of(samples: Sequence[MetricSample], name: SignalName) -> float | None:
    values = [v for v in (s.get(name) for s in samples) if v is not None]
    return sum(values) / len(values) if values else None


def latest_of(samples: Sequence[MetricSample], name: SignalName) -> float | None:
    for sample in reversed(samples):
        value = sample.get(name)
        if value is not None:
            return value
    return None
