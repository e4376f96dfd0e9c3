"""Generate the CustomResourceDefinitions from the pydantic models.

pydantic emits JSON Schema 2020-12; the API server wants a structural OpenAPI v3 schema.
The conversion inlines $refs, folds ``anyOf [X, null]`` into X (optional means "not in
required"), drops titles and null defaults, and turns numeric exclusive bounds into the
boolean form OpenAPI v3.0 uses. Every property must carry a description: that is
checked here, so ``kubectl explain`` documents every field.

Usage: ``python -m gpuserve.api.crdgen --out crds [--check]``
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gpuserve.api.generated import write_or_check
from gpuserve.api.models import (
    CLASSES_PLURAL,
    GROUP,
    SERVICE_NAME_MESSAGE,
    SERVICE_NAME_PATTERN,
    SERVICES_PLURAL,
    VERSION,
    AcceleratorClassSpec,
    InferenceServiceSpec,
)
from gpuserve.api.status import AcceleratorClassStatus, InferenceServiceStatus

JSON = dict[str, Any]

_DROP_KEYS = {"title"}


class SchemaError(ValueError):
    """A model cannot be expressed as a structural schema (e.g. a field lacks a description)."""


def _resolve(node: Any, defs: JSON) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return _resolve(merged, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _fold_optional(node: JSON) -> JSON:
    """anyOf [X, {type: null}] -> X, keeping the outer description and default."""
    variants = node.get("anyOf")
    if not variants:
        return node
    non_null = [v for v in variants if v.get("type") != "null"]
    if len(non_null) != 1:
        raise SchemaError(f"unions are not structural: {variants}")
    outer = {k: v for k, v in node.items() if k != "anyOf"}
    return {**non_null[0], **outer}


def _structural(node: JSON, path: str) -> JSON:
    node = _fold_optional(node)
    out: JSON = {}
    for key, value in node.items():
        if key in _DROP_KEYS or (key == "default" and value is None):
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum"):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        out[key] = value
    if out.get("type") == "object" and "properties" in out:
        props: JSON = {}
        for name, prop in out["properties"].items():
            child = _structural(prop, f"{path}.{name}")
            if not child.get("description"):
                raise SchemaError(f"{path}.{name} has no description")
            props[name] = child
        out["properties"] = props
        out.pop("additionalProperties", None)
    elif out.get("type") == "object" and isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(out["additionalProperties"], f"{path}[*]")
    if out.get("type") == "array" and isinstance(out.get("items"), dict):
        out["items"] = _structural(out["items"], f"{path}[]")
    return out


def openapi_schema(model: type[BaseModel]) -> JSON:
    """Structural OpenAPI v3 schema of a model's validation form."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _structural(_resolve(raw, defs), model.__name__)


def _status_schema(model: type[BaseModel]) -> JSON:
    schema = openapi_schema(model)
    # kopf keeps its handler progress and diff base here (not in annotations, so GitOps
    # tools see no drift); its shape is kopf's business.
    schema["properties"]["kopf"] = {
        "type": "object",
        "description": "Operator-internal progress (kopf); not part of the API.",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return schema


# Every list shows the object's age between its own columns and the wide ones.
_AGE_PATH = ".metadata.creationTimestamp"


def _printer_type(root: JSON, json_path: str) -> str:
    """The column type of the field at ``json_path``, read from the CRD's own schema so a
    column cannot disagree with the field it shows (kubectl prints a list as text)."""
    if json_path == _AGE_PATH:
        return "date"  # metadata is the API server's: the schema does not describe it
    node = root
    # A filter such as conditions[?(@.type=="Ready")] selects items of the list.
    for step in re.sub(r"\[[^\]]*\]", "[]", json_path).strip(".").split("."):
        name = step.removesuffix("[]")
        try:
            node = node["properties"][name]
            if step != name:
                node = node["items"]
        except KeyError:
            raise SchemaError(f"printer column {json_path}: the schema has no {name}") from None
    kind: str = node["type"]
    return "string" if kind == "array" else kind


def _printer_columns(root: JSON, shown: dict[str, str], wide: dict[str, str]) -> list[JSON]:
    """Column name -> JSONPath, in order, then the age; the ``wide`` columns are the ones
    `kubectl get -o wide` adds (priority 1)."""
    columns = [
        {"name": name, "type": _printer_type(root, path), "jsonPath": path}
        for name, path in [*shown.items(), ("Age", _AGE_PATH), *wide.items()]
    ]
    return [{**c, "priority": 1} if c["name"] in wide else c for c in columns]


def _crd(
    *,
    kind: str,
    plural: str,
    scope: str,
    short_names: list[str],
    spec_model: type[BaseModel],
    status_model: type[BaseModel],
    columns: dict[str, str],
    wide_columns: dict[str, str],
    description: str,
    root_rules: list[JSON] | None = None,
) -> JSON:
    spec_schema = openapi_schema(spec_model)
    spec_schema["description"] = description
    root: JSON = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        **({"x-kubernetes-validations": root_rules} if root_rules else {}),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # name declared so a rule's fieldPath may point at it
            # (the only metadata field a CRD schema may describe).
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
            },
            "spec": spec_schema,
            "status": _status_schema(status_model),
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "gpuserve"},
        },
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["gpuserve"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(root, columns, wide_columns),
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def inference_service_crd() -> JSON:
    return _crd(
        kind="InferenceService",
        plural=SERVICES_PLURAL,
        scope="Namespaced",
        short_names=["gsvc", "gpusvc"],
        spec_model=InferenceServiceSpec,
        status_model=InferenceServiceStatus,
        # Rules at the root may read metadata.name: it names the Service child.
        root_rules=[
            {
                "rule": "size(self.metadata.name) <= 63 && "
                f"self.metadata.name.matches('{SERVICE_NAME_PATTERN}')",
                "message": SERVICE_NAME_MESSAGE,
                # Without it the error of a rule at the root has no path (`<nil>:`).
                "fieldPath": ".metadata.name",
            }
        ],
        description="A model served by NVIDIA Triton on GPUs, with its precision, batching "
        "window, latency SLO, GPU preferences, scaling bounds and warm pool.",
        columns={
            "Ready": '.status.conditions[?(@.type=="Ready")].status',
            "Replicas": ".status.replicas",
            "Warm": ".status.warmReplicas",
            "GPU": ".status.accelerators",
            # kubectl prints a number column bare: the unit goes into the name.
            "P95(ms)": ".status.p95Ms",
            "SLO": ".spec.slo.latency",
        },
        wide_columns={
            "Desired": ".status.desiredReplicas",
            "WarmPool": ".spec.scaling.warmPool",
            "Classes": ".spec.accelerators.classes",
            "Tier": ".spec.tier",
            "Decision": ".status.lastDecision.reason",
        },
    )


def accelerator_class_crd() -> JSON:
    return _crd(
        kind="AcceleratorClass",
        plural=CLASSES_PLURAL,
        scope="Cluster",
        short_names=["accel"],
        spec_model=AcceleratorClassSpec,
        status_model=AcceleratorClassStatus,
        description="A platform team's named kind of GPU capacity: which nodes, which "
        "extended resource, how fast and how costly.",
        columns={
            "Product": ".spec.gpuProduct",
            "MIG": ".spec.mig.profile",
            "Speed": ".spec.relativeSpeed",
            "Cost/h": ".spec.costPerHour",
            "Capacity": ".status.capacity",
        },
        wide_columns={"Nodes": ".status.nodes", "Allocated": ".status.allocated"},
    )


def render_all() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    out: dict[str, str] = {}
    for crd in (inference_service_crd(), accelerator_class_crd()):
        name = f"{crd['metadata']['name']}.yaml"
        # A leading document marker keeps `helm show crds` output (files joined as-is)
        # a valid multi-document stream.
        out[name] = (
            "---\n# Generated by `make crds` from gpuserve/api; do not edit.\n"
            + yaml.safe_dump(crd, sort_keys=False, width=100)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("crds"), help="output directory")
    parser.add_argument(
        "--check", action="store_true", help="fail if the files differ from the models"
    )
    args = parser.parse_args(argv)
    files = {args.out / name: text for name, text in render_all().items()}
    return write_or_check(files, check=args.check, what="crds", make_target="crds")

if __name__ == "__main__":
    sys.exit(main())
