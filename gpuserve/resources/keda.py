"""`scaling.engine: keda`: a KEDA ScaledObject instead of gpuserve's built-in loop.

KEDA (through its HPA) then owns the replica count of the preferred class's Deployment, so
gpuserve leaves `replicas` out of that Deployment's apply: one writer per field. The
trigger is Triton's completed-request rate from Prometheus with a per-replica threshold
derived from the SLO by the same capacity model the built-in policy uses.
"""

from __future__ import annotations

from typing import Any

from gpuserve.api.models import AcceleratorClassSpec, InferenceService
from gpuserve.autoscaling.capacity import replica_capacity
from gpuserve.autoscaling.from_spec import service_profile
from gpuserve.resources.naming import deployment_name

Obj = dict[str, Any]
# Headroom a threshold trigger needs: KEDA reacts to what already happened.
UTILISATION = 0.7


def rate_threshold(svc: InferenceService, accel: AcceleratorClassSpec) -> float:
    spec = svc.spec
    cap = replica_capacity(
        profile=service_profile(spec),
        slo_latency=spec.slo.latency_s,
        quantile=spec.slo.percentile / 100.0,
        speed=accel.relative_speed,
    )
    return max(round(cap.rate * UTILISATION, 3), 0.001)


def scaled_object(
    svc: InferenceService, class_name: str, accel: AcceleratorClassSpec, prometheus_url: str
) -> Obj:
    name = svc.metadata.name
    ns = svc.metadata.namespace or "default"
    scaling = svc.spec.scaling
    query = f'sum(rate(nv_inference_request_success{{namespace="{ns}",service="{name}"}}[1m]))'
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "spec": {
            "scaleTargetRef": {"name": deployment_name(name, class_name)},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": query,
                        "threshold": str(rate_threshold(svc, accel)),
                    },
                }
            ],
        },
    }
