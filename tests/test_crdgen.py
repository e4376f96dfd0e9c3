"""The generated CRDs are structural, documented, and match the committed files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuserve.api import crdgen

REPO = Path(__file__).resolve().parents[1]


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, prop in schema.get("properties", {}).items():
        out += _walk(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _walk(schema["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize(
    "crd",
    [crdgen.inference_service_crd(), crdgen.accelerator_class_crd()],
    ids=lambda c: c["spec"]["names"]["kind"],
)
def test_spec_schema_is_structural_and_documented(crd: dict[str, Any]) -> None:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for path, node in _walk(spec, "spec"):
        assert "type" in node, f"{path} has no type"
        for banned in ("anyOf", "$ref", "allOf", "oneOf", "title"):
            assert banned not in node, f"{path} carries {banned}"
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if path.count(".") >= 1 and not path.endswith("[]") and not path.endswith("{}"):
            assert node.get("description"), f"{path} has no description"


def test_committed_crds_match_the_models() -> None:
    for name, text in crdgen.render_all().items():
        assert (REPO / "crds" / name).read_text() == text, f"crds/{name} is stale: make crds"


def test_check_mode_detects_drift(tmp_path: Path) -> None:
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 0
    victim = next(tmp_path.glob("inferenceservices*.yaml"))
    victim.write_text(victim.read_text().replace("maxBatchSize", "maxBatchSz"))
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1


def test_printer_columns_and_names() -> None:
    crd = crdgen.inference_service_crd()
    names = crd["spec"]["names"]
    assert "isvc" not in names["shortNames"]
    cols = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert cols == ["Ready", "Replicas", "Warm", "GPU", "P95", "SLO", "Age"]
    assert yaml.safe_load(crdgen.render_all()[f"{crd['metadata']['name']}.yaml"]) == crd


def test_nested_objects_default_in_full_so_cel_can_read_them() -> None:
    spec = crdgen.inference_service_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["spec"]
    assert spec["properties"]["scaling"]["default"]["minReplicas"] == 1
    assert spec["properties"]["batching"]["default"]["maxQueueDelay"] == "0ms"
    assert spec["properties"]["triton"]["default"]["resources"] == {"cpu": "2", "memory": "8Gi"}
