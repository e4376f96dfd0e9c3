"""What an LLM service's typed fields mean in GPU memory and GPU generations.

Pure arithmetic over the spec, used by placement to skip classes that cannot hold or run
the model. The weights are the parameter count times the bytes of one weight (its
quantization, or else the precision), or the size given; the smallest useful KV cache is
one sequence of ``maxContextLength`` tokens, which is what vLLM itself demands at start-up.
Both are split over the tensor-parallel GPUs of a pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuserve.api.models import InferenceServiceSpec, LLMSpec
from gpuserve.resources.sameness import parse_quantity

GIB = float(1 << 30)
_COUNT_SUFFIX = {"M": 1e6, "B": 1e9, "T": 1e12}
# Bytes of one value at each precision (fp32 down to the 8-bit types).
PRECISION_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0, "fp8": 1.0}
# Bytes of one weight per quantization; 4-bit formats ignore their per-group scales (~3%).
QUANTIZED_WEIGHT_BYTES = {"fp8": 1.0, "int4-awq": 0.5, "int4-gptq": 0.5}


def parameter_count(text: str) -> float:
    """'8B' -> 8e9, '1.5B' -> 1.5e9, '350M' -> 3.5e8."""
    return float(text[:-1]) * _COUNT_SUFFIX[text[-1]]


def weight_bytes(spec: InferenceServiceSpec, llm: LLMSpec) -> float:
    """Bytes of the whole model's weights."""
    if llm.weight_bytes is not None:
        size = parse_quantity(llm.weight_bytes)
        if size is None:  # the schema's pattern admits only quantities
            raise ValueError(f"llm.weightBytes: {llm.weight_bytes!r} is not a quantity")
        return float(size)
    per_weight = QUANTIZED_WEIGHT_BYTES.get(llm.quantization, PRECISION_BYTES[spec.precision])
    return parameter_count(llm.parameters or "0M") * per_weight


def kv_cache_dtype(spec: InferenceServiceSpec, llm: LLMSpec) -> str:
    """The KV cache's element type: auto means the model's precision."""
    return spec.precision if llm.kv_cache_dtype == "auto" else llm.kv_cache_dtype


def min_kv_cache_bytes(spec: InferenceServiceSpec, llm: LLMSpec) -> float:
    """KV cache of one full-context sequence; 0 when the bytes per token are not given."""
    if llm.kv_cache_bytes_per_token is None:
        return 0.0
    scale = PRECISION_BYTES[kv_cache_dtype(spec, llm)] / 2.0  # given at 16 bits
    return llm.max_context_length * llm.kv_cache_bytes_per_token * scale


def precisions_needed(spec: InferenceServiceSpec) -> list[tuple[str, str]]:
    """(field and value, numeric type) of every type the GPU must run: the precision, and
    for LLMs the KV cache's type and fp8 weights."""
    needed: list[tuple[str, str]] = [(f"precision {spec.precision}", spec.precision)]
    if spec.llm is not None:
        if spec.llm.kv_cache_dtype != "auto":
            needed.append((f"llm.kvCacheDtype {spec.llm.kv_cache_dtype}", spec.llm.kv_cache_dtype))
        if spec.llm.quantization == "fp8":
            needed.append(("llm.quantization fp8", "fp8"))
    return needed


@dataclass(frozen=True)
class MemoryNeed:
    """Per GPU of a pod: the weights' share, the smallest KV cache's share, and how much
    of a GPU of ``memory_gib`` the engine may fill with them."""

    weights_gib: float
    kv_gib: float
    budget_gib: float

    @property
    def fits(self) -> bool:
        return self.weights_gib + self.kv_gib <= self.budget_gib


def memory_need(spec: InferenceServiceSpec, llm: LLMSpec, memory_gib: float) -> MemoryNeed:
    """What one GPU (or MIG slice) of ``memory_gib`` must hold for this engine.

    vLLM takes ``kvCacheMemoryFraction`` of the GPU for weights and KV cache together.
    TensorRT-LLM loads the weights, then gives that fraction of what is left to the KV
    cache: the budget is the weights plus that share of the rest."""
    gpus = llm.tensor_parallel_size
    weights = weight_bytes(spec, llm) / gpus / GIB
    kv = min_kv_cache_bytes(spec, llm) / gpus / GIB
    fraction = llm.kv_cache_memory_fraction
    if spec.model.format == "tensorrtllm":
        budget = weights + max(memory_gib - weights, 0.0) * fraction
    else:
        budget = memory_gib * fraction
    return MemoryNeed(weights_gib=weights, kv_gib=kv, budget_gib=budget)


def memory_shortfall(spec: InferenceServiceSpec, memory_gib: float) -> str | None:
    """Why the model cannot fit a GPU (or slice) of ``memory_gib``, or None if it can."""
    llm = spec.llm
    if llm is None:
        return None
    need = memory_need(spec, llm, memory_gib)
    if need.fits:
        return None
    kv = (
        f" + {need.kv_gib:.1f} GiB of KV cache for one {llm.max_context_length}-token sequence"
        if need.kv_gib
        else ""
    )
    per_gpu = (
        f" per GPU (tensor-parallel {llm.tensor_parallel_size})"
        if llm.tensor_parallel_size > 1
        else ""
    )
    return (
        f"needs {need.weights_gib:.1f} GiB of weights{kv}{per_gpu}, more than the "
        f"{need.budget_gib:.1f} GiB of its {memory_gib:g} GiB that kvCacheMemoryFraction "
        f"{llm.kv_cache_memory_fraction:g} allows"
    )
