"""GitOps without drift, on the real control plane, with the operator running as the chart's
ServiceAccount in per-namespace RBAC mode:

- after the operator reconciled a service, `kubectl diff` of the user's manifest is empty
  (client-side and server-side apply, the two ways Argo CD syncs);
- re-applying the manifest makes the operator write nothing (the API server's own request
  counters);
- the Argo CD health check says Healthy for the live object;
- the Kustomize overlay in examples/gitops builds and passes admission.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.invalid_cases import valid_service
from e2e.operatorkit import REPO, install_classes, settle
from e2e.test_helm import (
    ChartOperator,
    apply_crds,
    cleanup_services,
    forbidden_lines,
    get_json,
    helm_binary,
    install,
    manifests,
    uninstall,
)
from gpuserve.resources.naming import SERVICES_PLURAL

pytestmark = pytest.mark.cluster

# What the operator writes when it reconciles (the user's own writes go to the main
# inferenceservices resource, which is left out).
RECONCILE_WRITES = (
    "configmaps/",
    "deployments/",
    "services/",
    "poddisruptionbudgets/",
    "pods/",
    f"{SERVICES_PLURAL}/status",
    "priorityclasses/",
)


def argocd_health() -> ModuleType:
    """tests/test_argocd_health.py, for its Lua runner (tests/ is not a package)."""
    path = REPO / "tests" / "test_argocd_health.py"
    spec = importlib.util.spec_from_file_location("argocd_health", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reconcile_writes(cluster: ClusterHandle) -> dict[str, float]:
    """Creating and modifying requests the API server served, per "resource/subresource".

    Like operatorkit.write_counts, but without DELETE: the namespace controller's deletion
    of other tests' namespaces (one DELETE per kind) lands in the same cluster-wide counters,
    and the operator never deletes anything.
    """
    counts: dict[str, float] = {}
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("verb") in ("POST", "PUT", "PATCH", "APPLY"):
            key = f"{fields.get('resource', '')}/{fields.get('subresource', '')}"
            counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def kubectl_diff(
    cluster: ClusterHandle, path: Path, namespace: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("diff", "-n", namespace, "-f", str(path), *extra, check=False)


def settled(cluster: ClusterHandle, name: str, namespace: str) -> Any:
    obj = get_json(cluster, "inferenceservice", name, "-n", namespace)
    status = obj.get("status", {})
    conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
    current = status.get("observedGeneration") == obj["metadata"]["generation"]
    ok = current and conds.get("Ready") == "True" and conds.get("Reconciling") == "False"
    return obj if ok else None


def test_reconciled_service_shows_no_drift_and_reapply_writes_nothing(
    cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    helm_binary()
    apply_crds(cluster, REPO / "crds")
    install_classes(cluster)
    release = install(
        cluster,
        "gs-gitops",
        "gs-gitops-system",
        tmp_path,
        "--set",
        f"watchNamespaces={{{namespace}}}",
    )
    docs = manifests(cluster, release.name, release.namespace)
    assert {d["kind"] for d in docs} >= {"Role", "RoleBinding", "ClusterRole"}
    op = ChartOperator(docs, release.kubeconfig, tmp_path / "operator.log", "gs-gitops-x")
    assert f"--namespace={namespace}" in op.argv
    op.start()
    try:
        client_side = tmp_path / "client-side.yaml"
        client_side.write_text(yaml.safe_dump(valid_service("csa")))
        server_side = tmp_path / "server-side.yaml"
        server_side.write_text(yaml.safe_dump(valid_service("ssa")))
        cluster.kubectl("apply", "-n", namespace, "-f", str(client_side))
        cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", str(server_side))
        for name in ("csa", "ssa"):
            wait_for(
                partial(settled, cluster, name, namespace), 90, f"{name} settled", interval=0.5
            )

        for path, extra in ((client_side, ()), (server_side, ("--server-side",))):
            diff = kubectl_diff(cluster, path, namespace, *extra)
            assert diff.returncode == 0 and diff.stdout == "", f"{path.name}:\n{diff.stdout}"

        # Nothing foreign on the user's object: no annotations of ours, no labels, and no
        # finalizer (the periodic work runs from operator-level loops, not kopf timers).
        obj = get_json(cluster, "inferenceservice", "csa", "-n", namespace)
        assert set(obj["metadata"].get("annotations", {})) <= {
            "kubectl.kubernetes.io/last-applied-configuration"
        }
        assert not obj["metadata"].get("finalizers"), obj["metadata"]["finalizers"]
        assert "labels" not in obj["metadata"]

        settle(5)  # promotions and the autoscaler's first status land
        before = reconcile_writes(cluster)
        # The counters are keyed as expected (else the comparison below proves nothing).
        assert before.get(f"{SERVICES_PLURAL}/status", 0) > 0 and before.get("deployments/", 0) > 0
        cluster.kubectl("apply", "-n", namespace, "-f", str(client_side))
        cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", str(server_side))
        settle(10)  # two autoscaler ticks; any watch event from the re-apply is handled by now
        after = reconcile_writes(cluster)
        grown = {
            k: after.get(k, 0) - before.get(k, 0)
            for k in RECONCILE_WRITES
            if after.get(k, 0) != before.get(k, 0)
        }
        assert grown == {}, f"re-applying the manifests caused writes: {grown}"
        for name in ("csa", "ssa"):
            assert settled(cluster, name, namespace), f"{name} no longer settled"

        # The Argo CD health check on the live objects.
        health = argocd_health()
        if health.lua_binary() is not None:
            for name in ("csa", "ssa"):
                live = get_json(cluster, "inferenceservice", name, "-n", namespace)
                assert health.run_health(live)[0] == "Healthy"
            cls = get_json(cluster, "acceleratorclass", "h100")
            assert health.run_health(cls)[0] == "Healthy"
    finally:
        cleanup_services(cluster, namespace)
        op.stop()
        uninstall(cluster, release)
    text = op.text()
    assert "Traceback" not in text, text[-3000:]
    assert forbidden_lines(text) == [], "\n".join(forbidden_lines(text))


def test_kustomize_overlay_builds_and_passes_admission(
    cluster: ClusterHandle, namespace: str
) -> None:
    apply_crds(cluster, REPO / "crds")
    out = cluster.kubectl(
        "kustomize", str(REPO / "examples" / "gitops" / "overlays" / "production")
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [
        ("InferenceService", "ml-prod")
    ]
    svc = docs[0]
    assert svc["spec"]["scaling"] == {"minReplicas": 2, "maxReplicas": 8, "warmPool": 1}
    assert svc["metadata"]["labels"] == {"environment": "production"}
    svc["metadata"]["namespace"] = namespace  # the overlay's namespace doesn't exist here
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(svc), check=False
    )
    assert result.returncode == 0, result.stderr
