"""The generated CRDs are structural, documented, and match the committed files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from gpuserve.api import crdgen, models
from gpuserve.api.durations import DURATION_PATTERN

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
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    default = [c["name"] for c in columns if not c.get("priority")]
    assert default == ["Ready", "Replicas", "Warm", "GPU", "P95(ms)", "SLO", "Age"]
    # -o wide adds columns, each reading a field the schema has.
    wide = [c["jsonPath"] for c in columns if c.get("priority") == 1]
    assert len(wide) >= 3
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path in wide:
        node = schema
        for key in path.strip(".").split("."):
            node = node["properties"][key]
        assert node.get("description"), path
    assert yaml.safe_load(crdgen.render_all()[f"{crd['metadata']['name']}.yaml"]) == crd


def test_nested_objects_default_in_full_so_cel_can_read_them() -> None:
    spec = crdgen.inference_service_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]["spec"]
    assert spec["properties"]["scaling"]["default"]["minReplicas"] == 1
    assert spec["properties"]["batching"]["default"]["maxQueueDelay"] == "0ms"
    assert spec["properties"]["triton"]["default"]["resources"] == {"cpu": "2", "memory": "8Gi"}


def _rules(crd: dict[str, Any], path: str) -> list[dict[str, Any]]:
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in path.split("."):
        node = node["properties"][key]
    rules: list[dict[str, Any]] = node.get("x-kubernetes-validations", [])
    return rules


def test_precision_rules_are_generated_from_the_one_table() -> None:
    rules = [
        r for r in _rules(crdgen.inference_service_crd(), "spec") if r["fieldPath"] == ".precision"
    ]
    restricted = [
        fmt
        for fmt, table in models.PRECISIONS_BY_FORMAT.items()
        if set(table.allowed) != set(get_args(models.Precision))
    ]
    assert "python" in restricted and len(rules) == len(restricted)
    for fmt, rule in zip(restricted, rules, strict=True):
        allowed = models.PRECISIONS_BY_FORMAT[fmt].allowed
        assert rule["rule"].startswith(f"self.model.format != '{fmt}' ||")
        assert all(f"'{p}'" in rule["rule"] for p in allowed)
        assert rule["message"] == models.precision_message(fmt)


def test_duration_rules_skip_values_the_schema_rejects() -> None:
    """A CEL rule calling duration() first checks the schema's pattern on each operand, so a
    malformed value gets the schema's error only."""
    for rule in _rules(crdgen.inference_service_crd(), "spec"):
        for operand in re.findall(r"duration\((self[.\w]+)\)", rule["rule"]):
            guard = f"!{operand}.matches(r'{DURATION_PATTERN}') ||"
            assert guard in rule["rule"], (operand, rule["rule"])


def test_root_rule_names_its_field() -> None:
    for rule in crdgen.inference_service_crd()["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]["x-kubernetes-validations"]:
        assert rule["fieldPath"] == ".metadata.name"
