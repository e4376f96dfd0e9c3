"""The operator's parser rejects every invalid manifest of the shared table, naming the field."""

from __future__ import annotations

import re
from typing import get_args

import pytest
from pydantic import ValidationError

from e2e.invalid_cases import CASES, Case, valid_class, valid_llm_service, valid_service
from gpuserve.api.models import (
    LLM_FORMATS,
    PRECISIONS_BY_FORMAT,
    BatchingSpec,
    Precision,
    parse_accelerator_class,
    parse_inference_service,
    precision_message,
)


def _parse(case: Case) -> None:
    body = case.body("x")
    if case.kind == "InferenceService":
        parse_inference_service(body)
    else:
        parse_accelerator_class(body)


def test_valid_bodies_parse() -> None:
    svc = parse_inference_service(valid_service())
    assert svc.spec.batching.max_batch_size == 8
    assert svc.spec.scaling.engine == "builtin"
    assert parse_accelerator_class(valid_class()).spec.resource == "nvidia.com/gpu"


def test_table_has_at_least_25_cases() -> None:
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_invalid_case_is_rejected_naming_the_field(case: Case) -> None:
    with pytest.raises(ValidationError) as info:
        _parse(case)
    leaf = case.field.split(".")[-1].split("[")[0]
    text = str(info.value)
    assert leaf in text, f"{case.id}: error does not name {leaf}: {text}"


@pytest.mark.parametrize("fmt", list(PRECISIONS_BY_FORMAT))
def test_each_format_takes_exactly_the_precisions_of_the_table(fmt: str) -> None:
    for precision in get_args(Precision):
        body = valid_llm_service(model_format=fmt) if fmt in LLM_FORMATS else valid_service()
        body["spec"]["model"]["format"] = fmt
        body["spec"]["precision"] = precision
        if precision in PRECISIONS_BY_FORMAT[fmt].allowed:
            assert parse_inference_service(body).spec.precision == precision
        else:
            with pytest.raises(ValidationError, match=re.escape(precision_message(fmt))):
                parse_inference_service(body)


def test_empty_preferred_batch_sizes_are_accepted_and_documented() -> None:
    body = valid_service()
    body["spec"]["batching"]["preferredBatchSizes"] = []
    assert parse_inference_service(body).spec.batching.preferred_batch_sizes == []
    described = BatchingSpec.model_fields["preferred_batch_sizes"].description or ""
    assert "Empty" in described and "largest batch" in described


def test_auto_warm_pool_is_accepted_on_builtin_and_bounded_by_max_replicas() -> None:
    body = valid_service()
    body["spec"]["scaling"] = {"warmPoolMode": "auto", "maxReplicas": 6}
    scaling = parse_inference_service(body).spec.scaling
    assert scaling.warm_pool_mode == "auto"
    assert scaling.warm_pool_ceiling == 6
    body["spec"]["scaling"]["warmPool"] = 2
    assert parse_inference_service(body).spec.scaling.warm_pool_ceiling == 2


def test_response_cache_stays_allowed_on_non_llm_formats() -> None:
    body = valid_service()
    body["spec"]["triton"] = {"responseCache": True}
    assert parse_inference_service(body).spec.triton.response_cache
