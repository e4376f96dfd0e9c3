"""Manifests the tests and benchmarks share: the catalogue sleeper service, the local class."""

from __future__ import annotations

from typing import Any

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
) -> dict[str, Any]:
    """An InferenceService of the demo catalogue's sleeper model (see e2e/models).

    ``exec_time_ms=None`` leaves out the model parameters (the model's own timing), for
    tests that need the smallest valid spec rather than a given latency."""
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
