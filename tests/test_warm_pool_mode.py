"""What the operator sizes the warm pool to: the spec's number, or the autoscaler's."""

from __future__ import annotations

from typing import Any

from controllers.converging import wanted_warm_pool
from e2e.invalid_cases import valid_service
from gpuserve.api.models import parse_inference_service
from gpuserve.api.status import InferenceServiceStatus


def service(**scaling: Any) -> Any:
    body = valid_service("chat")
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 6, **scaling}
    return parse_inference_service(body)


def test_a_fixed_pool_is_the_spec_whatever_the_autoscaler_said() -> None:
    status = InferenceServiceStatus(desired_warm_pool=4)
    assert wanted_warm_pool(service(warmPool=2), status) == 2


def test_an_auto_pool_follows_the_autoscaler_within_its_ceiling() -> None:
    auto = service(warmPool=3, warmPoolMode="auto")
    # Before the autoscaler's first decision: no standby pods.
    assert wanted_warm_pool(auto, InferenceServiceStatus()) == 0
    assert wanted_warm_pool(auto, InferenceServiceStatus(desired_warm_pool=2)) == 2
    assert wanted_warm_pool(auto, InferenceServiceStatus(desired_warm_pool=5)) == 3
    # warmPool 0 with auto: the ceiling is maxReplicas.
    open_ended = service(warmPool=0, warmPoolMode="auto")
    assert wanted_warm_pool(open_ended, InferenceServiceStatus(desired_warm_pool=9)) == 6
