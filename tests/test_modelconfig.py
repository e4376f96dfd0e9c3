"""config.pbtxt compiled from the spec through tritonclient's ModelConfig protobuf."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from e2e.invalid_cases import valid_service
from gpuserve.api.models import InferenceServiceSpec
from gpuserve.triton.modelconfig import parse_config_pbtxt, render_config_pbtxt
from gpuserve.triton.serverargs import server_args


def _spec(**changes: Any) -> InferenceServiceSpec:
    body = copy.deepcopy(valid_service()["spec"])
    for path, value in changes.items():
        node = body
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return InferenceServiceSpec.model_validate(body)


def test_round_trip_through_the_proto() -> None:
    text = render_config_pbtxt(_spec())
    cfg = parse_config_pbtxt(text)
    assert cfg.name == "sleeper" and cfg.backend == "python" and cfg.platform == ""
    assert cfg.max_batch_size == 8
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000
    assert cfg.input[0].data_type == pb.TYPE_FP32 and list(cfg.input[0].dims) == [4]
    assert cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_GPU


@pytest.mark.parametrize(
    ("fmt", "platform"),
    [
        ("onnx", "onnxruntime_onnx"),
        ("tensorrt", "tensorrt_plan"),
        ("pytorch", "pytorch_libtorch"),
        ("tensorflow", "tensorflow_savedmodel"),
    ],
)
def test_format_selects_platform(fmt: str, platform: str) -> None:
    assert parse_config_pbtxt(render_config_pbtxt(_spec(model__format=fmt))).platform == platform


def test_onnx_fp16_uses_tensorrt_precision_mode() -> None:
    cfg = parse_config_pbtxt(render_config_pbtxt(_spec(model__format="onnx", precision="fp16")))
    accel = cfg.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert accel.name == "tensorrt" and accel.parameters["precision_mode"] == "FP16"


def test_fp32_and_tensorrt_plans_get_no_accelerator() -> None:
    for fmt, precision in (("onnx", "fp32"), ("tensorrt", "fp8")):
        cfg = parse_config_pbtxt(render_config_pbtxt(_spec(model__format=fmt, precision=precision)))
        assert len(cfg.optimization.execution_accelerators.gpu_execution_accelerator) == 0


def test_queue_policy_and_priorities_follow_the_tier() -> None:
    spec = _spec(
        batching__priorityLevels=3,
        batching__queuePolicy={"maxQueueSize": 64, "timeout": "100ms", "timeoutAction": "Delay"},
        tier="batch",
    )
    dyn = parse_config_pbtxt(render_config_pbtxt(spec)).dynamic_batching
    assert dyn.priority_levels == 3 and dyn.default_priority_level == 3
    policy = dyn.default_queue_policy
    assert policy.max_queue_size == 64
    assert policy.default_timeout_microseconds == 100_000
    assert policy.timeout_action == pb.ModelQueuePolicy.DELAY
    interactive = parse_config_pbtxt(render_config_pbtxt(_spec(batching__priorityLevels=3)))
    assert interactive.dynamic_batching.default_priority_level == 1


def test_batching_off_has_no_dynamic_batcher() -> None:
    spec = _spec(batching={"maxBatchSize": 0})
    cfg = parse_config_pbtxt(render_config_pbtxt(spec))
    assert not cfg.HasField("dynamic_batching") and cfg.max_batch_size == 0


def test_server_args() -> None:
    args = server_args(_spec(triton={"responseCache": True, "args": ["--log-verbose=1"]}))
    assert "--model-control-mode=explicit" in args and "--load-model=sleeper" in args
    assert "--disable-auto-complete-config" in args
    assert f"--cache-config=local,size={256 << 20}" in args
    assert args[-1] == "--log-verbose=1"
    no_io = _spec(model__inputs=[], model__outputs=[])
    assert "--disable-auto-complete-config" not in server_args(no_io)
