"""The operator's settings: read from the environment once, at start-up, and passed in.

The chart sets these variables; outside a cluster they are set by hand. A bad value stops
the operator at start-up with a message that names the variable, instead of surfacing
later as a failed reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuserve.api.durations import parse_duration
from gpuserve.autoscaling.query_windows import DEFAULT_SCRAPE_INTERVAL_S, QueryWindows

PROMETHEUS_URL = "GPUSERVE_PROMETHEUS_URL"
# How often that Prometheus scrapes Triton (a duration, "15s"): the query windows follow it.
SCRAPE_INTERVAL = "GPUSERVE_PROMETHEUS_SCRAPE_INTERVAL"
AUTOSCALE_INTERVAL = "GPUSERVE_AUTOSCALE_INTERVAL"
EXTRA_POD_LABELS = "GPUSERVE_EXTRA_POD_LABELS"
WORKER_LIMIT = "GPUSERVE_WORKER_LIMIT"
WORKER_IDLE_SECONDS = "GPUSERVE_WORKER_IDLE_SECONDS"

# Where a ScaledObject's Prometheus trigger points when the operator was given no URL:
# the conventional in-cluster address (KEDA, not the operator, queries it).
DEFAULT_KEDA_PROMETHEUS = "http://prometheus.monitoring:9090"


class SettingsError(ValueError):
    """An environment variable holds a value the operator cannot use."""


@dataclass(frozen=True)
class Settings:
    # Empty: no built-in autoscaling (services hold at their bounds, and say why).
    prometheus_url: str = ""
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S
    autoscale_interval: float = 5.0
    # Labels added to every Triton pod (the chart's `podLabels`).
    extra_pod_labels: Mapping[str, str] = field(default_factory=dict)
    # kopf's per-object worker bound (0: none) and how long an idle worker is kept.
    worker_limit: int = 0
    worker_idle_seconds: float = 0.5
    resync_seconds: float = 30.0
    class_report_seconds: float = 30.0

    @property
    def windows(self) -> QueryWindows:
        return QueryWindows(self.scrape_interval)

    @property
    def keda_prometheus_url(self) -> str:
        return self.prometheus_url or DEFAULT_KEDA_PROMETHEUS

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> Settings:
        return cls(
            prometheus_url=env.get(PROMETHEUS_URL, "").strip(),
            scrape_interval=_interval(env, SCRAPE_INTERVAL, cls.scrape_interval),
            autoscale_interval=_positive(env, AUTOSCALE_INTERVAL, cls.autoscale_interval),
            extra_pod_labels=_labels(env.get(EXTRA_POD_LABELS, "")),
            worker_limit=int(_number(env, WORKER_LIMIT, cls.worker_limit, minimum=0)),
            worker_idle_seconds=_positive(env, WORKER_IDLE_SECONDS, cls.worker_idle_seconds),
        )


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: not a number") from None
    if value < minimum:
        raise SettingsError(f"{name}={raw!r}: must be at least {minimum:g}")
    return value


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default, minimum=0.0)
    if value == 0:
        raise SettingsError(f"{name}=0: must be more than 0")
    return value


def _interval(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive duration as Prometheus writes one ("15s", "1m"); bare seconds too."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw) if raw.replace(".", "", 1).isdigit() else parse_duration(raw)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r}: {exc}") from None
    if seconds <= 0:
        raise SettingsError(f"{name}={raw!r}: must be more than 0")
    return seconds


def _labels(raw: str) -> dict[str, str]:
    """`k=v,k2=v2`; an item without `=` is an error (a typo would silently drop a label)."""
    labels: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{EXTRA_POD_LABELS}: {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels
