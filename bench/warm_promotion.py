"""Benchmark: warm-pool promotion vs cold start, on the local stack (real control plane,
the operator, a real tritonserver per pod through the local runner, real Prometheus).

Promotion: the decision is a write that raises the service's desired serving count (a
spec bound change, which the operator reconciles at once, the same path an autoscaler
decision takes from converge on). Measured from just before that write to
  (1) the promoted pod's IP listed ready in the Service's EndpointSlices, and
  (2) a successful inference through that endpoint (the runner maps pod IP -> loopback).
Cold: the same with warmPool 0 (a new pod is created, scheduled, started, made Ready,
promoted), plus "new pod to Ready" for every pod created during the run (pod first seen by
a watch -> Ready condition).

Usage: python bench/warm_promotion.py [--promotions 20] [--cold 10]
(uses the harness cluster if up, else starts one; GPUSERVE_CLUSTER_DIR/PORT_OFFSET apply)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from e2e.cluster.testkit import wait_for
from e2e.loadgen import percentile
from e2e.manifests import LOCAL_CLASS, sleeper_service
from e2e.operatorkit import install_crds
from e2e.runner.stack import (
    apply,
    harness_cluster,
    local_stack,
    scratch_namespace,
)
from e2e.triton.requests import infer_sleeper
from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import SERVICES_PLURAL


def service(name: str, warm_pool: int) -> dict[str, Any]:
    # advisory: the autoscaler reports but does not act; the bench moves the bounds
    return sleeper_service(
        name,
        classes=["h100-local"],
        exec_time_ms=5,
        per_item_ms=0.2,
        slo="50ms",
        scaling={"minReplicas": 1, "maxReplicas": 1, "warmPool": warm_pool, "mode": "advisory"},
        triton={"exitTimeoutSeconds": 2},
    )


class PodClock(threading.Thread):
    """Watches the namespace's pods: when each was first seen and first seen Ready."""

    def __init__(self, api: Any, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api, self.namespace = api, namespace
        self.first_seen: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}
        self._done = threading.Event()

    def run(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api)
        while not self._done.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    core.list_namespaced_pod, self.namespace, timeout_seconds=2, deserialize=False
                ):
                    now = time.monotonic()
                    obj = event["object"]
                    pod = obj["metadata"]["name"]
                    self.first_seen.setdefault(pod, now)
                    conds = obj.get("status", {}).get("conditions") or []
                    if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                        self.ready_at.setdefault(pod, now)
            except Exception:
                time.sleep(0.2)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)

    def cold_starts(self) -> list[float]:
        return [self.ready_at[p] - t for p, t in self.first_seen.items() if p in self.ready_at]


def ready_ips(discovery: Any, namespace: str, svc: str) -> set[str]:
    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={svc}", _request_timeout=5
    )
    return {
        a
        for s in slices.items
        for e in (s.endpoints or [])
        if e.conditions and e.conditions.ready
        for a in e.addresses
    }


def infer_ok(address: str) -> bool:
    try:
        infer_sleeper(address, timeout_s=5)
        return True
    except Exception:
        return False


def set_bounds(custom: Any, namespace: str, name: str, replicas: int) -> None:
    body = {"spec": {"scaling": {"minReplicas": replicas, "maxReplicas": replicas}}}
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, SERVICES_PLURAL, name, body, _request_timeout=10
    )


def status(custom: Any, namespace: str, name: str) -> dict[str, Any]:
    obj = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, SERVICES_PLURAL, name, _request_timeout=10
    )
    return dict(obj.get("status") or {})


def cycles(
    stack: Any,
    api: Any,
    namespace: str,
    name: str,
    warm: int,
    count: int,
) -> list[tuple[float, float]]:
    """``count`` times: raise serving 1 -> 2, time it, lower it again and let it settle."""
    from kubernetes import client

    custom, discovery = client.CustomObjectsApi(api), client.DiscoveryV1Api(api)
    runner = stack.plane.runner

    def settled() -> bool:
        s = status(custom, namespace, name)
        return (
            s.get("replicas") == 1
            and s.get("warmReplicas", 0) == warm
            and len(ready_ips(discovery, namespace, name)) == 1
        )

    samples: list[tuple[float, float]] = []
    for i in range(count):
        wait_for(settled, 120, "1 serving + a full warm pool")
        before = ready_ips(discovery, namespace, name)
        t0 = time.monotonic()
        set_bounds(custom, namespace, name, 2)
        new_ip: set[str] = set()
        while not new_ip:
            new_ip = ready_ips(discovery, namespace, name) - before
            if time.monotonic() - t0 > 120:
                raise TimeoutError("no new endpoint within 120 s")
            if not new_ip:
                time.sleep(0.01)
        t_endpoint = time.monotonic() - t0
        address = None
        while address is None or not infer_ok(address):
            address = runner.address_of_ip(next(iter(new_ip)))
            if time.monotonic() - t0 > 120:
                raise TimeoutError("no inference through the new endpoint within 120 s")
            if address is None:
                time.sleep(0.01)
        t_infer = time.monotonic() - t0
        samples.append((t_endpoint, t_infer))
        print(
            f"  {'warm' if warm else 'cold'} #{i + 1}: endpoint {t_endpoint * 1e3:.0f} ms, "
            f"inference {t_infer * 1e3:.0f} ms",
            flush=True,
        )
        set_bounds(custom, namespace, name, 1)
    return samples


def row(label: str, values: list[float]) -> str:
    p50, p95 = percentile(values, 50), percentile(values, 95)
    assert p50 is not None and p95 is not None
    return (
        f"| {label} | {len(values)} | {p50 * 1e3:.0f} | {p95 * 1e3:.0f} | "
        f"{max(values) * 1e3:.0f} | {statistics.mean(values) * 1e3:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--promotions", type=int, default=20)
    parser.add_argument("--cold", type=int, default=10)
    args = parser.parse_args()
    with harness_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        install_crds(cluster)  # the class below needs its CRD on a fresh cluster
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(LOCAL_CLASS))
        with (
            scratch_namespace(cluster, "bench-promotion") as ns,
            local_stack(cluster, Path(tmp), namespaces=frozenset({ns})) as stack,
        ):
            api = cluster.api_client()
            clock = PodClock(api, ns)
            clock.start()
            apply(cluster, ns, service("warm", warm_pool=1))
            warm = cycles(stack, api, ns, "warm", warm=1, count=args.promotions)
            stack.cluster.kubectl("delete", "inferenceservice", "warm", "-n", ns, "--wait=true")
            apply(cluster, ns, service("cold", warm_pool=0))
            cold = cycles(stack, api, ns, "cold", warm=0, count=args.cold)
            clock.stop()
            starts = clock.cold_starts()
            cluster.kubectl("delete", "inferenceservice", "cold", "-n", ns, "--wait=true")
            cluster.kubectl("delete", "acceleratorclass", "h100-local", check=False)
    print("\n| path | n | p50 ms | p95 ms | max ms | mean ms |")
    print("|---|---|---|---|---|---|")
    print(row("warm promotion: decision -> in Service endpoints", [e for e, _ in warm]))
    print(row("warm promotion: decision -> inference through it", [i for _, i in warm]))
    print(row("cold scale-up: decision -> in Service endpoints", [e for e, _ in cold]))
    print(row("cold scale-up: decision -> inference through it", [i for _, i in cold]))
    print(row("cold start: new pod -> Ready (every pod created)", starts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
