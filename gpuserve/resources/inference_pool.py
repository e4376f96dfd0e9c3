"""The InferencePool of an LLM service (Gateway API Inference Extension, GA API).

A Service spreads requests over its pods at random, so a prompt that shares a prefix with
an earlier one rarely lands where that prefix is cached. An InferencePool names the same
pods for a gateway whose endpoint picker chooses the pod per request (prefix-cache
affinity, queue and KV-cache load): see docs/routing.md.

The pool selects exactly what the Service selects — the service's pods in the serving
role — so warm standby pods stay out of routing until they are promoted, and targets
Triton's HTTP port, where the LLM backends' generate endpoints are served.
"""

from __future__ import annotations

from typing import Any

from gpuserve.api.models import EndpointPickerSpec, InferenceService
from gpuserve.resources.naming import child_name, serving_pod_labels
from gpuserve.triton.serverargs import HTTP_PORT

Obj = dict[str, Any]

# The Gateway API Inference Extension's GA API (v1.0 and later); the x-k8s.io alpha group
# has a different schema (targetPortNumber, extensionRef) and is not rendered.
API_GROUP = "inference.networking.k8s.io"
API_VERSION = f"{API_GROUP}/v1"
KIND = "InferencePool"
PLURAL = "inferencepools"


def endpoint_picker_name(service: InferenceService) -> str:
    """The EPP Service a pool points at: the spec's, else ``<service>-epp``."""
    picker = service.spec.llm.endpoint_picker if service.spec.llm else None
    if picker is not None and picker.name:
        return picker.name
    return child_name(service.metadata.name, "epp")


def inference_pool_spec(service: InferenceService) -> Obj | None:
    """The pool's spec, or None for a format that no endpoint picker routes (not an LLM)."""
    if not service.spec.is_llm:
        return None
    picker = (service.spec.llm.endpoint_picker if service.spec.llm else None) or (
        EndpointPickerSpec()
    )
    return {
        "selector": {"matchLabels": serving_pod_labels(service.metadata.name)},
        "targetPorts": [{"number": HTTP_PORT}],
        "endpointPickerRef": {
            # group "" and kind Service are the API's defaults; spelt out so that what the
            # operator applied compares equal to what the API server stores.
            "group": "",
            "kind": "Service",
            "name": endpoint_picker_name(service),
            "port": {"number": picker.port},
            "failureMode": picker.failure_mode,
        },
    }
