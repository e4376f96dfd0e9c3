"""Engine parameters of an LLM service on an AcceleratorClass: the model's size over the
GPU's datasheet, at the efficiencies measured on a real GPU.

The engine's five time costs (``EngineParams``) follow from two figures of the GPU and
three of the model: a decode step reads every weight once (weight bytes over memory
bandwidth), attention reads each cached token's keys and values (KV bytes per token over
bandwidth), each computed token costs two FLOPs per parameter (over the dense bf16 rate),
and each computed prompt token attends to every token before it, four FLOPs per query
head dimension and layer for each (over the same rate). What a real engine achieves
against those floors was measured on an H100 with two Llama-shaped models
(``bench/gpu_engine_timing.py``; the figures, and the published measurements they agree
with, in docs/llm.md "Parameters per GPU class"), and the same efficiencies are applied
to every GPU: a class is priced by its datasheet, not by a constant per class. A MIG
slice gets its share of the GPU: compute by its compute slices (of 7), bandwidth by its
memory (of the whole GPU's). Tensor parallelism divides the work over the pod's GPUs; its
all-reduce cost is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuserve.api.llm_sizing import (
    GIB,
    PRECISION_BYTES,
    kv_cache_dtype,
    memory_need,
    parameter_count,
    weight_bytes,
)
from gpuserve.api.models import AcceleratorClassSpec, InferenceServiceSpec
from gpuserve.llm.params import EngineParams


@dataclass(frozen=True)
class Datasheet:
    """A GPU's published memory bandwidth and dense bf16 rate (no sparsity)."""

    product_prefix: str  # matched against the nvidia.com/gpu.product label
    memory_gb: float
    bandwidth_tb_s: float
    bf16_tflops: float


# NVIDIA's datasheets (dense bf16 is half the "with sparsity" figure they print). The most
# specific prefix is listed first: the first match wins.
DATASHEETS: tuple[Datasheet, ...] = (
    Datasheet("NVIDIA-H200", 141, 4.8, 989),
    Datasheet("NVIDIA-H100-PCIe", 80, 2.0, 756),
    Datasheet("NVIDIA-H100", 80, 3.35, 989),  # SXM5 (HBM3)
    Datasheet("NVIDIA-A100-SXM4-40GB", 40, 1.555, 312),
    Datasheet("NVIDIA-A100-PCIE-40GB", 40, 1.555, 312),
    Datasheet("NVIDIA-A100-80GB-PCIe", 80, 1.935, 312),
    Datasheet("NVIDIA-A100", 80, 2.039, 312),  # SXM4 80GB
    Datasheet("NVIDIA-L40S", 48, 0.864, 362),
    Datasheet("NVIDIA-L4", 24, 0.300, 121),
)

# Measured on an H100 80GB HBM3 with two Llama-shaped models, 8B and 3.6B
# (docs/bench-notes/gpu-engine-timing.md): what the engine spends against each floor. A
# decode step costs a fixed 1.79 ms (launches and small kernels, whatever the model's
# size) plus 1.27 reads of the weights at datasheet bandwidth; with these the 8B model's
# batch-1 time per token on an A100 80GB comes to 11.8 ms, where vLLM was published at
# 11.4-12.0 ms (docs/llm.md). A context token's keys and values cost 1.07x their read; a
# prompt token's two FLOPs per parameter run at 70% of the dense bf16 rate and its
# attention to earlier tokens at 33% (the 2026-11-26 run, which timed prompt chunks after
# up to 30k cached tokens; fitted without that attention term, as before, the prompt
# tokens alone came to 56%); a decoding sequence adds 44% of its FLOP time.
STEP_OVERHEAD_S = 1.79e-3
WEIGHT_READ_OVERHEAD = 1.27
KV_READ_OVERHEAD = 1.07
PREFILL_FLOP_EFFICIENCY = 0.70
ATTENTION_FLOP_EFFICIENCY = 0.33
DECODE_FLOP_SHARE = 0.44
# What a full A100/H100 has of MIG compute slices.
MIG_COMPUTE_SLICES = 7
# vLLM reserves this much beside weights and cache (activations, CUDA graphs): the same
# allowance as the defaults' derivation in params.py.
ACTIVATION_BYTES = 3e9
# Llama 3 8B at 16 bits (32 layers x 8 KV heads x 128 x keys and values x 2 bytes): the
# engine defaults' model, used when the spec does not give the figure.
DEFAULT_KV_BYTES_PER_TOKEN = 131072
# Llama 3 8B's 32 query heads over 8 key/value heads, when the spec does not say.
DEFAULT_QUERY_HEADS_PER_KV_HEAD = 4


def attention_flops_per_pair(kv_bytes_16bit: float, query_heads_per_kv_head: int) -> float:
    """FLOPs of one (query token, key token) pair over all layers: a query head's dot
    product with the key and its share of the value, 2 x 2 FLOPs per head dimension. The
    16-bit KV bytes per token are 4 x layers x KV heads x head dimension, so the query
    heads' total is that times the heads per KV head."""
    return kv_bytes_16bit * query_heads_per_kv_head


def datasheet_for(gpu_product: str) -> Datasheet | None:
    """The datasheet of a ``nvidia.com/gpu.product`` value; None for a GPU not listed."""
    for sheet in DATASHEETS:
        if gpu_product.startswith(sheet.product_prefix):
            return sheet
    return None


def _slice_shares(cls: AcceleratorClassSpec, sheet: Datasheet) -> tuple[float, float]:
    """(compute, bandwidth) share of the whole GPU that one unit of the class holds."""
    if cls.mig is None:
        return 1.0, 1.0
    compute_slices = int(cls.mig.profile.split("g.", 1)[0])
    memory_gb = float(cls.mig.profile.split("g.", 1)[1].removesuffix("+me").removesuffix("gb"))
    return compute_slices / MIG_COMPUTE_SLICES, min(1.0, memory_gb / sheet.memory_gb)


def engine_params_for_class(
    spec: InferenceServiceSpec, cls: AcceleratorClassSpec, base: EngineParams
) -> EngineParams | None:
    """``base`` with the time costs and KV blocks of ``spec``'s model on ``cls``; None
    when the class's GPU is not in ``DATASHEETS`` or one full-context sequence does not
    fit what is left for the cache. (The API makes every LLM service give its size.)"""
    llm = spec.llm
    sheet = datasheet_for(cls.gpu_product)
    if llm is None or sheet is None:
        return None
    compute_share, bandwidth_share = _slice_shares(cls, sheet)
    gpus = max(1, spec.accelerators.gpus_per_pod)
    bandwidth = sheet.bandwidth_tb_s * 1e12 * bandwidth_share * gpus
    flops = sheet.bf16_tflops * 1e12 * compute_share * gpus
    weights = weight_bytes(spec, llm)
    # Two FLOPs per parameter per token. Given only the bytes, count parameters at the
    # service's precision (a quantized model's bytes are not its parameter count).
    params = (
        parameter_count(llm.parameters)
        if llm.parameters is not None
        else weights / PRECISION_BYTES[spec.precision]
    )
    kv_bytes_16bit = llm.kv_cache_bytes_per_token or DEFAULT_KV_BYTES_PER_TOKEN
    kv_bytes = kv_bytes_16bit * PRECISION_BYTES[kv_cache_dtype(spec, llm)] / 2.0
    pair_flops = attention_flops_per_pair(
        kv_bytes_16bit, llm.query_heads_per_kv_head or DEFAULT_QUERY_HEADS_PER_KV_HEAD
    )
    memory_gib = cls.memory_gib if cls.memory_gib is not None else sheet.memory_gb * 1e9 / GIB
    # What each GPU's budget leaves beside its share of the weights (the backend's own
    # rule, as placement checks it), over the pod, less the activations.
    need = memory_need(spec, llm, memory_gib)
    cache_bytes = (need.budget_gib - need.weights_gib) * GIB * gpus - ACTIVATION_BYTES
    blocks = int(cache_bytes // (kv_bytes * base.block_size))
    if blocks * base.block_size < llm.max_context_length:
        return None
    return replace(
        base,
        num_blocks=blocks,
        decode_base_s=STEP_OVERHEAD_S + WEIGHT_READ_OVERHEAD * weights / bandwidth,
        decode_s_per_context_token=KV_READ_OVERHEAD * kv_bytes / bandwidth,
        prefill_s_per_token=2.0 * params / (PREFILL_FLOP_EFFICIENCY * flops),
        prefill_s_per_token_pair=pair_flops / (ATTENTION_FLOP_EFFICIENCY * flops),
        decode_s_per_seq=DECODE_FLOP_SHARE * 2.0 * params / flops,
    )
