"""Printer columns take their type from the field they show, and name a path the schema
lacks instead of printing an empty column."""

from __future__ import annotations

import pytest

from gpuserve.api import crdgen


def _root() -> crdgen.JSON:
    crd = crdgen.inference_service_crd()
    root: crdgen.JSON = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".status.replicas", "integer"),
        (".status.p95Ms", "number"),
        ('.status.conditions[?(@.type=="Ready")].status', "string"),
        (".spec.accelerators.classes", "string"),  # a list prints as text
        (".metadata.creationTimestamp", "date"),
    ],
)
def test_column_type_is_the_field_type(path: str, expected: str) -> None:
    assert crdgen._printer_type(_root(), path) == expected


def test_a_column_on_a_missing_field_is_refused() -> None:
    with pytest.raises(crdgen.SchemaError, match=r"\.status\.replica: .* no replica"):
        crdgen._printer_type(_root(), ".status.replica")
