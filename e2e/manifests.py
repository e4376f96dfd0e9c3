"""Manifests the tests and benchmarks share: the catalogue sleeper service, the local class,
the examples and the operator's rendering of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.resources.rendering import PoolPlan, RenderInput, render_children

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"

# Locally every class runs the same CPU Triton: this class states the H100's GPUs at the
# speed Triton really has here, so the autoscaler's plan matches what it measures.
LOCAL_CLASS: dict[str, Any] = {
    "apiVersion": "gpuserve.io/v1alpha1",
    "kind": "AcceleratorClass",
    "metadata": {"name": "h100-local"},
    "spec": {
        "gpuProduct": H100_PRODUCT,
        "computeCapability": "9.0",
        "memoryGiB": 80,
        "relativeSpeed": 1.0,
        "costPerHour": 6.98,
    },
}


def sleeper_service(
    name: str,
    *,
    classes: list[str],
    scaling: dict[str, Any] | None = None,
    exec_time_ms: float | None = 40,
    per_item_ms: float = 2,
    slo: str = "150ms",
    batching: dict[str, Any] | None = None,
    triton: dict[str, Any] | None = None,
    slowdown: float | None = None,
) -> dict[str, Any]:
    """An InferenceService of the demo catalogue's sleeper model (see e2e/models).

    ``exec_time_ms=None`` leaves out the model parameters (the model's own timing), for
    tests that need the smallest valid spec rather than a given latency. ``slowdown``
    makes every execution that many times as long as the parameters state."""
    model: dict[str, Any] = {
        "name": "sleeper",
        "storageUri": "demo://sleeper",
        "format": "python",
        "inputs": [{"name": "INPUT", "dataType": "FP32", "dims": [4]}],
        "outputs": [{"name": "OUTPUT", "dataType": "FP32", "dims": [4]}],
    }
    if exec_time_ms is not None:
        model["parameters"] = {
            "exec_time_ms": f"{exec_time_ms:g}", "per_item_ms": f"{per_item_ms:g}"
        }
        if slowdown is not None:
            model["parameters"]["slowdown"] = f"{slowdown:g}"
    spec: dict[str, Any] = {
        "model": model,
        "batching": batching or {"maxBatchSize": 8, "maxQueueDelay": "2ms"},
        "slo": {"latency": slo, "percentile": 95},
        "accelerators": {"classes": classes},
    }
    if scaling is not None:
        spec["scaling"] = scaling
    if triton is not None:
        spec["triton"] = triton
    return {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


def example(name: str) -> dict[str, Any]:
    """The single document of examples/<name>.yaml."""
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return body


def example_classes() -> dict[str, AcceleratorClassSpec]:
    """The classes of examples/accelerator-classes.yaml by name."""
    text = (EXAMPLES / "accelerator-classes.yaml").read_text()
    return {
        doc["metadata"]["name"]: AcceleratorClassSpec.model_validate(doc["spec"])
        for doc in yaml.safe_load_all(text)
    }


def rendered_on_h100(
    body: dict[str, Any], replicas: int, extra_pod_labels: dict[str, str]
) -> list[dict[str, Any]]:
    """The operator's children for an InferenceService body with ``replicas`` pods planned
    on the example h100 class."""
    return render_children(
        RenderInput(
            service=parse_inference_service(body),
            classes=example_classes(),
            pools={"h100": PoolPlan(replicas=replicas)},
            extra_pod_labels=extra_pod_labels,
        )
    )
