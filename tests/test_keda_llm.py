"""scaling.engine: keda for an LLM service: the ScaledObject carries the LLM rule's sizing
on the service's vLLM series, not the request-level model's (which prices an LLM request
as a few milliseconds of compute and would never scale it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controllers.inferenceservice import what_queues
from e2e.invalid_cases import valid_llm_service
from gpuserve.api.models import AcceleratorClassSpec, parse_inference_service
from gpuserve.llm.capacity import LoadShape
from gpuserve.llm.deciding import sizing
from gpuserve.llm.from_spec import llm_policy_from_spec
from gpuserve.llm.keda_mix import KedaTokenMix, mix_measured
from gpuserve.resources.keda import UTILISATION, rate_threshold, scaled_object

H100 = AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-H100-80GB-HBM3"})
L4 = AcceleratorClassSpec.model_validate({"gpuProduct": "NVIDIA-L4"})
CLASSES = {"h100": H100, "l4": L4}


def _body(slo: dict[str, str] | None = None, **scaling: Any) -> dict[str, Any]:
    body = valid_llm_service("chat")
    body["metadata"]["namespace"] = "ml"
    body["spec"]["accelerators"] = {"classes": ["h100", "l4"]}
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 8, "engine": "keda", **scaling}
    if slo is not None:
        body["spec"]["slo"] = slo
    return body


def _triggers(body: dict[str, Any], class_name: str = "h100") -> list[dict[str, str]]:
    svc = parse_inference_service(body)
    accel = CLASSES[class_name]
    obj = scaled_object(svc, class_name, accel, "http://prom:9090", classes=CLASSES)
    return [t["metadata"] for t in obj["spec"]["triggers"]]


def test_an_llm_service_is_triggered_on_its_vllm_arrivals_and_waiting_requests() -> None:
    rate, waiting = _triggers(_body())
    series = '{namespace="ml",service="chat"}'
    # Arrivals: first tokens plus the waiting queue's growth, over the stable window.
    assert f"rate(vllm:time_to_first_token_seconds_count{series}[60s])" in rate["query"]
    assert f"delta(vllm:num_requests_waiting{series}[60s])" in rate["query"]
    assert waiting["query"] == f"sum(vllm:num_requests_waiting{series})"
    assert "nv_inference" not in rate["query"] + waiting["query"]


def test_the_rate_threshold_is_the_llm_rules_capacity_with_keda_headroom() -> None:
    body = _body()
    spec = parse_inference_service(body).spec
    policy = llm_policy_from_spec(spec, classes=CLASSES)
    assert policy is not None
    per_replica = sizing(policy, "h100", policy.fallback_shape).per_replica
    rate, waiting = _triggers(body)
    assert float(rate["threshold"]) == round(per_replica * UTILISATION, 3)
    # What the request-level model gives the same service: milliseconds a request.
    request_level = rate_threshold(parse_inference_service(body), H100)
    assert float(rate["threshold"]) * 20 < request_level
    # The queue a replica clears within the 500-ms TTFT at that rate.
    assert int(waiting["threshold"]) == max(1, int(float(rate["threshold"]) * 0.5))


def test_a_looser_ttft_allows_a_longer_queue_and_never_a_lower_rate() -> None:
    tight = _triggers(_body({"latency": "20s", "ttft": "500ms", "tpot": "50ms"}))
    loose = _triggers(_body({"latency": "20s", "ttft": "3s", "tpot": "50ms"}))
    assert float(loose[0]["threshold"]) >= float(tight[0]["threshold"])
    assert int(loose[1]["threshold"]) > int(tight[1]["threshold"])


def test_target_queue_depth_sets_the_waiting_threshold() -> None:
    assert _triggers(_body(targetQueueDepth=3))[1]["threshold"] == "3"


def test_a_slower_class_is_given_a_lower_threshold() -> None:
    on_h100 = float(_triggers(_body(), "h100")[0]["threshold"])
    on_l4 = float(_triggers(_body(), "l4")[0]["threshold"])
    assert on_l4 < on_h100


def test_an_llm_service_without_token_objectives_keeps_the_request_level_trigger() -> None:
    # The builtin engine sizes it with the request-level rule too: one rule for both.
    (rate,) = _triggers(_body({"latency": "20s"}))
    assert rate["query"].startswith("sum(rate(nv_inference_request_success")


def test_a_stated_mix_of_long_prompts_lowers_the_thresholds() -> None:
    stated = _body()
    stated["spec"]["llm"]["expectedTokens"] = {"prompt": 6000, "output": 400}
    default_rate, default_waiting = _triggers(_body())
    long_rate, long_waiting = _triggers(stated)
    assert float(long_rate["threshold"]) < 0.5 * float(default_rate["threshold"])
    assert int(long_waiting["threshold"]) < int(default_waiting["threshold"])


def test_the_thresholds_follow_a_recorded_token_mix() -> None:
    svc = parse_inference_service(_body())
    default = scaled_object(svc, "h100", H100, "http://prom:9090", classes=CLASSES)
    mix = KedaTokenMix(LoadShape(6000.0, 20000.0, 400.0), per_replica=1.0)

    def thresholds(token_mix: KedaTokenMix) -> list[float]:
        so = scaled_object(
            svc, "h100", H100, "http://prom:9090", classes=CLASSES, token_mix=token_mix
        )
        return [float(t["metadata"]["threshold"]) for t in so["spec"]["triggers"]]

    before = [float(t["metadata"]["threshold"]) for t in default["spec"]["triggers"]]
    after = thresholds(mix)
    assert after[0] < 0.5 * before[0] and after[1] < before[1]
    # Engines measured at twice their modelled time costs serve fewer requests each.
    slower = thresholds(replace(mix, time_scale=2.0))
    assert slower[0] < 0.7 * after[0] and slower[1] <= after[1]


def test_a_new_per_replica_rate_queues_a_reconcile_and_a_new_message_does_not() -> None:
    def body(rate: float, message: str) -> dict[str, object]:
        record = {"requestsPerReplica": rate, "message": message, "time": message}
        return {"metadata": {"uid": "u", "generation": 2}, "status": {"kedaTokenMix": record}}

    assert what_queues(body(3.0, "a")) == what_queues(body(3.0, "b"))
    assert what_queues(body(3.0, "a")) != what_queues(body(2.0, "a"))


def test_only_a_keda_service_the_llm_rule_sizes_has_its_mix_measured() -> None:
    assert mix_measured(parse_inference_service(_body()).spec)
    builtin = _body()
    builtin["spec"]["scaling"]["engine"] = "builtin"
    assert not mix_measured(parse_inference_service(builtin).spec)
    # Without a token objective the request-level rule sizes it, under either engine.
    assert not mix_measured(parse_inference_service(_body({"latency": "20s"})).spec)
