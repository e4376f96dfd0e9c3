"""What the operator keeps per object: packed, and without what no reconcile reads."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from controllers.acceleratorclass import class_bodies
from controllers.inferenceservice import child_index, services
from controllers.packed import Packed, unpacked
from controllers.settings import Settings
from controllers.state import OperatorState
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


def child_body(data: dict[str, str], resource_version: str = "7") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "chat-config",
            "namespace": "ml",
            "labels": {LABEL_SERVICE: "chat"},
            "resourceVersion": resource_version,
            "managedFields": [
                {
                    "manager": FIELD_MANAGER,
                    "operation": "Apply",
                    "fieldsV1": {"f:data": {"f:config.pbtxt": {}}},
                }
            ],
        },
        "data": data,
    }


def index_child(memo: kopf.Memo, child: dict[str, Any]) -> dict[str, Any]:
    meta = child["metadata"]
    return indexed(
        child_index,
        namespace="ml",
        name=meta["name"],
        labels=meta["labels"],
        body=child,
        memo=memo,
    )


def operator_memo() -> kopf.Memo:
    memo = kopf.Memo()
    memo.state = OperatorState.start(Settings())
    return memo


def test_a_child_index_keeps_the_fields_gpuserve_applied() -> None:
    child = child_body({"config.pbtxt": "name: 'chat'", "added-by-someone": "x"})
    kept = index_child(operator_memo(), child)
    assert kept["data"] == {"config.pbtxt": "name: 'chat'"}
    assert kept["kind"] == "ConfigMap" and kept["metadata"]["name"] == "chat-config"


def test_only_a_change_to_what_gpuserve_applied_queues_its_service() -> None:
    memo = operator_memo()
    queue = memo.state.queue
    index_child(memo, child_body({"config.pbtxt": "a"}))
    assert len(queue) == 0, "first seen (listing, or its own create): nothing to bring back"
    index_child(memo, child_body({"config.pbtxt": "a", "theirs": "x"}, resource_version="8"))
    assert len(queue) == 0, "someone else's field: no drift of gpuserve's"
    index_child(memo, child_body({"config.pbtxt": "edited"}, resource_version="9"))
    assert len(queue) == 1, "gpuserve's field changed under it: reconcile the service"


def test_a_class_body_reads_back_as_the_object_and_non_json_is_refused() -> None:
    body: Any = {"metadata": {"name": "h100"}, "spec": {"resource": "nvidia.com/gpu"}}
    assert indexed(class_bodies, name="h100", body=kopf.Body(body)) == body
    with pytest.raises(TypeError):  # kopf's view of an object, not its data
        Packed.of({"body": kopf.Body(body)})
