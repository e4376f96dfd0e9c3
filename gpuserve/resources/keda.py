"""`scaling.engine: keda`: a KEDA ScaledObject instead of gpuserve's built-in loop.

KEDA (through its HPA) then owns the replica count of the preferred class's Deployment, so
gpuserve leaves `replicas` out of that Deployment's apply: one writer per field. The
trigger is Triton's completed-request rate from Prometheus with a per-replica threshold
derived from the SLO by the same capacity model the built-in policy uses.

The `scaling` fields the built-in loop reads mean the same with KEDA (nothing is ignored):

| field | ScaledObject |
|---|---|
| `stableWindow` | the rate() range of the request-rate trigger (at least 4 scrape intervals) |
| `panicWindow` | `pollingInterval` (how often KEDA reads the triggers); scale-up is never held |
| `scaleDownStabilization` | the HPA behaviour's `scaleDown.stabilizationWindowSeconds` |
| the policy's step limits | `scaleUp` / `scaleDown` policies per HPA period (15 s) |
| `targetQueueDepth` | a second trigger: pending requests per replica |
| `planningPercentile` | the backlog percentile of the per-replica rate threshold |
"""

from __future__ import annotations

import math
from typing import Any

from gpuserve.api.models import AcceleratorClassSpec, InferenceService
from gpuserve.autoscaling.capacity import replica_capacity
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.autoscaling.query_windows import (
    DEFAULT_SCRAPE_INTERVAL_S,
    QueryWindows,
    promql_range,
)
from gpuserve.resources.naming import deployment_name

Obj = dict[str, Any]
# Headroom a threshold trigger needs: KEDA reacts to what already happened.
UTILISATION = 0.7
# The HPA controller's default sync period: its behaviour policies are rates per period.
HPA_PERIOD_S = 15


def rate_threshold(svc: InferenceService, accel: AcceleratorClassSpec) -> float:
    return _rate_threshold(policy_config_from_spec(svc.spec), accel)


def _rate_threshold(config: PolicyConfig, accel: AcceleratorClassSpec) -> float:
    cap = replica_capacity(
        profile=config.profile,
        slo_latency=config.slo_latency,
        # The objective's own percentile unless the user asked for more headroom.
        quantile=config.planning_quantile or config.slo_quantile,
        speed=accel.relative_speed,
    )
    return max(round(cap.rate * UTILISATION, 3), 0.001)


def _behavior(config: PolicyConfig) -> Obj:
    """The built-in policy's step limits and scale-down window as HPA behaviour."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {
                    "type": "Percent",
                    "value": round((config.scale_up_max_factor - 1.0) * 100),
                    "periodSeconds": HPA_PERIOD_S,
                },
                {"type": "Pods", "value": config.scale_up_min_step, "periodSeconds": HPA_PERIOD_S},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": math.ceil(config.scale_down_window),
            "policies": [
                {
                    "type": "Percent",
                    "value": round(config.scale_down_max_fraction * 100),
                    "periodSeconds": HPA_PERIOD_S,
                }
            ],
        },
    }


def scaled_object(
    svc: InferenceService,
    class_name: str,
    accel: AcceleratorClassSpec,
    prometheus_url: str,
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S,
) -> Obj:
    name = svc.metadata.name
    ns = svc.metadata.namespace or "default"
    config = policy_config_from_spec(svc.spec)
    series = f'{{namespace="{ns}",service="{name}"}}'
    stable = max(1, math.ceil(config.stable_window))
    window = promql_range(QueryWindows(scrape_interval).rate_window_over(stable))
    triggers: list[Obj] = [
        {
            "type": "prometheus",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": f"sum(rate(nv_inference_request_success{series}[{window}]))",
                "threshold": str(_rate_threshold(config, accel)),
            },
        }
    ]
    if config.target_queue_depth is not None:
        triggers.append(
            {
                "type": "prometheus",
                "metadata": {
                    "serverAddress": prometheus_url,
                    "query": f"sum(nv_inference_pending_request_count{series})",
                    "threshold": str(config.target_queue_depth),
                },
            }
        )
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "spec": {
            "scaleTargetRef": {"name": deployment_name(name, class_name)},
            "minReplicaCount": config.min_replicas,
            "maxReplicaCount": config.max_replicas,
            "pollingInterval": max(1, math.ceil(config.panic_window)),
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(config)}},
            "triggers": triggers,
        },
    }
