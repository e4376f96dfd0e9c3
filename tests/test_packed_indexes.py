"""What the operator keeps per object: packed, and without what no reconcile reads."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from controllers.acceleratorclass import class_bodies
from controllers.inferenceservice import child_index, services
from controllers.packed import Packed, unpacked
from gpuserve.resources.naming import FIELD_MANAGER, LABEL_SERVICE


def indexed(index_function: Any, **kwargs: Any) -> dict[str, Any]:
    """What an index function returns for one object (kopf calls it the same way)."""
    entries: dict[Any, Packed] = asyncio.run(index_function(**kwargs))
    (entry,) = entries.values()
    return entry.unpack()


def service_body() -> dict[str, Any]:
    return {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {
            "name": "chat",
            "namespace": "ml",
            "uid": "u1",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"model": {"format": "onnx"}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "kopf": {"progress": {"x": 1}, "lastHandledConfiguration": "{...}"},
        },
    }


def test_a_packed_document_reads_back_equal() -> None:
    body = service_body()
    assert Packed.of(body).unpack() == body
    assert unpacked([[Packed.of(body)], [Packed.of({"a": [1, 2.5, None]})]]) == [
        body,
        {"a": [1, 2.5, None]},
    ]


def test_the_service_index_drops_field_managers_and_kopfs_bookkeeping_only() -> None:
    body = service_body()
    kept = indexed(services, namespace="ml", name="chat", body=body)
    assert "managedFields" not in kept["metadata"]
    assert "kopf" not in kept["status"]
    assert kept["status"]["conditions"] == body["status"]["conditions"]
    assert kept["spec"] == body["spec"]
    assert body["status"]["kopf"], "the watched body itself is not changed"


def test_a_child_index_keeps_the_fields_gpuserve_applied() -> None:
    child: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "chat-config",
            "namespace": "ml",
            "labels": {LABEL_SERVICE: "chat"},
            "resourceVersion": "7",
            "managedFields": [
                {
                    "manager": FIELD_MANAGER,
                    "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:config.pbtxt": {}}},
                }
            ],
        },
        "data": {"config.pbtxt": "name: 'chat'", "added-by-someone": "x"},
    }
    labels = child["metadata"]["labels"]
    kept = indexed(child_index, namespace="ml", labels=labels, body=child)
    assert kept["data"] == {"config.pbtxt": "name: 'chat'"}
    assert kept["kind"] == "ConfigMap" and kept["metadata"]["name"] == "chat-config"


def test_a_class_body_reads_back_as_the_object_and_non_json_is_refused() -> None:
    body: Any = {"metadata": {"name": "h100"}, "spec": {"resource": "nvidia.com/gpu"}}
    assert indexed(class_bodies, name="h100", body=kopf.Body(body)) == body
    with pytest.raises(TypeError):  # kopf's view of an object, not its data
        Packed.of({"body": kopf.Body(body)})
