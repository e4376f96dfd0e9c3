"""owned_part: the fields one manager applied, read from managedFields."""

from __future__ import annotations

from typing import Any

from gpuserve.resources.ownership import owned_part
from gpuserve.resources.sameness import contains

MINE = "gpuserve-operator"

# What the operator applied (a small Deployment-like object).
DESIRED: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "m-h100", "namespace": "ns", "labels": {"app": "m"}},
    "spec": {
        "replicas": 2,
        "template": {
            "spec": {
                "containers": [
                    {"name": "triton", "image": "tr:1", "args": ["--a", "--b"]},
                ],
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
            }
        },
    },
}

MY_FIELDS = {
    "f:metadata": {"f:labels": {"f:app": {}}},
    "f:spec": {
        "f:replicas": {},
        "f:template": {
            "f:spec": {
                "f:containers": {
                    'k:{"name":"triton"}': {".": {}, "f:image": {}, "f:args": {}, "f:name": {}}
                },
                "f:tolerations": {},
            }
        },
    },
}


def live(**changes: Any) -> dict[str, Any]:
    """DESIRED as the API server returns it: defaults, status, another manager's sidecar."""
    containers = [
        {
            "name": "triton",
            "image": changes.get("image", "tr:1"),
            "args": ["--a", "--b"],
            "terminationMessagePath": "/dev/termination-log",
        },
        {"name": "sidecar", "image": "other:2"},
    ]
    mine = changes.get("my_fields", MY_FIELDS)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "m-h100",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "42",
            "labels": {"app": "m", "team": "x"},
            "managedFields": [
                {"manager": MINE, "operation": "Apply", "fieldsV1": mine},
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:replicas": {}}},
                },
            ],
        },
        "spec": {
            "replicas": changes.get("replicas", 2),
            "revisionHistoryLimit": 10,
            "template": {
                "spec": {
                    "containers": containers,
                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                    "dnsPolicy": "ClusterFirst",
                }
            },
        },
        "status": {"replicas": 2},
    }


def test_keeps_exactly_the_applied_fields_and_the_identity() -> None:
    owned = owned_part(live(), MINE)
    assert owned is not None
    assert owned["metadata"] == {
        "name": "m-h100",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"app": "m"},
    }
    assert "status" not in owned and "revisionHistoryLimit" not in owned["spec"]
    containers = owned["spec"]["template"]["spec"]["containers"]
    assert containers == [{"name": "triton", "image": "tr:1", "args": ["--a", "--b"]}]
    assert contains(owned, DESIRED)


def test_a_field_another_manager_took_over_goes_missing() -> None:
    # The image was changed by someone else: ownership moved, so it is not ours any more.
    fields = {**MY_FIELDS}
    spec = {**fields["f:spec"]}
    template_spec = {
        "f:containers": {'k:{"name":"triton"}': {".": {}, "f:args": {}, "f:name": {}}},
        "f:tolerations": {},
    }
    spec["f:template"] = {"f:spec": template_spec}
    fields["f:spec"] = spec
    owned = owned_part(live(image="evil:1", my_fields=fields), MINE)
    assert owned is not None
    assert not contains(owned, DESIRED)  # so the child is applied again


def test_a_changed_owned_value_shows() -> None:
    owned = owned_part(live(replicas=5), MINE)
    assert owned is not None and not contains(owned, DESIRED)


def test_set_items_and_positions() -> None:
    obj = {
        "metadata": {
            "name": "x",
            "finalizers": ["a", "b", "c"],
            "managedFields": [
                {
                    "manager": MINE,
                    "operation": "Apply",
                    "fieldsV1": {
                        "f:metadata": {"f:finalizers": {'v:"b"': {}}},
                        "f:list": {"i:1": {}},
                    },
                }
            ],
        },
        "list": [10, 20, 30],
    }
    owned = owned_part(obj, MINE)
    assert owned is not None
    assert owned["metadata"]["finalizers"] == ["b"]
    assert owned["list"] == [20]


def test_no_apply_entry_means_no_answer() -> None:
    obj = live()
    obj["metadata"]["managedFields"] = [
        {"manager": MINE, "operation": "Update", "fieldsV1": MY_FIELDS},
    ]
    assert owned_part(obj, MINE) is None
    assert owned_part(live(), "someone-else") is None
