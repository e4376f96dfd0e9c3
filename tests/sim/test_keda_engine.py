"""`gpuserve simulate` on a `scaling.engine: keda` service replays the ScaledObject the
operator renders for it: the same threshold, windows and HPA behaviour."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from simulate_helpers import CLASSES, simulate, steady_trace

from cli.rendering import load_documents, render_service, split_manifests
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.autoscaling.query_windows import DEFAULT_SCRAPE_INTERVAL_S
from gpuserve.resources.keda import keda_scaling
from gpuserve.sim.baselines import HpaBehaviour
from gpuserve.sim.keda_engine import RenderedKeda

ROOT = Path(__file__).resolve().parents[2]
KEDA = ROOT / "examples" / "keda-engine.yaml"


def _scaled_object() -> dict[str, Any]:
    services, classes = split_manifests(load_documents([KEDA, CLASSES]))
    (svc,) = services
    return next(o for o in render_service(svc, classes) if o["kind"] == "ScaledObject")


def test_the_replayed_hpa_is_the_rendered_one() -> None:
    rendered = _scaled_object()["spec"]
    services, classes = split_manifests(load_documents([KEDA, CLASSES]))
    policy = policy_config_from_spec(services[0].spec)
    k = keda_scaling(policy, classes["l4"])
    scaler = RenderedKeda(
        policy=policy,
        accel=classes["l4"],
        scrape_interval=DEFAULT_SCRAPE_INTERVAL_S,
        min_replicas=rendered["minReplicaCount"],
        max_replicas=rendered["maxReplicaCount"],
    )
    assert scaler.scaling == k
    behavior = rendered["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    up = {p["type"]: p["value"] for p in behavior["scaleUp"]["policies"]}
    assert (scaler.behaviour.up_percent, scaler.behaviour.up_pods) == (up["Percent"], up["Pods"])
    assert scaler.behaviour.down_window == behavior["scaleDown"]["stabilizationWindowSeconds"]
    assert scaler.behaviour.down_percent == behavior["scaleDown"]["policies"][0]["value"]
    assert str(k.rate_threshold) == rendered["triggers"][0]["metadata"]["threshold"]


def test_a_scale_down_step_keeps_what_the_percent_policy_keeps() -> None:
    hpa = HpaBehaviour(1, 10, down_window=0.0, down_percent=50)
    assert hpa.next_size(now=0.0, current=8, ready=8, usage_ratio=0.01) == 4
    # Rounded down as the HPA does (int32 of the product), not up as gpuserve's own step.
    assert hpa.next_size(now=15.0, current=5, ready=5, usage_ratio=0.01) == 2
    assert hpa.next_size(now=30.0, current=3, ready=3, usage_ratio=0.01) == 1
    stock = HpaBehaviour(1, 10, down_window=0.0)  # 100 %: no limit
    assert stock.next_size(now=0.0, current=8, ready=8, usage_ratio=0.01) == 1


def test_simulate_replays_a_keda_service_as_rendered_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = simulate(capsys, KEDA, steady_trace(tmp_path))
    assert code == 0, err
    assert "policy gpuserve-keda" in out, out
    said = re.search(r"KEDA as rendered.*?: ([\d.]+) req/s per replica over (\d+)s", out)
    assert said, out
    trigger = _scaled_object()["spec"]["triggers"][0]["metadata"]
    assert said.group(1) == trigger["threshold"]
    assert f"[{said.group(2)}s]" in trigger["query"]
    # The builtin engine's replay, asked for, says what it is instead.
    code, out, _ = simulate(capsys, KEDA, steady_trace(tmp_path), "--policy", "gpuserve")
    assert code == 0 and "policy gpuserve," in out and "KEDA as rendered" not in out
    assert "--policy gpuserve-keda replays the ScaledObject" in out
    # A peer's replay is what it says it is: no note.
    code, out, _ = simulate(capsys, KEDA, steady_trace(tmp_path), "--policy", "keda")
    assert code == 0 and "scaling.engine keda" not in out and "policy keda-prom" in out, out


def test_a_builtin_service_can_be_replayed_as_if_switched_to_keda(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = yaml.safe_load(KEDA.read_text())
    del body["spec"]["scaling"]["engine"]
    builtin = tmp_path / "svc.yaml"
    builtin.write_text(yaml.safe_dump(body))
    code, out, _ = simulate(capsys, builtin, steady_trace(tmp_path))
    assert code == 0 and "policy gpuserve," in out and "scaling.engine keda" not in out
    code, out, _ = simulate(capsys, builtin, steady_trace(tmp_path), "--policy", "gpuserve-keda")
    assert code == 0 and "policy gpuserve-keda" in out and "KEDA as rendered" in out


def test_an_llm_keda_service_is_replayed_as_rendered_on_its_vllm_triggers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = yaml.safe_load((ROOT / "examples" / "llama-vllm.yaml").read_text())
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 8, "engine": "keda"}
    manifest = tmp_path / "llm.yaml"
    manifest.write_text(yaml.safe_dump(body))
    code, out, err = simulate(capsys, manifest, steady_trace(tmp_path))
    assert code == 0, err
    assert "policy gpuserve-keda, routing random" in out, out
    said = re.search(
        r"KEDA as rendered from the LLM rule's capacity model.*?: ([\d.]+) arrivals/s per "
        r"replica over (\d+)s, (\d+) waiting per replica",
        out,
    )
    assert said, out
    services, classes = split_manifests(load_documents([manifest, CLASSES]))
    (svc,) = services
    so = next(o for o in render_service(svc, classes) if o["kind"] == "ScaledObject")
    arrivals, waiting = (t["metadata"] for t in so["spec"]["triggers"])
    assert said.group(1) == arrivals["threshold"] and said.group(3) == waiting["threshold"]
    assert f"[{said.group(2)}s]" in arrivals["query"] and "vllm:" in arrivals["query"]
    # The thresholds follow the mix measured, as the operator records it in status.
    assert "status.kedaTokenMix (recorded 1 time(s)" in out, out
    assert "measured prompts of 100 tokens on average" in out
    code, out, _ = simulate(capsys, manifest, steady_trace(tmp_path), "--no-keda-calibration")
    assert code == 0 and "status.kedaTokenMix: not replayed" in out, out
    # The builtin engine's replay, asked for, says what it is instead.
    code, out, _ = simulate(capsys, manifest, steady_trace(tmp_path), "--policy", "gpuserve")
    assert code == 0 and "policy gpuserve," in out and "KEDA as rendered" not in out
    assert "--policy gpuserve-keda replays the ScaledObject" in out


def test_the_replayed_window_is_the_rendered_one_where_the_scrape_widens_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 20-s stable window is rendered as a 60-s range behind the chart's 15-s scrape;
    the replay once read 20 s (its simulated Prometheus scrapes every 5 s)."""
    body = yaml.safe_load(KEDA.read_text())
    body["spec"]["scaling"]["stableWindow"] = "20s"
    svc = tmp_path / "svc.yaml"
    svc.write_text(yaml.safe_dump(body))
    code, out, err = simulate(capsys, svc, steady_trace(tmp_path))
    assert code == 0, err
    assert "per replica over 60s" in out, out


def test_the_replay_sizes_the_threshold_again_from_the_measured_compute_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model three times slower than its spec states: the rendered threshold alone
    keeps too few pods; the operator's measurement (status.kedaCalibration) sizes it
    again, and the replay does what the operator does."""
    body = yaml.safe_load(KEDA.read_text())
    body["spec"]["batching"] = {"maxBatchSize": 0}
    body["spec"]["model"]["parameters"] = {"exec_time_ms": "5", "per_item_ms": "0"}
    svc = tmp_path / "svc.yaml"
    svc.write_text(yaml.safe_dump(body))
    times = tmp_path / "times.yaml"
    times.write_text("kind: ServiceTimes\ntimePerBatch: 15ms\ntimePerItem: 0ms\ncoldStart: 45s\n")
    trace = tmp_path / "busy.csv"
    rows = (f"{k / 100:.4f},100,10" for k in range(100 * 300))  # 100 req/s for 5 minutes
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    code, out, err = simulate(capsys, svc, trace, "--times", str(times))
    assert code == 0, err
    stated = re.search(r"KEDA as rendered.*?: ([\d.]+) req/s per replica", out)
    recorded = re.search(
        r"status.kedaCalibration: recorded .*?executions ([\d.]+)x as long; "
        r"threshold then ([\d.]+) req/s per replica",
        out,
    )
    assert stated and recorded, out
    assert float(recorded.group(1)) == pytest.approx(3.0, rel=0.1)
    assert float(recorded.group(2)) < float(stated.group(1)) / 3
    # One pod serves at most 66 req/s of 15-ms executions; the stated threshold lets one
    # take all 100 (10 % within the objective); the measured one keeps enough.
    attained = re.search(r"attainment ([\d.]+)%", out)
    assert attained and float(attained.group(1)) >= 95.0, out
    # The threshold as rendered alone, asked for: one pod takes it all.
    code, out, err = simulate(capsys, svc, trace, "--times", str(times), "--no-keda-calibration")
    assert code == 0, err
    assert "status.kedaCalibration: not replayed (--no-keda-calibration)" in out, out
    alone = re.search(r"attainment ([\d.]+)%", out)
    assert alone and float(alone.group(1)) < 50.0, out


def test_the_threshold_as_rendered_is_a_what_if_of_the_keda_replay_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = steady_trace(tmp_path)
    code, _, err = simulate(capsys, KEDA, trace, "--policy", "gpuserve", "--no-keda-calibration")
    assert code == 1 and "--no-keda-calibration goes with --policy gpuserve-keda" in err, err
    llm = ROOT / "examples" / "llama-vllm.yaml"
    code, _, err = simulate(capsys, llm, trace, "--no-keda-calibration")
    assert code == 1 and "--no-keda-calibration goes with --policy gpuserve-keda" in err, err
