"""Prometheus targets and serving endpoints from the runner's instances (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InstanceInfo:
    """A snapshot of one pod's local Triton, as the runner exposes it."""

    namespace: str
    pod: str
    service: str
    accelerator_class: str
    role: str
    pod_ip: str | None
    state: str  # starting | ready | failed | stopping | stopped
    pod_ready: bool  # the pod's Ready condition as last observed from the API
    deleting: bool
    grpc: str | None  # 127.0.0.1:PORT
    http: str | None
    metrics: str | None
    restarts: int = 0
    pid: int | None = None


def scrape_targets(instances: Iterable[InstanceInfo]) -> list[dict[str, Any]]:
    """One file_sd target per Triton metrics port, labelled as the chart's PodMonitor
    labels it: the role too, so a pod's role change makes a new target here as there."""
    targets = [
        {
            "address": i.metrics,
            "labels": {
                "namespace": i.namespace,
                "pod": i.pod,
                "service": i.service,
                "accelerator_class": i.accelerator_class,
                "role": i.role,
            },
        }
        for i in instances
        if i.metrics and i.state in ("ready", "stopping")
    ]
    return sorted(targets, key=lambda t: (t["labels"]["namespace"], t["labels"]["pod"]))


def serving_endpoints(
    instances: Iterable[InstanceInfo], namespace: str | None = None, service: str | None = None
) -> list[str]:
    """gRPC addresses a Service selecting role=serving would route to: serving, Ready, not
    terminating, and with Triton up."""
    return sorted(
        i.grpc
        for i in instances
        if i.grpc
        and i.role == "serving"
        and i.pod_ready
        and not i.deleting
        and i.state == "ready"
        and (namespace is None or i.namespace == namespace)
        and (service is None or i.service == service)
    )
