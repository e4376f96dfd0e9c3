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

An LLM service with a TTFT or TPOT objective, which the builtin engine sizes with the LLM
rule (gpuserve.llm.deciding), gets that rule's numbers on its vLLM series instead: the
arrival rate (requests that got their first token plus the waiting queue's growth, as the
rule reads it) against the per-replica rate the capacity model gives the class on the
token mix the rule sizes for before any measurement (`spec.llm.expectedTokens`, else a
default chat mix), and the waiting requests against what a replica admits within the TTFT
objective.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
from gpuserve.llm import metrics as vllm
from gpuserve.llm.deciding import LLMPolicy, sizing
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.keda_mix import KedaTokenMix, sized_for
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
    rate = _rate_threshold(config, accel, service_scale)
    return _scaling(config, rate, config.target_queue_depth, scrape_interval)


def _scaling(
    config: PolicyConfig, rate: float, queue: float | None, scrape_interval: float
) -> KedaScaling:
    """The two thresholds with the windows and behaviour every ScaledObject takes from the
    spec's scaling fields."""
    stable = max(1, math.ceil(config.stable_window))
    return KedaScaling(
        rate_threshold=rate,
        rate_window_s=QueryWindows(scrape_interval).rate_window_over(stable),
        queue_threshold=queue,
        polling_s=max(1, math.ceil(config.panic_window)),
        down_window_s=math.ceil(config.scale_down_window),
        up_percent=round((config.scale_up_max_factor - 1.0) * 100),
        up_pods=config.scale_up_min_step,
        down_percent=round(config.scale_down_max_fraction * 100),
    )


def llm_keda_scaling(
    config: PolicyConfig,
    policy: LLMPolicy,
    class_name: str,
    scrape_interval: float = DEFAULT_SCRAPE_INTERVAL_S,
) -> KedaScaling:
    """The ScaledObject's numbers for an LLM service the LLM rule sizes (``policy``): the
    same windows and behaviour as any service, thresholds in requests of the token mix the
    rule sizes for before it measures one (``LLMPolicy.fallback_shape``: the spec's
    ``llm.expectedTokens``, else the default mix)."""
    per_replica = sizing(policy, class_name, policy.fallback_shape).per_replica
    rate = max(round(per_replica * UTILISATION, 3), 0.001)
    # A replica admitting ``rate`` a second clears this many waiting requests within the
    # TTFT objective (the rule's queue budget where TTFT is not an objective): a longer
    # queue per replica misses TTFT whatever the arrival rate reads.
    admitted_s = min(policy.objectives.ttft_s, policy.queue_budget_s)
    waiting = config.target_queue_depth or max(1, math.floor(rate * admitted_s))
    return _scaling(config, rate, waiting, scrape_interval)


def _service_keda_scaling(
    config: PolicyConfig,
    llm: LLMPolicy | None,
    class_name: str,
    accel: AcceleratorClassSpec,
    scrape_interval: float,
    service_scale: float,
    token_mix: KedaTokenMix | None,
) -> KedaScaling:
    """What the ScaledObject targeting ``class_name`` asks: by the LLM rule where the
    builtin engine would size the service with it (``llm``: a TTFT or TPOT objective), for
    ``token_mix`` (as measured: status.kedaTokenMix) or else the stated mix; otherwise by
    the request-level capacity model for executions ``service_scale`` times as long as
    stated."""
    if llm is not None:
        return llm_keda_scaling(config, sized_for(llm, token_mix), class_name, scrape_interval)
    return keda_scaling(config, accel, scrape_interval, service_scale)


def _queries(svc: InferenceService, llm: bool, window_s: float) -> tuple[str, str]:
    """The rate trigger's query and the queue trigger's, over the service's series."""
    window = promql_range(window_s)
    series = f'{{namespace="{svc.metadata.namespace or "default"}",service="{svc.metadata.name}"}}'
    if not llm:
        return (
            f"sum(rate(nv_inference_request_success{series}[{window}]))",
            f"sum(nv_inference_pending_request_count{series})",
        )
    first_tokens = f"{vllm.TIME_TO_FIRST_TOKEN.name}_count{series}"
    waiting = f"{vllm.NUM_REQUESTS_WAITING.name}{series}"
    # Arrivals, not admissions (the LLM rule's reading): under overload the first-token
    # rate is what the replicas admit, and the queue's growth is the rest. Triton's own
    # vLLM backend does not forward the queue gauge (docs/llm.md): the rate stands alone.
    arrivals = (
        f"clamp_min(sum(rate({first_tokens}[{window}])) + "
        f"(sum(delta({waiting}[{window}])) or vector(0)) / {window_s:g}, 0)"
    )
    return arrivals, f"sum({waiting})"


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
    classes: Mapping[str, AcceleratorClassSpec] | None = None,
    token_mix: KedaTokenMix | None = None,
) -> Obj:
    """``classes``: the AcceleratorClasses known (an LLM service's engines per class)."""
    name = svc.metadata.name
    config = policy_config_from_spec(svc.spec)
    known = classes if classes is not None else {class_name: accel}
    llm = llm_policy_from_spec(svc.spec, classes=known)
    k = _service_keda_scaling(
        config, llm, class_name, accel, scrape_interval, service_scale, token_mix
    )
    rate_query, queue_query = _queries(svc, llm is not None, k.rate_window_s)
    triggers: list[Obj] = [
        {
            "type": "prometheus",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": rate_query,
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
                    "query": queue_query,
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
