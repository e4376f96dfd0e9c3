"""The fields the fuzz test mutates and the values it tries, read from the CRD schemas that
the pydantic models generate: a field added to the API is fuzzed without anyone listing it.

What is kept by hand is small: values only a person knows to be interesting (a class that
exists, a quantity the pattern allows but Kubernetes refuses) and the fields left out on
purpose, each with its reason. tests/test_fuzz_fields.py fails when a schema field is
neither fuzzed nor excluded, when a hand-kept entry names a field the schema no longer
has, or when a mutation cannot reach a field of the base bodies.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from e2e.invalid_cases import valid_class, valid_service
from gpuserve.api.crdgen import accelerator_class_crd, inference_service_crd

Obj = dict[str, Any]
Schema = dict[str, Any]
SERVICE = "InferenceService"
CLASS = "AcceleratorClass"

# Values near the valid ones that the schema alone does not suggest, per field ([n]
# indexes a list). They are tried on top of the values read from the schema's limits.
SERVICE_NEAR: dict[str, list[Any]] = {
    "spec": [None, "spec", [], {}],
    "spec.model": [{}, {"name": "m"}],
    "spec.model.name": ["sleeper.v2", "-x", "a/b", "x" * 63, "x" * 64],
    "spec.model.storageUri": ["s3://b/p", "pvc://claim", "pvc://claim/p", "http://x", "demo://"],
    "spec.model.format": [
        "onnx", "tensorrt", "pytorch", "tensorflow", "vllm", "tensorrtllm", "caffe", "ONNX"
    ],
    "spec.model.version": [0, 1, -1, 2**31],
    "spec.model.storageSecretRef": [{"name": "creds"}, {"name": ""}, {}, "creds"],
    "spec.model.inputs": [[], [{"name": "x", "dataType": "FP32", "dims": [1]}] * 33],
    "spec.model.inputs[0].dims": [[], [0], [-1], [-2], [1] * 9, [2**40]],
    "spec.model.inputs[0].dataType": ["FP32", "fp32", "FP128", "STRING"],
    "spec.model.inputs[0].name": ["", "x" * 129],
    "spec.model.outputs": [[]],
    "spec.model.parameters": [{"k": "v"}, {"k": 1}, {f"k{i}": "v" for i in range(65)}],
    "spec.precision": ["fp16", "bf16", "int8", "fp8", "fp64", "FP16"],
    "spec.batching": [{}, None],
    "spec.batching.maxBatchSize": [0, 1, 4096, 4097, -1],
    "spec.batching.preferredBatchSizes": [[], [0], [8, 8], [9], list(range(1, 18))],
    "spec.batching.maxQueueDelay": ["0ms", "49ms", "50ms", "100us", "1m", "1.5ms"],
    "spec.batching.priorityLevels": [0, 1, 16, 17],
    "spec.batching.defaultPriorityLevel": [0, 1, 2, 17],
    "spec.batching.queuePolicy": [{}, {"timeout": "1ms"}, {"timeoutAction": "Delay"}],
    "spec.batching.queuePolicy.maxQueueSize": [0, 1_000_000, 1_000_001],
    "spec.slo": [{}, {"latency": "1s"}],
    "spec.slo.latency": ["1us", "3ms", "1h", "0ms"],
    "spec.slo.percentile": [50, 90, 95, 99, 99.9, 100, "95"],
    "spec.accelerators.classes": [[], ["l4"], ["ghost"], ["h100", "h100"], ["a100-1g10gb"],
                                  ["a100-3g40gb", "l4", "h100", "a100-1g10gb"], ["x" * 64]],
    "spec.accelerators.gpusPerPod": [0, 1, 2, 8, 9],
    "spec.scaling": [{}, {"minReplicas": 1}],
    "spec.scaling.minReplicas": [0, 1, 2, 1000, 1001],
    "spec.scaling.maxReplicas": [0, 1, 1000, 1001],
    "spec.scaling.warmPool": [0, 1, 64, 65],
    "spec.scaling.engine": ["builtin", "keda", "hpa"],
    "spec.scaling.mode": ["active", "advisory", "passive"],
    "spec.scaling.targetQueueDepth": [0, 1, 100_000, 100_001],
    "spec.scaling.planningPercentile": [49.9, 50, 99.99, 100, "p99"],
    "spec.scaling.scaleDownStabilization": ["0s", "10m", "forever"],
    "spec.tier": ["interactive", "batch", "realtime"],
    "spec.triton": [{}, None],
    "spec.triton.image": ["", "img", "x" * 513, "registry:5000/img@sha256:abc"],
    "spec.triton.args": [["--log-verbose=1"], ["a"] * 33, [""]],
    "spec.triton.resources.cpu": ["500m", "2", "0.5", "lots", "-1", "1Ki"],
    "spec.triton.resources.memory": ["8Gi", "1e3", "lots", "8GB"],
    "spec.triton.responseCache": [True, "yes"],
    "spec.triton.responseCacheSize": ["1Gi", "1GB", "0"],
    "spec.triton.instanceCount": [0, 1, 16, 17],
    "spec.triton.exitTimeoutSeconds": [0, 1, 3600, 3601],
    "spec.triton.pod.tolerations": [[{"key": "a", "operator": "Exists"}],
                                    [{"key": "a", "tolerationSeconds": 5}],
                                    [{"operator": "Equal", "value": "v"}]],
    "spec.triton.pod.nodeSelector": [{"zone": "a"}, {"bad key!": "v"}, {"k": "bad value!"}],
    "spec.triton.pod.serviceAccountName": ["sa", "Bad_SA", ""],
    "spec.triton.pod.imagePullSecrets": [[{"name": "pull"}], [{}], [{"name": ""}]],
}
CLASS_NEAR: dict[str, list[Any]] = {
    "spec": [None, {}, "spec"],
    "spec.gpuProduct": ["NVIDIA-L4", "", "bad product", "x" * 64],
    "spec.mig": [{}, {"profile": "1g.10gb"}, {"profile": "1g.10gb", "strategy": "single"},
                 {"profile": "8g.80gb"}, {"profile": "3g.40gb+me"}],
    "spec.resourceName": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "gpu", "a/b/c"],
    "spec.nodeLabels": [{"zone": "a"}, {"bad key!": "v"}],
    "spec.computeCapability": ["8.0", "10.0", "8", "eight", "9.0.1"],
    "spec.memoryGiB": [0, 1, 1024, 1025],
    "spec.relativeSpeed": [0, 0.001, 100, 100.5, -1],
    "spec.costPerHour": [0, -0.01, 10_000, 10_001],
}
NEAR: dict[str, dict[str, list[Any]]] = {SERVICE: SERVICE_NEAR, CLASS: CLASS_NEAR}
# Fuzzed although the CRD schema cannot describe them (metadata is the API server's).
OUTSIDE_SCHEMA: dict[str, dict[str, list[Any]]] = {
    SERVICE: {"metadata.labels": [{"a": "b"}, {"bad key!": "v"}]},
    CLASS: {},
}
# Schema fields the fuzz test leaves alone: path -> why. Empty today; an entry needs a
# reason a reviewer accepts (a field whose mutation would harm the shared cluster, say).
EXCLUDED: dict[str, dict[str, str]] = {SERVICE: {}, CLASS: {}}


def spec_schema(kind: str) -> Schema:
    """The OpenAPI schema of ``spec`` as the CRD generator writes it from the models now."""
    crd = inference_service_crd() if kind == SERVICE else accelerator_class_crd()
    root: Schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec: Schema = root["properties"]["spec"]
    return spec


def schema_fields(node: Schema, path: str = "spec") -> dict[str, Schema]:
    """Every field at and below ``path``: an object's properties by name, an array's items
    as ``[0]``. A map (additionalProperties) is one field: its keys are the user's data."""
    fields = {path: node}
    for name, child in (node.get("properties") or {}).items():
        fields.update(schema_fields(child, f"{path}.{name}"))
    items = node.get("items")
    if isinstance(items, dict):
        fields.update(schema_fields(items, f"{path}[0]"))
    return fields


def _example(node: Schema) -> Any:
    """A value of the node's type, valid where the schema is simple."""
    if "default" in node:
        return node["default"]
    if node.get("enum"):
        return node["enum"][0]
    kind = node.get("type")
    if kind in ("integer", "number"):
        low = node.get("minimum", 1)
        return low + 1 if node.get("exclusiveMinimum") else low
    return {"string": "x", "boolean": True, "array": [], "object": {}}.get(str(kind))


def _off_enum(enum: list[Any]) -> list[Any]:
    """Values next to an enum's: another case, an unknown word, the wrong type."""
    first = enum[0]
    if isinstance(first, str):
        return [v for v in (first.upper(), first.capitalize(), "fuzz-unknown") if v not in enum]
    return [max(enum) + 1, str(first)]


def _number_limits(node: Schema) -> list[Any]:
    step = 1 if node.get("type") == "integer" else 0.5
    values: list[Any] = []
    if "minimum" in node:
        values += [node["minimum"], node["minimum"] - step]
    if "maximum" in node:
        values += [node["maximum"], node["maximum"] + step]
    if not values:
        values = [0, -1, 2**31]
    if step == 1:
        values.append(values[0] + 0.5)  # not an integer
    return values


def _string_limits(node: Schema) -> list[Any]:
    values: list[Any] = ["", " "]  # a blank breaks any pattern that forbids spaces
    low = node.get("minLength", 0)
    if low > 1:
        values.append("x" * (low - 1))
    if "maxLength" in node:
        values += ["x" * node["maxLength"], "x" * (node["maxLength"] + 1)]
    return values


def _array_limits(node: Schema) -> list[Any]:
    item = _example(node.get("items") or {})
    values: list[Any] = [[], [item]]
    if "maxItems" in node:
        values.append([item] * (node["maxItems"] + 1))
    if node.get("x-kubernetes-list-type") == "set":
        values.append([item, item])
    return values


def _object_limits(node: Schema) -> list[Any]:
    values: list[Any] = [{}, None]
    if "additionalProperties" in node:
        values += [{"k": "v"}, {"k": 1}, {"bad key!": "v"}]
        if "maxProperties" in node:
            values.append({f"k{i}": "v" for i in range(node["maxProperties"] + 1)})
    return values


def limit_values(node: Schema) -> list[Any]:
    """Values on and just past the limits the schema states for a field. Empty for a shape
    it does not know (no ``type``): such a field needs hand-kept values or an exclusion."""
    values: list[Any] = [node["default"]] if "default" in node else []
    if node.get("enum"):
        return values + list(node["enum"]) + _off_enum(list(node["enum"]))
    by_type = {"integer": _number_limits, "number": _number_limits, "string": _string_limits,
               "array": _array_limits, "object": _object_limits}
    kind = node.get("type")
    if kind == "boolean":
        return [*values, True, False, "true"]
    if kind in by_type:
        return values + by_type[str(kind)](node)
    return values


def _distinct(values: Iterable[Any]) -> list[Any]:
    seen: set[str] = set()
    out: list[Any] = []
    for value in values:
        key = json.dumps(value, sort_keys=True, default=repr)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out


def fuzz_table(kind: str, schema: Schema | None = None) -> dict[str, list[Any]]:
    """Path -> the near values of every field the fuzz test mutates for ``kind``."""
    near, excluded = NEAR[kind], EXCLUDED[kind]
    table: dict[str, list[Any]] = {}
    for path, node in schema_fields(schema or spec_schema(kind)).items():
        values = _distinct([*limit_values(node), *near.get(path, [])])
        if path not in excluded and values:
            table[path] = values
    table.update(OUTSIDE_SCHEMA[kind])
    return table


def unfuzzed(kind: str, schema: Schema | None = None) -> list[str]:
    """Schema fields that are neither fuzzed nor excluded with a reason."""
    table = fuzz_table(kind, schema)
    reasons = EXCLUDED[kind]
    return [path for path in schema_fields(schema or spec_schema(kind))
            if path not in table and not reasons.get(path, "").strip()]


def stale_entries(kind: str) -> list[str]:
    """Hand-kept paths (near values, exclusions) that name no field of the schema."""
    fields = schema_fields(spec_schema(kind))
    return sorted(p for p in (*NEAR[kind], *EXCLUDED[kind]) if p not in fields)


# ------------------------------------------------------------------- reaching a field

_PATH_PART = re.compile(r"([^.\[\]]+)(?:\[(\d+)\])?")


def path_parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for name, index in _PATH_PART.findall(path):
        parts.append(name)
        if index:
            parts.append(int(index))
    return parts


def base_body(kind: str, name: str) -> Obj:
    """The valid body each fuzzed input starts from."""
    if kind == CLASS:
        return valid_class(name)
    body = valid_service(name)
    # Start small: most inputs are config-only (no pods), so GPUs are not the limit.
    body["spec"]["scaling"] = {"minReplicas": 0, "maxReplicas": 1}
    return body


def _mutate_item(items: list[Any], index: int, action: str, value: Any) -> None:
    if len(items) <= index:
        return  # an earlier mutation shortened the list: nothing to do here
    if action == "drop":
        del items[index]
    elif action == "unknown":
        if isinstance(items[index], dict):
            items[index]["fuzzUnknownField"] = value
        else:
            items.append(value)  # an item the list did not have
    else:
        items[index] = value


def mutate(body: Obj, path: str, action: str, value: Any) -> None:
    """set / drop / unknown (adds a field the schema does not know) at path, building
    missing parents on the way (a list of one empty object where the path indexes one).
    The body gets a copy of ``value``: a strategy may hand the same object to several
    mutations, and an ``unknown`` into a field that holds it made the body refer to
    itself (a RecursionError in the client, not a verdict on the input)."""
    value = copy.deepcopy(value)
    parts = path_parts(path)
    node: Any = body
    for part, after in itertools.pairwise(parts):
        if isinstance(part, int):
            if not isinstance(node, list) or len(node) <= part:
                return  # an earlier mutation replaced the list: nothing to do here
            node = node[part]
        else:
            if not isinstance(node, dict):
                return
            if not isinstance(node.get(part), dict | list):
                node[part] = [{}] if isinstance(after, int) else {}
            node = node[part]
    last = parts[-1]
    if isinstance(last, int):
        if isinstance(node, list):
            _mutate_item(node, last, action, value)
        return
    if not isinstance(node, dict):
        return
    if action == "drop":
        node.pop(last, None)
    elif action == "unknown":
        target = node.get(last)
        if isinstance(target, dict):
            target["fuzzUnknownField"] = value
        else:
            node[f"{last}Typo"] = value
    else:
        node[last] = value


def lookup(body: Mapping[str, Any], path: str) -> Any:
    """The value at path, or KeyError/IndexError/TypeError where there is none."""
    node: Any = body
    for part in path_parts(path):
        node = node[part]
    return node
