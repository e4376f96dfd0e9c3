"""docs/api.md: every spec field documented, current with the models, drift detected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuserve.api import crdgen, docgen

REPO = Path(__file__).resolve().parents[1]


def _field_paths(node: dict[str, Any], path: str) -> list[str]:
    out = [path]
    for name, child in node.get("properties", {}).items():
        out += _field_paths(child, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict):
        for name, child in items.get("properties", {}).items():
            out += _field_paths(child, f"{path}[].{name}")
    return out


def test_every_spec_field_has_a_row_with_its_description() -> None:
    text = docgen.render()
    for crd in (crdgen.inference_service_crd(), crdgen.accelerator_class_crd()):
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for path in _field_paths(spec, "spec")[1:]:
            start = f"| `{path}` |"
            row = next((line for line in text.splitlines() if line.startswith(start)), None)
            assert row is not None, f"{crd['spec']['names']['kind']} {path} is not documented"
            assert row.count(" | ") >= 4 and not row.rstrip().endswith("|  |"), row


def test_defaults_constraints_and_rules_are_shown() -> None:
    text = docgen.render()
    row = next(line for line in text.splitlines() if line.startswith("| `spec.scaling.warmPool` |"))
    assert "`0`" in row and ">= 0; <= 64" in row
    assert "warmPool: must be &lt;= maxReplicas" in text
    assert "precision: python models run" in text


def test_committed_reference_is_current_and_drift_fails(tmp_path: Path) -> None:
    assert (REPO / "docs" / "api.md").read_text() == docgen.render(), "run `make api-docs`"
    out = tmp_path / "api.md"
    assert docgen.main(["--out", str(out)]) == 0
    assert docgen.main(["--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace("warmPool", "warmPools"))
    assert docgen.main(["--out", str(out), "--check"]) == 1
