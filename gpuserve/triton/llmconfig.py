"""The LLM backends' side of the model config: vLLM's model.json and TensorRT-LLM's parameters.

Both engines batch continuously and stream tokens, so Triton's part is a decoupled model
with no batching window; what the engine needs comes from the typed ``spec.llm`` fields:
for vLLM as the engine arguments the backend passes to vLLM (``model.json`` in the version
directory), for TensorRT-LLM as the backend's string parameters in config.pbtxt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

from gpuserve.api.models import InferenceServiceSpec, LLMSpec

# Where a vLLM pod mounts the weights: outside the model repository, since the version
# directory holds model.json from the ConfigMap (a read-only weights volume there could
# not take the file's mount point).
VLLM_WEIGHTS_DIR = "/weights"
MODEL_JSON = "model.json"
# The vLLM backend exports vLLM's own metrics (vllm:time_to_first_token_seconds, ...) on
# Triton's metrics port only with this parameter, and only while vLLM keeps its stats.
VLLM_METRICS_PARAMETER = "REPORT_CUSTOM_METRICS"

_VLLM_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def vllm_engine_args(
    spec: InferenceServiceSpec, llm: LLMSpec, batched_tokens: int | None = None
) -> dict[str, Any]:
    """vLLM engine arguments (the names of vLLM's EngineArgs) from the typed fields;
    ``batched_tokens``: the prefill chunk budget (gpuserve.llm.chunking), if not vLLM's."""
    args: dict[str, Any] = {
        "model": VLLM_WEIGHTS_DIR,
        "dtype": _VLLM_DTYPE[spec.precision],
        "max_model_len": llm.max_context_length,
        "max_num_seqs": llm.max_running_sequences,
        "gpu_memory_utilization": llm.kv_cache_memory_fraction,
        "enable_prefix_caching": llm.prefix_caching,
        # A 16-bit cache equals the precision (admission), which is vLLM's "auto".
        "kv_cache_dtype": "fp8" if llm.kv_cache_dtype == "fp8" else "auto",
        "tensor_parallel_size": llm.tensor_parallel_size,
        "disable_log_stats": False,
    }
    # fp8 quantizes a 16-bit checkpoint on load. AWQ and GPTQ checkpoints declare their
    # method themselves; naming it ("awq") would force vLLM's slower non-Marlin kernels.
    if llm.quantization == "fp8":
        args["quantization"] = "fp8"
    if batched_tokens is not None:
        args["max_num_batched_tokens"] = batched_tokens
        # Older vLLM (V0) chunks prompts only when asked, and refuses a step budget under
        # max_model_len without chunking; V1 always chunks and accepts the flag.
        args["enable_chunked_prefill"] = True
    return args


def render_model_json(spec: InferenceServiceSpec, batched_tokens: int | None = None) -> str | None:
    """The vLLM backend's model.json, or None for other formats."""
    if spec.model.format != "vllm" or spec.llm is None:
        return None
    args = vllm_engine_args(spec, spec.llm, batched_tokens)
    return json.dumps(args, indent=2, sort_keys=True) + "\n"


def tensorrtllm_parameters(llm: LLMSpec, engine_dir: str) -> dict[str, str]:
    """The TensorRT-LLM backend's parameters (it reads every value as a string)."""
    return {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": engine_dir,
        "kv_cache_free_gpu_mem_fraction": f"{llm.kv_cache_memory_fraction:g}",
        "enable_kv_cache_reuse": "true" if llm.prefix_caching else "false",
        "max_beam_width": "1",
        # Streamed responses carry only the new tokens.
        "exclude_input_in_output": "true",
    }


@dataclass(frozen=True)
class _Tensor:
    name: str
    data_type: int
    dims: tuple[int, ...]
    optional: bool = False
    ragged: bool = False
    scalar: bool = False  # [1] on the wire, a scalar to the backend


# The token-level interface of TensorRT-LLM's tensorrt_llm model (what the backend reads),
# used when the spec names no tensors; tokenization stays with the caller.
_TRTLLM_INPUTS = (
    _Tensor("input_ids", pb.TYPE_INT32, (-1,), ragged=True),
    _Tensor("input_lengths", pb.TYPE_INT32, (1,), scalar=True),
    _Tensor("request_output_len", pb.TYPE_INT32, (1,)),
    _Tensor("end_id", pb.TYPE_INT32, (1,), optional=True, scalar=True),
    _Tensor("pad_id", pb.TYPE_INT32, (1,), optional=True, scalar=True),
    _Tensor("streaming", pb.TYPE_BOOL, (1,), optional=True),
)
_TRTLLM_OUTPUTS = (
    _Tensor("output_ids", pb.TYPE_INT32, (-1, -1)),
    _Tensor("sequence_length", pb.TYPE_INT32, (-1,)),
)


def _trtllm_tensors(cfg: pb.ModelConfig) -> None:
    for t in _TRTLLM_INPUTS:
        item = cfg.input.add(
            name=t.name,
            data_type=t.data_type,
            dims=list(t.dims),
            optional=t.optional,
            allow_ragged_batch=t.ragged,
        )
        if t.scalar:
            item.reshape.SetInParent()
    for t in _TRTLLM_OUTPUTS:
        cfg.output.add(name=t.name, data_type=t.data_type, dims=list(t.dims))


def configure_llm_engine(
    cfg: pb.ModelConfig, spec: InferenceServiceSpec, llm: LLMSpec, version_dir: str
) -> None:
    """Fill in what an LLM backend needs: decoupled streaming, no batching window, the
    engine owning its GPUs, and the engine's settings."""
    cfg.model_transaction_policy.decoupled = True
    if spec.model.format == "vllm":
        # vLLM batches by itself: Triton hands every request over at once.
        cfg.max_batch_size = 0
        # KIND_MODEL: the engine places itself on the pod's GPUs (required with tensor
        # parallelism: KIND_GPU would pin it to one).
        cfg.instance_group.append(pb.ModelInstanceGroup(kind=pb.ModelInstanceGroup.KIND_MODEL))
        cfg.parameters[VLLM_METRICS_PARAMETER].string_value = "true"
        return
    # TensorRT-LLM: Triton's batch bound is the engine's sequences; the dynamic batcher,
    # with no delay, passes requests straight to the in-flight batcher.
    cfg.max_batch_size = llm.max_running_sequences
    cfg.dynamic_batching.SetInParent()
    # The backend drives the GPUs itself; its model instance is a CPU-side executor.
    cfg.instance_group.append(pb.ModelInstanceGroup(kind=pb.ModelInstanceGroup.KIND_CPU))
    for key, value in tensorrtllm_parameters(llm, version_dir).items():
        cfg.parameters[key].string_value = value
    if not spec.model.inputs and not spec.model.outputs:
        _trtllm_tensors(cfg)
