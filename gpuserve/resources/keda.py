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

The threshold rests on `serviceTimes` until Triton's measured compute time contradicts
them; the operator then records the measurement (`status.kedaCalibration`) and the
threshold is sized for the measured executions (gpuserve.autoscaling.keda_calibration).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class KedaScaling:
    """What the ScaledObject asks of KEDA and its HPA, as numbers: the rendering below
    writes them out, and the simulator replays them (``gpuserve.sim.keda_engine``), so a
    prediction for a KEDA service follows the object it gets."""

    rate_threshold: float  # completed req/s per replica (AverageValue)
    rate_window_s: float  # the rate() range
    queue_threshold: float | None  # pending requests per replica; None: no queue trigger
    polling_s: int
    down_window_s: int  # scaleDown.stabilizationWindowSeconds
    up_percent: int  # scaleUp Percent policy per HPA period
    up_pods: int  # scaleUp Pods policy per HPA period (selectPolicy Max)
    down_percent: int  # scaleDown Percent policy per HPA period


def keda_scaling(
    config: PolicyConfig,
    accel: AcceleratorClassSpec,
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S,
    service_scale: float = 1.0,
) -> KedaScaling:
    """``service_scale``: measured / stated execution time, as the operator recorded it
    (gpuserve.autoscaling.keda_calibration); 1.0 until a measurement contradicts the spec."""
    stable = max(1, math.ceil(config.stable_window))
    return KedaScaling(
        rate_threshold=_rate_threshold(config, accel, service_scale),
        rate_window_s=QueryWindows(scrape_interval).rate_window_over(stable),
        queue_threshold=config.target_queue_depth,
        polling_s=max(1, math.ceil(config.panic_window)),
        down_window_s=math.ceil(config.scale_down_window),
        up_percent=round((config.scale_up_max_factor - 1.0) * 100),
        up_pods=config.scale_up_min_step,
        down_percent=round(config.scale_down_max_fraction * 100),
    )


def rate_threshold(svc: InferenceService, accel: AcceleratorClassSpec) -> float:
    return _rate_threshold(policy_config_from_spec(svc.spec), accel)


def _rate_threshold(
    config: PolicyConfig, accel: AcceleratorClassSpec, service_scale: float = 1.0
) -> float:
    cap = replica_capacity(
        profile=config.profile,
        slo_latency=config.slo_latency,
        # The objective's own percentile unless the user asked for more headroom.
        quantile=config.planning_quantile or config.slo_quantile,
        speed=accel.relative_speed,
        service_scale=service_scale,
    )
    return max(round(cap.rate * UTILISATION, 3), 0.001)


def _behavior(k: KedaScaling) -> Obj:
    """The built-in policy's step limits and scale-down window as HPA behaviour."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Percent", "value": k.up_percent, "periodSeconds": HPA_PERIOD_S},
                {"type": "Pods", "value": k.up_pods, "periodSeconds": HPA_PERIOD_S},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": k.down_window_s,
            "policies": [
                {"type": "Percent", "value": k.down_percent, "periodSeconds": HPA_PERIOD_S}
            ],
        },
    }


def scaled_object(
    svc: InferenceService,
    class_name: str,
    accel: AcceleratorClassSpec,
    prometheus_url: str,
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S,
    service_scale: float = 1.0,
) -> Obj:
    name = svc.metadata.name
    ns = svc.metadata.namespace or "default"
    config = policy_config_from_spec(svc.spec)
    k = keda_scaling(config, accel, scrape_interval, service_scale)
    series = f'{{namespace="{ns}",service="{name}"}}'
    window = promql_range(k.rate_window_s)
    triggers: list[Obj] = [
        {
            "type": "prometheus",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": f"sum(rate(nv_inference_request_success{series}[{window}]))",
                "threshold": str(k.rate_threshold),
            },
        }
    ]
    if k.queue_threshold is not None:
        triggers.append(
            {
                "type": "prometheus",
                "metadata": {
                    "serverAddress": prometheus_url,
                    "query": f"sum(nv_inference_pending_request_count{series})",
                    "threshold": str(k.queue_threshold),
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
            "pollingInterval": k.polling_s,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(k)}},
            "triggers": triggers,
        },
    }
