"""Lifecycle edges: deleting namespaces and CRDs under live services, uninstalling the
operator first, secrets that must never be copied, class lists that change, slow starts.

What each case does today and what it should do is written down in docs/reliability.md.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.chaoskit import Api, unexpected_tracebacks
from e2e.cluster.testkit import ClusterHandle, KubectlError, wait_for
from e2e.invalid_cases import valid_service
from e2e.operatorkit import CRDS, OperatorProcess, install_classes, install_crds, settle
from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import (
    CLASSES_PLURAL,
    LABEL_CLASS,
    LABEL_ROLE,
    LABEL_SERVICE,
    ROLE_SERVING,
    SERVICES_PLURAL,
)

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
GONE_TIMEOUT_S = 60.0
CRD_NAMES = (f"{SERVICES_PLURAL}.{GROUP}", f"{CLASSES_PLURAL}.{GROUP}")


def reinstall_crds(cluster: ClusterHandle) -> None:
    """install_crds, retried: `kubectl wait` right after re-creating a CRD can find it
    without status yet and fail at once."""
    for attempt in range(5):
        try:
            install_crds(cluster)
            break
        except KubectlError:
            if attempt == 4:
                raise
            time.sleep(1)
    install_classes(cluster)


@pytest.fixture
def crds(cluster: ClusterHandle) -> None:
    reinstall_crds(cluster)


@pytest.fixture
def operator(cluster: ClusterHandle, crds: None, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[OperatorProcess]:
    """A fresh operator per test; parametrize it indirectly with a dict to set its env."""
    env: dict[str, str] = getattr(request, "param", {})
    with OperatorProcess(cluster, tmp_path / "operator.log", env=env) as proc:
        yield proc


@pytest.fixture
def ns(cluster: ClusterHandle, namespace: str, operator: OperatorProcess) -> Iterator[str]:
    """The test's namespace, emptied of services while an operator runs (their pods'
    Triton processes belong to it)."""
    yield namespace
    if not operator.alive():
        operator.start()
    cluster.kubectl("delete", SERVICES_PLURAL, "--all", "-n", namespace, "--wait=false")
    wait_for(lambda: not get_json(cluster, SERVICES_PLURAL, "-n", namespace)["items"],
             60, f"services of {namespace} deleted")


def apply(cluster: ClusterHandle, obj: Obj, namespace: str | None = None) -> None:
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    cluster.kubectl(*args, stdin=yaml.safe_dump(obj))


def get_json(cluster: ClusterHandle, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def ready(cluster: ClusterHandle, namespace: str, name: str, timeout: float = 90.0) -> Obj:
    def probe() -> Obj | None:
        obj = get_json(cluster, "inferenceservice", name, "-n", namespace)
        status = obj.get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        current = status.get("observedGeneration") == obj["metadata"]["generation"]
        return obj if current and conds.get("Ready") == "True" else None

    return wait_for(probe, timeout, f"{name} Ready")


def small_service(name: str, *, pods: int = 1) -> Obj:
    body = valid_service(name)
    body["spec"]["scaling"] = {"minReplicas": pods, "maxReplicas": max(1, pods)}
    return body


def exists(cluster: ClusterHandle, *args: str) -> bool:
    return cluster.kubectl("get", *args, check=False).returncode == 0


def release_finalizers(cluster: ClusterHandle, namespace: str | None = None) -> None:
    """Test cleanup only: strip finalizers from leftover gpuserve objects (a regression
    would put one back), so a failed case does not leave a namespace or CRD terminating
    for the rest of the session."""
    scope = ["-n", namespace] if namespace else ["-A"]
    for plural in (SERVICES_PLURAL, CLASSES_PLURAL):
        out = cluster.kubectl("get", f"{plural}.{GROUP}", *scope, "-o", "json", check=False)
        if out.returncode != 0:
            continue
        for obj in json.loads(out.stdout)["items"]:
            meta = obj["metadata"]
            ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
            cluster.kubectl("patch", f"{plural}.{GROUP}", meta["name"], *ns, "--type=merge",
                            "-p", '{"metadata":{"finalizers":null}}', check=False)


@pytest.fixture
def own_namespace(cluster: ClusterHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace the test deletes itself (the `namespace` fixture deletes its own)."""
    name = f"e2e-edge-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    wait_for(lambda: exists(cluster, "serviceaccount", "default", "-n", name), 30,
             f"service account default in {name}")
    try:
        yield name
    finally:
        if exists(cluster, "namespace", name):
            release_finalizers(cluster, name)
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _populate(cluster: ClusterHandle, namespace: str) -> None:
    apply(cluster, small_service("with-pod", pods=1), namespace)
    apply(cluster, small_service("config-only", pods=0), namespace)
    ready(cluster, namespace, "with-pod")
    ready(cluster, namespace, "config-only")


def _namespace_gone(cluster: ClusterHandle, namespace: str, timeout: float) -> float:
    start = time.monotonic()
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
    wait_for(lambda: not exists(cluster, "namespace", namespace), timeout,
             f"namespace {namespace} deleted", interval=0.5)
    return time.monotonic() - start


def test_namespace_with_live_services_is_deleted_with_the_operator_running(
    cluster: ClusterHandle, operator: OperatorProcess, own_namespace: str
) -> None:
    _populate(cluster, own_namespace)
    took = _namespace_gone(cluster, own_namespace, GONE_TIMEOUT_S)
    print(f"namespace deleted in {took:.1f} s with the operator running")
    assert operator.alive()
    assert not unexpected_tracebacks(operator.log_text())


def test_namespace_with_live_services_is_deleted_with_the_operator_stopped(
    cluster: ClusterHandle, operator: OperatorProcess, own_namespace: str
) -> None:
    """No finalizer deadlock: nothing the operator put on its objects may hold up a
    namespace deletion when no operator runs (it may be down, or uninstalled)."""
    _populate(cluster, own_namespace)
    operator.stop()
    took = _namespace_gone(cluster, own_namespace, GONE_TIMEOUT_S)
    print(f"namespace deleted in {took:.1f} s with the operator stopped")


def _crd_gone(cluster: ClusterHandle, timeout: float) -> float:
    start = time.monotonic()
    cluster.kubectl("delete", "-f", str(CRDS), "--wait=false")
    wait_for(lambda: not any(exists(cluster, "crd", c) for c in CRD_NAMES), timeout,
             "gpuserve CRDs deleted", interval=0.5)
    return time.monotonic() - start


def _children_gone(cluster: ClusterHandle, namespace: str) -> None:
    def empty() -> bool:
        for kind in ("configmaps", "deployments", "services", "poddisruptionbudgets", "pods"):
            out = get_json(cluster, kind, "-n", namespace, "-l", LABEL_SERVICE)
            if [o for o in out["items"] if not o["metadata"].get("deletionTimestamp")]:
                return False
        return True

    wait_for(empty, 90, "children garbage-collected once their services were gone")


@pytest.fixture
def restore_crds(cluster: ClusterHandle) -> Iterator[None]:
    """Tests that delete the CRDs put them back (other modules need them)."""
    try:
        yield
    finally:
        release_finalizers(cluster)
        for crd in CRD_NAMES:
            wait_for(lambda crd=crd: not exists(cluster, "crd", crd) or not get_json(
                cluster, "crd", crd)["metadata"].get("deletionTimestamp"), 60,
                f"{crd} deletion finished")
        reinstall_crds(cluster)


def test_deleting_the_crds_under_live_services_completes(
    cluster: ClusterHandle, operator: OperatorProcess, own_namespace: str, restore_crds: None
) -> None:
    """With the operator running the CRD deletion completes and takes every custom
    resource with it; after re-installing the CRDs and restarting the operator (the
    documented step: kopf resolves kinds only on CRD events, and the API server's
    discovery can lag the last of them) services are served again. (The children are
    left behind: the garbage collector cannot look up an owner whose kind no longer
    exists, "unable to get REST mapping", and backs off; see docs/reliability.md. Delete
    the services before the CRDs.)"""
    _populate(cluster, own_namespace)
    took = _crd_gone(cluster, GONE_TIMEOUT_S)
    print(f"CRDs deleted in {took:.1f} s with the operator running")
    # A watcher's next request can reach the API server before kopf has seen its CRD go;
    # its 404 pauses that watch (controllers/kopf_vanished_kinds.py) where kopf's own would
    # fail the watcher and, when its orchestrator noticed first, stop the operator.
    settle(3)
    assert operator.alive()
    assert not unexpected_tracebacks(operator.log_text())
    reinstall_crds(cluster)
    operator.stop()
    before_restart = len(operator.log_text())
    operator.start()
    apply(cluster, small_service("after-reinstall", pods=0), own_namespace)
    ready(cluster, own_namespace, "after-reinstall", timeout=90)
    assert operator.alive()
    assert not unexpected_tracebacks(operator.log_text()[before_restart:])


def test_uninstalling_the_operator_first_then_services_then_crds(
    cluster: ClusterHandle, operator: OperatorProcess, own_namespace: str, restore_crds: None
) -> None:
    """Uninstall with the operator already gone (`helm uninstall` first): deleting the
    services must not wait for it, their children are garbage-collected, and the CRDs
    then go at once."""
    _populate(cluster, own_namespace)
    operator.stop()
    cluster.kubectl("delete", SERVICES_PLURAL, "--all", "-n", own_namespace,
                    "--wait=false")
    wait_for(lambda: not get_json(cluster, SERVICES_PLURAL, "-n", own_namespace)["items"],
             GONE_TIMEOUT_S, "services deleted with no operator running")
    _children_gone(cluster, own_namespace)
    took = _crd_gone(cluster, GONE_TIMEOUT_S)
    print(f"CRDs deleted in {took:.1f} s after the operator was uninstalled")


def test_storage_secret_is_referenced_never_copied(
    cluster: ClusterHandle, operator: OperatorProcess, ns: str
) -> None:
    namespace = ns
    value = f"gs-secret-{secrets.token_hex(12)}"
    encoded = base64.b64encode(value.encode()).decode()
    cluster.kubectl("create", "secret", "generic", "model-creds", "-n", namespace,
                    f"--from-literal=AWS_SECRET_ACCESS_KEY={value}",
                    "--from-literal=AWS_ACCESS_KEY_ID=gs-key-id")
    body = small_service("private-model", pods=1)
    body["spec"]["model"]["storageUri"] = "s3://private-bucket/models/sleeper"
    body["spec"]["model"]["storageSecretRef"] = {"name": "model-creds"}
    apply(cluster, body, namespace)
    ready(cluster, namespace, "private-model")
    settle(3)  # events of the first reconciles land

    # Referenced: the fetcher gets the Secret by name.
    deployment = get_json(cluster, "deployment", "private-model-h100", "-n", namespace)
    fetch = deployment["spec"]["template"]["spec"]["initContainers"][0]
    assert fetch["envFrom"] == [{"secretRef": {"name": "model-creds"}}]
    # Never copied: not in any ConfigMap of the cluster, the service, events, the log.
    places = {
        "configmaps": cluster.kubectl("get", "configmaps", "-A", "-o", "json").stdout,
        "service": cluster.kubectl("get", "inferenceservice", "private-model", "-n",
                                   namespace, "-o", "json").stdout,
        "children": cluster.kubectl("get", "deployments,services,poddisruptionbudgets,pods",
                                    "-n", namespace, "-o", "json").stdout,
        "events": cluster.kubectl("get", "events", "-A", "-o", "json").stdout,
        "operator log": operator.log_text(),
    }
    for where, text in places.items():
        assert value not in text and encoded not in text, f"secret value found in {where}"


def _pods(cluster: ClusterHandle, namespace: str, service: str) -> list[Obj]:
    out = get_json(cluster, "pods", "-n", namespace, "-l", f"{LABEL_SERVICE}={service}")
    return [p for p in out["items"] if not p["metadata"].get("deletionTimestamp")]


def _deployments(cluster: ClusterHandle, namespace: str, service: str) -> list[str]:
    out = get_json(cluster, "deployments", "-n", namespace, "-l", f"{LABEL_SERVICE}={service}")
    return sorted(d["metadata"]["name"] for d in out["items"])


def test_removing_a_class_from_the_list_retires_its_pool(
    cluster: ClusterHandle, operator: OperatorProcess, ns: str
) -> None:
    namespace = ns
    """[h100, l4] -> [l4]: the h100 pool must go (Deployment and serving pod), the l4 pod
    must serve, and the service must be Ready again."""
    body = small_service("moving", pods=1)
    body["spec"]["accelerators"] = {"classes": ["h100", "l4"]}
    apply(cluster, body, namespace)
    ready(cluster, namespace, "moving")
    body["spec"]["accelerators"] = {"classes": ["l4"]}
    apply(cluster, body, namespace)

    def moved() -> bool:
        pods = _pods(cluster, namespace, "moving")
        classes = sorted(p["metadata"]["labels"].get(LABEL_CLASS, "") for p in pods)
        want = ["moving-l4"]  # no warm pool: no standby Deployment
        return _deployments(cluster, namespace, "moving") == want and classes == ["l4"]

    wait_for(moved, 60, "the h100 pool retired and one l4 pod left")
    obj = ready(cluster, namespace, "moving", timeout=60)
    serving = [p for p in _pods(cluster, namespace, "moving")
               if p["metadata"]["labels"].get(LABEL_ROLE) == ROLE_SERVING]
    assert len(serving) == 1 and obj["status"]["replicas"] == 1


def test_a_class_the_service_cannot_use_gets_no_deployment(
    cluster: ClusterHandle, operator: OperatorProcess, ns: str
) -> None:
    """fp8 needs compute capability 8.9: the A100 MIG class is listed but unusable, so
    only the h100 pool exists (its serving Deployment; no warm pool, so no standby one)."""
    namespace = ns
    body = small_service("fp8", pods=1)
    body["spec"]["precision"] = "fp8"
    body["spec"]["accelerators"] = {"classes": ["a100-1g10gb", "h100"]}
    apply(cluster, body, namespace)
    ready(cluster, namespace, "fp8")
    assert _deployments(cluster, namespace, "fp8") == ["fp8-h100"]


@pytest.mark.parametrize(
    "operator", [{"GPUSERVE_EXTRA_POD_LABELS": "gpuserve.io/readiness=external"}],
    indirect=True, ids=["external-readiness"])
def test_pods_still_loading_do_not_inflate_the_replica_count(
    cluster: ClusterHandle, operator: OperatorProcess, ns: str
) -> None:
    """Pods carry the harness's external-readiness label: Running but never Ready, like
    Triton pods still loading a large model. Without metrics the autoscaler holds at
    minReplicas; warm-pool pods that are still starting must not be counted as serving
    capacity on the way (1 + 2 warm = 3 pods, not maxReplicas + 2)."""
    namespace = ns
    body = valid_service("slow")
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 4, "warmPool": 2}
    apply(cluster, body, namespace)
    deadline = time.monotonic() + 25  # five autoscaler evaluations
    worst = 0
    while time.monotonic() < deadline:
        worst = max(worst, len(_pods(cluster, namespace, "slow")))
        time.sleep(1)
    status = get_json(cluster, "inferenceservice", "slow", "-n", namespace)["status"]
    assert status.get("desiredReplicas") == 1, status.get("lastDecision")
    assert worst == 3, f"{worst} pods for 1 serving + 2 warm"


def test_deleting_a_service_while_the_operator_is_down(
    cluster: ClusterHandle, operator: OperatorProcess, ns: str
) -> None:
    namespace = ns
    """A delete must not wait for the operator: the object goes at once and the garbage
    collector removes its children."""
    api = Api(cluster.api_client())
    apply(cluster, small_service("orphaned", pods=1), namespace)
    ready(cluster, namespace, "orphaned")
    operator.stop()
    api.delete_service(namespace, "orphaned")

    def gone() -> bool:
        try:
            client.CustomObjectsApi(api.api_client).get_namespaced_custom_object(
                GROUP, VERSION, namespace, SERVICES_PLURAL, "orphaned")
        except ApiException as exc:
            return exc.status == 404
        return False

    try:
        wait_for(gone, 30, "the service deleted with no operator running")
        _children_gone(cluster, namespace)
    finally:
        release_finalizers(cluster, namespace)
