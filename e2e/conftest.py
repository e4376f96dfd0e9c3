"""Fixtures for tests that need a real Kubernetes API.

`cluster` (session): the local harness cluster, started if needed and stopped at the end only
if this session started it. With GPUSERVE_E2E_KUBECONFIG=<path> the tests run against that
cluster instead (kind, a real GPU cluster) and nothing is started or stopped.
`namespace` (function): a fresh namespace per test, deleted afterwards (and, on a cluster
this session does not stop, confirmed gone at the end of the session).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import binaries, lifecycle, reaping, settings
from e2e.cluster.testkit import ClusterHandle, run_cluster_cli, wait_for

UP_TIMEOUT_S = 300.0
DOWN_TIMEOUT_S = 120.0
NAMESPACE_DELETE_TIMEOUT_S = 90.0
EXTERNAL_KUBECONFIG_ENV = "GPUSERVE_E2E_KUBECONFIG"


# Namespaces the `namespace` fixture asked to delete. The namespace controller waits 5 s
# before acting on a deletion, so tests don't block on it; the session checks once at the end.
_deleted_namespaces: list[str] = []


def _stop_cluster(pids: list[int]) -> subprocess.CompletedProcess[str]:
    result = run_cluster_cli("down", DOWN_TIMEOUT_S)
    reaping.reap(pids)
    return result


def _wait_namespaces_gone(handle: ClusterHandle) -> None:
    def all_gone() -> bool:
        names = set(handle.kubectl("get", "namespaces", "-o", "name").stdout.split())
        return not any(f"namespace/{ns}" in names for ns in _deleted_namespaces)

    wait_for(all_gone, NAMESPACE_DELETE_TIMEOUT_S, "the tests' namespaces to be deleted",
             interval=0.5)


def _foreign_cluster(handle: ClusterHandle) -> Iterator[ClusterHandle]:
    """A cluster this session did not start: use it, clean our namespaces, never stop it."""
    yield handle
    _wait_namespaces_gone(handle)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    external = os.environ.get(EXTERNAL_KUBECONFIG_ENV)
    if external:
        path = Path(external).expanduser()
        if not path.is_file():
            pytest.fail(f"{EXTERNAL_KUBECONFIG_ENV}={external} is not a file")
        yield from _foreign_cluster(ClusterHandle(path, started_here=False, local=False))
        return

    state = settings.layout()
    if lifecycle.is_up(state):
        # Somebody else's cluster (make cluster-up, another session).
        yield from _foreign_cluster(ClusterHandle(state.admin_kubeconfig, started_here=False,
                                                  local=True))
        return

    missing = binaries.missing_runtime()
    if missing:
        pytest.fail("cluster binaries are not built ("
                    + ", ".join(f"{c.name} {c.version}" for c in missing)
                    + "); run `make cluster-build` (python -m e2e.cluster build) first")
    # The daemons outlive the `up` CLI; adopting them lets us reap them after `down`.
    reaping.become_subreaper()
    try:
        result = run_cluster_cli("up", UP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop_cluster([])
        pytest.fail(f"`python -m e2e.cluster up` took more than {UP_TIMEOUT_S:.0f} s")
    if result.returncode != 0:
        pytest.fail(f"`python -m e2e.cluster up` failed:\n{result.stdout}\n{result.stderr}")
    pids = [record.pid for record in lifecycle.read_records(state).values()]
    try:
        yield ClusterHandle(state.admin_kubeconfig, started_here=True, local=True)
    finally:
        _stop_cluster(pids)


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "test"


@pytest.fixture
def namespace(cluster: ClusterHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"e2e-{_slug(request.node.name, 40)}-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "gpuserve.io/e2e=true")
    try:
        # Pods are rejected until the service account controller has made `default`.
        wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name,
                                         check=False).returncode == 0,
                 30.0, f"service account default in {name}")
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false")
        _deleted_namespaces.append(name)
