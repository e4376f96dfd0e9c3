"""Benchmark: how fast the closed loop reacts to a load step, with and without a warm pool.

Local stack: real control plane, the operator with its autoscaler (evaluation every
--interval s), Prometheus scraping every --scrape s, a real tritonserver per pod through
the local runner. The service (one replica saturates near 140 req/s, the policy plans
~120 req/s per replica) sits idle at 1 serving replica; a constant-rate step of --rate
req/s starts at t0. Measured from t0:
  decision  - status.desiredReplicas first seen above 1 (polled every 50 ms);
  endpoint  - a second ready address in the Service's EndpointSlices (capacity added);
and the reason the autoscaler recorded. Between trials the load stops and the service
returns to 1 replica (short stabilisation window) and idles so the rate windows empty.

Usage: python bench/autoscaling_reaction.py [--trials 3] [--rate 250]
(uses the harness cluster if up, else starts one; GPUSERVE_CLUSTER_DIR/PORT_OFFSET apply)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from e2e.cluster.testkit import wait_for
from e2e.loadgen import Limits, Target, percentile, run_constant_rate
from e2e.manifests import LOCAL_CLASS, sleeper_service
from e2e.operatorkit import install_crds
from e2e.runner.stack import apply, harness_cluster, local_stack, scratch_namespace
from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import SERVICES_PLURAL


def service(name: str, warm_pool: int) -> dict[str, Any]:
    return sleeper_service(
        name,
        classes=["h100-local"],
        slo="150ms",
        scaling={
            "minReplicas": 1,
            "maxReplicas": 4,
            "warmPool": warm_pool,
            "scaleDownStabilization": "10s",
            "stableWindow": "20s",
            "panicWindow": "6s",
        },
        triton={"exitTimeoutSeconds": 2},
    )


def trial(
    stack: Any, api: Any, ns: str, name: str, warm: int, rate: float, seconds: float
) -> dict[str, Any]:
    from kubernetes import client

    custom, discovery = client.CustomObjectsApi(api), client.DiscoveryV1Api(api)

    def status() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, SERVICES_PLURAL, name, _request_timeout=10
        )
        return dict(obj.get("status") or {})

    def endpoints() -> int:
        slices = discovery.list_namespaced_endpoint_slice(
            ns, label_selector=f"kubernetes.io/service-name={name}", _request_timeout=5
        )
        return sum(
            1
            for s in slices.items
            for e in (s.endpoints or [])
            if e.conditions and e.conditions.ready
        )

    wait_for(
        lambda: (
            (s := status()).get("desiredReplicas") == 1
            and s.get("replicas") == 1
            and s.get("warmReplicas", 0) == warm
            and endpoints() == 1
        ),
        180,
        "1 serving replica and a full warm pool",
    )
    time.sleep(20)  # idle: the 15 s rate windows hold no load from the previous trial
    target = Target(model="sleeper", endpoints=stack.plane.runner.endpoints_for(ns, name))
    limits = Limits(max_requests=int(rate * seconds) + 10, max_wall_s=seconds + 60)
    out: dict[str, Any] = {}
    load = threading.Thread(
        target=lambda: out.setdefault("r", run_constant_rate(target, rate, seconds, limits)),
        daemon=True,
    )
    t0 = time.monotonic()
    load.start()
    decided = added = None
    reason = ""
    while (decided is None or added is None) and time.monotonic() - t0 < seconds:
        now = time.monotonic() - t0
        if decided is None:
            s = status()
            if s.get("desiredReplicas", 1) > 1:
                decided = now
                reason = (s.get("lastDecision") or {}).get("reason", "")
        if added is None and endpoints() >= 2:
            added = now
        time.sleep(0.05)
    load.join(timeout=seconds + 90)
    result = out.get("r")
    return {
        "decision": decided,
        "endpoint": added,
        "reason": reason,
        "p95_ms": result.p95_ms if result else None,
        "failures": result.failures if result else None,
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rate", type=float, default=250.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=2.0, help="autoscaler evaluation")
    parser.add_argument("--scrape", type=float, default=1.0, help="Prometheus scrape")
    args = parser.parse_args()
    rows: list[tuple[str, int, dict[str, Any]]] = []
    with harness_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        install_crds(cluster)  # the class below needs its CRD on a fresh cluster
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(LOCAL_CLASS))
        with (
            scratch_namespace(cluster, "bench-reaction") as ns,
            local_stack(
                cluster,
                Path(tmp),
                namespaces=frozenset({ns}),
                autoscale_interval_s=args.interval,
                scrape_interval_s=args.scrape,
            ) as stack,
        ):
            api = cluster.api_client()
            for warm in (0, 1):
                name = f"react-warm{warm}"
                apply(cluster, ns, service(name, warm))
                for i in range(args.trials):
                    r = trial(stack, api, ns, name, warm, args.rate, args.seconds)
                    print(
                        f"  warmPool {warm} trial {i + 1}: decision {fmt(r['decision'])} s, "
                        f"endpoint {fmt(r['endpoint'])} s, p95 {fmt(r['p95_ms'])} ms, "
                        f"failures {r['failures']}; {r['reason'][:160]}",
                        flush=True,
                    )
                    rows.append((f"warmPool {warm}", i + 1, r))
                cluster.kubectl("delete", "inferenceservice", name, "-n", ns, "--wait=true")
            cluster.kubectl("delete", "acceleratorclass", "h100-local", check=False)
    goal = args.scrape + args.interval
    print(f"\nstep to {args.rate:g} req/s; goal: decision <= scrape + evaluation = {goal:g} s")
    print(
        "| pool | trial | load -> decision s | load -> 2nd endpoint s | decision -> endpoint s"
        " | step p95 ms | failures |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, i, r in rows:
        gap = (r["endpoint"] - r["decision"]) if r["endpoint"] and r["decision"] else None
        print(
            f"| {label} | {i} | {fmt(r['decision'])} | {fmt(r['endpoint'])} | {fmt(gap)} | "
            f"{fmt(r['p95_ms'])} | {r['failures']} |"
        )
    for label in ("warmPool 0", "warmPool 1"):
        d = [r["decision"] for lab, _, r in rows if lab == label and r["decision"] is not None]
        e = [r["endpoint"] for lab, _, r in rows if lab == label and r["endpoint"] is not None]
        print(
            f"{label}: median decision {fmt(percentile(d, 50))} s, "
            f"median capacity {fmt(percentile(e, 50))} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
