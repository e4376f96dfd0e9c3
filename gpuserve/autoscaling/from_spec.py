"""The policy's configuration derived from an InferenceService spec.

Service-time priors come from the model's parameters when it states them (the demo
catalogue's `exec_time_ms` / `per_item_ms`), else from conservative defaults; the policy
corrects them with the compute time Triton measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from gpuserve.api.durations import parse_duration
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.autoscaling.config import PolicyConfig, ServiceProfile

DEFAULT_TIME_PER_BATCH_S = 0.005
DEFAULT_TIME_PER_ITEM_S = 0.0002


# The model parameters that state service times (the demo catalogue's names).
TIME_PARAMS = ("exec_time_ms", "per_item_ms")


def _ms(params: Mapping[str, str], key: str) -> float | None:
    """The parameter in seconds; None when absent; an error naming it when it is not a
    number of milliseconds >= 0 (0 is a cost the model does not have, as the sleeper's
    per-item cost may be)."""
    if key not in params:
        return None
    try:
        value = float(params[key])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"model.parameters.{key}: {params[key]!r} is not a number of ms >= 0")
    return value / 1e3


def _ms_param(params: Mapping[str, str], key: str, default_s: float) -> float:
    # The operator corrects the prior from Triton's measurements: a malformed one falls back.
    try:
        stated = _ms(params, key)
    except ValueError:
        return default_s
    return default_s if stated is None else stated


def stated_service_times(params: Mapping[str, str]) -> list[str]:
    """Which of ``TIME_PARAMS`` the model states; a ValueError naming one that is
    malformed (a prediction, which has no measurement to correct it, must not fall back
    silently)."""
    return [key for key in TIME_PARAMS if _ms(params, key) is not None]


def service_profile(spec: InferenceServiceSpec) -> ServiceProfile:
    params = spec.model.parameters
    batching = spec.batching
    return ServiceProfile(
        time_per_batch=_ms_param(params, "exec_time_ms", DEFAULT_TIME_PER_BATCH_S),
        time_per_item=_ms_param(params, "per_item_ms", DEFAULT_TIME_PER_ITEM_S),
        max_batch_size=batching.max_batch_size,
        max_queue_delay=parse_duration(batching.max_queue_delay),
        instances=spec.triton.instance_count,
        dynamic_batching=batching.max_batch_size > 0,
        preferred_batch_sizes=tuple(batching.preferred_batch_sizes),
    )


def policy_config_from_spec(
    spec: InferenceServiceSpec,
    classes: Mapping[str, AcceleratorClassSpec] | None = None,
    *,
    rate_window: float = 20.0,
    scrape_interval: float = 0.0,
) -> PolicyConfig:
    """``classes`` is accepted for symmetry with placement; per-class speed reaches the
    policy through the pool state. ``rate_window``: the window of the caller's rate()
    queries (it tells the policy how much consecutive samples overlap);
    ``scrape_interval``: how often its Prometheus scrapes (0: at every call)."""
    scaling = spec.scaling
    stable = parse_duration(scaling.stable_window)
    panic = min(parse_duration(scaling.panic_window), stable)
    return PolicyConfig(
        profile=service_profile(spec),
        slo_latency=spec.slo.latency_s,
        slo_quantile=spec.slo.percentile / 100.0,
        planning_quantile=(
            scaling.planning_percentile / 100.0 if scaling.planning_percentile is not None else None
        ),
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        stable_window=stable,
        panic_window=panic,
        scale_down_window=parse_duration(scaling.scale_down_stabilization),
        target_queue_depth=scaling.target_queue_depth,
        rate_window=rate_window,
        scrape_interval=scrape_interval,
        warm_pool_auto=scaling.warm_pool_mode == "auto",
        route_around_backlogs=scaling.route_around_backlogs,
        warm_pool_max=scaling.warm_pool_ceiling,
    )
