"""What the capacity model needs, read from the vLLM-named metrics of a service's replicas.

Input: Prometheus samples ``(name, labels, value)`` as scraped from the replicas (one series
per replica and model), the names of ``gpuserve.llm.metrics``. A ``VllmSnapshot`` holds
them at one instant; ``observe`` turns two snapshots into the window's request rate, token
mix (``LoadShape``), prefix-hit rate, measured TTFT/TPOT quantiles and the engines' state
now. Counters and histograms are differenced series by series, as Prometheus' ``increase``
does, and then added up: a replica that starts within the window counts from zero, one
that restarts from its restart, and one that leaves takes only its own observations
along. (Until 2026-12-07 the sums over replicas were differenced: a replica leaving made
them go down, and the window measured nothing; over ten minutes it would also have
subtracted that replica's whole history from the others' counts.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

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

    def since(self, earlier: Histogram | None) -> Histogram:
        """The observations one series made since ``earlier``, as Prometheus' ``increase``
        reads them: all of them where the series is new (or its buckets changed), and all
        since its restart where it went down (a restarted engine counts from zero)."""
        if earlier is None or earlier.bounds != self.bounds:
            return self
        if self.count < earlier.count or any(
            a < b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)
        ):
            return self
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.total - earlier.total,
            self.count - earlier.count,
        )

    def plus(self, other: Histogram) -> Histogram:
        """Both series' observations (same bounds; ``other`` is left out where they
        differ: replicas of one service export the same buckets)."""
        if other.bounds != self.bounds:
            return self
        return Histogram(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.total + other.total,
            self.count + other.count,
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


# A series' labels, less a histogram's bucket bound: one replica's series of one metric.
SeriesKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class VllmSnapshot:
    """The service's vLLM metrics at ``at``: counters and histograms per series (each
    replica's), so that a window differences each series as Prometheus' ``increase`` does
    and a replica leaving within it takes only its own observations along; gauges summed
    over replicas (KV usage averaged)."""

    at: float
    counters: Mapping[str, Mapping[SeriesKey, float]] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    histograms: Mapping[str, Mapping[SeriesKey, Histogram]] = field(default_factory=dict)
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
    """Sorts scraped samples (every replica's, one model) into one snapshot."""
    counters: dict[str, dict[SeriesKey, float]] = {}
    gauges: dict[str, float] = {}
    kv: list[float] = []
    buckets: dict[str, dict[SeriesKey, dict[float, float]]] = {}
    sums: dict[str, dict[SeriesKey, float]] = {}
    counts: dict[str, dict[SeriesKey, float]] = {}
    for name, labels, value in samples:
        if name in _GAUGES:
            gauges[name] = gauges.get(name, 0.0) + value
            continue
        if name == vllm.KV_CACHE_USAGE.name:
            kv.append(value)
            continue
        key = _series_key(labels)
        if name in _COUNTERS:
            per_series = counters.setdefault(name, {})
            per_series[key] = per_series.get(key, 0.0) + value
        else:
            base, part = _histogram_part(name)
            if base is None:
                continue
            if part == _BUCKET:
                bound = float(labels.get("le", "+Inf"))
                buckets.setdefault(base, {}).setdefault(key, {})[bound] = value
            elif part == _SUM:
                sums.setdefault(base, {})[key] = value
            else:
                counts.setdefault(base, {})[key] = value
    if kv:
        gauges[vllm.KV_CACHE_USAGE.name] = sum(kv) / len(kv)
    histograms = {
        base: {
            key: Histogram(
                tuple(sorted(per_bound)),
                tuple(per_bound[b] for b in sorted(per_bound)),
                sums.get(base, {}).get(key, 0.0),
                counts.get(base, {}).get(key, per_bound.get(math.inf, 0.0)),
            )
            for key, per_bound in per_series.items()
        }
        for base, per_series in buckets.items()
    }
    return VllmSnapshot(at, counters, gauges, histograms, len(kv))


def _series_key(labels: Mapping[str, str]) -> SeriesKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


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
    # The engines that served over the window, on average (one that served half of it
    # counts one half); None where not measured. The engines of two snapshots cannot
    # tell it: one that joined a second before the window's end counts as a whole one.
    engines: float | None = None

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
        now, before = later.histograms.get(name, {}), earlier.histograms.get(name, {})
        grown_by = [h.since(before.get(key)) for key, h in now.items()]
        return functools.reduce(Histogram.plus, grown_by) if grown_by else None

    def increase(name: str) -> float:
        now, before = later.counters.get(name, {}), earlier.counters.get(name, {})
        # A series that went down restarted: it counts from zero, as Prometheus reads it.
        return sum(
            value - before[key] if before.get(key, math.inf) <= value else value
            for key, value in now.items()
        )

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
                output_square_mean=outputs.moment(2),
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


@dataclass(frozen=True, slots=True)
class Windows:
    """One pass's windows of a service's traffic (``windows_of``)."""

    stable: Observation | None
    recent: Observation | None
    pooled: Observation | None = None  # the mix's window (gpuserve.llm.mixing)
    replicas: int = 0  # engines that reported at the windows' end


def windows_of(
    snapshots: Mapping[float, VllmSnapshot],
    quantile: float,
    *,
    pooled_s: float | None = None,
    engines: tuple[float, float] | None = None,
) -> Windows:
    """The windows of one pass's snapshots (seconds before the pass -> snapshot, 0 the
    pass's own): of those other than ``pooled_s`` the longest there is (stable) and the
    shortest (recent), and the one starting ``pooled_s`` before the pass (pooled); None
    where a start is missing or not before the pass. A service younger than the pooled
    window has none: a few minutes of a long tail have mostly not seen the tail yet, and
    the simulator's saving from pooling them came from that (docs/bench-notes/
    llm-capacity.md, "2026-12-07 (night)"). ``engines``: (the engines that served over
    the last ``seconds``, on average; ``seconds``) where measured, taken as the stable
    window's ``Observation.engines`` where that window is as long: a service younger than
    it is observed over a shorter window, and engines averaged over the longer one, which
    count it as none for the time before it, would read its rate per engine high."""
    latest = snapshots.get(0.0)

    def since(ago: float) -> Observation | None:
        start = snapshots.get(ago)
        if latest is None or start is None or not start.at < latest.at:
            return None
        return observe(start, latest, quantile)

    windows = [since(ago) for ago in sorted(snapshots, reverse=True) if 0 < ago != pooled_s]
    stable = next((w for w in windows if w is not None), None)
    if stable is not None and engines is not None and math.isclose(stable.window_s, engines[1]):
        stable = replace(stable, engines=engines[0])
    pooled = None if pooled_s is None else since(pooled_s)
    replicas = latest.replicas if latest is not None else 0
    return Windows(stable, windows[-1] if windows else None, pooled, replicas)
