"""The gpuserve.io/v1alpha1 API: the single source of truth of the CRDs.

Every field carries a description (it becomes `kubectl explain` text), defaults and
enums live in the schema, and cross-field rules are CEL expressions that the API server
evaluates at admission (``x-kubernetes-validations``). The operator parses bodies with the
same models, so a rule can never be enforced in one place and forgotten in the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpuserve.api.durations import DURATION_PATTERN, parse_duration
from gpuserve.llm.capacity import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    PROMPT_HIGH_PER_MEAN,
)

JsonDict = dict[str, Any]

GROUP = "gpuserve.io"
VERSION = "v1alpha1"
# Resource names (plurals) of the two kinds, as the API server's URLs and RBAC rules spell them.
SERVICES_PLURAL = "inferenceservices"
CLASSES_PLURAL = "acceleratorclasses"
API_VERSION: Final = "gpuserve.io/v1alpha1"

Format = Literal["onnx", "tensorrt", "pytorch", "tensorflow", "python", "vllm", "tensorrtllm"]
# Formats served by an LLM engine inside Triton: continuous batching, token streaming.
LLM_FORMATS: tuple[str, ...] = ("vllm", "tensorrtllm")
Precision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
KVCacheDtype = Literal["auto", "fp16", "bf16", "fp8"]
Quantization = Literal["none", "fp8", "int4-awq", "int4-gptq"]
Tier = Literal["interactive", "batch"]
DataType = Literal[
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "STRING",
]


@dataclass(frozen=True)
class FormatPrecisions:
    """The precisions a model format can be served at, and why the others cannot."""

    allowed: tuple[str, ...]
    why: str


# The one table of which precision each format can honour. The pydantic validator and the
# CRD's CEL rules (``precision_rules``) are both generated from it.
PRECISIONS_BY_FORMAT: dict[str, FormatPrecisions] = {
    # gpuserve compiles the precision into config.pbtxt for these two (TensorRT accelerator).
    "onnx": FormatPrecisions(
        ("fp32", "fp16", "int8"),
        "ONNX Runtime's TensorRT accelerator takes precision_mode FP32, FP16 or INT8",
    ),
    "tensorflow": FormatPrecisions(
        ("fp32", "fp16"), "TF-TRT converts a SavedModel to FP32 or FP16 only"
    ),
    # For the others the precision is fixed by the artifact or the code; gpuserve uses it to
    # skip GPUs that cannot run it (bf16, fp8) and in the simulator.
    "pytorch": FormatPrecisions(
        ("fp32", "fp16", "bf16"),
        "a TorchScript model runs at the precision it was exported in, and the libtorch "
        "backend has no int8 or fp8 path",
    ),
    "tensorrt": FormatPrecisions(
        ("fp32", "fp16", "bf16", "int8", "fp8"),
        "a TensorRT plan fixes its precision when it is built",
    ),
    "python": FormatPrecisions(
        ("fp32", "fp16", "bf16", "fp8"),
        "the model's own code computes in the floating-point type it declares; int8 needs "
        "a calibrated quantization that only TensorRT performs: use format onnx or tensorrt",
    ),
    # For LLM engines the precision is the activations' type (vLLM's dtype, the dtype a
    # TensorRT-LLM engine was built with); 8-bit and 4-bit weights are llm.quantization.
    "vllm": FormatPrecisions(
        ("fp32", "fp16", "bf16"),
        "the precision is vLLM's dtype; fp8 or int4 weights are set with llm.quantization",
    ),
    "tensorrtllm": FormatPrecisions(
        ("fp32", "fp16", "bf16"),
        "the precision is the dtype the engine was built with; fp8 or int4 weights are set "
        "with llm.quantization",
    ),
}


def _or_list(items: tuple[str, ...]) -> str:
    return ", ".join(items[:-1]) + f" or {items[-1]}" if len(items) > 1 else items[0]


def precision_message(model_format: str) -> str:
    """The rejection message for a precision ``model_format`` cannot honour."""
    rule = PRECISIONS_BY_FORMAT[model_format]
    return f"precision: {model_format} models run {_or_list(rule.allowed)} ({rule.why})"


def precision_rules() -> list[JsonDict]:
    """One CEL rule per format that does not take every precision, from the table."""
    every = set(get_args(Precision))
    return [
        _cel(
            f"self.model.format != '{fmt}' || self.precision in "
            f"[{', '.join(repr(p) for p in rule.allowed)}]",
            precision_message(fmt),
            ".precision",
        )
        for fmt, rule in PRECISIONS_BY_FORMAT.items()
        if set(rule.allowed) != every
    ]


# A duration such as 100ms or 1m30s: the format the fields below share.
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, max_length=32)]

# Counts several fields share, bounded once: GPUs in one pod (one node holds at most 8),
# a Triton request priority (1 is the highest) and a batch (items or sequences).
GpuCount = Annotated[int, Field(ge=1, le=8)]
PriorityLevel = Annotated[int, Field(ge=1, le=16)]
BatchSize = Annotated[int, Field(ge=1, le=4096)]

# Minimum CUDA compute capability for the precisions that need tensor-core support.
MIN_COMPUTE_CAPABILITY: dict[str, float] = {"bf16": 8.0, "fp8": 8.9}


def _default_of(model: type[BaseModel]) -> JsonDict:
    """Schema default of a nested object: its complete default value, so the API server
    stores every field and CEL rules never meet a missing key."""
    return {"default": model().model_dump(mode="json", by_alias=True, exclude_none=True)}


def _nested(model: type[BaseModel], description: str) -> Any:
    """A nested object that may be left out: defaults to its complete default value."""
    return Field(
        default_factory=model, description=description, json_schema_extra=_default_of(model)
    )


def _optional(description: str, alias: str | None = None) -> Any:
    """A field that may be left out: unset (None) by default. Its constraints live in its
    type (``Annotated[..., Field(...)] | None``), so they bind the value when it is set."""
    return Field(default=None, description=description, alias=alias)


def _cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def _unless_malformed(*duration_fields: str) -> str:
    """CEL prefix that skips a rule while a duration field fails the schema's pattern: the
    API server runs CEL rules even on values the schema rejected, and duration() would then
    add a second error naming the wrong field."""
    return "".join(f"!{f}.matches(r'{DURATION_PATTERN}') || " for f in duration_fields)


def _unless_below(field: str, minimum: int) -> str:
    """CEL prefix that skips a rule while ``field`` is below the schema's minimum (the
    schema's error names it; the rule would blame the field it compares it with)."""
    return f"{field} < {minimum} || "


DELAY_WITHIN_SLO_MESSAGE = (
    "batching.maxQueueDelay: the batching delay must be shorter than the SLO latency"
)
TIMEOUT_COVERS_DELAY_MESSAGE = (
    "batching.queuePolicy.timeout: a Reject timeout shorter than maxQueueDelay rejects "
    "requests the batcher is still holding"
)
WARM_POOL_BOUND_MESSAGE = (
    "warmPool: must be <= maxReplicas (a warm pod only ever replaces a serving one, so "
    "standby pods beyond maxReplicas could never serve)"
)
_KEDA_NO_STANDBY = "need the builtin engine (KEDA scales one Deployment and knows no standby pods)"
WARM_POOL_KEDA_MESSAGE = f"warmPool: warm pools {_KEDA_NO_STANDBY}"
WARM_POOL_MODE_KEDA_MESSAGE = f"warmPoolMode: auto warm pools {_KEDA_NO_STANDBY}"
RESPONSE_CACHE_LLM_MESSAGE = (
    "triton.responseCache: vllm and tensorrtllm models cannot use Triton's response cache "
    "(generation is sampled and streamed: a cached answer would replay one completion)"
)


class _Model(BaseModel):
    """Base: camelCase on the wire, unknown fields refused (the API server prunes them)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


# --------------------------------------------------------------------------- model


class TensorSpec(_Model):
    name: str = Field(
        description="Tensor name as the model declares it.", min_length=1, max_length=128
    )
    data_type: DataType = Field(description="Triton data type of the tensor, e.g. FP32.")
    dims: list[int] = Field(
        description="Shape without the batch dimension; -1 marks a variable dimension.",
        min_length=1,
        max_length=8,
    )

    @field_validator("dims")
    @classmethod
    def _dims_positive_or_variable(cls, dims: list[int]) -> list[int]:
        if any(d == 0 or d < -1 for d in dims):
            raise ValueError("dims must be positive or -1 (variable)")
        return dims


class SecretRef(_Model):
    name: str = Field(
        description="Name of a Secret in the service's namespace whose keys become "
        "environment variables of the model fetcher (e.g. AWS_ACCESS_KEY_ID). The "
        "operator references it and never copies its data.",
        min_length=1,
        max_length=253,
    )


STORAGE_URI_PATTERN = r"^(s3|gs|as|pvc|demo)://[^\s]+$"


class ModelSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!self.storageUri.startsWith('pvc://') || "
                    "self.storageUri.substring(6).contains('/')",
                    "storageUri: a pvc:// location is pvc://<claim>/<path>",
                    ".storageUri",
                ),
            ]
        }
    )

    name: str = Field(
        description="Model name inside Triton (its directory in the model repository).",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=63,
    )
    storage_uri: str = Field(
        description="Where the model files live: s3://bucket/path, gs://bucket/path, "
        "as://account/container/path, pvc://<claim>/<path>, or demo://<name> for the "
        "local demo catalogue.",
        pattern=STORAGE_URI_PATTERN,
        max_length=1024,
    )
    format: Format = Field(
        description="Model format; selects the Triton backend (onnx -> onnxruntime, "
        "tensorrt -> tensorrt_plan, pytorch -> libtorch, tensorflow -> savedmodel, "
        "python -> python backend)."
    )
    version: Annotated[int, Field(ge=1)] | None = _optional(
        "Serve exactly this model version; when unset, the latest version."
    )
    storage_secret_ref: SecretRef | None = _optional(
        "Credentials for the storage location, by reference."
    )
    inputs: list[TensorSpec] = Field(
        default_factory=list,
        description="Input tensors. With inputs and outputs both given, Triton's "
        "auto-completion of the config is turned off and the config is exactly this.",
        max_length=32,
    )
    outputs: list[TensorSpec] = Field(
        default_factory=list, description="Output tensors.", max_length=32
    )
    parameters: dict[str, str] = Field(
        default_factory=dict,
        description="Backend parameters written to the model config's parameters map.",
        max_length=64,
    )

    @field_validator("storage_uri")
    @classmethod
    def _pvc_has_path(cls, uri: str) -> str:
        if uri.startswith("pvc://") and "/" not in uri[len("pvc://") :]:
            raise ValueError("storageUri: a pvc:// location is pvc://<claim>/<path>")
        return uri


# --------------------------------------------------------------------------- batching


class QueuePolicy(_Model):
    max_queue_size: int = Field(
        default=0,
        description="Requests allowed to wait in the queue; beyond it Triton rejects at "
        "once. 0 means unbounded.",
        ge=0,
        le=1_000_000,
    )
    timeout: Duration | None = _optional(
        "How long a request may wait in the queue before timeoutAction applies, as a "
        "duration (e.g. 100ms). Unset means no timeout."
    )
    timeout_action: Literal["Reject", "Delay"] = Field(
        default="Reject",
        description="Reject: fail requests that time out. Delay: keep them, behind "
        "requests that have not timed out (they can starve).",
    )
    allow_timeout_override: bool = Field(
        default=False, description="Let requests ask for a shorter timeout than this one."
    )


class BatchingSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    _unless_below("self.maxBatchSize", 0) + "!has(self.preferredBatchSizes) || "
                    "self.preferredBatchSizes.all(s, s <= self.maxBatchSize)",
                    "preferredBatchSizes: every preferred size must be <= maxBatchSize",
                    ".preferredBatchSizes",
                ),
                _cel(
                    _unless_below("self.maxBatchSize", 0)
                    + "self.maxBatchSize > 0 || !has(self.preferredBatchSizes) || "
                    "size(self.preferredBatchSizes) == 0",
                    "preferredBatchSizes: needs maxBatchSize > 0 (batching is off at 0)",
                    ".preferredBatchSizes",
                ),
                _cel(
                    _unless_below("self.priorityLevels", 0) + "!has(self.defaultPriorityLevel) || "
                    "(self.priorityLevels > 0 && self.defaultPriorityLevel <= "
                    "self.priorityLevels)",
                    "defaultPriorityLevel: must be between 1 and priorityLevels",
                    ".defaultPriorityLevel",
                ),
            ]
        }
    )

    max_batch_size: int = Field(
        default=8,
        description="Largest batch Triton forms. 0 turns batching off (the model then "
        "takes no batch dimension).",
        ge=0,
        le=4096,
    )
    preferred_batch_sizes: list[BatchSize] = Field(
        default_factory=list,
        description="Batch sizes the dynamic batcher tries to form first; each <= "
        "maxBatchSize. Empty (the default): Triton forms the largest batch it can, up to "
        "maxBatchSize, within maxQueueDelay.",
        max_length=16,
    )
    max_queue_delay: Duration = Field(
        default="0ms",
        description="How long the batcher may hold a request to build a larger batch "
        "(e.g. 2ms). Must fit inside the SLO latency.",
    )
    priority_levels: int = Field(
        default=0,
        description="Number of request priority levels (1 is the highest); 0 disables priorities.",
        ge=0,
        le=16,
    )
    default_priority_level: PriorityLevel | None = _optional(
        "Priority of requests that do not say; defaults from the tier (interactive: 1, "
        "batch: the lowest level)."
    )
    queue_policy: QueuePolicy | None = _optional("Bounds and timeouts of the request queue.")

    @model_validator(mode="after")
    def _cross_checks(self) -> BatchingSpec:
        if any(s > self.max_batch_size for s in self.preferred_batch_sizes):
            raise ValueError("preferredBatchSizes: every preferred size must be <= maxBatchSize")
        if self.default_priority_level is not None and not (
            0 < self.default_priority_level <= self.priority_levels
        ):
            raise ValueError("defaultPriorityLevel: must be between 1 and priorityLevels")
        return self


# --------------------------------------------------------------------------- SLO, GPUs, scaling


class SLOSpec(_Model):
    latency: Duration = Field(
        description="Latency objective for one request, end to end inside Triton (e.g. 50ms).",
    )
    percentile: Literal[50, 90, 95, 99] = Field(
        default=95,
        description="Share of requests, in percent, that must meet latency (and ttft and "
        "tpot where set).",
    )
    ttft: Duration | None = _optional(
        "Time-to-first-token objective of a streamed LLM request (e.g. 500ms): from "
        "arrival to the first output token. vllm and tensorrtllm formats only."
    )
    tpot: Duration | None = _optional(
        "Time-per-output-token objective of a streamed LLM request (e.g. 50ms): "
        "the mean gap between output tokens after the first. vllm and tensorrtllm formats "
        "only."
    )

    @property
    def latency_s(self) -> float:
        return parse_duration(self.latency)


class AcceleratorsSpec(_Model):
    classes: list[Annotated[str, Field(max_length=63, min_length=1)]] = Field(
        description="AcceleratorClass names in order of preference; replicas go to the "
        "first class with free capacity.",
        min_length=1,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    gpus_per_pod: GpuCount = Field(
        default=1, description="GPUs (or MIG slices) per pod. MIG classes allow exactly 1."
    )

    @field_validator("classes")
    @classmethod
    def _unique(cls, classes: list[str]) -> list[str]:
        if len(set(classes)) != len(classes):
            raise ValueError("classes: each AcceleratorClass may be listed once")
        return classes


# --------------------------------------------------------------------------- LLM engine

PARAMETER_COUNT_PATTERN = r"^[0-9]+(\.[0-9]+)?[MBT]$"
ParameterCount = Annotated[str, Field(pattern=PARAMETER_COUNT_PATTERN, max_length=16)]
ByteQuantity = Annotated[
    str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(k|M|G|T|Ki|Mi|Gi|Ti)?$", max_length=32)
]

MODEL_SIZE_MESSAGE = (
    "llm.parameters: give exactly one of parameters and weightBytes (the model's size, for "
    "the GPU memory check)"
)
BATCHED_TOKENS_MESSAGE = (
    "llm.maxBatchedTokens: must be at least maxRunningSequences (vLLM refuses a step budget "
    "smaller than the sequences it batches)"
)


# A Service name: the InferenceService's own name (DNS-1035 label).
SERVICE_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
EPP_DEFAULT_PORT: Final = 9002
EXPECTED_HIGH_MESSAGE = "llm.expectedTokens.promptHigh: must be at least prompt (the mean)"
EXPECTED_FITS_MESSAGE = (
    "llm.expectedTokens: prompt + output must fit maxContextLength (the engine refuses a "
    "longer sequence)"
)


class ExpectedTokensSpec(_Model):
    """The token mix a service expects, where the operator has measured none."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.promptHigh) || self.promptHigh >= self.prompt",
                    EXPECTED_HIGH_MESSAGE,
                    ".promptHigh",
                )
            ]
        }
    )

    prompt: Annotated[int, Field(ge=1, le=1_048_576)] = Field(
        description="Mean prompt tokens of a request."
    )
    output: Annotated[int, Field(ge=1, le=1_048_576)] = Field(
        description="Mean output tokens of a request."
    )
    prompt_high: Annotated[int, Field(ge=1, le=1_048_576)] | None = _optional(
        "Prompt tokens at the objectives' percentile (slo.percentile) of requests. Unset: "
        f"{PROMPT_HIGH_PER_MEAN} times prompt, within maxContextLength."
    )

    @model_validator(mode="after")
    def _high_above_mean(self) -> ExpectedTokensSpec:
        if self.prompt_high is not None and self.prompt_high < self.prompt:
            raise ValueError(EXPECTED_HIGH_MESSAGE)
        return self


class EndpointPickerSpec(_Model):
    """Where the gateway finds the endpoint picker of the service's InferencePool."""

    name: Annotated[str, Field(pattern=SERVICE_NAME_PATTERN, max_length=63)] | None = _optional(
        "Name of the endpoint picker's Service, in the service's namespace. Unset: "
        "<service>-epp (shortened with a hash past 52 characters)."
    )
    port: int = Field(
        default=EPP_DEFAULT_PORT,
        ge=1,
        le=65535,
        description="The endpoint picker's gRPC (ext-proc) port.",
    )
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose",
        description="What the gateway does when the endpoint picker does not answer: "
        "FailClose rejects the request, FailOpen sends it to any pod of the pool.",
    )


class LLMSpec(_Model):
    """What a platform engineer sets for an LLM engine (vLLM or TensorRT-LLM) in Triton."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.parameters) != has(self.weightBytes)",
                    MODEL_SIZE_MESSAGE,
                    ".parameters",
                ),
                _cel(
                    "!has(self.maxBatchedTokens) || "
                    "self.maxBatchedTokens >= self.maxRunningSequences",
                    BATCHED_TOKENS_MESSAGE,
                    ".maxBatchedTokens",
                ),
                _cel(
                    "!has(self.expectedTokens) || "
                    "self.expectedTokens.prompt + self.expectedTokens.output "
                    "<= self.maxContextLength",
                    EXPECTED_FITS_MESSAGE,
                    ".expectedTokens",
                ),
            ]
        }
    )

    max_context_length: int = Field(
        description="Longest sequence (prompt + output tokens) the engine accepts; vLLM's "
        "max_model_len. TensorRT-LLM fixes it when the engine is built (max_seq_len): give "
        "the same value. The memory check reserves KV cache for one such sequence.",
        ge=16,
        le=1_048_576,
    )
    max_running_sequences: BatchSize = Field(
        default=256,
        description="Sequences the engine batches at once; vLLM's max_num_seqs, Triton's "
        "max_batch_size for TensorRT-LLM (at most the engine's build-time max_batch_size).",
    )
    max_batched_tokens: Annotated[int, Field(ge=16, le=1_048_576)] | None = _optional(
        "Prompt tokens one engine step computes at most; a longer prompt is prefilled in "
        "chunks of this size, each in a step beside the decoding sequences (vLLM's "
        "max_num_batched_tokens). Unset, for vLLM: the largest power of two whose step fits "
        "slo.tpot on the service's most preferred class with a known engine, from its "
        "engine costs (vLLM's 8192 without a tpot objective or a known class); see "
        "docs/llm.md. TensorRT-LLM "
        "fixes it when the engine is built (max_num_tokens): give the same value."
    )
    kv_cache_memory_fraction: float = Field(
        default=0.9,
        description="GPU memory for the KV cache. vLLM: gpu_memory_utilization, the share "
        "of the GPU's memory the engine may take for weights, activations and KV cache. "
        "TensorRT-LLM: kv_cache_free_gpu_mem_fraction, the share of what is left after the "
        "weights that the KV cache takes.",
        gt=0,
        le=1,
    )
    prefix_caching: bool = Field(
        default=True,
        description="Reuse the KV cache of shared prompt prefixes across requests (vLLM "
        "enable_prefix_caching, TensorRT-LLM enable_kv_cache_reuse).",
    )
    kv_cache_dtype: KVCacheDtype = Field(
        default="auto",
        description="Type of the KV cache entries. auto: the model's precision. fp8 halves "
        "the cache of a 16-bit model and needs compute capability >= 8.9. A 16-bit value "
        "must equal precision (both engines keep a 16-bit cache in the model's type).",
    )
    quantization: Quantization = Field(
        default="none",
        description="Weight quantization of the checkpoint or engine: none (weights at "
        "precision), fp8 (8-bit floating point, compute capability >= 8.9), int4-awq or "
        "int4-gptq (4-bit weight-only).",
    )
    tensor_parallel_size: GpuCount = Field(
        default=1,
        description="GPUs one engine splits the model over; must equal accelerators.gpusPerPod.",
    )
    parameters: ParameterCount | None = _optional(
        "The model's parameter count, e.g. 8B, 70B, 1.5B or 350M; with quantization and "
        "precision it gives the size of the weights."
    )
    weight_bytes: ByteQuantity | None = _optional(
        "Size of the weights as a quantity (e.g. 16Gi), instead of parameters."
    )
    kv_cache_bytes_per_token: Annotated[int, Field(ge=1, le=1 << 30)] | None = _optional(
        "KV cache bytes of one token over all layers at 16 bits (2 x layers x KV heads x "
        "head size x 2; 131072 for Llama 3 8B). Unset: the memory check counts the weights "
        "only."
    )
    query_heads_per_kv_head: Annotated[int, Field(ge=1, le=256)] | None = _optional(
        "Attention heads per key/value head (num_attention_heads / num_key_value_heads in "
        "the model's config.json): 4 for Llama 3 8B, 8 for Llama 3 70B, 1 without "
        "grouped-query attention. With kvCacheBytesPerToken it sizes the attention work "
        "of a prompt, which grows with the square of its length. Unset: 4."
    )
    expected_tokens: ExpectedTokensSpec | None = _optional(
        "The token mix the service expects (from a load test, or gpuserve simulate's trace "
        "line). The LLM rule sizes replicas for it until it has measured the mix of a "
        "minute's traffic; under scaling.engine keda the ScaledObject's thresholds are "
        "sized for it. Unset: "
        f"{DEFAULT_PROMPT_TOKENS}-token prompts ({PROMPT_HIGH_PER_MEAN * DEFAULT_PROMPT_TOKENS} "
        f"at the percentile) and {DEFAULT_OUTPUT_TOKENS} output tokens."
    )
    endpoint_picker: EndpointPickerSpec | None = _optional(
        "The endpoint picker that routes requests among the serving pods (by prefix-cache "
        "affinity and load) through the InferencePool gpuserve renders. Unset: the "
        "Service <service>-epp on port 9002, failing closed. See docs/routing.md."
    )

    @model_validator(mode="after")
    def _one_size(self) -> LLMSpec:
        if (self.parameters is None) == (self.weight_bytes is None):
            raise ValueError(MODEL_SIZE_MESSAGE)
        return self

    @model_validator(mode="after")
    def _step_budget(self) -> LLMSpec:
        if self.max_batched_tokens is not None and (
            self.max_batched_tokens < self.max_running_sequences
        ):
            raise ValueError(BATCHED_TOKENS_MESSAGE)
        return self

    @model_validator(mode="after")
    def _expected_fits(self) -> LLMSpec:
        mix = self.expected_tokens
        if mix is not None and mix.prompt + mix.output > self.max_context_length:
            raise ValueError(EXPECTED_FITS_MESSAGE)
        return self


class ScalingSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    _unless_below("self.maxReplicas", 1) + "self.minReplicas <= self.maxReplicas",
                    "minReplicas: must be <= maxReplicas",
                    ".minReplicas",
                ),
                _cel(
                    _unless_below("self.maxReplicas", 1) + "self.warmPool <= self.maxReplicas",
                    WARM_POOL_BOUND_MESSAGE,
                    ".warmPool",
                ),
                _cel(
                    "self.engine != 'keda' || self.warmPool == 0",
                    WARM_POOL_KEDA_MESSAGE,
                    ".warmPool",
                ),
                _cel(
                    "self.engine != 'keda' || self.warmPoolMode != 'auto'",
                    WARM_POOL_MODE_KEDA_MESSAGE,
                    ".warmPoolMode",
                ),
            ]
        }
    )

    min_replicas: int = Field(default=1, description="Fewest serving pods.", ge=0, le=1000)
    max_replicas: int = Field(default=4, description="Most serving pods.", ge=1, le=1000)
    warm_pool: int = Field(
        default=0,
        description="Standby pods kept started with the model loaded but out of the "
        "Service; promoted to serving in seconds. At most maxReplicas: a warm pod only "
        "replaces a serving one.",
        ge=0,
        le=64,
    )
    warm_pool_mode: Literal["fixed", "auto"] = Field(
        default="fixed",
        description="fixed: keep warmPool standby pods. auto: the autoscaler sizes the "
        "pool from the bursts it measured over the last 30 minutes (standby pods for the "
        "surges a cold start would be too slow for), between 0 and warmPool, or between 0 "
        "and maxReplicas when warmPool is 0.",
    )
    engine: Literal["builtin", "keda"] = Field(
        default="builtin",
        description="builtin: gpuserve's SLO-driven autoscaler. keda: render a KEDA "
        "ScaledObject with a Prometheus trigger instead (KEDA then owns replicas).",
    )
    mode: Literal["active", "advisory"] = Field(
        default="active",
        description="advisory: compute and report decisions in status without acting.",
    )
    target_queue_depth: Annotated[int, Field(ge=1, le=100_000)] | None = _optional(
        "Explicit target of pending requests per serving pod; overrides the target "
        "derived from the SLO."
    )
    planning_percentile: Annotated[float, Field(ge=50, lt=100)] | None = _optional(
        "Percentile of the queue backlog each pod's capacity is planned for. Higher buys "
        "headroom: fewer requests over the objective, more GPUs. Default: "
        "100 - (100 - slo.percentile) / 5 (99 for a p95 objective)."
    )
    route_around_backlogs: bool = Field(
        default=True,
        description="Take a serving pod out of the Service while its queue is deeper than "
        "it clears within the objective (its role becomes routed-around), as long as the "
        "other serving pods carry the arrivals and the bursts measured, and at most half "
        "the pods; it rejoins once cleared. false leaves every ready pod in routing (for "
        "a gateway that ejects outliers itself). Request models only: an LLM format's "
        "endpoint picker routes by load.",
    )
    scale_down_stabilization: Duration = Field(
        default="120s",
        description=(
            "Scale down only to the highest size recommended over this window; over one "
            "start-up instead where demand falls along a line that accounts for every "
            "recommendation held, and over 30s where ready warm pods could undo the cut."
        ),
    )
    panic_window: Duration = Field(
        default="6s",
        description="Short window that reacts to bursts (scale up only).",
    )
    stable_window: Duration = Field(
        default="60s",
        description="Long window that steady-state decisions average over.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ScalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas: must be <= maxReplicas")
        if self.warm_pool > self.max_replicas:
            raise ValueError(WARM_POOL_BOUND_MESSAGE)
        if self.engine == "keda" and self.warm_pool:
            raise ValueError(WARM_POOL_KEDA_MESSAGE)
        if self.engine == "keda" and self.warm_pool_mode == "auto":
            raise ValueError(WARM_POOL_MODE_KEDA_MESSAGE)
        return self

    @property
    def warm_pool_ceiling(self) -> int:
        """The most standby pods warmPoolMode auto may keep."""
        return self.warm_pool or self.max_replicas


class Toleration(_Model):
    key: Annotated[str, Field(max_length=316)] | None = _optional("Taint key to tolerate.")
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists or Equal.")
    value: Annotated[str, Field(max_length=63)] | None = _optional("Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = _optional(
        "Taint effect to match; empty matches all."
    )
    toleration_seconds: int | None = _optional("For NoExecute: how long the pod stays bound.")


class LocalObjectReference(_Model):
    name: str = Field(description="Name of the referenced object.", max_length=253)


class PodOverrides(_Model):
    tolerations: list[Toleration] = Field(
        default_factory=list,
        description="Extra tolerations (the nvidia.com/gpu taint is always tolerated).",
        max_length=32,
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels the pods require."
    )
    service_account_name: Annotated[str, Field(max_length=253)] | None = _optional(
        "ServiceAccount of the Triton pods."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, description="Secrets for pulling the Triton image.", max_length=8
    )


# A non-negative Kubernetes quantity (the API server answers 500, not 422, when a pod
# template holds a string that is not one).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"


SERVICE_NAME_MESSAGE = (
    "metadata.name: at most 63 lower-case letters, digits and '-', starting with a letter "
    "(it names the Kubernetes Service of the model)"
)


class ResourceAmounts(_Model):
    cpu: str = Field(
        default="2", description="CPU per Triton pod.", pattern=QUANTITY_PATTERN, max_length=32
    )
    memory: str = Field(
        default="8Gi",
        description="Memory per Triton pod.",
        pattern=QUANTITY_PATTERN,
        max_length=32,
    )


# The one table of default Triton images: NVIDIA publishes the vLLM and TensorRT-LLM
# backends in images of their own, so an LLM service that names no image gets its
# backend's, and every other format the standard image.
TRITON_RELEASE = "25.10"
DEFAULT_TRITON_IMAGES: dict[str, str] = {
    "standard": f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-py3",
    "vllm": f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-vllm-python-py3",
    "tensorrtllm": f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-trtllm-python-py3",
}


def default_triton_image(model_format: str) -> str:
    """The image a service of ``model_format`` runs when spec.triton.image is unset."""
    return DEFAULT_TRITON_IMAGES.get(model_format, DEFAULT_TRITON_IMAGES["standard"])


class TritonSpec(_Model):
    image: Annotated[str, Field(max_length=512)] | None = _optional(
        "Triton Inference Server image. Unset: the default image of the model's backend, "
        + "; ".join(f"{kind}: {image}" for kind, image in DEFAULT_TRITON_IMAGES.items())
        + "."
    )
    args: list[str] = Field(
        default_factory=list,
        description="Extra tritonserver flags, appended after gpuserve's own.",
        max_length=32,
    )
    resources: ResourceAmounts = _nested(ResourceAmounts, "CPU and memory per pod.")
    response_cache: bool = Field(
        default=False, description="Enable Triton's response cache for this model."
    )
    response_cache_size: str = Field(
        default="256Mi",
        description="Size of the local response cache when enabled.",
        pattern=r"^[0-9]+(Ki|Mi|Gi)?$",
        max_length=16,
    )
    instance_count: int = Field(
        default=1, description="Model instances per GPU inside each pod.", ge=1, le=16
    )
    exit_timeout_seconds: int = Field(
        default=30,
        description="How long Triton finishes in-flight requests after SIGTERM; the pod's "
        "grace period is set above it.",
        ge=1,
        le=3600,
    )
    pod: PodOverrides = _nested(PodOverrides, "Pod-level overrides.")


# --------------------------------------------------------------------------- LLM rules

_IS_LLM = "self.model.format in [" + ", ".join(repr(f) for f in LLM_FORMATS) + "]"
_CONTINUOUS = "vllm and tensorrtllm batch continuously inside the engine: "


@dataclass(frozen=True)
class LLMBatchingRule:
    """A batching field that Triton's dynamic batcher reads and an LLM engine replaces: on
    an LLM format it must keep its default. One entry gives the CEL rule and the check."""

    field: str  # under spec.batching, as the API spells it
    cel_at_default: str  # CEL, true when the field keeps its default
    at_default: Callable[[BatchingSpec], bool]
    must: str

    @property
    def message(self) -> str:
        return f"batching.{self.field}: {_CONTINUOUS}Triton's {self.must}"


LLM_BATCHING_RULES: tuple[LLMBatchingRule, ...] = (
    LLMBatchingRule(
        "maxQueueDelay",
        _unless_malformed("self.batching.maxQueueDelay")
        + "duration(self.batching.maxQueueDelay) == duration('0s')",
        lambda b: parse_duration(b.max_queue_delay) == 0,
        "batching window must stay 0ms",
    ),
    LLMBatchingRule(
        "preferredBatchSizes",
        "!has(self.batching.preferredBatchSizes) || size(self.batching.preferredBatchSizes) == 0",
        lambda b: not b.preferred_batch_sizes,
        "preferred batch sizes must stay empty",
    ),
    LLMBatchingRule(
        "queuePolicy",
        "!has(self.batching.queuePolicy)",
        lambda b: b.queue_policy is None,
        "queue policy must stay unset",
    ),
    LLMBatchingRule(
        "priorityLevels",
        "self.batching.priorityLevels == 0",
        lambda b: b.priority_levels == 0,
        "priority levels must stay 0",
    ),
)

LLM_SECTION_UNEXPECTED_MESSAGE = "llm: only vllm and tensorrtllm models take an llm section"
LLM_SECTION_MISSING_MESSAGE = (
    "llm: vllm and tensorrtllm models need an llm section (maxContextLength and the model's "
    "size at least)"
)
TENSOR_PARALLEL_MESSAGE = (
    "llm.tensorParallelSize: must equal accelerators.gpusPerPod (the engine splits the "
    "model over exactly the GPUs of its pod)"
)
KV_CACHE_DTYPE_MESSAGE = (
    "llm.kvCacheDtype: a 16-bit KV cache is kept in the model's precision: use auto, fp8 or "
    "the value of precision"
)


def token_slo_message(field: str) -> str:
    what = {"ttft": "time-to-first-token", "tpot": "time-per-output-token"}[field]
    return f"slo.{field}: {what} objectives need an LLM format (vllm or tensorrtllm)"


def llm_rules() -> list[JsonDict]:
    """The CEL rules that tie the llm section, token SLOs and batching to the format."""
    return [
        _cel(f"!has(self.llm) || {_IS_LLM}", LLM_SECTION_UNEXPECTED_MESSAGE, ".llm"),
        _cel(f"has(self.llm) || !({_IS_LLM})", LLM_SECTION_MISSING_MESSAGE, ".llm"),
        _cel(
            "!has(self.llm) || "
            + _unless_below("self.accelerators.gpusPerPod", 1)
            + _unless_below("self.llm.tensorParallelSize", 1)
            + "self.llm.tensorParallelSize == self.accelerators.gpusPerPod",
            TENSOR_PARALLEL_MESSAGE,
            ".llm.tensorParallelSize",
        ),
        _cel(
            "!has(self.llm) || !(self.llm.kvCacheDtype in ['fp16', 'bf16']) || "
            "self.llm.kvCacheDtype == self.precision",
            KV_CACHE_DTYPE_MESSAGE,
            ".llm.kvCacheDtype",
        ),
        *(
            _cel(f"!has(self.slo.{f}) || {_IS_LLM}", token_slo_message(f), f".slo.{f}")
            for f in ("ttft", "tpot")
        ),
        *(
            _cel(f"!({_IS_LLM}) || {r.cel_at_default}", r.message, f".batching.{r.field}")
            for r in LLM_BATCHING_RULES
        ),
        _cel(
            f"!({_IS_LLM}) || !has(self.triton) || !has(self.triton.responseCache) || "
            "!self.triton.responseCache",
            RESPONSE_CACHE_LLM_MESSAGE,
            ".triton.responseCache",
        ),
    ]


def llm_errors(spec: InferenceServiceSpec) -> list[str]:
    """The same rules as ``llm_rules``, checked on a parsed spec (messages in order)."""
    errors: list[str] = []
    llm_format = spec.model.format in LLM_FORMATS
    if spec.llm is not None and not llm_format:
        errors.append(LLM_SECTION_UNEXPECTED_MESSAGE)
    if spec.llm is None and llm_format:
        errors.append(LLM_SECTION_MISSING_MESSAGE)
    if spec.llm is not None:
        if spec.llm.tensor_parallel_size != spec.accelerators.gpus_per_pod:
            errors.append(TENSOR_PARALLEL_MESSAGE)
        if spec.llm.kv_cache_dtype in ("fp16", "bf16") and spec.llm.kv_cache_dtype != (
            spec.precision
        ):
            errors.append(KV_CACHE_DTYPE_MESSAGE)
    if not llm_format:
        errors += [
            token_slo_message(f) for f in ("ttft", "tpot") if getattr(spec.slo, f) is not None
        ]
    else:
        errors += [r.message for r in LLM_BATCHING_RULES if not r.at_default(spec.batching)]
        if spec.triton.response_cache:
            errors.append(RESPONSE_CACHE_LLM_MESSAGE)
    return errors


class InferenceServiceSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    _unless_malformed("self.batching.maxQueueDelay", "self.slo.latency")
                    + "duration(self.batching.maxQueueDelay) < duration(self.slo.latency)",
                    DELAY_WITHIN_SLO_MESSAGE,
                    ".batching.maxQueueDelay",
                ),
                *precision_rules(),
                *llm_rules(),
                _cel(
                    "!has(self.batching.queuePolicy) || "
                    "!has(self.batching.queuePolicy.timeout) || "
                    "self.batching.queuePolicy.timeoutAction == 'Delay' || "
                    + _unless_malformed(
                        "self.batching.queuePolicy.timeout", "self.batching.maxQueueDelay"
                    )
                    + "duration(self.batching.queuePolicy.timeout) >= "
                    "duration(self.batching.maxQueueDelay)",
                    TIMEOUT_COVERS_DELAY_MESSAGE,
                    ".batching.queuePolicy.timeout",
                ),
            ]
        }
    )

    model: ModelSpec = Field(description="What to serve and where it lives.")
    precision: Precision = Field(
        default="fp32",
        description="Numeric precision: fp32, fp16, bf16, int8 or fp8, compiled to what "
        "Triton does for the format (e.g. TensorRT precision_mode for onnx).",
    )
    batching: BatchingSpec = _nested(BatchingSpec, "Triton dynamic batching and queue policy.")
    slo: SLOSpec = Field(description="The latency objective the autoscaler keeps.")
    accelerators: AcceleratorsSpec = Field(description="Which GPU kinds may serve.")
    scaling: ScalingSpec = _nested(ScalingSpec, "Replica bounds, warm pool and autoscaler.")
    llm: LLMSpec | None = _optional(
        "The LLM engine's settings and the model's size; required for, and only allowed "
        "with, the vllm and tensorrtllm formats."
    )
    tier: Tier = Field(
        default="interactive",
        description="interactive or batch: the pods' PriorityClass and Triton's default "
        "request priority.",
    )
    triton: TritonSpec = _nested(TritonSpec, "The Triton server and its pods.")

    @model_validator(mode="after")
    def _cross_checks(self) -> InferenceServiceSpec:
        if parse_duration(self.batching.max_queue_delay) >= self.slo.latency_s:
            raise ValueError(DELAY_WITHIN_SLO_MESSAGE)
        policy = self.batching.queue_policy
        if (
            policy is not None
            and policy.timeout is not None
            and policy.timeout_action == "Reject"
            and parse_duration(policy.timeout) < parse_duration(self.batching.max_queue_delay)
        ):
            raise ValueError(TIMEOUT_COVERS_DELAY_MESSAGE)
        if self.precision not in PRECISIONS_BY_FORMAT[self.model.format].allowed:
            raise ValueError(precision_message(self.model.format))
        errors = llm_errors(self)
        if errors:
            raise ValueError("; ".join(errors))
        return self

    @property
    def is_llm(self) -> bool:
        """Served by an LLM engine (vLLM or TensorRT-LLM): continuous batching, streaming."""
        return self.model.format in LLM_FORMATS


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else passes through."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(max_length=253)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class _Object(BaseModel):
    """A whole object of one of the two kinds as the operator sees it: status is read
    separately, other top-level fields are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    api_version: Literal["gpuserve.io/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")


class InferenceService(_Object):
    kind: Literal["InferenceService"] = "InferenceService"
    metadata: ObjectMeta
    spec: InferenceServiceSpec

    @field_validator("metadata")
    @classmethod
    def _name_fits_a_service(cls, meta: ObjectMeta) -> ObjectMeta:
        if len(meta.name) > 63 or not re.fullmatch(SERVICE_NAME_PATTERN, meta.name):
            raise ValueError(SERVICE_NAME_MESSAGE)
        return meta


# --------------------------------------------------------------------------- AcceleratorClass


# An extended resource name as the device plugin advertises it (nvidia.com/gpu).
ExtendedResource = Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[a-z0-9A-Z.+-]+$", max_length=128)]


class MigSpec(_Model):
    profile: str = Field(
        description="MIG profile of one slice, e.g. 1g.10gb or 3g.40gb.",
        pattern=r"^[1-7]g\.[0-9]+gb(\+me)?$",
        max_length=16,
    )
    strategy: Literal["single", "mixed"] = Field(
        default="mixed",
        description="The device plugin's MIG strategy on these nodes. mixed: slices are "
        "requested as nvidia.com/mig-<profile>. single: as nvidia.com/gpu, on nodes whose "
        "gpu.product ends in -MIG-<profile>.",
    )


class AcceleratorClassSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.resourceName) || !has(self.mig) || "
                    "self.mig.strategy != 'mixed' || "
                    "self.resourceName == 'nvidia.com/mig-' + self.mig.profile",
                    "resourceName: with the mixed MIG strategy the resource is "
                    "nvidia.com/mig-<profile>",
                    ".resourceName",
                ),
            ]
        }
    )

    gpu_product: str = Field(
        description="Value of the nvidia.com/gpu.product node label of the whole GPU "
        "(e.g. NVIDIA-H100-80GB-HBM3). With the single MIG strategy gpuserve matches "
        "<product>-MIG-<profile>.",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=63,
    )
    mig: MigSpec | None = _optional("Serve from MIG slices.")
    resource_name: ExtendedResource | None = _optional(
        "Extended resource to request; derived from mig when unset (nvidia.com/gpu or "
        "nvidia.com/mig-<profile>)."
    )
    node_labels: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels to require (e.g. a zone)."
    )
    compute_capability: str = Field(
        default="8.0",
        description='CUDA compute capability, quoted (e.g. "9.0" for H100, "8.9" for L4); '
        "decides which precisions the GPU runs.",
        pattern=r"^[0-9]+\.[0-9]+$",
        max_length=8,
    )
    memory_gib: Annotated[int, Field(ge=1, le=1024)] | None = _optional(
        "GPU (or slice) memory in GiB.", alias="memoryGiB"
    )
    relative_speed: float = Field(
        default=1.0,
        description="Throughput of one GPU (or slice) of this class relative to the "
        "reference; scales the service time the autoscaler assumes.",
        gt=0,
        le=100,
    )
    cost_per_hour: float = Field(
        default=1.0, description="Cost of one GPU (or slice) per hour.", ge=0, le=10_000
    )

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _quoted(cls, value: object) -> object:
        # YAML reads an unquoted 9.0 as a number; say so rather than "not a string".
        if isinstance(value, int | float) and not isinstance(value, bool):
            shown = f"{value}.0" if isinstance(value, int) else str(value)
            raise ValueError(f'quote it, "{shown}": YAML reads {value} unquoted as a number')
        return value

    @model_validator(mode="after")
    def _mixed_mig_resource(self) -> AcceleratorClassSpec:
        if (
            self.resource_name
            and self.mig is not None
            and self.mig.strategy == "mixed"
            and self.resource_name != f"nvidia.com/mig-{self.mig.profile}"
        ):
            raise ValueError(
                "resourceName: with the mixed MIG strategy the resource is nvidia.com/mig-<profile>"
            )
        return self

    @property
    def resource(self) -> str:
        if self.resource_name:
            return self.resource_name
        if self.mig is not None and self.mig.strategy == "mixed":
            return f"nvidia.com/mig-{self.mig.profile}"
        return "nvidia.com/gpu"

    @property
    def product_label(self) -> str:
        if self.mig is not None and self.mig.strategy == "single":
            return f"{self.gpu_product}-MIG-{self.mig.profile}"
        return self.gpu_product

    def supports(self, precision: str) -> bool:
        needed = MIN_COMPUTE_CAPABILITY.get(precision)
        return needed is None or float(self.compute_capability) >= needed


class ClusterObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(max_length=253)
    generation: int | None = None


class AcceleratorClass(_Object):
    kind: Literal["AcceleratorClass"] = "AcceleratorClass"
    metadata: ClusterObjectMeta
    spec: AcceleratorClassSpec


def parse_inference_service(body: dict[str, Any]) -> InferenceService:
    """Parse a full object body; raises pydantic.ValidationError with field paths."""
    return InferenceService.model_validate(body)


def parse_accelerator_class(body: dict[str, Any]) -> AcceleratorClass:
    return AcceleratorClass.model_validate(body)
