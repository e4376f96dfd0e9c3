"""The whole local stack for closed-loop tests and benchmarks: CRDs and AcceleratorClasses,
Prometheus + the runner (LocalDataPlane) and the operator wired to them, plus small
helpers to read an InferenceService's status, events and Service endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.testkit import ClusterHandle
from e2e.operatorkit import OperatorProcess, delete_services, install_classes, install_crds
from e2e.runner.dataplane import LocalDataPlane
from e2e.runner.runner import RunnerSettings

EXTERNAL_READINESS = "gpuserve.io/readiness=external"


@dataclass
class Stack:
    cluster: ClusterHandle
    plane: LocalDataPlane
    operator: OperatorProcess


@contextmanager
def local_stack(
    cluster: ClusterHandle,
    workdir: Path,
    *,
    namespaces: frozenset[str] | None = None,
    autoscale_interval_s: float = 2.0,
    scrape_interval_s: float = 1.0,
) -> Iterator[Stack]:
    """Starts Prometheus, the runner and the operator (autoscaler on); stops all three.
    The InferenceServices of ``namespaces`` are deleted before the operator stops."""
    install_crds(cluster)
    install_classes(cluster)
    settings = RunnerSettings(namespaces=namespaces, log_dir=workdir / "runner")
    with LocalDataPlane(
        cluster.kubeconfig, settings=settings, scrape_interval_s=scrape_interval_s
    ) as plane:
        operator = OperatorProcess(
            cluster,
            workdir / "operator.log",
            env={
                **plane.operator_env,
                "GPUSERVE_AUTOSCALE_INTERVAL": f"{autoscale_interval_s:g}",
                "GPUSERVE_EXTRA_POD_LABELS": EXTERNAL_READINESS,
            },
        ).start()
        try:
            yield Stack(cluster, plane, operator)
        finally:
            # Delete the services while the operator still runs, so their pods' Triton
            # processes are stopped by the runner that started them.
            for namespace in sorted(namespaces or ()):
                delete_services(cluster, namespace)
            operator.stop()


def apply(cluster: ClusterHandle, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))


def get(cluster: ClusterHandle, namespace: str, *what: str) -> Any:
    return json.loads(cluster.kubectl("get", *what, "-n", namespace, "-o", "json").stdout)


def service_status(cluster: ClusterHandle, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = get(cluster, namespace, "inferenceservice", name).get("status", {})
    return status


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in status.get("conditions", []):
        if c.get("type") == type_:
            return dict(c)
    return None


def events(cluster: ClusterHandle, namespace: str, name: str) -> list[dict[str, Any]]:
    """Events about the InferenceService ``name`` (reason, message...), oldest first."""
    items: list[dict[str, Any]] = get(
        cluster, namespace, "events", "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def service_pods(cluster: ClusterHandle, namespace: str, name: str) -> list[dict[str, Any]]:
    """The service's pods that are not being deleted."""
    items: list[dict[str, Any]] = get(
        cluster, namespace, "pods", "-l", f"gpuserve.io/service={name}"
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def endpoint_ips(cluster: ClusterHandle, namespace: str, service: str) -> set[str]:
    """Ready addresses the Service's EndpointSlices list (what kube-proxy would route to)."""
    slices = get(
        cluster, namespace, "endpointslices", "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    return {
        address
        for s in slices
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready")
        for address in e.get("addresses", [])
    }


@contextmanager
def harness_cluster(timeout: float = 300.0) -> Iterator[ClusterHandle]:
    """The local harness cluster for scripts: reused if up (and left up), else started
    here and stopped at the end ($GPUSERVE_CLUSTER_DIR / $GPUSERVE_PORT_OFFSET apply)."""
    import subprocess

    from e2e.cluster import lifecycle, reaping, settings
    from e2e.cluster.testkit import run_cluster_cli

    state = settings.layout()
    if lifecycle.is_up(state):
        yield ClusterHandle(state.admin_kubeconfig, started_here=False, local=True)
        return
    reaping.become_subreaper()  # the daemons outlive `up`; adopt them so they get reaped

    def cli(command: str) -> subprocess.CompletedProcess[str]:
        return run_cluster_cli(command, timeout)

    result = cli("up")
    pids = [r.pid for r in lifecycle.read_records(state).values()]
    try:
        if result.returncode != 0:
            raise RuntimeError(f"cluster up failed:\n{result.stdout}\n{result.stderr}")
        yield ClusterHandle(state.admin_kubeconfig, started_here=True, local=True)
    finally:
        cli("down")
        reaping.reap(pids)


@contextmanager
def scratch_namespace(cluster: ClusterHandle, prefix: str) -> Iterator[str]:
    """A fresh namespace, deleted (without waiting) afterwards."""
    import secrets

    from e2e.cluster.testkit import wait_for

    name = f"{prefix}-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    try:
        wait_for(
            lambda: (
                cluster.kubectl(
                    "get", "serviceaccount", "default", "-n", name, check=False
                ).returncode
                == 0
            ),
            30.0,
            f"service account default in {name}",
        )
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
