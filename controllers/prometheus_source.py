"""Triton's signals for one service, read from Prometheus with prometheus-api-client.

Triton labels its series with `model` and `version`; the scrape configuration adds the
pod's `namespace`, `pod` and `service` (gpuserve.io/service) labels. Every query sums by
service, so per-GPU and per-pod series fold into one figure. Failures come back as None
values plus an error text — the policy then holds, it never scales down on absent data.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException
from urllib3.util.retry import Retry

from gpuserve.autoscaling.metrics import MetricSample
from gpuserve.autoscaling.query_windows import QueryWindows, promql_range
from gpuserve.llm.observing import VllmSnapshot, Windows, snapshot_from_samples, windows_of
from gpuserve.resources.naming import ROLE_WARM

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    sample: MetricSample
    error: str | None = None
    # pod -> requests waiting in its Triton queue (the gauge at the last scrape)
    pod_queues: dict[str, float] = field(default_factory=dict)


BY = "namespace, service"
# Not part of a series' identity: the chart's PodMonitor copies the pod's role onto its
# scrape target, so a role change (a promotion, rule 9) gives the pod a new target whose
# series overlap the old target's until those go stale; summed as they are, that pod
# would count twice. Without this label the two are one series, read at its larger value.
TARGET_ROLE = "role"


def _once(expr: str, *extra: str) -> str:
    """``expr`` summed per service (and ``extra`` labels), each series once whatever role
    its pod's target carried."""
    return f"sum by ({', '.join((BY, *extra))}) (max without ({TARGET_ROLE}) ({expr}))"


def _queries(sel: str, window: str) -> dict[str, str]:
    def rate(metric: str, fn: str = "rate") -> str:
        return _once(f"{fn}({metric}{{{sel}}}[{window}])")

    success = rate("nv_inference_request_success")
    # A series missing on one side (no failures yet, no queue gauge) counts as zero for
    # that service: `or` with the success series times 0 keeps the labels to match on.
    zero = f"({success} * 0)"
    failures = rate("nv_inference_request_failure")
    growth = _once(f"deriv(nv_inference_pending_request_count{{{sel}}}[{window}])")
    return {
        "queue_depth": _once(f"nv_inference_pending_request_count{{{sel}}}"),
        "success_rate": success,
        "recent_completion_rate": f"{rate('nv_inference_request_success', 'irate')} + "
        f"({rate('nv_inference_request_failure', 'irate')} or {zero})",
        # Triton counts no arrivals: demand = completions + failures + queue growth.
        "arrival_rate": f"{success} + ({failures} or {zero}) + ({growth} or {zero})",
        "item_rate": rate("nv_inference_count"),
        "exec_rate": rate("nv_inference_exec_count"),
        "avg_queue_time": f"{rate('nv_inference_queue_duration_us')} / {success} / 1e6",
        "avg_request_time": f"{rate('nv_inference_request_duration_us')} / {success} / 1e6",
        "avg_compute_time": f"{rate('nv_inference_compute_infer_duration_us')} / {success} / 1e6",
        "p95_latency": f"max by ({BY}) "
        f'(nv_inference_request_summary_us{{{sel},quantile="0.95"}}) / 1e6',
    }


ServiceKey = tuple[str, str]


@dataclass(frozen=True)
class Readings:
    """One pass's signals for every service Prometheus has series of."""

    at: float
    values: dict[ServiceKey, dict[str, float | None]]
    error: str | None = None
    pod_queues: dict[ServiceKey, dict[str, float]] = field(default_factory=dict)

    def of(self, namespace: str, service: str) -> Reading:
        found = self.values.get((namespace, service), {})
        return Reading(
            MetricSample(at=self.at, **found),
            error=self.error,
            pod_queues=self.pod_queues.get((namespace, service), {}),
        )

    def has_series(self, namespace: str, service: str) -> bool:
        return (namespace, service) in self.values


# Every vLLM-named series of every service: the LLM rule adds them up itself
# (gpuserve.llm.observing), histogram buckets included.
VLLM_SERIES = '{__name__=~"vllm:.+",service!=""}'


def engines_query(window_s: float, step_s: float) -> str:
    """The engines that served each service over the last ``window_s``, on average: the
    pods with a TTFT histogram (Triton's vLLM backend forwards it; vLLM's own gauges it
    does not) whose target is not a warm standby (which serves nothing), counted at every
    ``step_s`` (the scrape interval) and averaged over every step, those at which the
    service had none counting zero (``avg_over_time`` would skip them: a service's first
    engine, up for half the window, would count as one). A pod scraped under two roles
    during a promotion is one pod."""
    per_pod = (
        f"count by ({BY}, pod) (vllm:time_to_first_token_seconds_count"
        f'{{service!="",{TARGET_ROLE}!="{ROLE_WARM}"}})'
    )
    steps = f"[{promql_range(window_s)}:{promql_range(step_s)}]"
    counted = f"sum_over_time((count by ({BY}) ({per_pod})){steps})"
    return f"{counted} / on() group_left() count_over_time(vector(1){steps})"


@dataclass(frozen=True)
class VllmReadings:
    """One pass's vLLM series of every LLM service, at the pass's instant and at the
    starts of the windows before it (instant queries at past times: nothing is kept
    between passes, so a restarted operator sees the same windows)."""

    at: float
    # seconds before ``at`` (0 and each of the stable, recent and pooled windows) -> snapshot
    snapshots: dict[ServiceKey, dict[float, VllmSnapshot]]
    error: str | None = None
    pooled_s: float | None = None  # the window the token mix is pooled over
    # the engines that served over the last ``engines_s``, on average (``engines_query``)
    engines: dict[ServiceKey, float] = field(default_factory=dict)
    engines_s: float = 0.0  # the stable window

    def of(self, namespace: str, service: str) -> dict[float, VllmSnapshot]:
        return self.snapshots.get((namespace, service), {})


def service_windows(readings: VllmReadings | None, key: ServiceKey, quantile: float) -> Windows:
    """One service's windows (gpuserve.llm.observing.windows_of); none where nothing was
    read."""
    if readings is None:
        return Windows(None, None)
    return windows_of(
        readings.of(*key),
        quantile,
        pooled_s=readings.pooled_s,
        engines=(readings.engines[key], readings.engines_s) if key in readings.engines else None,
    )


class PrometheusSource:
    def __init__(
        self, url: str, *, windows: QueryWindows | None = None, timeout: float = 3.0
    ) -> None:
        self.url = url
        # The windows follow how often Prometheus scrapes (gpuserve.autoscaling.query_windows).
        self.windows = windows or QueryWindows()
        self.window = self.windows.rate_range
        # No client-side retries: an unreachable Prometheus must fail fast (the policy
        # holds and the next evaluation tries again), not stall the operator's periodic loop.
        self._prom = PrometheusConnect(
            url=url, disable_ssl=True, timeout=timeout, retry=Retry(total=0)
        )

    def read_all(self, *, now: float | None = None) -> Readings:
        """Every service's signals in one query per signal (ten per pass, with the pods'
        queues, whatever the number of services), not ten per service."""
        return self._read('service!=""', now)

    def read(self, *, namespace: str, service: str, now: float | None = None) -> Reading:
        return self._read(f'namespace="{namespace}",service="{service}"', now).of(
            namespace, service
        )

    def read_vllm(self, *, at: float) -> VllmReadings:
        """Every service's vLLM series now and at the start of each window, one query per
        instant, and the engines that served over the stable window (``engines_query``),
        one more: five queries whatever the number of services."""
        found: dict[ServiceKey, dict[float, list[tuple[str, dict[str, str], float]]]] = {}
        stable_s, _ = self.windows.vllm_windows_s
        try:
            for ago in (0.0, *self.windows.vllm_windows_s, self.windows.vllm_mix_s):
                result = self._prom.custom_query(query=VLLM_SERIES, params={"time": at - ago})
                for key, sample in _vllm_samples(result):
                    found.setdefault(key, {}).setdefault(ago, []).append(sample)
            query = engines_query(stable_s, self.windows.scrape_interval_s)
            engines = _positive(self._prom.custom_query(query=query, params={"time": at}))
        except (PrometheusApiClientException, RequestException, ValueError) as exc:
            return VllmReadings(at, {}, error=f"Prometheus at {self.url}: {exc}")
        return VllmReadings(
            at,
            {
                key: {ago: snapshot_from_samples(at - ago, samples) for ago, samples in by.items()}
                for key, by in found.items()
            },
            pooled_s=self.windows.vllm_mix_s,
            engines=engines,
            engines_s=stable_s,
        )

    def _read(self, sel: str, now: float | None) -> Readings:
        at = time.time() if now is None else now
        values: dict[ServiceKey, dict[str, float | None]] = {}
        try:
            for name, query in _queries(sel, self.window).items():
                for key, value in _by_service(self._prom.custom_query(query=query)).items():
                    values.setdefault(key, {})[name] = value
            per_pod = self._prom.custom_query(query=_pod_queues_query(sel))
        except (PrometheusApiClientException, RequestException, ValueError) as exc:
            return Readings(at, {}, error=f"Prometheus at {self.url}: {exc}")
        return Readings(at, values, pod_queues=_by_pod(per_pod))


def _pod_queues_query(sel: str) -> str:
    """Each pod's queue: the autoscaler routes around a pod whose queue it cannot clear
    within the budget (gpuserve.autoscaling.shedding)."""
    return _once(f"nv_inference_pending_request_count{{{sel}}}", "pod")


def _entries(result: object, *extra: str) -> list[tuple[ServiceKey, tuple[str, ...], float]]:
    """An instant vector's entries as ((namespace, service), the ``extra`` labels' values,
    value); malformed entries left out."""
    found: list[tuple[ServiceKey, tuple[str, ...], float]] = []
    if not isinstance(result, list):
        return found
    for entry in result:
        try:
            labels = entry["metric"]
            key = (str(labels["namespace"]), str(labels["service"]))
            more = tuple(str(labels[name]) for name in extra)
            found.append((key, more, float(entry["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return found


def _by_pod(result: object) -> dict[ServiceKey, dict[str, float]]:
    """An instant vector's finite values by (namespace, service), then pod."""
    found: dict[ServiceKey, dict[str, float]] = {}
    for key, (pod,), value in _entries(result, "pod"):
        if math.isfinite(value):
            found.setdefault(key, {})[pod] = value
    return found


def _by_service(result: object) -> dict[ServiceKey, float | None]:
    """An instant vector's values by (namespace, service); NaN kept as NaN, infinity as
    None, malformed entries left out."""
    return {key: value if not math.isinf(value) else None for key, _, value in _entries(result)}


def _positive(result: object) -> dict[ServiceKey, float]:
    """An instant vector's finite positive values by (namespace, service)."""
    return {key: value for key, _, value in _entries(result) if 0 < value < math.inf}


def _vllm_samples(
    result: object,
) -> list[tuple[ServiceKey, tuple[str, dict[str, str], float]]]:
    """An instant vector of vLLM series as (service, (name, labels, value)); malformed and
    non-finite entries left out. A series the pod's old and new role both scraped (see
    ``TARGET_ROLE``) is taken once, at the larger value, so a promotion does not double a
    counter for a scrape."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[ServiceKey, float]] = {}
    if not isinstance(result, list):
        return []
    for entry in result:
        try:
            labels = {str(k): str(v) for k, v in entry["metric"].items() if k != TARGET_ROLE}
            name = labels.pop("__name__")
            key = (labels["namespace"], labels["service"])
            value = float(entry["value"][1])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            continue
        if not math.isfinite(value):
            continue
        series = (name, tuple(sorted(labels.items())))
        if series not in found or value > found[series][1]:
            found[series] = (key, value)
    return [(key, (name, dict(labels), value)) for (name, labels), (key, value) in found.items()]
