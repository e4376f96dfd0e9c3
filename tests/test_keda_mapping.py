"""scaling.engine: keda: every scaling field the built-in loop reads reaches the ScaledObject."""

from __future__ import annotations

from typing import Any

from e2e.invalid_cases import valid_service
from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.resources.keda import rate_threshold, scaled_object

H100 = AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-H100-80GB-HBM3"})


def _keda(scrape_interval: float = 15.0, **scaling: Any) -> dict[str, Any]:
    body = valid_service("chat")
    body["metadata"]["namespace"] = "ml"
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 6, "engine": "keda", **scaling}
    svc = parse_inference_service(body)
    return scaled_object(svc, "h100", H100, "http://prom:9090", scrape_interval)


def test_windows_map_onto_the_trigger_and_the_hpa_behaviour() -> None:
    spec = _keda(stableWindow="90s", panicWindow="4s", scaleDownStabilization="300s")["spec"]
    assert "[90s]" in spec["triggers"][0]["metadata"]["query"]
    assert spec["pollingInterval"] == 4
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    # The built-in policy's step limits: at most double, at least 4 pods; halve at most.
    up = {p["type"]: p["value"] for p in behavior["scaleUp"]["policies"]}
    assert up == {"Percent": 100, "Pods": 4}
    assert behavior["scaleDown"]["policies"][0] == {
        "type": "Percent",
        "value": 50,
        "periodSeconds": 15,
    }


def test_defaults_change_with_the_fields() -> None:
    default = _keda()["spec"]
    assert "[60s]" in default["triggers"][0]["metadata"]["query"]
    assert default["pollingInterval"] == 6
    assert len(default["triggers"]) == 1  # no queue trigger unless a target is set


def test_the_trigger_range_holds_four_scrapes_where_the_stable_window_is_shorter() -> None:
    # rate() over a range with one sample in it returns nothing, and KEDA would read no load.
    def query(scrape: float, **scaling: Any) -> str:
        return str(_keda(scrape, **scaling)["spec"]["triggers"][0]["metadata"]["query"])

    assert "[20s]" in query(1.0, stableWindow="20s")  # a fast scrape: the window as stated
    assert "[60s]" in query(15.0, stableWindow="20s")  # four 15-s scrapes
    assert "[120s]" in query(30.0)  # the 60-s default behind a 30-s scrape
    assert "[90s]" in query(15.0, stableWindow="90s")  # long enough already


def test_target_queue_depth_adds_a_queue_trigger() -> None:
    triggers = _keda(targetQueueDepth=12)["spec"]["triggers"]
    assert len(triggers) == 2
    queue = triggers[1]["metadata"]
    assert "nv_inference_pending_request_count" in queue["query"] and queue["threshold"] == "12"


def test_a_stricter_planning_percentile_lowers_the_per_replica_threshold() -> None:
    def threshold(**scaling: Any) -> float:
        body = valid_service("chat")
        body["spec"]["scaling"] = {"engine": "keda", **scaling}
        return rate_threshold(parse_inference_service(body), H100)

    assert threshold(planningPercentile=99.9) < threshold()
