"""The operator against the real control plane: admission, reconcile, status, recovery."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.invalid_cases import CASES, Case, valid_service
from e2e.operatorkit import OperatorProcess, operator_with_classes, settle, write_counts
from gpuserve.resources.naming import SERVICES_PLURAL

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def operator(
    cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_classes(cluster, tmp_path_factory.mktemp("operator"))


def apply(
    cluster: ClusterHandle, obj: dict[str, Any], namespace: str | None = None, check: bool = True
) -> Any:
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    return cluster.kubectl(*args, stdin=yaml.safe_dump(obj), check=check)


def get_json(cluster: ClusterHandle, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return None


def wait_condition(
    cluster: ClusterHandle, ns: str, name: str, type_: str, status: str, timeout: float = 60.0
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = get_json(cluster, "inferenceservice", name, "-n", ns)
        c = condition(obj, type_)
        return obj if c and c["status"] == status else None

    return wait_for(probe, timeout, f"{name} {type_}={status}")


def apply_ready(cluster: ClusterHandle, namespace: str, name: str) -> dict[str, Any]:
    """A valid service applied, once it is Ready."""
    apply(cluster, valid_service(name), namespace)
    return wait_condition(cluster, namespace, name, "Ready", "True", timeout=90)


def test_crds_are_explained(operator: OperatorProcess, cluster: ClusterHandle) -> None:
    out = cluster.kubectl("explain", "inferenceservice.spec.batching").stdout
    assert "maxQueueDelay" in out and "batcher may hold a request" in out
    out = cluster.kubectl("explain", "acceleratorclass.spec.mig").stdout
    assert "nvidia.com/mig-<profile>" in out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_admission_rejects_invalid_manifest_naming_the_field(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str, case: Case
) -> None:
    body = case.body(f"bad-{case.id}"[:50])
    result = apply(
        cluster, body, namespace if case.kind == "InferenceService" else None, check=False
    )
    assert result.returncode != 0, f"{case.id} was accepted"
    # The API server spells nested fields with dots, list items with [i].
    assert case.field in result.stderr, f"{case.id}: {result.stderr}"


def test_operator_survived_bad_input(operator: OperatorProcess) -> None:
    assert operator.alive()
    assert "Traceback" not in operator.log_text()


@pytest.mark.parametrize(
    ("case_id", "change", "reason"),
    [
        (
            "unknown-class",
            {"accelerators": {"classes": ["no-such-class"]}},
            "AcceleratorClassNotFound",
        ),
        (
            "fp8-on-ampere",
            {"precision": "fp8", "accelerators": {"classes": ["a100-3g40gb"]}},
            "PrecisionUnsupported",
        ),
        (
            "mig-two-slices",
            {"accelerators": {"classes": ["a100-1g10gb"], "gpusPerPod": 2}},
            "MigNeedsOneSlice",
        ),
    ],
)
def test_rules_needing_cluster_state_end_stalled(
    operator: OperatorProcess,
    cluster: ClusterHandle,
    namespace: str,
    case_id: str,
    change: dict[str, Any],
    reason: str,
) -> None:
    body = valid_service(case_id)
    body["spec"].update(change)
    apply(cluster, body, namespace)
    obj = wait_condition(cluster, namespace, case_id, "Stalled", "True")
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["reason"] == reason
    assert stalled["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "Ready")["status"] == "False"  # type: ignore[index]
    assert operator.alive()


def _pods(cluster: ClusterHandle, ns: str, name: str) -> list[dict[str, Any]]:
    out = get_json(cluster, "pods", "-n", ns, "-l", f"gpuserve.io/service={name}")
    return [p for p in out["items"] if not p["metadata"].get("deletionTimestamp")]


def _node_product(cluster: ClusterHandle, node: str) -> str:
    return str(get_json(cluster, "node", node)["metadata"]["labels"]["nvidia.com/gpu.product"])


def test_apply_reconciles_to_ready_on_the_right_gpus(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    body = valid_service("chat")
    body["spec"]["accelerators"] = {"classes": ["h100", "l4"]}
    body["spec"]["scaling"] = {"minReplicas": 2, "maxReplicas": 4, "warmPool": 1}
    apply(cluster, body, namespace)
    obj = wait_condition(cluster, namespace, "chat", "Ready", "True", timeout=90)
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    wait_for(
        lambda: (
            get_json(cluster, "inferenceservice", "chat", "-n", namespace)["status"].get(
                "warmReplicas"
            )
            == 1
        ),
        60,
        "one warm pod",
    )
    kinds = {
        kind: get_json(cluster, kind, "-n", namespace, "-l", "gpuserve.io/service=chat")["items"]
        for kind in ("configmap", "deployment", "service", "poddisruptionbudget")
    }
    deps = {d["metadata"]["name"]: d for d in kinds["deployment"]}
    assert sorted(deps) == ["chat-h100", "chat-h100-standby", "chat-l4", "chat-l4-standby"]

    # The warm pool runs in the standby Deployment, at the lowest PriorityClass. A standby
    # pod that was Ready first may be serving until a serving-priority pod relieves it
    # (the standby Deployment is one larger meanwhile), so wait for the settled sizes.
    def sizes() -> list[int]:
        items = get_json(cluster, "deployment", "-n", namespace, "-l", "gpuserve.io/service=chat")
        by_name = {d["metadata"]["name"]: d["spec"]["replicas"] for d in items["items"]}
        return [by_name[n] for n in sorted(by_name)]

    wait_for(lambda: sizes() == [2, 1, 0, 0], 60, "serving 2 on h100, warm pool 1")
    assert {n: d["spec"]["template"]["spec"]["priorityClassName"] for n, d in deps.items()} == {
        "chat-h100": "gpuserve-interactive",
        "chat-h100-standby": "gpuserve-standby",
        "chat-l4": "gpuserve-interactive",
        "chat-l4-standby": "gpuserve-standby",
    }
    assert (
        len(kinds["configmap"]) == len(kinds["service"]) == len(kinds["poddisruptionbudget"]) == 1
    )
    pods = _pods(cluster, namespace, "chat")
    assert len(pods) == 3
    for pod in pods:
        assert _node_product(cluster, pod["spec"]["nodeName"]) == "NVIDIA-H100-80GB-HBM3"
    roles = sorted(
        (p["metadata"]["labels"]["gpuserve.io/role"], p["spec"]["priorityClassName"]) for p in pods
    )
    assert roles == [
        ("serving", "gpuserve-interactive"),
        ("serving", "gpuserve-interactive"),
        ("warm", "gpuserve-standby"),
    ]
    endpoints = get_json(cluster, "endpoints", "chat", "-n", namespace)
    addresses = [a for s in endpoints.get("subsets", []) for a in s.get("addresses", [])]
    assert len(addresses) == 2  # the warm pod is out of the Service
    # Every pod starts warm and is promoted once ready; a standby pod that was ready before
    # the serving pods was promoted too, then relieved. Either way each promotion and
    # relief is announced once: promotions less reliefs are the two serving pods.
    def announced() -> dict[str, int]:
        events = get_json(
            cluster, "events", "-n", namespace, "--field-selector", "involvedObject.name=chat"
        )["items"]
        counts = {"Applied": 0, "Promoted": 0, "Demoted": 0}
        for e in events:
            if e["reason"] in counts:
                counts[e["reason"]] += e.get("count") or 1
        return counts

    def all_announced() -> dict[str, int] | None:
        counts = announced()
        return counts if counts["Applied"] and counts["Promoted"] - counts["Demoted"] == 2 else None

    wait_for(all_announced, 30, "two promotions announced", explain=lambda: str(announced()))


def test_batching_change_updates_config_and_rolls_pods(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    body = valid_service("roll")
    apply(cluster, body, namespace)
    wait_condition(cluster, namespace, "roll", "Ready", "True", timeout=90)
    before = get_json(cluster, "configmap", "roll-triton-config", "-n", namespace)
    old_pods = {p["metadata"]["name"] for p in _pods(cluster, namespace, "roll")}
    body["spec"]["batching"]["maxQueueDelay"] = "5ms"
    apply(cluster, body, namespace)

    def rolled() -> bool:
        cm = get_json(cluster, "configmap", "roll-triton-config", "-n", namespace)
        pods = {p["metadata"]["name"] for p in _pods(cluster, namespace, "roll")}
        return (
            "max_queue_delay_microseconds: 5000" in cm["data"]["config.pbtxt"]
            and bool(pods)
            and not (pods & old_pods)
        )

    wait_for(rolled, 90, "new config and new pods")
    assert "max_queue_delay_microseconds: 2000" in before["data"]["config.pbtxt"]
    obj = wait_condition(cluster, namespace, "roll", "Ready", "True", timeout=90)
    assert obj["status"]["observedGeneration"] == 2


def test_delete_garbage_collects_children(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    apply_ready(cluster, namespace, "gone")
    cluster.kubectl(
        "delete", "inferenceservice", "gone", "-n", namespace, "--wait=true", "--timeout=60s"
    )

    def empty() -> bool:
        for kind in ("configmap", "deployment", "service", "poddisruptionbudget", "pods"):
            items = get_json(cluster, kind, "-n", namespace, "-l", "gpuserve.io/service=gone")
            if items["items"]:
                return False
        return True

    wait_for(empty, 90, "children garbage-collected")


def test_steady_state_sends_no_writes(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    apply_ready(cluster, namespace, "quiet")
    # The autoscaler's first evaluation records its verdict (here: no Prometheus, hold).
    wait_condition(cluster, namespace, "quiet", "MetricsAvailable", "False", timeout=60)
    settle(5)  # let promotions, events and status land

    # Earlier tests' namespaces are deleted in the background; their teardown (deletes,
    # finalizer removal) must not be counted as this service's writes.
    def alone() -> bool:
        names = cluster.kubectl("get", "namespaces", "-o", "name").stdout.split()
        return [n for n in names if n.startswith("namespace/e2e-")] == [f"namespace/{namespace}"]

    wait_for(alone, 120, "other test namespaces gone")
    settle(2)
    before = write_counts(cluster)
    # The counter keys are real: the service's children were written through them.
    assert before.get("configmaps/", 0) > 0 and before.get("deployments/", 0) > 0, before
    # The resync timer reconciles every service at least once in this window.
    settle(35)
    after = write_counts(cluster)
    watched = (
        "configmaps/",
        "deployments/",
        "services/",
        "poddisruptionbudgets/",
        "pods/",
        f"{SERVICES_PLURAL}/",
        f"{SERVICES_PLURAL}/status",
    )
    grown = {
        k: after.get(k, 0) - before.get(k, 0)
        for k in watched
        if after.get(k, 0) != before.get(k, 0)
    }
    assert grown == {}, f"writes while nothing changed: {grown}"


def test_drift_on_a_child_is_corrected(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    apply_ready(cluster, namespace, "drift")
    cluster.kubectl(
        "patch",
        "configmap",
        "drift-triton-config",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"data": {"config.pbtxt": 'name: "tampered"\n'}}),
    )

    def restored() -> bool:
        cm = get_json(cluster, "configmap", "drift-triton-config", "-n", namespace)
        return 'name: "sleeper"' in cm["data"]["config.pbtxt"]

    wait_for(restored, 30, "ConfigMap restored")


def test_killed_operator_converges_without_duplicates(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    names = [f"crash-{i}" for i in range(5)]
    for name in names:
        apply(cluster, valid_service(name), namespace)
    settle(0.5)
    operator.kill9()  # mid-reconcile: some services half-applied, some untouched
    operator.start()
    for name in names:
        wait_condition(cluster, namespace, name, "Ready", "True", timeout=120)
    deployments = get_json(cluster, "deployments", "-n", namespace)["items"]
    per_service: dict[str, int] = {}
    for d in deployments:
        svc = d["metadata"]["labels"]["gpuserve.io/service"]
        per_service[svc] = per_service.get(svc, 0) + 1
    assert per_service == {name: 1 for name in names}  # serving only: no warm pool
    for kind in ("configmaps", "services", "poddisruptionbudgets"):
        assert len(
            get_json(cluster, kind, "-n", namespace, "-l", "app.kubernetes.io/managed-by=gpuserve")[
                "items"
            ]
        ) == len(names)
    assert sum(len(_pods(cluster, namespace, n)) for n in names) == len(names)


def test_class_without_capacity_is_reported_within_one_reconcile(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    ghost = {
        "apiVersion": "gpuserve.io/v1alpha1",
        "kind": "AcceleratorClass",
        "metadata": {"name": "b200-none"},
        "spec": {"gpuProduct": "NVIDIA-B200", "computeCapability": "10.0"},
    }
    apply(cluster, ghost)
    body = valid_service("nocap")
    body["spec"]["accelerators"] = {"classes": ["b200-none"]}
    apply(cluster, body, namespace)
    obj = wait_condition(cluster, namespace, "nocap", "Schedulable", "False", timeout=30)
    msg = condition(obj, "Schedulable")["message"]  # type: ignore[index]
    assert "b200-none" in msg
    assert condition(obj, "Stalled")["reason"] == "InsufficientCapacity"  # type: ignore[index]
    assert _pods(cluster, namespace, "nocap") == []  # nothing left silently Pending
    cluster.kubectl("delete", "acceleratorclass", "b200-none")
