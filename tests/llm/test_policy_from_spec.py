"""The LLM scaling policy read from an InferenceService spec."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.invalid_cases import valid_llm_service
from gpuserve.api.models import InferenceServiceSpec
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.llm.capacity import LoadShape, default_shape
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.from_spec import UNSET_OBJECTIVE_S, llm_policy_from_spec

REPO_ROOT = Path(__file__).resolve().parents[2]


def _spec(example: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / example).read_text())["spec"]
    return spec


def test_the_vllm_example_gives_its_objectives_bounds_and_engine_limits() -> None:
    policy = llm_policy_from_spec(InferenceServiceSpec.model_validate(_spec("llama-vllm.yaml")))
    assert policy is not None
    assert (policy.objectives.ttft_s, policy.objectives.tpot_s) == pytest.approx((0.8, 0.06))
    assert policy.objectives.quantile == pytest.approx(0.95)
    assert (policy.min_replicas, policy.max_replicas) == (1, 8)
    assert policy.params.max_running == 128 and policy.params.max_model_len == 8192


def test_one_objective_alone_leaves_the_other_unbinding_and_none_gives_no_policy() -> None:
    raw = _spec("llama-vllm.yaml")
    only_ttft = copy.deepcopy(raw)
    del only_ttft["slo"]["tpot"]
    policy = llm_policy_from_spec(InferenceServiceSpec.model_validate(only_ttft))
    assert policy is not None and policy.objectives.tpot_s == UNSET_OBJECTIVE_S
    neither = copy.deepcopy(only_ttft)
    del neither["slo"]["ttft"]
    assert llm_policy_from_spec(InferenceServiceSpec.model_validate(neither)) is None


def test_a_non_llm_service_has_no_llm_policy() -> None:
    spec = InferenceServiceSpec.model_validate(_spec("resnet50-onnx-fp16.yaml"))
    assert llm_policy_from_spec(spec) is None


def test_policies_built_without_a_spec_scale_down_as_the_api_default_does() -> None:
    # Benchmarks and the simulator build policies from the dataclasses' defaults; those
    # must be the operator's, or the figures describe a setting no user has.
    raw = _spec("llama-vllm.yaml")
    assert "scaleDownStabilization" not in raw["scaling"]
    from_spec = llm_policy_from_spec(InferenceServiceSpec.model_validate(raw))
    assert from_spec is not None
    bare = LLMPolicy(from_spec.objectives)
    assert bare.scale_down_window_s == from_spec.scale_down_window_s
    request = policy_config_from_spec(
        InferenceServiceSpec.model_validate(_spec("resnet50-onnx-fp16.yaml"))
    )
    bare_request = PolicyConfig(profile=request.profile, slo_latency=request.slo_latency)
    assert bare_request.scale_down_window == request.scale_down_window


def test_the_expected_token_mix_is_what_the_rule_sizes_for_before_a_measurement() -> None:
    body = valid_llm_service("chat")
    spec = InferenceServiceSpec.model_validate(body["spec"])
    policy = llm_policy_from_spec(spec)
    assert policy is not None and policy.fallback_shape == default_shape()
    body["spec"]["llm"]["expectedTokens"] = {"prompt": 3000, "output": 300}
    stated = llm_policy_from_spec(InferenceServiceSpec.model_validate(body["spec"]))
    assert stated is not None
    # The prompt at the percentile: four times the mean, within the context (8,192) less
    # the output.
    assert stated.fallback_shape == LoadShape(3000.0, 7892.0, 300.0)
    body["spec"]["llm"]["expectedTokens"]["promptHigh"] = 5000
    high = llm_policy_from_spec(InferenceServiceSpec.model_validate(body["spec"]))
    assert high is not None and high.fallback_shape.prompt_high == 5000.0
