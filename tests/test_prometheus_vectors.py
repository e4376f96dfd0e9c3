"""Prometheus instant vectors as the autoscaler reads them: per service, and per pod."""

from __future__ import annotations

import math

from controllers.prometheus_source import _by_pod, _by_service, _vllm_samples


def entry(value: str, **labels: str) -> dict[str, object]:
    return {"metric": {"namespace": "ns", "service": "svc", **labels}, "value": [0, value]}


def test_per_pod_queues_keep_finite_values_and_drop_malformed_entries() -> None:
    result = [
        entry("412", pod="a"),
        entry("0", pod="b"),
        entry("NaN", pod="c"),
        entry("+Inf", pod="d"),
        entry("3"),  # no pod label
        {"metric": {"pod": "e"}, "value": [0, "1"]},  # no service
        "not an entry",
    ]
    assert _by_pod(result) == {("ns", "svc"): {"a": 412.0, "b": 0.0}}
    assert _by_pod(None) == {}


def test_per_service_values_keep_nan_and_turn_infinity_to_none() -> None:
    found = _by_service([entry("+Inf"), {"metric": {}, "value": [0, "1"]}])
    assert found == {("ns", "svc"): None}
    nan = _by_service([entry("NaN")])[("ns", "svc")]
    assert nan is not None and math.isnan(nan)


def test_a_vllm_series_scraped_under_the_old_and_new_role_counts_once() -> None:
    def series(value: str, role: str, pod: str = "a") -> dict[str, object]:
        labels = {"__name__": "vllm:request_success_total", "pod": pod, "role": role}
        return entry(value, **labels)

    # A promotion: the pod's counter under role warm (last scrape) and serving (new target).
    found = _vllm_samples(
        [series("40", "warm"), series("41", "serving"), series("7", "serving", "b")]
    )
    assert len(found) == 2  # a's two series are one
    by_pod = {labels["pod"]: value for _, (_, labels, value) in found}
    assert by_pod == {"a": 41.0, "b": 7.0}
    assert all("role" not in labels for _, (_, labels, _) in found)
