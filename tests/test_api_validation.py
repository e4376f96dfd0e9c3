"""The operator's parser rejects every invalid manifest of the shared table, naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from e2e.invalid_cases import CASES, Case, valid_class, valid_service
from gpuserve.api.models import parse_accelerator_class, parse_inference_service


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
