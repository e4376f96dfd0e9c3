"""What the capacity model needs, read from the vLLM-named metrics of a service's replicas.

Input: Prometheus samples ``(name, labels, value)`` as scraped from the replicas (one series
per replica and model), the names of ``gpuserve.llm.metrics``. A ``VllmSnapshot`` adds them
up over replicas at one instant; ``observe`` turns two snapshots into the window's request
rate, token mix (``LoadShape``), prefix-hit rate, measured TTFT/TPOT quantiles and the
engines' state now. Counters and histograms are differenced, so a replica that starts or
stops between the snapshots only shifts the window's totals, as Prometheus' ``increase``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuserve.llm import metrics as vllm
from gpuserve.llm.capacity import LoadShape

_BUCKET, _SUM, _COUNT = "_bucket", "_sum", "_count"


@dataclass(frozen=True, slots=True)
class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound (+inf last)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float  # sum of the observations
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """The observations made since ``earlier`` (same bounds). Sums over replicas go
        down when a replica leaves (or restarts) within the window: such a window measures
        nothing (an empty histogram), rather than negative counts."""
        if earlier is None or earlier.bounds != self.bounds:
            return self
        if self.count < earlier.count or any(
            a < b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)
        ):
            return Histogram(self.bounds, tuple(0.0 for _ in self.bounds), 0.0, 0.0)
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.total - earlier.total,
            self.count - earlier.count,
        )

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None

    def moment(self, power: int) -> float | None:
        """The mean of the observations raised to ``power``, each spread evenly over its
        bucket (as ``quantile`` reads them; the +inf bucket at the largest finite bound)."""
        if self.count <= 0 or not self.bounds:
            return None
        total, lower_bound, lower_count = 0.0, 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            upper = lower_bound if math.isinf(bound) else bound
            # The mean of x ** power for x uniform on [lower_bound, upper].
            if upper > lower_bound:
                rise = upper ** (power + 1) - lower_bound ** (power + 1)
                value = rise / ((power + 1) * (upper - lower_bound))
            else:
                value = lower_bound**power
            total += (cumulative - lower_count) * value
            lower_bound, lower_count = upper, cumulative
        return total / self.count

    def quantile(self, q: float) -> float | None:
        """Linear interpolation within the bucket, as PromQL's ``histogram_quantile``
        (the +inf bucket answers with the largest finite bound)."""
        if self.count <= 0 or not self.bounds:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower_bound
                share = (rank - lower_count) / (cumulative - lower_count)
                return lower_bound + (bound - lower_bound) * share
            lower_bound, lower_count = bound, cumulative
        return lower_bound


@dataclass(frozen=True, slots=True)
class VllmSnapshot:
    """The service's vLLM metrics at ``at``: counters and gauges summed over replicas (KV
    usage averaged), histograms merged."""

    at: float
    counters: Mapping[str, float] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    replicas: int = 0  # series of the KV-usage gauge: engines that reported


_HISTOGRAMS = (
    vllm.TIME_TO_FIRST_TOKEN.name,
    vllm.TIME_PER_OUTPUT_TOKEN.name,
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
)
_COUNTERS = (
    vllm.PREFIX_CACHE_QUERIES.name,
    vllm.PREFIX_CACHE_HITS.name,
    vllm.NUM_PREEMPTIONS.name,
    vllm.PROMPT_TOKENS.name,
    vllm.GENERATION_TOKENS.name,
)
_GAUGES = (vllm.NUM_REQUESTS_RUNNING.name, vllm.NUM_REQUESTS_WAITING.name)


def snapshot_from_samples(
    at: float, samples: Iterable[tuple[str, Mapping[str, str], float]]
) -> VllmSnapshot:
    """Adds up scraped samples (every replica's, one model) into one snapshot."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    kv: list[float] = []
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for name, labels, value in samples:
        if name in _COUNTERS:
            counters[name] = counters.get(name, 0.0) + value
        elif name in _GAUGES:
            gauges[name] = gauges.get(name, 0.0) + value
        elif name == vllm.KV_CACHE_USAGE.name:
            kv.append(value)
        else:
            base, part = _histogram_part(name)
            if base is None:
                continue
            if part == _BUCKET:
                bound = float(labels.get("le", "+Inf"))
                per_bound = buckets.setdefault(base, {})
                per_bound[bound] = per_bound.get(bound, 0.0) + value
            elif part == _SUM:
                sums[base] = sums.get(base, 0.0) + value
            else:
                counts[base] = counts.get(base, 0.0) + value
    if kv:
        gauges[vllm.KV_CACHE_USAGE.name] = sum(kv) / len(kv)
    histograms = {
        base: Histogram(
            tuple(sorted(per_bound)),
            tuple(per_bound[b] for b in sorted(per_bound)),
            sums.get(base, 0.0),
            counts.get(base, per_bound.get(math.inf, 0.0)),
        )
        for base, per_bound in buckets.items()
    }
    return VllmSnapshot(at, counters, gauges, histograms, len(kv))


def _histogram_part(name: str) -> tuple[str | None, str]:
    for part in (_BUCKET, _SUM, _COUNT):
        if name.endswith(part) and name[: -len(part)] in _HISTOGRAMS:
            return name[: -len(part)], part
    return None, ""


@dataclass(frozen=True, slots=True)
class Observation:
    """One window of a service's traffic, in the capacity model's terms."""

    at: float  # end of the window
    window_s: float
    rate: float  # requests/s that got their first token
    shape: LoadShape | None  # None when no request was measured
    ttft_high_s: float | None  # measured at the quantile asked
    tpot_high_s: float | None  # per output-token gap, at the quantile asked
    tpot_mean_s: float | None  # mean output-token gap
    running: float  # now, summed over replicas
    waiting: float
    kv_usage: float  # now, mean over replicas
    preemptions: float  # in the window
    # requests/s the waiting queue grew by over the window (negative where it shrank)
    queue_growth: float = 0.0

    @property
    def arrival_rate(self) -> float:
        """Requests/s that arrived: those that got their first token plus the growth of
        the queue. Under overload the first-token rate is what the replicas admit, not
        what arrives: a spike to 4x the capacity reads as the capacity."""
        return max(0.0, self.rate + self.queue_growth)


def observe(earlier: VllmSnapshot, later: VllmSnapshot, quantile: float) -> Observation:
    """The window between two snapshots of the same service."""
    window = later.at - earlier.at
    if window <= 0:
        raise ValueError(f"later.at: must be after earlier.at ({earlier.at}), got {later.at}")

    def grown(name: str) -> Histogram | None:
        now = later.histograms.get(name)
        return None if now is None else now.minus(earlier.histograms.get(name))

    def increase(name: str) -> float:
        return max(0.0, later.counters.get(name, 0.0) - earlier.counters.get(name, 0.0))

    ttft, tpot = grown(vllm.TIME_TO_FIRST_TOKEN.name), grown(vllm.TIME_PER_OUTPUT_TOKEN.name)
    waiting = later.gauges.get(vllm.NUM_REQUESTS_WAITING.name, 0.0)
    prompts = grown("vllm:request_prompt_tokens")
    outputs = grown("vllm:request_generation_tokens")
    queried = increase(vllm.PREFIX_CACHE_QUERIES.name)
    hit_rate = increase(vllm.PREFIX_CACHE_HITS.name) / queried if queried > 0 else 0.0
    shape = None
    if prompts is not None and outputs is not None:
        prompt_mean, prompt_high = prompts.mean, prompts.quantile(quantile)
        output_mean = outputs.mean
        if prompt_mean is not None and prompt_high is not None and output_mean is not None:
            mean = max(1.0, prompt_mean)
            shape = LoadShape(
                prompt_mean=mean,
                prompt_high=max(mean, prompt_high),
                output_mean=max(1.0, output_mean),
                prefix_hit_rate=min(hit_rate, 0.99),
                prompt_square_mean=prompts.moment(2),
                prompt_cube_mean=prompts.moment(3),
                prompt_fourth_mean=prompts.moment(4),
            )
    return Observation(
        at=later.at,
        window_s=window,
        rate=(ttft.count if ttft is not None else 0.0) / window,
        shape=shape,
        ttft_high_s=None if ttft is None else ttft.quantile(quantile),
        tpot_high_s=None if tpot is None else tpot.quantile(quantile),
        tpot_mean_s=None if tpot is None else tpot.mean,
        running=later.gauges.get(vllm.NUM_REQUESTS_RUNNING.name, 0.0),
        waiting=waiting,
        kv_usage=later.gauges.get(vllm.KV_CACHE_USAGE.name, 0.0),
        preemptions=increase(vllm.NUM_PREEMPTIONS.name),
        queue_growth=(waiting - earlier.gauges.get(vllm.NUM_REQUESTS_WAITING.name, 0.0)) / window,
    )


def windows_of(
    snapshots: Mapping[float, VllmSnapshot], quantile: float
) -> tuple[Observation | None, Observation | None]:
    """The stable and the recent window of one pass's snapshots (seconds before the pass
    -> snapshot, 0 the pass's own): the longest window there is, and the shortest; None
    where a start is missing or not before the pass."""
    latest = snapshots.get(0.0)
    windows = [
        observe(start, latest, quantile) if latest is not None and start.at < latest.at else None
        for start in (snapshots[ago] for ago in sorted(snapshots, reverse=True) if ago > 0)
    ]
    stable = next((w for w in windows if w is not None), None)
    return stable, (windows[-1] if windows else None)
