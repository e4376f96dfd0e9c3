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
from dataclasses import dataclass

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException
from urllib3.util.retry import Retry

from gpuserve.autoscaling.metrics import MetricSample

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    sample: MetricSample
    error: str | None = None


def _queries(sel: str, window: str) -> dict[str, str]:
    def rate(metric: str) -> str:
        return f"sum(rate({metric}{{{sel}}}[{window}]))"

    success = rate("nv_inference_request_success")
    return {
        "queue_depth": f"sum(nv_inference_pending_request_count{{{sel}}})",
        "success_rate": success,
        # Triton counts no arrivals: demand = completions + failures + queue growth.
        "arrival_rate": f"{success} + (sum(rate(nv_inference_request_failure{{{sel}}}[{window}]))"
        f" or vector(0)) + (sum(deriv(nv_inference_pending_request_count{{{sel}}}[{window}]))"
        " or vector(0))",
        "item_rate": rate("nv_inference_count"),
        "exec_rate": rate("nv_inference_exec_count"),
        "avg_queue_time": f"{rate('nv_inference_queue_duration_us')} / {success} / 1e6",
        "avg_request_time": f"{rate('nv_inference_request_duration_us')} / {success} / 1e6",
        "avg_compute_time": f"{rate('nv_inference_compute_infer_duration_us')} / {success} / 1e6",
        "p95_latency": f'max(nv_inference_request_summary_us{{{sel},quantile="0.95"}}) / 1e6',
    }


class PrometheusSource:
    def __init__(self, url: str, *, window: str = "15s", timeout: float = 3.0) -> None:
        self.url = url
        self.window = window
        # No client-side retries: an unreachable Prometheus must fail fast (the policy
        # holds and the next evaluation tries again), not stall the operator's periodic loop.
        self._prom = PrometheusConnect(
            url=url, disable_ssl=True, timeout=timeout, retry=Retry(total=0)
        )

    def read(self, *, namespace: str, service: str, now: float | None = None) -> Reading:
        at = time.time() if now is None else now
        sel = f'namespace="{namespace}",service="{service}"'
        values: dict[str, float | None] = {}
        try:
            for name, query in _queries(sel, self.window).items():
                values[name] = _scalar(self._prom.custom_query(query=query))
        except (PrometheusApiClientException, RequestException, ValueError) as exc:
            return Reading(MetricSample(at=at), error=f"Prometheus at {self.url}: {exc}")
        return Reading(MetricSample(at=at, **values))


def _scalar(result: object) -> float | None:
    """The single value of an instant vector, None for an empty one, NaN kept as NaN."""
    if not isinstance(result, list) or not result:
        return None
    try:
        value = float(result[0]["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if not math.isinf(value) else None
