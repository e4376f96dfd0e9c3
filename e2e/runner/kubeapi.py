"""The few Kubernetes calls the runner makes, each bounded by a request timeout."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import SERVICES_PLURAL

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

REQUEST_TIMEOUT_S = 10.0


def api_client(kubeconfig: Path, pool_size: int = 8) -> ApiClient:
    """An ApiClient whose connection pool fits the runner's worker threads."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def read_config_map_key(api: ApiClient, namespace: str, name: str, key: str) -> str:
    from kubernetes import client

    cm = client.CoreV1Api(api).read_namespaced_config_map(
        name, namespace, _request_timeout=REQUEST_TIMEOUT_S
    )
    data: dict[str, str] = cm.data or {}
    if key not in data:
        raise KeyError(f"ConfigMap {namespace}/{name} has no key {key!r}")
    return data[key]


def storage_uri(api: ApiClient, namespace: str, service: str) -> str:
    """``spec.model.storageUri`` of the pod's InferenceService (pods don't carry it)."""
    from kubernetes import client

    obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, SERVICES_PLURAL, service, _request_timeout=REQUEST_TIMEOUT_S
    )
    return str(obj["spec"]["model"]["storageUri"])


def list_pods(api: ApiClient, label_selector: str) -> tuple[list[dict[str, Any]], str]:
    """(pods as JSON, resourceVersion of the list) across all namespaces."""
    from kubernetes import client

    result = client.CoreV1Api(api).list_pod_for_all_namespaces(
        label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT_S
    )
    pods = [api.sanitize_for_serialization(p) for p in result.items]  # type: ignore[no-untyped-call]
    version = result.metadata.resource_version if result.metadata is not None else ""
    return pods, str(version)


def set_ready(api: ApiClient, namespace: str, name: str, ready: bool, reason: str) -> None:
    """The readiness hook of the harness (e2e.cluster.readiness), with bounded requests."""
    from kubernetes import client

    from e2e.cluster.readiness import readiness_patch

    core = client.CoreV1Api(api)
    pod = core.read_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT_S)
    statuses = pod.status.container_statuses if pod.status is not None else None
    current = api.sanitize_for_serialization(statuses or [])  # type: ignore[no-untyped-call]
    core.patch_namespaced_pod_status(
        name,
        namespace,
        readiness_patch(current, ready, reason),
        _request_timeout=REQUEST_TIMEOUT_S,
    )
