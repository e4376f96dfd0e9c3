"""Under `scaling.engine: keda` the ScaledObject's threshold follows Triton's measured
compute time (gpuserve.autoscaling.keda_calibration), and the rendering uses it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from controllers.inferenceservice import what_queues
from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.api.status import KedaCalibrationStatus
from gpuserve.autoscaling.config import ServiceProfile
from gpuserve.autoscaling.keda_calibration import (
    BAND,
    KedaCalibration,
    calibrate_from,
    describe,
    recalibrate,
    threshold_measured,
)
from gpuserve.autoscaling.metrics import MetricSample
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.autoscaling.service_scale import SCALE_BOUNDS, ComputeMeasurement
from gpuserve.resources.rendering import PoolPlan, RenderInput, render_children

ROOT = Path(__file__).resolve().parents[1]
# No batching: a correct profile explains exactly S(1), so the scale is measured / stated.
STATED = ServiceProfile(time_per_batch=0.010, time_per_item=0.0)
L4 = AcceleratorClassSpec(gpu_product="NVIDIA-L4")


def _measured(ms: float) -> ComputeMeasurement:
    return ComputeMeasurement(compute=ms / 1e3, mean_batch=1.0)


def test_nothing_measured_and_nothing_recorded_records_nothing() -> None:
    assert recalibrate(None, None, speed=1.0, profile=STATED) is None


def test_a_first_measurement_is_recorded_even_where_it_agrees() -> None:
    first = recalibrate(None, _measured(10.2), speed=1.0, profile=STATED)
    assert first is not None and first.scale == 1.0
    assert "the threshold rests on them" in describe(first, STATED)


def test_a_slower_model_scales_the_threshold_by_what_was_measured() -> None:
    recorded = KedaCalibration(measured=_measured(10.0), speed=1.0, scale=1.0)
    new = recalibrate(recorded, _measured(30.0), speed=1.0, profile=STATED)
    assert new is not None and new.scale == pytest.approx(3.0)
    text = describe(new, STATED)
    assert "30.0 ms" in text and "10.0-10.0 ms" in text and "3x as long" in text, text


def test_pods_of_a_faster_class_are_judged_at_their_speed() -> None:
    # 15 ms on pods twice as fast as the reference is 3x the 5 ms stated for them.
    new = recalibrate(None, _measured(15.0), speed=2.0, profile=STATED)
    assert new is not None and new.scale == pytest.approx(3.0) and new.speed == 2.0


def test_a_move_within_the_band_keeps_the_recorded_threshold() -> None:
    recorded = KedaCalibration(measured=_measured(30.0), speed=1.0, scale=3.0)
    inside = 30.0 * (BAND - 0.05)
    assert recalibrate(recorded, _measured(inside), speed=1.0, profile=STATED) is None
    outside = recalibrate(recorded, _measured(30.0 * (BAND + 0.05)), speed=1.0, profile=STATED)
    assert outside is not None and outside.scale > 3.0


def test_without_executions_the_record_is_judged_again_against_a_new_spec() -> None:
    recorded = KedaCalibration(measured=_measured(30.0), speed=1.0, scale=3.0)
    assert recalibrate(recorded, None, speed=1.0, profile=STATED) is None
    # The user now states the model's real 30 ms: the same measurement agrees with it.
    stated_right = ServiceProfile(time_per_batch=0.030, time_per_item=0.0)
    again = recalibrate(recorded, None, speed=1.0, profile=stated_right)
    assert again is not None and again.scale == 1.0 and again.measured == recorded.measured


def test_the_correction_stops_at_its_bounds_and_says_what_to_do() -> None:
    slow = recalibrate(None, _measured(100.0), speed=1.0, profile=STATED)
    assert slow is not None and slow.scale == SCALE_BOUNDS[1]
    assert "exec_time_ms and per_item_ms" in describe(slow, STATED)
    fast = recalibrate(None, _measured(1.0), speed=1.0, profile=STATED)
    assert fast is not None and fast.scale == SCALE_BOUNDS[0]


def _window(ms: float) -> list[MetricSample]:
    # One request per execution: item and execution rates are equal, a mean batch of 1.
    return [
        MetricSample(at=t, avg_compute_time=ms / 1e3, item_rate=5.0, exec_rate=5.0)
        for t in (0.0, 5.0, 10.0)
    ]


def test_executions_measured_while_no_pod_is_ready_move_nothing() -> None:
    recorded = KedaCalibration(measured=_measured(10.0), speed=1.0, scale=1.0)
    gone = PoolState(classes=(ClassPool(name="l4", speed=2.0),))
    assert calibrate_from(recorded, _window(30.0), gone, STATED) is None
    serving = PoolState(classes=(ClassPool(name="l4", speed=2.0, serving_ready=2),))
    new = calibrate_from(recorded, _window(30.0), serving, STATED)
    # 30 ms on pods twice as fast as the reference: 6x the 5 ms stated for them, bounded.
    assert new is not None and new.speed == 2.0 and new.scale == SCALE_BOUNDS[1]


def test_a_hand_edited_record_out_of_range_reads_as_one_the_operator_could_write() -> None:
    found = KedaCalibrationStatus.model_validate(
        {"time": "t", "computeMs": 30.0, "meanBatch": 1.0, "relativeSpeed": 0, "serviceScale": 0}
    )
    assert found.service_scale == SCALE_BOUNDS[0] and found.relative_speed == 1.0
    assert (
        KedaCalibrationStatus.model_validate(
            {**found.model_dump(), "service_scale": 9}
        ).service_scale
        == SCALE_BOUNDS[1]
    )
    recorded = KedaCalibration(
        measured=_measured(found.compute_ms), speed=found.relative_speed, scale=found.service_scale
    )
    again = recalibrate(recorded, None, speed=1.0, profile=STATED)  # no division by zero
    assert again is not None and again.scale == 3.0


def test_a_new_scale_queues_a_reconcile_and_a_new_message_does_not() -> None:
    def body(scale: float, message: str) -> dict[str, object]:
        record = {"serviceScale": scale, "message": message, "time": message}
        return {"metadata": {"uid": "u", "generation": 2}, "status": {"kedaCalibration": record}}

    assert what_queues(body(3.0, "a")) == what_queues(body(3.0, "b"))
    assert what_queues(body(3.0, "a")) != what_queues(body(2.0, "a"))
    assert what_queues(body(3.0, "a")) != what_queues({"metadata": {"uid": "u", "generation": 2}})


SERVICE = {
    "apiVersion": "gpuserve.io/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "k", "namespace": "ns", "uid": "u"},
    "spec": {
        "model": {
            "name": "m",
            "storageUri": "s3://b/m",
            "format": "onnx",
            "parameters": {"exec_time_ms": "10", "per_item_ms": "0"},
        },
        "slo": {"latency": "50ms", "percentile": 95},
        "accelerators": {"classes": ["l4"]},
        "scaling": {"minReplicas": 1, "maxReplicas": 8, "engine": "keda"},
    },
}


def test_only_a_keda_service_of_requests_has_its_threshold_measured() -> None:
    keda = parse_inference_service(copy.deepcopy(SERVICE)).spec
    assert threshold_measured(keda)
    builtin = copy.deepcopy(SERVICE)
    builtin["spec"]["scaling"]["engine"] = "builtin"
    assert not threshold_measured(parse_inference_service(builtin).spec)
    llm = yaml.safe_load((ROOT / "examples" / "llama-vllm.yaml").read_text())
    llm["metadata"]["namespace"] = "ns"
    llm["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 8, "engine": "keda"}
    llm_spec = parse_inference_service(llm).spec
    assert llm_spec.is_llm and not threshold_measured(llm_spec)


def _threshold(scale: float) -> float:
    svc = parse_inference_service(copy.deepcopy(SERVICE))
    children = render_children(
        RenderInput(
            service=svc,
            classes={"l4": L4},
            pools={"l4": PoolPlan(replicas=0)},
            keda_service_scale=scale,
        )
    )
    (so,) = [c for c in children if c["kind"] == "ScaledObject"]
    return float(so["spec"]["triggers"][0]["metadata"]["threshold"])


def test_the_rendered_threshold_is_sized_for_the_recorded_scale() -> None:
    stated, measured = _threshold(1.0), _threshold(3.0)
    # Three times the execution time leaves less of the objective to queue in, too: the
    # threshold falls by at least the factor.
    assert measured <= stated / 3.0, (stated, measured)
    assert _threshold(0.5) > stated
