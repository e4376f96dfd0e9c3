"""What the operator wants, what it gets, and what it remembers, on the local stack (real
Triton per pod, real Prometheus, the operator's autoscaler):

- an interactive service under load takes the GPUs of another service's warm pool (the
  scheduler preempts the standby pods), and both services say what happened;
- a service that wants more serving pods than the cluster can place says so in
  Schedulable, Reconciling and its decisions, instead of reporting that all is well;
- a service deleted and created again under the same name starts with fresh autoscaler
  memory (the old object's recommendations do not scale the new one).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.loadgen import Limits, LoadResult, Target, run_constant_rate
from e2e.manifests import LOCAL_CLASS, sleeper_service
from e2e.marks import LOCAL_DATA_PLANE
from e2e.runner.stack import (
    Stack,
    apply,
    condition,
    events,
    local_stack,
    service_pods,
    service_status,
)
from e2e.test_warm_pool import filler_pod, gpu_pods_elsewhere, settled

pytestmark = LOCAL_DATA_PLANE

WAIT_S = 120.0
# The sleeper at 40 ms + 2 ms/item saturates one replica near 140 req/s; 200 needs two.
RATE = 200.0


@pytest.fixture
def stack(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    with local_stack(cluster, tmp_path, namespaces=frozenset({namespace})) as s:
        yield s


def load_in_thread(
    stack: Stack, namespace: str, name: str, seconds: float
) -> tuple[threading.Thread, dict[str, LoadResult]]:
    target = Target(
        model="sleeper",
        endpoints=stack.plane.runner.endpoints_for(namespace, name),
        request_timeout_s=10.0,
    )
    limits = Limits(max_requests=int(RATE * seconds) + 10, max_wall_s=seconds + 60)
    out: dict[str, LoadResult] = {}
    thread = threading.Thread(
        target=lambda: out.setdefault("r", run_constant_rate(target, RATE, seconds, limits)),
        daemon=True,
    )
    thread.start()
    return thread, out


def scaling(**fields: Any) -> dict[str, Any]:
    return {
        "scaleDownStabilization": "20s",
        "stableWindow": "20s",
        "panicWindow": "6s",
        **fields,
    }


def test_interactive_load_takes_warm_pool_gpus_and_status_says_what_it_cannot_place(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(LOCAL_CLASS))
    wait_for(
        lambda: not gpu_pods_elsewhere(cluster, namespace), 90, "GPU nodes free of other tests"
    )
    # 12 of the 16 H100 GPUs held at serving priority: 4 left for the two services.
    for pod in (filler_pod("fill-0", "h100-0", 8), filler_pod("fill-1", "h100-1", 4)):
        pod["spec"]["priorityClassName"] = "gpuserve-interactive"
        apply(cluster, namespace, pod)
    # "reports" (batch): 1 serving + 2 warm pods take 3 of them.
    reports = sleeper_service(
        "reports",
        classes=["h100-local"],
        slo="2s",
        scaling={"minReplicas": 1, "maxReplicas": 2, "warmPool": 2, "mode": "advisory"},
        exec_time_ms=5,
        per_item_ms=0.2,
    )
    reports["spec"]["tier"] = "batch"
    apply(cluster, namespace, reports)
    wait_for(lambda: settled(stack, namespace, "reports", 1, 2), WAIT_S, "reports 1 + 2 warm")
    # "chat" (interactive) takes the last GPU; under load it needs more than one replica.
    chat = sleeper_service(
        "chat", classes=["h100-local"], scaling=scaling(minReplicas=1, maxReplicas=3)
    )
    apply(cluster, namespace, chat)
    wait_for(lambda: settled(stack, namespace, "chat", 1, 0), WAIT_S, "chat 1 serving")

    thread, out = load_in_thread(stack, namespace, "chat", seconds=50)
    # The only GPUs left are reports' warm pods': the scheduler preempts them for chat.
    wait_for(
        lambda: service_status(cluster, namespace, "chat").get("replicas", 0) >= 2,
        90,
        "chat serving on a second GPU taken from reports' warm pool",
    )
    thread.join(timeout=150)
    assert out["r"].failures == 0, [r.error for r in out["r"].records if not r.ok][:5]
    decisions = service_status(cluster, namespace, "chat").get("decisions") or []
    assert any(d["desiredReplicas"] >= 2 for d in decisions), decisions
    reasons = {e["reason"] for e in events(cluster, namespace, "chat")}
    assert "ScaledUp" in reasons, reasons
    # reports lost warm pods and says so.
    wait_for(
        lambda: (c := condition(service_status(cluster, namespace, "reports"), "Schedulable"))
        and c["status"] == "False"
        and "warm pool short" in c["message"],
        WAIT_S,
        "reports to report its warm pool short",
    )

    # chat now wants more serving pods than the four GPUs can hold, whatever it preempts.
    chat["spec"]["scaling"] = scaling(minReplicas=5, maxReplicas=6)
    apply(cluster, namespace, chat)

    def short() -> dict[str, Any] | None:
        status = service_status(cluster, namespace, "chat")
        sched = condition(status, "Schedulable")
        return status if sched and sched["status"] == "False" else None

    status = wait_for(short, 60, "chat Schedulable=False")
    sched = condition(status, "Schedulable")
    assert sched is not None and sched["reason"] == "InsufficientCapacity", sched
    assert "wants 5 serving" in sched["message"] and "unplaced" in sched["message"], sched
    reconciling = condition(status, "Reconciling")
    assert reconciling is not None and reconciling["status"] == "True", reconciling
    assert reconciling["reason"] == "WaitingForCapacity", reconciling
    assert "wait for capacity" in reconciling["message"], reconciling
    assert status.get("desiredReplicas") == 5  # what it wants, not what fits
    for svc in ("chat", "reports"):
        cluster.kubectl("delete", "inferenceservice", svc, "-n", namespace, "--wait=true")


def test_a_service_created_again_under_the_same_name_starts_with_fresh_memory(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    name = "again"
    # A long scale-down window: the first object's high recommendations stay in its
    # autoscaler memory for two minutes.
    body = sleeper_service(
        name,
        classes=["l4"],
        scaling=scaling(minReplicas=1, maxReplicas=4, scaleDownStabilization="120s"),
        triton={"exitTimeoutSeconds": 5},
    )
    apply(cluster, namespace, body)
    wait_for(lambda: settled(stack, namespace, name, 1, 0), WAIT_S, "1 serving replica")
    thread, out = load_in_thread(stack, namespace, name, seconds=25)
    wait_for(
        lambda: service_status(cluster, namespace, name).get("desiredReplicas", 0) >= 2,
        60,
        "a scale-up under load",
    )
    thread.join(timeout=90)
    assert out["r"].failures == 0

    old_uid = cluster.kubectl(
        "get", "inferenceservice", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    cluster.kubectl("delete", "inferenceservice", name, "-n", namespace, "--wait=true")
    wait_for(lambda: not service_pods(cluster, namespace, name), 90, "the old object's pods gone")
    time.sleep(20)  # past the rate() window: Prometheus shows no demand for the name
    apply(cluster, namespace, body)
    new_uid = cluster.kubectl(
        "get", "inferenceservice", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    assert new_uid and new_uid != old_uid
    wait_for(lambda: settled(stack, namespace, name, 1, 0), WAIT_S, "the new object serving")
    # With the old object's memory it would go back to its peak within seconds, unloaded.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = service_status(cluster, namespace, name)
        assert status.get("desiredReplicas", 1) == 1, status.get("decisions")
        time.sleep(1.0)
    assert not any(
        e["reason"] == "ScaledUp" for e in events(cluster, namespace, name)
        if e.get("involvedObject", {}).get("uid") == new_uid
    )


def test_promotions_swaps_and_scale_downs_fail_no_request(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    """warmPool 2 under a steady 60 req/s with a burst on top: warm pods are promoted,
    serving-priority pods relieve them (the relieved pods are demoted and deleted), and the
    service scales back down; every request of both loads must succeed."""
    name = "swap"
    # The four L4 GPUs hold 1 serving + 2 warm pods and leave one free: the first
    # serving-priority pod starts there and relieves a promoted standby pod. With
    # maxReplicas 4 a decision of 4 would fill every GPU with the service's own serving
    # pods, and nothing could (or should) be swapped.
    wait_for(
        lambda: not gpu_pods_elsewhere(cluster, namespace), 90, "L4 GPUs free of other tests' pods"
    )
    apply(
        cluster,
        namespace,
        sleeper_service(
            name,
            classes=["l4"],
            scaling=scaling(minReplicas=1, maxReplicas=3, warmPool=2),
            triton={"exitTimeoutSeconds": 5},
        ),
    )
    wait_for(lambda: settled(stack, namespace, name, 1, 2), WAIT_S, "1 serving + 2 warm")
    target = Target(
        model="sleeper",
        endpoints=stack.plane.runner.endpoints_for(namespace, name),
        request_timeout_s=10.0,
    )
    steady_s = 150.0
    out: dict[str, LoadResult] = {}
    steady = threading.Thread(
        target=lambda: out.setdefault(
            "steady",
            run_constant_rate(
                target, 60.0, steady_s, Limits(max_requests=9010, max_wall_s=steady_s + 60)
            ),
        ),
        daemon=True,
    )
    steady.start()
    burst, burst_out = load_in_thread(stack, namespace, name, seconds=30)
    seen: set[str] = set()

    def promoted_and_relieved() -> bool:
        seen.update(e["reason"] for e in events(cluster, namespace, name))
        return {"Promoted", "Demoted"} <= seen

    def decided() -> str:
        decisions = service_status(cluster, namespace, name).get("decisions", [])
        return f"events {sorted(seen)}; decisions {[d.get('reason') for d in decisions]}"

    wait_for(promoted_and_relieved, 90, "a promotion and a relief under load", explain=decided)
    burst.join(timeout=120)
    steady.join(timeout=steady_s + 90)
    results = {"burst": burst_out["r"], "steady": out["steady"]}
    for label, result in results.items():
        failed = [r.error for r in result.records if not r.ok]
        assert not failed, f"{label}: {len(failed)} failed: {failed[:5]}"
    reasons = [e["reason"] for e in events(cluster, namespace, name)]
    assert "ScaledDown" in reasons, reasons
    # One announcement per real transition: in the operator's log (ordered to the
    # millisecond; events carry whole seconds, so two in one second have no order) no pod
    # is promoted twice, or demoted twice, in a row; and the events are exactly those.
    logged: dict[str, list[str]] = {}
    for line in stack.operator.log_path.read_text().splitlines():
        words = line.split()
        if f"{namespace}/{name}:" in words and words[-3] in ("promoted", "demoted"):
            logged.setdefault(words[-1], []).append(words[-3].capitalize())
    repeated = {
        pod: seq for pod, seq in logged.items() if any(a == b for a, b in itertools.pairwise(seq))
    }
    assert logged and not repeated, repeated
    posted: dict[str, list[str]] = {}
    for e in events(cluster, namespace, name):
        if e["reason"] in ("Promoted", "Demoted"):
            posted.setdefault(e["message"].split()[1], []).extend([e["reason"]] * e.get("count", 1))
    assert {pod: sorted(seq) for pod, seq in posted.items()} == {
        pod: sorted(seq) for pod, seq in logged.items()
    }


def test_an_idle_new_service_goes_straight_to_min_replicas(
    stack: Stack, cluster: ClusterHandle, namespace: str
) -> None:
    name = "idle"
    apply(
        cluster,
        namespace,
        sleeper_service(name, classes=["l4"], scaling=scaling(minReplicas=2, maxReplicas=4)),
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = service_status(cluster, namespace, name)
        seen.add(int(status.get("desiredReplicas", 0)))
        seen.add(len(service_pods(cluster, namespace, name)))
        if settled(stack, namespace, name, 2, 0) and time.monotonic() > deadline - 20:
            break
        time.sleep(0.5)
    assert max(seen) == 2, f"desired replicas or pod counts seen: {sorted(seen)}"
