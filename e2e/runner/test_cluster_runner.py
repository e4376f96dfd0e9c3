"""The runner against the real control plane, without the operator: the Deployment and
ConfigMap are the operator's own rendering, applied with kubectl; roles are flipped by hand.

Checks: a Triton per runnable pod, pods set Ready from Triton's readiness, Prometheus targets
with the pod labels, serving endpoints follow role and readiness, a crashed Triton makes its
pod NotReady and is restarted, a deleted pod drains without failing a request, and nothing
is left running afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.startup import priority_classes
from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.loadgen import Limits, LoadResult, Target, run_constant_rate
from e2e.manifests import example, rendered_on_h100
from e2e.marks import LOCAL_DATA_PLANE
from e2e.operatorkit import install_crds
from e2e.runner import LocalDataPlane, RunnerSettings
from e2e.triton.process import pid_alive

pytestmark = LOCAL_DATA_PLANE
SERVICE = "sleeper-chat"
WAIT_S = 60.0


def kubectl_json(cluster: ClusterHandle, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def deploy_rendered(cluster: ClusterHandle, namespace: str, replicas: int) -> None:
    """Creates the InferenceService (the runner reads its storageUri) and applies the
    operator's rendering of its ConfigMap and h100 Deployment."""
    body = example("sleeper-interactive")
    body["spec"]["triton"] = {"exitTimeoutSeconds": 5}
    body["metadata"]["namespace"] = namespace
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(body))
    live = kubectl_json(cluster, "get", "inferenceservice", SERVICE, "-n", namespace)
    children = rendered_on_h100(live, replicas, {"gpuserve.io/readiness": "external"})
    # The operator creates its PriorityClasses at start-up; no operator runs here.
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(priority_classes()))
    wanted = [
        c
        for c in children
        if c["kind"] == "ConfigMap"
        or (c["kind"] == "Deployment" and c["metadata"]["name"].endswith("-h100"))
    ]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(wanted))


def pods(cluster: ClusterHandle, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl_json(
        cluster, "get", "pods", "-n", namespace, "-l", f"gpuserve.io/service={SERVICE}"
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def all_ready(cluster: ClusterHandle, namespace: str, count: int) -> list[dict[str, Any]]:
    """The pods when exactly ``count`` exist and all are Ready, else []."""
    current = pods(cluster, namespace)
    return current if len(current) == count and all(is_ready(p) for p in current) else []


def set_role(cluster: ClusterHandle, namespace: str, pod: str, role: str) -> None:
    cluster.kubectl("label", "pod", pod, "-n", namespace, f"gpuserve.io/role={role}", "--overwrite")


@pytest.fixture
def plane(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[LocalDataPlane]:
    install_crds(cluster)
    settings = RunnerSettings(
        namespaces=frozenset({namespace}), restart_backoff_s=1.0, log_dir=tmp_path / "runner"
    )
    with LocalDataPlane(cluster.kubeconfig, settings=settings) as dp:
        yield dp


def test_runner_serves_drives_readiness_and_drains(
    cluster: ClusterHandle, namespace: str, plane: LocalDataPlane
) -> None:
    runner = plane.runner
    deploy_rendered(cluster, namespace, replicas=2)
    ready = wait_for(
        lambda: all_ready(cluster, namespace, 2),
        WAIT_S,
        "two pods Ready",
    )
    names = sorted(p["metadata"]["name"] for p in ready)
    infos = {i.pod: i for i in runner.instances()}
    assert sorted(infos) == names and all(i.state == "ready" for i in infos.values())
    pids = [i.pid for i in infos.values() if i.pid]
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)

    # Prometheus scrapes every pod's Triton under the pod's labels.
    assert plane.prometheus is not None
    series = plane.prometheus.wait_for(
        f'nv_inference_request_success{{namespace="{namespace}",service="{SERVICE}"}}',
        lambda r: len(r) == 2,
        timeout=30,
    )
    assert {s["metric"]["pod"] for s in series} == set(names)
    assert {s["metric"]["accelerator_class"] for s in series} == {"h100"}

    # Warm pods are not endpoints; serving + Ready ones are.
    assert runner.serving_endpoints(namespace, SERVICE) == []
    for name in names:
        set_role(cluster, namespace, name, "serving")
    wait_for(
        lambda: len(runner.serving_endpoints(namespace, SERVICE)) == 2,
        WAIT_S,
        "two serving endpoints",
    )
    target = Target(model="sleeper", endpoints=runner.endpoints_for(namespace, SERVICE))
    result = run_constant_rate(
        target, rate_per_s=50, duration_s=2, limits=Limits(max_requests=500, max_wall_s=30)
    )
    assert result.failures == 0 and result.successes == 100
    assert len({r.endpoint for r in result.records}) == 2

    # A crashed Triton: the pod goes NotReady, leaves the endpoints, and is restarted.
    victim = names[0]
    victim_pid = infos[victim].pid
    assert victim_pid is not None
    os.kill(victim_pid, signal.SIGKILL)  # our own child process, by PID
    wait_for(
        lambda: (
            not any(
                is_ready(p) for p in pods(cluster, namespace) if p["metadata"]["name"] == victim
            )
        ),
        WAIT_S,
        "crashed pod NotReady",
    )
    wait_for(
        lambda: any(
            is_ready(p) for p in pods(cluster, namespace) if p["metadata"]["name"] == victim
        ),
        WAIT_S,
        "restarted pod Ready",
    )
    restarted = next(i for i in runner.instances() if i.pod == victim)
    assert restarted.restarts == 1 and restarted.pid != victim_pid
    wait_for(
        lambda: len(runner.serving_endpoints(namespace, SERVICE)) == 2,
        WAIT_S,
        "both endpoints back",
    )

    # Deleting a serving pod under load drops no request: it leaves the endpoints first,
    # then Triton drains what it has in flight.
    outcome: dict[str, LoadResult] = {}

    def load() -> None:
        outcome["r"] = run_constant_rate(
            target, rate_per_s=80, duration_s=6, limits=Limits(max_requests=1000, max_wall_s=60)
        )

    thread = threading.Thread(target=load)
    thread.start()
    wait_for(lambda: any(e.what == "pod-ready" for e in runner.events), 5, "load running")
    threading.Event().wait(1.5)
    old_pid = next(i.pid for i in runner.instances() if i.pod == names[1])
    cluster.kubectl("delete", "pod", names[1], "-n", namespace, "--wait=false")
    thread.join(timeout=90)
    result = outcome["r"]
    assert result.failures == 0, [r.error for r in result.records if not r.ok][:5]
    assert result.successes == 480
    wait_for(
        lambda: old_pid is not None and not pid_alive(old_pid),
        WAIT_S,
        "the deleted pod's Triton to exit",
    )
    drained = [e for e in runner.events if e.pod == names[1]]
    assert [e.what for e in drained][-2:] == ["draining", "stopped"]


def test_runner_stops_every_triton_it_started(
    cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    install_crds(cluster)
    settings = RunnerSettings(namespaces=frozenset({namespace}))
    with LocalDataPlane(cluster.kubeconfig, settings=settings) as dp:
        deploy_rendered(cluster, namespace, replicas=1)
        infos = dp.runner.wait_for(
            lambda i: len(i) == 1 and i[0].state == "ready", WAIT_S, "one Triton ready"
        )
        pid = infos[0].pid
        workdir = dp.runner._workdir
    assert pid is not None and not pid_alive(pid)
    assert workdir is not None and not workdir.exists()
    assert dp.prometheus is None
