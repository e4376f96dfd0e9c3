"""Prometheus instant vectors as the autoscaler reads them: per service, and per pod."""

from __future__ import annotations

import math

from controllers.prometheus_source import _by_pod, _by_service


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
