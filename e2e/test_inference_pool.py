"""An LLM service's InferencePool on the real API server, with the Gateway API Inference
Extension's real CRD: accepted, selecting the serving pods only, recreated when deleted,
collected with its service; a malformed pool is refused by the CRD's own validation."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import extension_crds, lifecycle, reaping, settings
from e2e.cluster.testkit import ClusterHandle, run_cluster_cli, wait_for
from e2e.invalid_cases import valid_llm_service, valid_service
from e2e.operatorkit import (
    OperatorProcess,
    install_classes,
    install_crds,
    operator_with_classes,
)
from gpuserve.resources import inference_pool
from gpuserve.resources.naming import FIELD_MANAGER, LABEL_ROLE, LABEL_SERVICE, ROLE_SERVING

pytestmark = pytest.mark.cluster
CRD_NAME = f"{inference_pool.PLURAL}.{inference_pool.API_GROUP}"


def _crd_present(cluster: ClusterHandle) -> bool:
    return cluster.kubectl("get", "crd", CRD_NAME, check=False).returncode == 0


@pytest.fixture(scope="module")
def pool_crd(cluster: ClusterHandle) -> Iterator[None]:
    """The extension's CRD, as `up` installs it; installed here (and removed again) on a
    cluster started before it was part of `up`."""
    if _crd_present(cluster):
        yield
        return
    if not extension_crds.is_fetched():
        pytest.fail("the InferencePool CRD is not cached; run `make cluster-build` first")
    for path in extension_crds.paths():
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s")
    try:
        yield
    finally:
        cluster.kubectl("delete", "crd", CRD_NAME, "--wait=false")


@pytest.fixture(scope="module")
def operator(
    cluster: ClusterHandle, pool_crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_classes(cluster, tmp_path_factory.mktemp("operator"))


def _get(cluster: ClusterHandle, *args: str) -> Any:
    result = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _pool(cluster: ClusterHandle, namespace: str, name: str) -> Any:
    return _get(cluster, "inferencepool", name, "-n", namespace, "--show-managed-fields")


def _apply(cluster: ClusterHandle, obj: dict[str, Any], namespace: str, check: bool = True) -> Any:
    return cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=check
    )


def _pod_names(cluster: ClusterHandle, namespace: str, selector: dict[str, str]) -> set[str]:
    labels = ",".join(f"{k}={v}" for k, v in selector.items())
    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", labels, "-o", "name").stdout
    return set(out.split())


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next(
        (c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None
    )


def _llm_service(name: str) -> dict[str, Any]:
    body = valid_llm_service(name)
    # No volume to wait for: KWOK runs the pods (nothing is served in this test).
    body["spec"]["model"]["storageUri"] = "demo://llm_emulator"
    # One pod serving and one warm: the pool must select the first only.
    body["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 2, "warmPool": 1}
    return body


def test_an_llm_service_gets_a_pool_the_api_server_accepts(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    name = "chat"
    _apply(cluster, _llm_service(name), namespace)
    pool = wait_for(lambda: _pool(cluster, namespace, name), 60, f"InferencePool {name}")
    svc = _get(cluster, "inferenceservice", name, "-n", namespace)

    spec = pool["spec"]
    assert pool["apiVersion"] == inference_pool.API_VERSION
    assert spec["selector"]["matchLabels"] == {LABEL_SERVICE: name, LABEL_ROLE: ROLE_SERVING}
    assert spec["targetPorts"] == [{"number": 8000}]
    picker = spec["endpointPickerRef"]
    assert (picker["name"], picker["port"], picker["failureMode"]) == (
        f"{name}-epp",
        {"number": 9002},
        "FailClose",
    )
    (owner,) = pool["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "InferenceService",
        svc["metadata"]["uid"],
        True,
    )
    managers = {
        m["manager"] for m in pool["metadata"]["managedFields"] if m["operation"] == "Apply"
    }
    assert FIELD_MANAGER in managers

    # The pool selects the service's serving pods, and not its warm standby pod.
    def one_serving_one_warm() -> tuple[set[str], set[str]] | None:
        serving = _pod_names(cluster, namespace, {LABEL_SERVICE: name, LABEL_ROLE: ROLE_SERVING})
        every = _pod_names(cluster, namespace, {LABEL_SERVICE: name})
        return (serving, every) if len(serving) == 1 and len(every) == 2 else None

    def pods() -> str:
        return cluster.kubectl(
            "get", "pods", "-n", namespace, "-L", LABEL_ROLE, "-o", "wide", check=False
        ).stdout

    serving, every = wait_for(
        one_serving_one_warm, 90, f"{name}: one serving, one warm pod", explain=pods
    )
    selected = _pod_names(cluster, namespace, spec["selector"]["matchLabels"])
    assert selected == serving and selected < every

    obj = wait_for(
        lambda: (
            s
            if (
                c := _condition(
                    s := _get(cluster, "inferenceservice", name, "-n", namespace),
                    "InferencePoolApplied",
                )
            )
            and c["status"] == "True"
            else None
        ),
        30,
        "InferencePoolApplied=True",
    )
    cond = _condition(obj, "InferencePoolApplied")
    assert cond is not None and f"{name}-epp:9002" in cond["message"]

    # A pool deleted under the operator is made again; a second one is never made.
    cluster.kubectl("delete", "inferencepool", name, "-n", namespace)
    again = wait_for(
        lambda: (
            p
            if (p := _pool(cluster, namespace, name))
            and p["metadata"]["uid"] != pool["metadata"]["uid"]
            else None
        ),
        60,
        "the deleted InferencePool made again",
    )
    assert again["spec"]["selector"] == spec["selector"]
    listed = _get(cluster, "inferencepools", "-n", namespace)["items"]
    assert [p["metadata"]["name"] for p in listed] == [name]

    # Deleting the service takes the pool with it (owner reference, garbage collector).
    cluster.kubectl("delete", "inferenceservice", name, "-n", namespace)
    wait_for(lambda: _pool(cluster, namespace, name) is None, 90, "the pool collected")
    assert operator.alive()
    assert "Traceback" not in operator.log_text()


def test_a_service_that_stops_being_an_llm_service_loses_its_pool(
    operator: OperatorProcess, cluster: ClusterHandle, namespace: str
) -> None:
    name = "was-llm"
    _apply(cluster, _llm_service(name), namespace)
    wait_for(lambda: _pool(cluster, namespace, name), 60, f"InferencePool {name}")
    # kubectl apply drops what the new manifest no longer says (llm, token objectives).
    _apply(cluster, valid_service(name), namespace)
    wait_for(lambda: _pool(cluster, namespace, name) is None, 60, "the pool retired")

    def condition_gone() -> bool:
        svc = _get(cluster, "inferenceservice", name, "-n", namespace)
        return svc is not None and _condition(svc, "InferencePoolApplied") is None

    wait_for(condition_gone, 60, "InferencePoolApplied dropped from the status")
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "reason=Retired", "-o", "json"
    ).stdout
    assert f"deleted InferencePool {name}" in events
    assert operator.alive() and "Traceback" not in operator.log_text()


def _valid_pool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": inference_pool.API_VERSION,
        "kind": inference_pool.KIND,
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {LABEL_SERVICE: name, LABEL_ROLE: ROLE_SERVING}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}},
        },
    }


@pytest.mark.parametrize(
    ("case", "breaks", "says"),
    [
        ("no-picker-port", lambda s: s["endpointPickerRef"].pop("port"), "port is required"),
        (
            "port-out-of-range",
            lambda s: s.update(targetPorts=[{"number": 70000}]),
            "spec.targetPorts[0].number",
        ),
        ("no-selector", lambda s: s.pop("selector"), "spec.selector"),
        (
            "bad-failure-mode",
            lambda s: s["endpointPickerRef"].update(failureMode="Retry"),
            "spec.endpointPickerRef.failureMode",
        ),
    ],
)
def test_the_real_crd_rejects_a_malformed_pool(
    pool_crd: None, cluster: ClusterHandle, namespace: str, case: str, breaks: Any, says: str
) -> None:
    good = _valid_pool(f"ok-{case}")
    assert _apply(cluster, good, namespace, check=False).returncode == 0
    bad = _valid_pool(f"bad-{case}")
    breaks(bad["spec"])
    result = _apply(cluster, bad, namespace, check=False)
    assert result.returncode != 0, f"{case} was accepted"
    assert says in result.stderr, result.stderr
    assert _pool(cluster, namespace, bad["metadata"]["name"]) is None


def test_the_cached_crd_is_the_pinned_ga_pool() -> None:
    if not extension_crds.is_fetched():
        pytest.skip("the InferencePool CRD is not cached (make cluster-build)")
    (doc,) = [yaml.safe_load(Path(p).read_text()) for p in extension_crds.paths()]
    versions = {v["name"]: v for v in doc["spec"]["versions"]}
    assert doc["spec"]["group"] == inference_pool.API_GROUP and versions["v1"]["served"]
    schema = versions["v1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"selector", "targetPorts", "endpointPickerRef"} <= set(schema["required"])


# A cluster of its own, beside the shared one (the lifecycle tests use offset 1000): the
# CRD is cluster-wide, and removing it from the shared cluster would change other tests.
BARE_PORT_OFFSET = 1100


@pytest.fixture
def bare_cluster(cluster: ClusterHandle, tmp_path: Path) -> Iterator[ClusterHandle]:
    """A throwaway local cluster without the InferencePool CRD."""
    if not cluster.local:
        pytest.skip("needs the local harness")
    reaping.become_subreaper()
    env = dict(
        os.environ,
        GPUSERVE_CLUSTER_DIR=str(tmp_path / "cluster"),
        GPUSERVE_PORT_OFFSET=str(BARE_PORT_OFFSET),
    )
    state = settings.StateLayout(tmp_path / "cluster")

    def cli(command: str) -> subprocess.CompletedProcess[str]:
        return run_cluster_cli(command, 300, env)

    try:
        up = cli("up")
        assert up.returncode == 0, up.stderr
        handle = ClusterHandle(state.admin_kubeconfig, started_here=True, local=True)
        handle.kubectl("delete", "crd", CRD_NAME, "--wait=true")
        yield handle
    finally:
        pids = [r.pid for r in lifecycle.read_records(state).values()]
        cli("down")
        reaping.reap(pids)


def test_without_the_crd_the_pool_is_skipped_said_so_and_applied_once_installed(
    bare_cluster: ClusterHandle, tmp_path: Path
) -> None:
    cluster = bare_cluster
    install_crds(cluster)
    install_classes(cluster)
    namespace = "llm"
    cluster.kubectl("create", "namespace", namespace)
    wait_for(
        lambda: (
            cluster.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0
        ),
        30,
        "service account default",
    )
    name = "chat"
    with OperatorProcess(cluster, tmp_path / "operator.log") as operator:
        _apply(cluster, _llm_service(name), namespace)

        def condition_is(type_: str, status: str) -> dict[str, Any] | None:
            obj = _get(cluster, "inferenceservice", name, "-n", namespace)
            c = _condition(obj or {}, type_)
            return obj if c is not None and c["status"] == status else None

        # The service serves without the pool (nothing waits for the missing kind).
        def seen() -> str:
            obj = _get(cluster, "inferenceservice", name, "-n", namespace) or {}
            pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False)
            return (
                f"{obj.get('status', {}).get('conditions')}\n{pods.stdout}{pods.stderr}\n"
                f"operator log:\n{operator.log_tail(30)}"
            )

        wait_for(
            lambda: condition_is("Ready", "True"), 90, "Ready=True without the CRD", explain=seen
        )
        obj = wait_for(lambda: condition_is("InferencePoolApplied", "False"), 30, "skipped")
        cond = _condition(obj, "InferencePoolApplied")
        assert cond is not None and cond["reason"] == "CRDNotInstalled"
        assert _condition(obj, "Stalled")["status"] == "False"  # type: ignore[index]

        def skipped_events() -> list[Any]:
            out = _get(
                cluster,
                "events",
                "-n",
                namespace,
                "--field-selector",
                "reason=InferencePoolSkipped",
            )
            return list((out or {}).get("items", []))

        wait_for(skipped_events, 30, "an InferencePoolSkipped event")
        time.sleep(35)  # past one resync of the service: still one event, seen once
        (event,) = skipped_events()
        assert event.get("count", 1) == 1, event

        for path in extension_crds.paths():
            cluster.kubectl("apply", "--server-side", "-f", str(path))
        # Discovery is asked again within a minute, the next resync applies the pool.
        wait_for(lambda: _pool(cluster, namespace, name), 120, "the pool once the CRD is in")
        wait_for(lambda: condition_is("InferencePoolApplied", "True"), 30, "applied")
        assert operator.alive()
        assert "Traceback" not in operator.log_text()
