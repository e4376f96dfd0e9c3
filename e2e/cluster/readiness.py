"""The external side of KWOK's readiness hook (kwok_stages/pod-external-readiness.yaml).

Pods labelled ``gpuserve.io/readiness=external`` are started by KWOK but left NOT Ready.
Whatever knows the truth (e.g. a prober of a real Triton process) calls set_pod_ready() to
flip the pod's Ready/ContainersReady conditions and container statuses, as a kubelet would
after a readiness probe. Services, EndpointSlices, Deployments and PDBs then react as usual.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

READINESS_LABEL = "gpuserve.io/readiness"
EXTERNAL = "external"


def readiness_patch(container_statuses: list[dict[str, Any]], ready: bool, reason: str,
                    message: str = "") -> dict[str, Any]:
    """Strategic-merge patch for pods/status. Conditions merge by type, but the API declares
    no merge key for containerStatuses, so the whole (current) list is sent back."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = "True" if ready else "False"
    conditions = [
        {"type": kind, "status": status, "reason": reason, "message": message,
         "lastTransitionTime": now}
        for kind in ("ContainersReady", "Ready")
    ]
    statuses = [dict(item, ready=ready) for item in container_statuses]
    return {"status": {"conditions": conditions, "containerStatuses": statuses}}


def set_pod_ready(api: ApiClient, namespace: str, name: str, ready: bool,
                  reason: str = "ExternalReadiness", message: str = "") -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    pod = core.read_namespaced_pod(name, namespace)
    statuses = pod.status.container_statuses if pod.status is not None else None
    current = api.sanitize_for_serialization(statuses or [])  # type: ignore[no-untyped-call]
    core.patch_namespaced_pod_status(name, namespace,
                                     readiness_patch(current, ready, reason, message))
