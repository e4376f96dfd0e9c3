"""Prometheus as the autoscaler sees it: scrapes of Triton's counters and gauges, and the
PromQL the controller runs on them (sum by model of rates over a window).

Counters are summed over every pod that ever served (a pod that goes away keeps its last
values, which is what ``sum(rate(...))`` sees while its series is inside the window).
``rate`` here is increase / elapsed between the first and last scrape in the window,
without Prometheus's extrapolation to the window edges (ratios such as average queue time
are unaffected; absolute rates differ by a scrape at most).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from gpuserve.autoscaling.metrics import MetricHistory, MetricSample


@dataclass(frozen=True, slots=True)
class Scrape:
    """Service-level values at one scrape (counters cumulative; seconds, not µs)."""

    at: float
    success: float
    failure: float
    items: float
    execs: float
    request_time: float
    queue_time: float
    compute_time: float
    pending: float
    p95: float  # max over pods of the summary quantile; NaN without observations


class MetricStore:
    """Scrapes in time order, the samples derived from them, and in-flight integrals."""

    def __init__(self, *, rate_window: float) -> None:
        self.rate_window = rate_window
        self._times: list[float] = []
        self._scrapes: list[Scrape] = []
        self._samples: list[MetricSample] = []
        self._area_times: list[float] = []
        self._areas: list[float] = []

    def record(self, scrape: Scrape) -> MetricSample:
        self._times.append(scrape.at)
        self._scrapes.append(scrape)
        sample = self._sample_at(len(self._scrapes) - 1)
        self._samples.append(sample)
        return sample

    def record_area(self, at: float, area: float) -> None:
        """Integral of requests in the system (queued + executing) up to ``at``."""
        self._area_times.append(at)
        self._areas.append(area)

    def history(self, now: float, span: float) -> MetricHistory:
        lo = bisect.bisect_left(self._times, now - span)
        hi = bisect.bisect_right(self._times, now)
        return MetricHistory(tuple(self._samples[lo:hi]))

    def latest_scrape(self, now: float) -> Scrape | None:
        hi = bisect.bisect_right(self._times, now)
        return self._scrapes[hi - 1] if hi else None

    def request_rate(self, now: float, window: float, *, failures: bool = True) -> float | None:
        """sum(rate(success[w])) + sum(rate(failure[w])): completed requests per second
        (without ``failures``, the successes alone)."""
        hi = bisect.bisect_right(self._times, now)
        lo = bisect.bisect_left(self._times, now - window)
        if hi - lo < 2:
            return None
        first, last = self._scrapes[lo], self._scrapes[hi - 1]
        elapsed = last.at - first.at
        done = last.success - first.success
        if failures:
            done += last.failure - first.failure
        return done / elapsed if elapsed > 0 else None

    def concurrency(self, now: float, window: float) -> float | None:
        """Average requests in the system over the last ``window`` seconds (all pods)."""
        hi = bisect.bisect_right(self._area_times, now)
        lo = bisect.bisect_left(self._area_times, now - window)
        if hi - lo < 2:
            return None
        elapsed = self._area_times[hi - 1] - self._area_times[lo]
        if elapsed <= 0:
            return None
        return (self._areas[hi - 1] - self._areas[lo]) / elapsed

    def _sample_at(self, index: int) -> MetricSample:
        last = self._scrapes[index]
        lo = bisect.bisect_left(self._times, last.at - self.rate_window, 0, index)
        p95 = None if math.isnan(last.p95) else last.p95
        recent = None
        if index > 0 and (gap := last.at - self._scrapes[index - 1].at) > 0:
            before = self._scrapes[index - 1]  # irate: the last two scrapes
            recent = (last.success + last.failure - before.success - before.failure) / gap
        if lo >= index:
            return MetricSample(at=last.at, queue_depth=last.pending, p95_latency=p95)
        first = self._scrapes[lo]
        elapsed = last.at - first.at
        done = last.success - first.success
        failed = last.failure - first.failure

        def per_request(total: float) -> float | None:
            return total / done if done > 0 else None

        return MetricSample(
            at=last.at,
            queue_depth=last.pending,
            arrival_rate=(done + failed + last.pending - first.pending) / elapsed,
            success_rate=done / elapsed,
            recent_completion_rate=recent,
            item_rate=(last.items - first.items) / elapsed,
            exec_rate=(last.execs - first.execs) / elapsed,
            avg_queue_time=per_request(last.queue_time - first.queue_time),
            avg_request_time=per_request(last.request_time - first.request_time),
            avg_compute_time=per_request(last.compute_time - first.compute_time),
            p95_latency=p95,
        )
