"""The real tritonserver (pytriton wheel) on CPU: serving, metrics, batching, validation,
clean shutdown."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as pb

from e2e.loadgen import Target, run_closed_loop
from e2e.models import load_catalog, resolve_demo_uri, sleeper_config
from e2e.triton import (
    ConfigValidator,
    TritonModelError,
    TritonServer,
    TritonStartError,
    error_lines,
    triton_available,
    validate_model_config,
    write_model,
)
from e2e.triton.pbtxt import top_level_name
from e2e.triton.process import pid_alive, port_listening
from e2e.triton.requests import infer_sleeper

needs_triton = [
    pytest.mark.triton,
    pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed"),
]


def metric(text: str, name: str, model: str) -> float:
    """Sum of a metric's samples for one model in a Prometheus exposition."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    if not seen:
        raise KeyError(f"{name} for {model} not in metrics")
    return total


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    if not triton_available():
        pytest.skip("nvidia-pytriton wheel not installed")
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "sleeper", sleeper_config("sleeper", max_batch_size=32))
    write_model(
        repo, "nobatch", sleeper_config("nobatch", max_batch_size=0, dynamic_batching=False)
    )
    with TritonServer(repo) as server:
        yield server


# ----------------------------------------------------------------------------- no server needed
def test_top_level_name_ignores_nested_names_and_comments() -> None:
    text = '# name: "comment"\ninput [ { name: "INPUT" } ]\nname: "real"\n'
    assert top_level_name(text) == "real"
    assert top_level_name('input [ { name: "x" } ]') is None
    assert top_level_name('name: "a b" platform: "x"') == "a b"


def test_error_lines_keep_model_errors_and_drop_gpu_noise() -> None:
    log = "\n".join(
        [
            "E1121 20:53:59.864085 13762 server.cc:241] "
            '"CudaDriverHelper has not been initialized."',
            "I1121 20:54:00.095233 13762 model_lifecycle.cc:839] \"successfully loaded 'a'\"",
            "[libprotobuf ERROR /x/text_format.cc:337] Error parsing text-format "
            'inference.ModelConfig: 13:12: no field named "bogus".',
            "E1121 20:54:01.000000 13762 model.cc:10] \"failed to load 'a': CUDA weights gone\"",
            "error: creating server: Internal - failed to load all models",
        ]
    )
    assert error_lines(log) == [
        'Error parsing text-format inference.ModelConfig: 13:12: no field named "bogus".',
        "failed to load 'a': CUDA weights gone",
        "error: creating server: Internal - failed to load all models",
    ]
    assert "CudaDriverHelper has not been initialized." in error_lines(log, include_harmless=True)


def test_catalogue_resolves_demo_uri() -> None:
    model = resolve_demo_uri("demo://sleeper")
    assert model.model_file.is_file() and model.reference_config.is_file()
    assert [t.name for t in model.inputs] == ["INPUT"]
    output = model.outputs[0]
    assert pb.DataType.Name(output.data_type) == "TYPE_FP32" and list(output.dims) == [4]
    assert "sleeper" in load_catalog()
    with pytest.raises(KeyError):
        resolve_demo_uri("demo://nope")


# ----------------------------------------------------------------------------- serving
@pytest.mark.triton
def test_inference_returns_the_input(triton: TritonServer) -> None:
    assert triton.is_ready() and triton.model_ready("sleeper") and triton.model_ready("nobatch")
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    data = np.random.default_rng(1).random((1, 4), dtype=np.float32)
    for model, array in (("sleeper", data), ("nobatch", data[0])):
        item = grpcclient.InferInput("INPUT", list(array.shape), "FP32")
        item.set_data_from_numpy(array)
        result = client.infer(model, [item])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT"), array)
    client.close()


@pytest.mark.triton
def test_metrics_expose_success_and_pending(triton: TritonServer) -> None:
    def success() -> float:
        return metric(triton.metrics_text(), "nv_inference_request_success", "sleeper")

    # Triton bumps its counters just after it answers, so a previous test's last request
    # may still be landing: take the baseline once the counter has stopped moving.
    before = success()
    for _ in range(20):
        time.sleep(0.1)
        now = success()
        if now == before:
            break
        before = now
    infer_sleeper(triton.grpc_url, 3)
    deadline = time.monotonic() + 5
    while success() < before + 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    text = triton.metrics_text()
    assert metric(text, "nv_inference_request_success", "sleeper") == before + 3
    assert metric(text, "nv_inference_pending_request_count", "sleeper") == 0


@pytest.mark.triton
def test_dynamic_batching_merges_concurrent_requests(triton: TritonServer) -> None:
    def counters(model: str) -> tuple[float, float]:
        text = triton.metrics_text()
        return (
            metric(text, "nv_inference_request_success", model),
            metric(text, "nv_inference_exec_count", model),
        )

    for model, batched in (("sleeper", True), ("nobatch", False)):
        requests0, execs0 = counters(model)
        result = run_closed_loop(
            Target(model, [triton.grpc_url], connections_per_endpoint=16), 16, 1.5
        )
        requests1, execs1 = counters(model)
        assert result.failures == 0 and result.successes > 50
        requests, execs = requests1 - requests0, execs1 - execs0
        assert requests == result.successes
        if batched:
            assert execs < requests / 2, f"{execs} executions for {requests} requests"
        else:
            assert execs == requests


# ----------------------------------------------------------------------------- validation
PREFERRED_TOO_BIG = sleeper_config("pbig", max_batch_size=8, preferred_batch_sizes=[4, 16])
PRIORITY_OUT_OF_RANGE = sleeper_config(
    "prio", batcher_extra="priority_levels: 2\n  default_priority_level: 3"
)


@pytest.mark.triton
@pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed")
def test_validate_model_config_accepts_and_rejects_precisely() -> None:
    good = validate_model_config(sleeper_config("good"))
    assert good.ok and good.errors == [] and good.model_name == "good"
    bad = validate_model_config(PREFERRED_TOO_BIG)
    assert not bad.ok
    assert bad.exit_code not in (None, 0)
    assert any(
        "dynamic batching preferred size must be <= max batch size for pbig" in e
        for e in bad.errors
    ), bad.errors


@pytest.mark.triton
@pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed")
def test_config_validator_reports_each_error() -> None:
    onnx_gpu = (
        'name: "resnet"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "input", data_type: TYPE_FP32, dims: [ 3, 4 ] } ]\n'
        'output [ { name: "logits", data_type: TYPE_FP32, dims: [ 10 ] } ]\n'
        "instance_group [ { kind: KIND_GPU, count: 1, gpus: [ 0 ] } ]\n"
        "dynamic_batching { preferred_batch_size: [ 4, 8 ] }\n"
    )
    expected = {
        PREFERRED_TOO_BIG: "dynamic batching preferred size must be <= max batch size",
        PRIORITY_OUT_OF_RANGE: "default priority level must be in range [1, 2]",
        sleeper_config("unk", extra="bogus_field: 1"): 'no field named "bogus_field"',
        sleeper_config("gpu").replace("KIND_CPU", "KIND_GPU"): "no GPUs are available",
    }
    with ConfigValidator() as validator:
        assert validator.validate(sleeper_config("fine")).ok
        for config, message in expected.items():
            result = validator.validate(config)
            assert not result.ok
            assert any(message in e for e in result.errors), (message, result.errors)
        # A GPU config for another backend is checked with the Python backend standing in.
        emulated = validator.validate(onnx_gpu, emulate_backend=True)
        assert emulated.ok, emulated.errors
        assert any("KIND_GPU -> KIND_CPU" in change for change in emulated.emulated)
        too_big = onnx_gpu.replace("[ 4, 8 ]", "[ 4, 16 ]")
        assert not validator.validate(too_big, emulate_backend=True).ok


# ----------------------------------------------------------------------------- lifecycle
@pytest.mark.triton
@pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed")
def test_stop_leaves_no_process_and_frees_ports(tmp_path: Path) -> None:
    write_model(tmp_path, "sleeper", sleeper_config())
    server = TritonServer(tmp_path).start()
    try:
        pids = server.process_group_pids()
        ports = (server.http_port, server.grpc_port, server.metrics_port)
        assert server.pid in pids and len(pids) >= 2, "expected tritonserver plus a Python stub"
        assert all(port_listening(p) for p in ports)
    finally:
        server.stop()  # also when an assertion above fails: no server is left running
    assert not server.running
    assert [p for p in pids if pid_alive(p)] == []
    assert not any(port_listening(p) for p in ports)
    assert "successfully loaded 'sleeper'" in server.log_text()
    assert server.errors() == []  # the CPU-only start-up noise is filtered out
    assert server.stop() == server.exit_code  # idempotent


@pytest.mark.triton
@pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed")
def test_start_waits_for_metrics_only_where_they_are_served(tmp_path: Path) -> None:
    # start() waits for the gRPC and metrics ports as well as HTTP readiness; with metrics
    # turned off it must not wait for a port that never opens.
    write_model(tmp_path, "sleeper", sleeper_config())
    began = time.monotonic()
    with TritonServer(tmp_path, extra_flags=["--allow-metrics", "false"]) as server:
        assert server.is_ready() and port_listening(server.grpc_port)
        assert not port_listening(server.metrics_port)
    assert time.monotonic() - began < 30.0


@pytest.mark.triton
@pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed")
def test_failed_start_raises_with_reason_and_cleans_up(tmp_path: Path) -> None:
    write_model(tmp_path, "pbig", PREFERRED_TOO_BIG)
    server = TritonServer(tmp_path)
    with pytest.raises(TritonStartError) as info:
        server.start(timeout=30)
    assert any("preferred size must be <= max batch size" in e for e in info.value.errors)
    assert not server.running and server.process_group_pids() == []


@pytest.mark.triton
@pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed")
def test_explicit_mode_loads_only_named_models(tmp_path: Path) -> None:
    write_model(tmp_path, "a", sleeper_config("a"))
    write_model(tmp_path, "b", sleeper_config("b"))
    with TritonServer(tmp_path, load_models=["a"]) as server:
        assert server.model_ready("a") and not server.model_ready("b")
        server.load_model("b")
        assert server.model_ready("b")
        server.unload_model("b")
        assert not server.model_ready("b")
        (tmp_path / "b" / "config.pbtxt").write_text(
            sleeper_config("b", max_batch_size=4, preferred_batch_sizes=[8])
        )
        with pytest.raises(TritonModelError) as info:
            server.load_model("b")
        assert any("preferred size must be <= max batch size" in e for e in info.value.errors)
