"""Invalid manifests and the field each must be rejected for.

Shared by the unit tests (pydantic, the operator's own parser) and the end-to-end tests
(the real API server's schema and CEL rules), so both layers reject the same inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from e2e.manifests import sleeper_service

Obj = dict[str, Any]


def valid_service(name: str = "svc") -> Obj:
    """The smallest valid service the cases below each break in one place."""
    return sleeper_service(
        name,
        classes=["h100"],
        slo="50ms",
        exec_time_ms=None,
        batching={"maxBatchSize": 8, "preferredBatchSizes": [4, 8], "maxQueueDelay": "2ms"},
        scaling={"minReplicas": 1, "maxReplicas": 4},
    )


def valid_llm_service(name: str = "llm", model_format: str = "vllm") -> Obj:
    """The smallest valid LLM service (a vLLM engine on one GPU) the LLM cases break."""
    return {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": "llama",
                "storageUri": "pvc://models/llama-3.1-8b-instruct",
                "format": model_format,
            },
            "precision": "bf16",
            "slo": {"latency": "20s", "ttft": "500ms", "tpot": "50ms"},
            "accelerators": {"classes": ["h100"]},
            "llm": {"maxContextLength": 8192, "parameters": "8B"},
        },
    }


def valid_class(name: str = "h100") -> Obj:
    return {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "AcceleratorClass",
        "metadata": {"name": name},
        "spec": {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "computeCapability": "9.0"},
    }


@dataclass(frozen=True)
class Case:
    id: str
    field: str  # the path the rejection must name, as the API server spells it
    mutate: Callable[[Obj], None]
    kind: str = "InferenceService"
    llm: bool = False  # breaks valid_llm_service instead of valid_service

    def body(self, name: str) -> Obj:
        if self.kind != "InferenceService":
            base = valid_class(name)
        else:
            base = valid_llm_service(name) if self.llm else valid_service(name)
        obj = copy.deepcopy(base)
        self.mutate(obj)
        return obj


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        keys = path.split(".")
        node = obj
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value

    return mutate


def _drop(path: str) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        keys = path.split(".")
        node = obj
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]

    return mutate


def _both(*mutations: Callable[[Obj], None]) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        for m in mutations:
            m(obj)

    return mutate


def _empty_first_input_dims(obj: Obj) -> None:
    obj["spec"]["model"]["inputs"][0]["dims"] = []


CASES: list[Case] = [
    Case(
        "preferred-above-max",
        "spec.batching.preferredBatchSizes",
        _set("spec.batching.preferredBatchSizes", [4, 16]),
    ),
    Case(
        "preferred-without-batching",
        "spec.batching.preferredBatchSizes",
        _both(
            _set("spec.batching.maxBatchSize", 0), _set("spec.batching.preferredBatchSizes", [4])
        ),
    ),
    Case(
        "default-priority-above-levels",
        "spec.batching.defaultPriorityLevel",
        _both(
            _set("spec.batching.priorityLevels", 2), _set("spec.batching.defaultPriorityLevel", 3)
        ),
    ),
    Case(
        "default-priority-without-levels",
        "spec.batching.defaultPriorityLevel",
        _set("spec.batching.defaultPriorityLevel", 1),
    ),
    Case(
        "min-above-max",
        "spec.scaling.minReplicas",
        _both(_set("spec.scaling.minReplicas", 5), _set("spec.scaling.maxReplicas", 2)),
    ),
    Case(
        "delay-outside-slo",
        "spec.batching.maxQueueDelay",
        _set("spec.batching.maxQueueDelay", "60ms"),
    ),
    Case(
        "delay-equals-slo",
        "spec.batching.maxQueueDelay",
        _set("spec.batching.maxQueueDelay", "50ms"),
    ),
    Case(
        "onnx-bf16",
        "spec.precision",
        _both(_set("spec.model.format", "onnx"), _set("spec.precision", "bf16")),
    ),
    Case(
        "tensorflow-int8",
        "spec.precision",
        _both(_set("spec.model.format", "tensorflow"), _set("spec.precision", "int8")),
    ),
    Case(
        "pytorch-fp8",
        "spec.precision",
        _both(_set("spec.model.format", "pytorch"), _set("spec.precision", "fp8")),
    ),
    # Triton's python backend has no int8 path: the precision would be dropped silently.
    Case("python-int8", "spec.precision", _set("spec.precision", "int8")),
    Case("unknown-precision", "spec.precision", _set("spec.precision", "fp64")),
    Case("unknown-format", "spec.model.format", _set("spec.model.format", "caffe")),
    Case("http-storage", "spec.model.storageUri", _set("spec.model.storageUri", "http://x/y")),
    Case("pvc-without-path", "spec.model.storageUri", _set("spec.model.storageUri", "pvc://claim")),
    Case("model-name-slash", "spec.model.name", _set("spec.model.name", "a/b")),
    Case("negative-batch", "spec.batching.maxBatchSize", _set("spec.batching.maxBatchSize", -1)),
    Case("huge-batch", "spec.batching.maxBatchSize", _set("spec.batching.maxBatchSize", 5000)),
    Case(
        "bad-duration", "spec.batching.maxQueueDelay", _set("spec.batching.maxQueueDelay", "fast")
    ),
    # Values the schema's pattern rejects: no second error from a CEL rule's duration().
    Case(
        "delay-not-a-duration",
        "spec.batching.maxQueueDelay",
        _set("spec.batching.maxQueueDelay", "abc"),
    ),
    Case("latency-without-unit", "spec.slo.latency", _set("spec.slo.latency", "50")),
    Case(
        "queue-timeout-not-a-duration",
        "spec.batching.queuePolicy.timeout",
        _set("spec.batching.queuePolicy", {"timeout": "soon"}),
    ),
    Case("missing-slo-latency", "spec.slo.latency", _drop("spec.slo.latency")),
    Case("odd-percentile", "spec.slo.percentile", _set("spec.slo.percentile", 97)),
    Case("no-classes", "spec.accelerators.classes", _set("spec.accelerators.classes", [])),
    Case(
        "duplicate-classes",
        "spec.accelerators.classes",
        _set("spec.accelerators.classes", ["h100", "h100"]),
    ),
    Case("zero-gpus", "spec.accelerators.gpusPerPod", _set("spec.accelerators.gpusPerPod", 0)),
    Case("negative-warm-pool", "spec.scaling.warmPool", _set("spec.scaling.warmPool", -1)),
    Case(
        "warm-pool-above-max",
        "spec.scaling.warmPool",
        _both(_set("spec.scaling.warmPool", 5), _set("spec.scaling.maxReplicas", 2)),
    ),
    Case("upper-case-name", "metadata.name", _set("metadata.name", "Chat")),
    Case("name-with-dot", "metadata.name", _set("metadata.name", "chat.v2")),
    Case("unknown-tier", "spec.tier", _set("spec.tier", "realtime")),
    Case(
        "unknown-timeout-action",
        "spec.batching.queuePolicy.timeoutAction",
        _set("spec.batching.queuePolicy", {"timeoutAction": "Drop"}),
    ),
    Case(
        "reject-timeout-below-delay",
        "spec.batching.queuePolicy.timeout",
        _set("spec.batching.queuePolicy", {"timeout": "1ms", "timeoutAction": "Reject"}),
    ),
    Case("unknown-engine", "spec.scaling.engine", _set("spec.scaling.engine", "hpa")),
    Case(
        "planning-percentile-100",
        "spec.scaling.planningPercentile",
        _set("spec.scaling.planningPercentile", 100),
    ),
    Case(
        "keda-with-warm-pool",
        "spec.scaling.warmPool",
        _both(_set("spec.scaling.engine", "keda"), _set("spec.scaling.warmPool", 1)),
    ),
    Case(
        "keda-with-auto-warm-pool",
        "spec.scaling.warmPoolMode",
        _both(_set("spec.scaling.engine", "keda"), _set("spec.scaling.warmPoolMode", "auto")),
    ),
    Case(
        "unknown-warm-pool-mode",
        "spec.scaling.warmPoolMode",
        _set("spec.scaling.warmPoolMode", "big"),
    ),
    Case("empty-dims", "spec.model.inputs[0].dims", _empty_first_input_dims),
    Case("missing-model", "spec.model", _drop("spec.model")),
    Case("version-zero", "spec.model.version", _set("spec.model.version", 0)),
    Case("unknown-field", "spec.batching.maxBatch", _set("spec.batching.maxBatch", 4)),
    # LLM formats: the engine batches continuously, so Triton's batching window is refused.
    Case(
        "llm-batching-window",
        "spec.batching.maxQueueDelay",
        _set("spec.batching.maxQueueDelay", "5ms"),
        llm=True,
    ),
    Case(
        "llm-preferred-batch-sizes",
        "spec.batching.preferredBatchSizes",
        _set("spec.batching.preferredBatchSizes", [4]),
        llm=True,
    ),
    Case(
        "llm-queue-policy",
        "spec.batching.queuePolicy",
        _set("spec.batching.queuePolicy", {"maxQueueSize": 64}),
        llm=True,
    ),
    Case(
        "llm-priority-levels",
        "spec.batching.priorityLevels",
        _set("spec.batching.priorityLevels", 2),
        llm=True,
    ),
    Case(
        "trtllm-batching-window",
        "spec.batching.maxQueueDelay",
        _both(_set("spec.model.format", "tensorrtllm"), _set("spec.batching.maxQueueDelay", "1ms")),
        llm=True,
    ),
    Case(
        "tensor-parallel-not-gpus-per-pod",
        "spec.llm.tensorParallelSize",
        _set("spec.llm.tensorParallelSize", 2),
        llm=True,
    ),
    Case(
        "gpus-per-pod-not-tensor-parallel",
        "spec.llm.tensorParallelSize",
        _set("spec.accelerators.gpusPerPod", 4),
        llm=True,
    ),
    Case(
        "llm-response-cache",
        "spec.triton.responseCache",
        _set("spec.triton.responseCache", True),
        llm=True,
    ),
    Case(
        "trtllm-response-cache",
        "spec.triton.responseCache",
        _both(_set("spec.model.format", "tensorrtllm"), _set("spec.triton.responseCache", True)),
        llm=True,
    ),
    Case("ttft-on-python", "spec.slo.ttft", _set("spec.slo.ttft", "300ms")),
    Case("tpot-on-python", "spec.slo.tpot", _set("spec.slo.tpot", "40ms")),
    Case(
        "llm-section-on-onnx",
        "spec.llm",
        _set("spec.llm", {"maxContextLength": 4096, "parameters": "8B"}),
    ),
    Case("vllm-without-llm-section", "spec.llm", _drop("spec.llm"), llm=True),
    Case(
        "llm-size-twice",
        "spec.llm.parameters",
        _set("spec.llm.weightBytes", "16Gi"),
        llm=True,
    ),
    Case("llm-size-missing", "spec.llm.parameters", _drop("spec.llm.parameters"), llm=True),
    Case(
        "llm-bad-parameter-count",
        "spec.llm.parameters",
        _set("spec.llm.parameters", "8b"),
        llm=True,
    ),
    Case(
        "llm-kv-16-bit-not-precision",
        "spec.llm.kvCacheDtype",
        _set("spec.llm.kvCacheDtype", "fp16"),
        llm=True,
    ),
    Case(
        "llm-unknown-quantization",
        "spec.llm.quantization",
        _set("spec.llm.quantization", "int3"),
        llm=True,
    ),
    Case("vllm-fp8-precision", "spec.precision", _set("spec.precision", "fp8"), llm=True),
    Case("ttft-not-a-duration", "spec.slo.ttft", _set("spec.slo.ttft", "fast"), llm=True),
    Case(
        "llm-step-budget-below-running-sequences",
        "spec.llm.maxBatchedTokens",
        _set("spec.llm.maxBatchedTokens", 64),
        llm=True,
    ),
    Case(
        "llm-expected-prompt-high-below-mean",
        "spec.llm.expectedTokens.promptHigh",
        _set("spec.llm.expectedTokens", {"prompt": 2000, "output": 100, "promptHigh": 500}),
        llm=True,
    ),
    Case(
        "llm-expected-mix-longer-than-the-context",
        "spec.llm.expectedTokens",
        _set("spec.llm.expectedTokens", {"prompt": 8000, "output": 500}),
        llm=True,
    ),
    Case(
        "llm-expected-output-zero",
        "spec.llm.expectedTokens.output",
        _set("spec.llm.expectedTokens", {"prompt": 1000, "output": 0}),
        llm=True,
    ),
    Case(
        "llm-memory-fraction-above-one",
        "spec.llm.kvCacheMemoryFraction",
        _set("spec.llm.kvCacheMemoryFraction", 1.5),
        llm=True,
    ),
    Case(
        "mixed-mig-wrong-resource",
        "spec.resourceName",
        _both(
            _set("spec.mig", {"profile": "3g.40gb", "strategy": "mixed"}),
            _set("spec.resourceName", "nvidia.com/gpu"),
        ),
        kind="AcceleratorClass",
    ),
    Case(
        "bad-mig-profile",
        "spec.mig.profile",
        _set("spec.mig", {"profile": "3g40gb"}),
        kind="AcceleratorClass",
    ),
    Case(
        "zero-speed", "spec.relativeSpeed", _set("spec.relativeSpeed", 0), kind="AcceleratorClass"
    ),
]
