"""The real API server rejects each invalid manifest of the shared table with errors that
all name the case's field: no stray CEL error from a rule that ran on a value the schema had
already refused, no error without a path (`<nil>`).

Requests are server-side dry runs through the API (not kubectl), so each error cause is read
with its own field path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.cluster.testkit import ClusterHandle
from e2e.invalid_cases import CASES, Case, valid_service
from e2e.operatorkit import install_crds
from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import CLASSES_PLURAL, SERVICES_PLURAL

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def api(cluster: ClusterHandle) -> Iterator[client.CustomObjectsApi]:
    install_crds(cluster)
    with config.new_client_from_config(str(cluster.kubeconfig)) as api_client:
        yield client.CustomObjectsApi(api_client)


def _create(api: client.CustomObjectsApi, body: dict[str, Any], namespace: str) -> None:
    opts = {"dry_run": "All", "field_validation": "Strict"}
    if body["kind"] == "InferenceService":
        api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, SERVICES_PLURAL, body, **opts
        )
    else:
        api.create_cluster_custom_object(GROUP, VERSION, CLASSES_PLURAL, body, **opts)


def _errors(
    api: client.CustomObjectsApi, body: dict[str, Any], namespace: str
) -> list[tuple[str | None, str]]:
    """(field, message) of each cause of the rejection ([] if accepted); field None for a
    rejection without causes (strict decoding of an unknown field)."""
    try:
        _create(api, body, namespace)
    except ApiException as exc:
        status = json.loads(exc.body)
        causes = status.get("details", {}).get("causes") or []
        if not causes:
            return [(None, str(status["message"]))]
        return [
            (c.get("field"), str(c.get("message", "")))
            for c in causes
            # The API server's own notice (no field) that it skipped the CEL rules because
            # of a type or required-field error: not an error of its own.
            if "some validation rules were not checked" not in c.get("message", "")
        ]
    return []


def test_the_valid_service_is_accepted(api: client.CustomObjectsApi, namespace: str) -> None:
    assert _errors(api, valid_service("fine"), namespace) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_error_names_the_field_of_the_case(
    api: client.CustomObjectsApi, namespace: str, case: Case
) -> None:
    errors = _errors(api, case.body(f"bad-{case.id}"[:50]), namespace)
    assert errors, f"{case.id} was accepted"
    for field, message in errors:
        if field is None:
            assert "strict decoding" in message and case.field in message, errors
        else:
            # The field itself, or an item of it (a duplicate in a set is named by index).
            assert field == case.field or field.startswith(f"{case.field}["), (
                f"{case.id}: an error names another field: {errors}"
            )
        assert "evaluating rule" not in message, errors
