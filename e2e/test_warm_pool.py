"""Warm pools and placement on the local stack (real Triton per pod, real Prometheus, the
operator's autoscaler).

- warmPool 2: two standby pods are Ready but outside the Service, at the standby
  PriorityClass (below serving pods); a load step promotes warm pods first (same pod, same
  Triton process: no restart), the pool refills, and serving-priority pods take over from
  the promoted standby pods; on scale-down the service goes back to 1 serving + 2 warm,
  while a bounded load through the serving endpoints loses no request.
- A serving pod of another service preempts a standby pod when the GPUs are full.
- With the H100 pool full, further replicas go to the A100 MIG 3g.40gb slices, then to L4,
  and status.pools reports each class.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.loadgen import Limits, LoadResult, Target, run_constant_rate
from e2e.manifests import H100_PRODUCT, LOCAL_CLASS, sleeper_service
from e2e.marks import LOCAL_DATA_PLANE
from e2e.runner.stack import (
    Stack,
    apply,
    condition,
    endpoint_ips,
    events,
    local_stack,
    pod_ready,
    service_pods,
    service_status,
)

pytestmark = LOCAL_DATA_PLANE

H100 = H100_PRODUCT
WAIT_S = 120.0
SERVING_PRIORITY = 100_000  # gpuserve-interactive
STANDBY_PRIORITY = 1_000  # gpuserve-standby


def sleeper(
    name: str, classes: list[str], scaling: dict[str, Any], params: dict[str, str] | None = None
) -> dict[str, Any]:
    params = params or {"exec_time_ms": "40", "per_item_ms": "2"}
    return sleeper_service(
        name,
        classes=classes,
        scaling=scaling,
        exec_time_ms=float(params["exec_time_ms"]),
        per_item_ms=float(params["per_item_ms"]),
        triton={"exitTimeoutSeconds": 5},
    )


@pytest.fixture
def stack(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    with local_stack(cluster, tmp_path, namespaces=frozenset({namespace})) as s:
        yield s


def roles(cluster: ClusterHandle, namespace: str, name: str) -> dict[str, tuple[str, bool]]:
    """pod name -> (role, Ready)."""
    return {
        p["metadata"]["name"]: (p["metadata"]["labels"].get("gpuserve.io/role", ""), pod_ready(p))
        for p in service_pods(cluster, namespace, name)
    }


def settled(stack: Stack, namespace: str, name: str, serving: int, warm: int) -> bool:
    status = service_status(stack.cluster, namespace, name)
    now = roles(stack.cluster, namespace, name)
    return (
        status.get("replicas") == serving
        and status.get("warmReplicas") == warm
        and sum(1 for r, ok in now.values() if r == "serving" and ok) == serving
        and sum(1 for r, ok in now.values() if r == "warm" and ok) == warm
        and len(now) == serving + warm
    )


def serving_priority_only(cluster: ClusterHandle, namespace: str, name: str) -> bool:
    """Every serving pod is a serving-priority pod, and at least two serve."""
    serving = [
        p
        for p in service_pods(cluster, namespace, name)
        if p["metadata"]["labels"].get("gpuserve.io/role") == "serving"
    ]
    return len(serving) >= 2 and all(
        p["spec"]["priority"] == SERVING_PRIORITY
        and "gpuserve.io/pool" not in p["metadata"]["labels"]
        for p in serving
    )


def run_in_thread(
    target: Target, rate: float, seconds: float
) -> tuple[threading.Thread, dict[str, LoadResult]]:
    out: dict[str, LoadResult] = {}
    limits = Limits(max_requests=int(rate * seconds) + 10, max_wall_s=seconds + 60)
    thread = threading.Thread(
        target=lambda: out.setdefault("r", run_constant_rate(target, rate, seconds, limits)),
        daemon=True,
    )
    thread.start()
    return thread, out


def test_warm_pods_promote_first_refill_and_demote_without_dropping_requests(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(LOCAL_CLASS))
    name = "warm"
    scaling = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "warmPool": 2,
        "scaleDownStabilization": "20s",
        "stableWindow": "20s",
        "panicWindow": "6s",
    }
    apply(cluster, namespace, sleeper(name, ["h100-local"], scaling))
    wait_for(
        lambda: settled(stack, namespace, name, serving=1, warm=2),
        WAIT_S,
        "1 serving + 2 warm pods Ready",
    )

    # Warm pods are Ready yet outside the Service; the serving one is in it.
    pods = {p["metadata"]["name"]: p for p in service_pods(cluster, namespace, name)}
    before = roles(cluster, namespace, name)
    # The warm pool runs below serving pods: the scheduler may preempt it for them.
    priority = {
        n: (p["metadata"]["labels"].get("gpuserve.io/pool"), p["spec"]["priority"])
        for n, p in pods.items()
    }
    assert sorted(priority.values(), key=str) == sorted(
        [(None, SERVING_PRIORITY), ("standby", STANDBY_PRIORITY), ("standby", STANDBY_PRIORITY)],
        key=str,
    ), priority
    assert all(priority[n][0] == "standby" for n, (r, _) in before.items() if r == "warm")
    warm_before = {n for n, (r, _) in before.items() if r == "warm"}
    serving_ip = {pods[n]["status"]["podIP"] for n, (r, _) in before.items() if r == "serving"}
    wait_for(
        lambda: endpoint_ips(cluster, namespace, name) == serving_ip,
        30,
        "the Service's endpoints to be exactly the serving pod",
    )
    runner = stack.plane.runner
    pids = {i.pod: i.pid for i in runner.instances() if i.namespace == namespace}
    assert set(runner.serving_endpoints(namespace, name)) == {
        runner.grpc_address(namespace, n) for n, (r, _) in before.items() if r == "serving"
    }

    # Load: the autoscaler raises desiredReplicas; warm pods are promoted, not new ones.
    target = Target(model="sleeper", endpoints=runner.endpoints_for(namespace, name))
    heavy, heavy_out = run_in_thread(target, rate=200, seconds=40)
    up = wait_for(
        lambda: (s := service_status(cluster, namespace, name)).get("replicas", 0) >= 2 and s,
        60,
        "scale-up under load",
    )
    promoted = {n for n, (r, _) in roles(cluster, namespace, name).items() if r == "serving"}
    # A serving-priority pod may already have relieved it: the events tell what was promoted.
    promoted |= {
        e["message"].split()[1]
        for e in events(cluster, namespace, name)
        if e["reason"] == "Promoted"
    }
    assert promoted & warm_before, (promoted, warm_before)
    for pod in promoted & warm_before:  # same pod, same Triton process: no restart
        info = next((i for i in runner.instances() if i.pod == pod), None)
        assert info is None or (info.pid == pids[pod] and info.restarts == 0)
    reasons = [e["reason"] for e in events(cluster, namespace, name)]
    assert "Promoted" in reasons and "ScaledUp" in reasons, reasons
    # Serving-priority pods take over; the relieved standby pods go back to warm.
    wait_for(
        lambda: serving_priority_only(cluster, namespace, name),
        WAIT_S,
        "serving-priority pods to relieve the promoted standby pods",
    )
    reasons = [e["reason"] for e in events(cluster, namespace, name)]
    assert "Demoted" in reasons, reasons
    # The pool refills with new pods.
    wait_for(
        lambda: (
            (s := service_status(cluster, namespace, name)).get("warmReplicas") == 2
            and s.get("replicas", 0) >= 2
        ),
        WAIT_S,
        "the warm pool to refill",
    )
    # The standby Deployment created new pods behind the promoted ones (which of the warm
    # pods it keeps when it shrinks back is the ReplicaSet's choice: not-ready ones first,
    # then the lowest deletion cost, i.e. the relieved pods).
    created = json.loads(
        cluster.kubectl(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "reason=SuccessfulCreate",
            "-o",
            "json",
        ).stdout
    )["items"]
    standby_pods = {
        e["message"].rsplit(" ", 1)[-1]
        for e in created
        if e["involvedObject"]["name"].startswith(f"{name}-h100-local-standby-")
    }
    assert standby_pods - warm_before, "the warm pool was refilled with new pods"
    heavy.join(timeout=120)
    assert heavy_out["r"].failures == 0
    peak = max(up.get("replicas", 0), service_status(cluster, namespace, name)["replicas"])

    # Scale-down under a light load: demoted pods go warm (up to 2), the rest are deleted,
    # and no request fails - pods leave the endpoints before Triton stops.
    light, light_out = run_in_thread(target, rate=20, seconds=60)
    wait_for(
        lambda: settled(stack, namespace, name, serving=1, warm=2),
        90,
        "scale-down to 1 serving + 2 warm",
    )
    light.join(timeout=120)
    result = light_out["r"]
    assert result.failures == 0, [r.error for r in result.records if not r.ok][:5]
    assert result.successes == 1200
    after = roles(cluster, namespace, name)
    assert len(after) == 3 and peak >= 2
    reasons = [e["reason"] for e in events(cluster, namespace, name)]
    assert "ScaledDown" in reasons, reasons
    cluster.kubectl("delete", "inferenceservice", name, "-n", namespace, "--wait=true", timeout=180)
    cluster.kubectl("delete", "acceleratorclass", "h100-local", "--wait=true", timeout=180)


def filler_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A plain pod (KWOK makes it Ready) holding ``gpus`` H100 GPUs of ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpu-filler"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "hold",
                    "image": "busybox",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def gpu_pods_elsewhere(cluster: ClusterHandle, namespace: str) -> list[str]:
    """Pods of other namespaces still holding MIG 3g or L4 GPUs (e.g. a previous test's)."""
    items = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in items
        if p["metadata"]["namespace"] != namespace
        and (p["spec"].get("nodeName") or "").startswith(("l4-", "a100-mig-3g", "h100-"))
    ]


def test_full_h100_pool_spills_to_mig_slices_then_l4(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    wait_for(
        lambda: not gpu_pods_elsewhere(cluster, namespace),
        90,
        "GPU nodes free of other tests' pods",
    )
    # 15 of the 16 H100 GPUs taken by plain pods: one H100 replica fits.
    for pod in (filler_pod("fill-0", "h100-0", 8), filler_pod("fill-1", "h100-1", 7)):
        apply(cluster, namespace, pod)
    wait_for(
        lambda: all(
            pod_ready(p)
            for p in json.loads(
                cluster.kubectl(
                    "get", "pods", "-n", namespace, "-l", "app=gpu-filler", "-o", "json"
                ).stdout
            )["items"]
        ),
        30,
        "the filler pods to run",
    )
    name = "spread"
    scaling = {"minReplicas": 4, "maxReplicas": 4, "warmPool": 0}
    apply(
        cluster,
        namespace,
        sleeper(
            name,
            ["h100", "a100-3g40gb", "l4"],
            scaling,
            params={"exec_time_ms": "5", "per_item_ms": "0.2"},
        ),
    )
    wait_for(
        lambda: settled(stack, namespace, name, serving=4, warm=0), WAIT_S, "4 serving replicas"
    )

    pods = service_pods(cluster, namespace, name)
    by_class: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        by_class.setdefault(p["metadata"]["labels"]["gpuserve.io/accelerator-class"], []).append(p)
    assert {c: len(v) for c, v in by_class.items()} == {"h100": 1, "a100-3g40gb": 2, "l4": 1}
    for p in by_class["a100-3g40gb"]:
        assert p["spec"]["nodeName"].startswith("a100-mig-3g")
        requests = p["spec"]["containers"][0]["resources"]["requests"]
        assert requests.get("nvidia.com/mig-3g.40gb") == "1"
        assert "nvidia.com/gpu" not in requests
    assert by_class["l4"][0]["spec"]["nodeName"].startswith("l4-")
    assert by_class["h100"][0]["spec"]["nodeName"].startswith("h100-")

    status = service_status(cluster, namespace, name)
    pools = {p["acceleratorClass"]: p for p in status["pools"]}
    assert {c: (p["replicas"], p["serving"]) for c, p in pools.items()} == {
        "h100": (1, 1),
        "a100-3g40gb": (2, 2),
        "l4": (1, 1),
    }
    assert set(status["accelerators"].split(",")) == {"h100", "a100-3g40gb", "l4"}
    # Every replica serves real inferences through the serving endpoints.
    runner = stack.plane.runner
    endpoints = runner.serving_endpoints(namespace, name)
    assert len(endpoints) == 4
    result = run_constant_rate(
        Target(model="sleeper", endpoints=endpoints), 40, 2, Limits(max_requests=200, max_wall_s=30)
    )
    assert result.failures == 0 and len({r.endpoint for r in result.records}) == 4


def test_serving_pod_of_another_service_preempts_a_standby_pod_when_gpus_are_full(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(LOCAL_CLASS))
    wait_for(
        lambda: not gpu_pods_elsewhere(cluster, namespace),
        90,
        "GPU nodes free of other tests' pods",
    )
    # 13 of the 16 H100 GPUs held at serving priority (so only standby pods are victims).
    for pod in (filler_pod("fill-0", "h100-0", 8), filler_pod("fill-1", "h100-1", 5)):
        pod["spec"]["priorityClassName"] = "gpuserve-interactive"
        apply(cluster, namespace, pod)
    # "pool": 1 serving + 2 standby pods take the last three GPUs.
    # Advisory: both stay at minReplicas (1); maxReplicas 2 admits the warm pool of 2.
    fixed = {"minReplicas": 1, "maxReplicas": 2, "mode": "advisory"}
    fast = {"exec_time_ms": "5", "per_item_ms": "0.2"}
    apply(cluster, namespace, sleeper("pool", ["h100-local"], fixed | {"warmPool": 2}, fast))
    wait_for(lambda: settled(stack, namespace, "pool", serving=1, warm=2), WAIT_S, "pool settled")
    before = {p["metadata"]["name"]: p for p in service_pods(cluster, namespace, "pool")}
    standby = {n for n, p in before.items() if p["metadata"]["labels"].get("gpuserve.io/pool")}
    server = set(before) - standby
    assert len(standby) == 2 and len(server) == 1
    assert all(before[n]["spec"]["priority"] == STANDBY_PRIORITY for n in standby)

    # "rival" wants one serving pod on the same, full, GPUs: the operator plans it on the
    # standby pods' GPUs and the scheduler preempts one of them.
    apply(cluster, namespace, sleeper("rival", ["h100-local"], fixed | {"warmPool": 0}, fast))
    wait_for(lambda: settled(stack, namespace, "rival", serving=1, warm=0), WAIT_S, "rival serving")
    rival = service_pods(cluster, namespace, "rival")[0]
    assert rival["spec"]["nodeName"].startswith("h100-")
    assert rival["spec"]["priority"] == SERVING_PRIORITY
    preempted = json.loads(
        cluster.kubectl(
            "get", "events", "-n", namespace, "--field-selector", "reason=Preempted", "-o", "json"
        ).stdout
    )["items"]
    victims = {e["involvedObject"]["name"] for e in preempted}
    assert victims and victims <= standby, (victims, standby)
    # The pool keeps its serving pod; its warm pool is short, and it says so.
    wait_for(
        lambda: settled(stack, namespace, "pool", serving=1, warm=1),
        WAIT_S,
        "pool at 1 serving + 1 warm",
    )
    now = {p["metadata"]["name"] for p in service_pods(cluster, namespace, "pool")}
    assert server <= now and not (victims & now)
    schedulable = condition(service_status(cluster, namespace, "pool"), "Schedulable")
    assert schedulable is not None and schedulable["status"] == "False", schedulable
    assert "warm pool short by 1" in schedulable["message"]
    for svc in ("rival", "pool"):
        cluster.kubectl("delete", "inferenceservice", svc, "-n", namespace, "--wait=true")
