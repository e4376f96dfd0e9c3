"""What a simulation run produced, and the summaries the bench and CLI print."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    at: float
    serving_ready: int  # pods in the Service's endpoints
    committed: int  # serving + starting for serving
    warm: int  # warm-pool pods (ready or starting)
    pods: int  # every pod holding a GPU
    demand: float  # arrivals per second since the previous point
    routed_around: int = 0  # ready serving pods new arrivals avoid (rule 9)


@dataclass(frozen=True, slots=True)
class SimResult:
    """Per-request latency (inf = rejected), resources used, and what the scaler did."""

    policy: str
    slo_latency: float
    slo_quantile: float
    arrivals: tuple[float, ...]
    latencies: tuple[float, ...]
    duration: float
    gpu_seconds: float
    cost: float
    scale_events: int
    timeline: tuple[TimelinePoint, ...]
    events: tuple[tuple[float, str], ...]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    @property
    def rejected(self) -> int:
        return sum(1 for x in self.latencies if math.isinf(x))

    def attainment(self, start: float = -math.inf, end: float = math.inf) -> float:
        """Share of requests (arriving in [start, end)) done within the SLO latency;
        rejected requests count as misses."""
        lat = np.asarray(self.latencies)
        arr = np.asarray(self.arrivals)
        mask = (arr >= start) & (arr < end)
        if not mask.any():
            return 1.0
        return float(np.mean(lat[mask] <= self.slo_latency + 1e-12))

    def misses(self) -> int:
        """Requests over the SLO latency or rejected: attainment as a count."""
        return sum(1 for x in self.latencies if x > self.slo_latency + 1e-12)

    def percentile(self, q: float) -> float:
        """Latency percentile (0-100) over all requests; inf when rejections reach it."""
        if not self.latencies:
            return math.nan
        return float(np.percentile(np.asarray(self.latencies), q, method="higher"))

    def window_attainment(self, window: float) -> float:
        """Share of windows (by arrival time) whose p-quantile latency meets the SLO."""
        if not self.arrivals:
            return 1.0
        arr = np.asarray(self.arrivals)
        lat = np.asarray(self.latencies)
        edges = np.arange(0.0, arr[-1] + window, window)
        met = total = 0
        for lo, hi in itertools.pairwise(edges):
            chunk = lat[(arr >= lo) & (arr < hi)]
            if chunk.size == 0:
                continue
            total += 1
            q = float(np.percentile(chunk, self.slo_quantile * 100, method="higher"))
            met += q <= self.slo_latency
        return met / total if total else 1.0

    def mean_replicas(self) -> float:
        return self.gpu_seconds / self.duration if self.duration > 0 else 0.0
