"""The tritonserver command line of a gpuserve pod."""

from __future__ import annotations

from gpuserve.api.models import InferenceServiceSpec

MODEL_REPOSITORY = "/models"
HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002


def model_dir(spec: InferenceServiceSpec) -> str:
    """The model's directory in the repository inside the pod."""
    return f"{MODEL_REPOSITORY}/{spec.model.name}"


def version_path(spec: InferenceServiceSpec) -> str:
    """The served version's directory (the pinned version, or 1)."""
    return f"{model_dir(spec)}/{spec.model.version or 1}"


def server_args(spec: InferenceServiceSpec) -> list[str]:
    """Flags in a fixed order (a stable pod template means no needless rollouts)."""
    args = [
        "tritonserver",
        f"--model-repository={MODEL_REPOSITORY}",
        # Explicit control: exactly this model is loaded, nothing that appears later.
        "--model-control-mode=explicit",
        f"--load-model={spec.model.name}",
        "--strict-readiness=true",
        f"--exit-timeout-secs={spec.triton.exit_timeout_seconds}",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        # Summaries give per-pod percentiles, which the autoscaler compares with the SLO.
        "--metrics-config=summary_latencies=true",
    ]
    if spec.model.inputs and spec.model.outputs:
        args.append("--disable-auto-complete-config")
    if spec.triton.response_cache:
        args.append(f"--cache-config=local,size={_bytes(spec.triton.response_cache_size)}")
    args.extend(spec.triton.args)
    return args


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)
