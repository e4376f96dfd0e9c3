"""InferenceService -> simulator configuration, and the `gpuserve simulate` command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cli.main import main
from gpuserve.api.models import parse_accelerator_class, parse_inference_service
from gpuserve.sim.from_spec import (
    parse_service_time_model,
    profile_from_spec,
    sim_config_from_spec,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SERVICE = """
apiVersion: gpuserve.io/v1alpha1
kind: InferenceService
metadata: {name: ranker, namespace: default}
spec:
  model: {name: ranker, storageUri: "s3://models/ranker", format: onnx}
  precision: fp16
  batching:
    maxBatchSize: 8
    preferredBatchSizes: [4, 8]
    maxQueueDelay: 20ms
    priorityLevels: 2
    queuePolicy: {maxQueueSize: 64, timeout: 500ms, timeoutAction: Delay}
  slo: {latency: 2s, percentile: 99}
  accelerators: {classes: [l4, t4]}
  scaling: {minReplicas: 2, maxReplicas: 6, warmPool: 1}
  tier: batch
---
apiVersion: gpuserve.io/v1alpha1
kind: AcceleratorClass
metadata: {name: l4}
spec: {gpuProduct: NVIDIA-L4, computeCapability: "8.9", relativeSpeed: 2.0, costPerHour: 0.8}
---
kind: AcceleratorClass
metadata: {name: t4}
spec: {gpuProduct: Tesla-T4, computeCapability: "7.5", relativeSpeed: 1.0, costPerHour: 0.4}
---
kind: ServiceTimes
timePerBatch: 120ms
timePerItem: 240ms
precision: fp32
coldStart: 30s
warmStart: 1s
classes:
  t4: {timePerBatch: 200ms, timePerItem: 400ms}
"""


def docs() -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(SERVICE) if d]


def test_spec_maps_to_the_simulated_batcher_pods_and_times() -> None:
    svc_doc, l4_doc, t4_doc, times_doc = docs()
    spec = parse_inference_service(svc_doc).spec
    l4_class = parse_accelerator_class(l4_doc).spec
    classes = {"l4": l4_class, "t4": parse_accelerator_class(t4_doc).spec}
    times = parse_service_time_model(times_doc)
    with pytest.raises(ValueError, match=r"accelerators\.classes: AcceleratorClass 't4' not given"):
        sim_config_from_spec(spec=spec, classes={"l4": l4_class}, times=times)
    config = sim_config_from_spec(spec=spec, classes=classes, times=times)
    b = config.batcher
    assert (b.max_batch_size, b.preferred_batch_sizes, b.max_queue_delay) == (8, (4, 8), 0.02)
    assert b.priority_levels == 2 and b.default_priority == 2  # batch tier: lowest level
    assert b.default_policy.max_queue_size == 64
    assert b.default_policy.timeout == pytest.approx(0.5)
    assert b.default_policy.action == "delay"
    # Times measured at fp32 move to fp16 (2x faster).
    assert config.service.precision_factor == pytest.approx(0.5)
    l4, t4 = config.classes
    assert (l4.name, l4.speed, l4.cost_per_hour, l4.cold_start) == ("l4", 2.0, 0.8, 30.0)
    assert t4.per_batch == pytest.approx(0.1) and t4.per_item == pytest.approx(0.2)
    assert (config.initial_replicas, config.warm_pool) == (2, 1)
    assert (config.slo_latency, config.slo_quantile) == (2.0, 0.99)
    profile = profile_from_spec(spec, times)
    assert profile.time_per_batch == pytest.approx(0.06)
    assert profile.time_per_item == pytest.approx(0.12)


def test_bad_service_times_name_the_field() -> None:
    with pytest.raises(ValueError, match="timePerItem"):
        parse_service_time_model({"timePerBatch": "5ms", "timePerItem": "soon"})
    with pytest.raises(ValueError, match="precision"):
        parse_service_time_model({"timePerBatch": "5ms", "timePerItem": "1ms", "precision": "x"})


def test_simulate_command_prints_the_prediction_and_writes_a_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = tmp_path / "svc.yaml"
    service.write_text(SERVICE)
    trace = tmp_path / "trace.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for k in range(600):  # 3 req/s for 200 s
        rows.append(f"2023-11-16 18:{15 + k // 180:02d}:{(k // 3) % 60:02d}.{k % 3}00,100,10")
    trace.write_text("\n".join(rows) + "\n")
    plot = tmp_path / "out.png"
    code = main(
        [
            "simulate",
            "-f",
            str(service),
            "--trace",
            str(trace),
            "--warmup",
            "30",
            "--plot",
            str(plot),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "policy gpuserve" in out and "attainment" in out and "GPU-hours" in out
    assert re.search(r"within 2000ms \(\d+ over\)", out), out
    assert "service times (ServiceTimes document)" in out
    assert "class l4: speed 2" in out and "class t4: speed 1" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_command_runs_a_baseline_on_an_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"{k * 0.01:.3f},100,10" for k in range(3000)]  # 100 req/s for 30 s
    trace.write_text("\n".join(rows) + "\n")
    code = main(
        [
            "simulate",
            "-f",
            str(EXAMPLES / "sleeper-interactive.yaml"),
            "--classes",
            str(EXAMPLES / "accelerator-classes.yaml"),
            "--trace",
            str(trace),
            "--warmup",
            "10",
            "--policy",
            "keda",
        ]
    )
    assert code == 0
    assert "policy keda-prom" in capsys.readouterr().out


def test_simulate_command_reports_a_missing_service(tmp_path: Path) -> None:
    empty = tmp_path / "none.yaml"
    empty.write_text("kind: ServiceTimes\ntimePerBatch: 5ms\ntimePerItem: 1ms\n")
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n")
    assert main(["simulate", "-f", str(empty), "--trace", str(trace)]) == 1


def test_simulate_command_names_a_class_it_was_not_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = tmp_path / "svc.yaml"
    service.write_text(SERVICE.replace("metadata: {name: t4}", "metadata: {name: t4-other}"))
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,1,1\n1,1,1\n")
    assert main(["simulate", "-f", str(service), "--trace", str(trace)]) == 1
    assert "AcceleratorClass 't4' not given" in capsys.readouterr().err
