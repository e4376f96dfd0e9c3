"""Compile an InferenceService spec into Triton's config.pbtxt.

The config is built as a ``tritonclient`` ModelConfig protobuf and printed with
protobuf's text format, so every field name and enum is checked by the schema Triton
itself parses, never by string templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from gpuserve.api.durations import parse_duration
from gpuserve.api.models import BatchingSpec, InferenceServiceSpec
from gpuserve.triton.llmconfig import MODEL_JSON, configure_llm_engine, render_model_json
from gpuserve.triton.serverargs import version_path


@dataclass(frozen=True)
class Backend:
    platform: str
    backend: str
    default_file: str


BACKENDS: dict[str, Backend] = {
    "onnx": Backend("onnxruntime_onnx", "onnxruntime", "model.onnx"),
    "tensorrt": Backend("tensorrt_plan", "tensorrt", "model.plan"),
    "pytorch": Backend("pytorch_libtorch", "pytorch", "model.pt"),
    "tensorflow": Backend("tensorflow_savedmodel", "tensorflow", "model.savedmodel"),
    # The Python backend has no platform value; it is named by backend only.
    "python": Backend("", "python", "model.py"),
    # The LLM backends have no platform value either; vLLM reads model.json.
    "vllm": Backend("", "vllm", "model.json"),
    "tensorrtllm": Backend("", "tensorrtllm", ""),
}

# Formats whose precision Triton sets through the TensorRT execution accelerator.
_TRT_ACCELERATED = {"onnx", "tensorflow"}


def _us(duration: str) -> int:
    return round(parse_duration(duration) * 1e6)


def default_priority_level(spec: InferenceServiceSpec) -> int:
    """The tier decides the level of requests that don't say: interactive highest."""
    batching = spec.batching
    if batching.default_priority_level is not None:
        return batching.default_priority_level
    return 1 if spec.tier == "interactive" else batching.priority_levels


def _dynamic_batching(spec: InferenceServiceSpec) -> pb.ModelDynamicBatching:
    b: BatchingSpec = spec.batching
    dyn = pb.ModelDynamicBatching(
        preferred_batch_size=list(b.preferred_batch_sizes),
        max_queue_delay_microseconds=_us(b.max_queue_delay),
    )
    if b.priority_levels > 0:
        dyn.priority_levels = b.priority_levels
        dyn.default_priority_level = default_priority_level(spec)
    if b.queue_policy is not None:
        q = b.queue_policy
        policy = dyn.default_queue_policy
        policy.timeout_action = (
            pb.ModelQueuePolicy.DELAY if q.timeout_action == "Delay" else pb.ModelQueuePolicy.REJECT
        )
        policy.allow_timeout_override = q.allow_timeout_override
        policy.max_queue_size = q.max_queue_size
        if q.timeout is not None:
            policy.default_timeout_microseconds = _us(q.timeout)
    return dyn


def _tensor(t: Any, cls: Any) -> Any:
    return cls(name=t.name, data_type=pb.DataType.Value(f"TYPE_{t.data_type}"), dims=t.dims)


def build_model_config(spec: InferenceServiceSpec) -> pb.ModelConfig:
    """The ModelConfig protobuf for a service spec (pure; same input, same bytes)."""
    model = spec.model
    backend = BACKENDS[model.format]
    cfg = pb.ModelConfig(name=model.name)
    if backend.platform:
        cfg.platform = backend.platform
    else:
        cfg.backend = backend.backend
    if model.version is not None:
        cfg.version_policy.specific.versions.append(model.version)
    else:
        cfg.version_policy.latest.num_versions = 1
    cfg.input.extend(_tensor(t, pb.ModelInput) for t in model.inputs)
    cfg.output.extend(_tensor(t, pb.ModelOutput) for t in model.outputs)
    if spec.llm is not None:
        configure_llm_engine(cfg, spec, spec.llm, version_path(spec))
    else:
        _configure_dynamic_batcher(cfg, spec)
    for key, value in sorted(model.parameters.items()):
        cfg.parameters[key].string_value = value
    return cfg


def _configure_dynamic_batcher(cfg: pb.ModelConfig, spec: InferenceServiceSpec) -> None:
    """Batching, GPU instances, precision and cache of a model that Triton batches."""
    cfg.max_batch_size = spec.batching.max_batch_size
    cfg.instance_group.append(
        pb.ModelInstanceGroup(kind=pb.ModelInstanceGroup.KIND_GPU, count=spec.triton.instance_count)
    )
    if spec.batching.max_batch_size > 0:
        cfg.dynamic_batching.CopyFrom(_dynamic_batching(spec))
    if spec.model.format in _TRT_ACCELERATED and spec.precision != "fp32":
        accel = cfg.optimization.execution_accelerators.gpu_execution_accelerator.add()
        accel.name = "tensorrt"
        accel.parameters["precision_mode"] = spec.precision.upper()
    if spec.triton.response_cache:
        cfg.response_cache.enable = True


def render_config_pbtxt(spec: InferenceServiceSpec) -> str:
    text: str = text_format.MessageToString(build_model_config(spec))
    return text


def render_model_files(
    spec: InferenceServiceSpec, batched_tokens: int | None = None
) -> dict[str, str]:
    """Every file gpuserve writes into the model's directory, by name: config.pbtxt, and
    vLLM's model.json (which the pod finds in the version directory) with the prefill
    chunk budget ``batched_tokens`` where vLLM's default does not stand."""
    files = {"config.pbtxt": render_config_pbtxt(spec)}
    model_json = render_model_json(spec, batched_tokens)
    if model_json is not None:
        files[MODEL_JSON] = model_json
    return files


def parse_config_pbtxt(text: str) -> pb.ModelConfig:
    """Parse text format back (raises text_format.ParseError with line:column)."""
    cfg = pb.ModelConfig()
    text_format.Parse(text, cfg)
    return cfg
