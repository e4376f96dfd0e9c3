"""Apply -> all children exist: how fast the operator turns a new service into objects.

Starts a private local cluster (its own state dir and ports), the CRDs, the example
AcceleratorClasses and the operator, then creates N InferenceServices one after the other
and, for each, times from the create call until its ConfigMap, Deployment(s), Service and
PodDisruptionBudget all exist (polled every 10 ms through the API server). Prints a table.

    .venv/bin/python bench/reconcile_latency.py --services 50
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.cluster.testkit import ClusterHandle  # noqa: E402
from e2e.invalid_cases import valid_service  # noqa: E402
from e2e.operatorkit import OperatorProcess, install_classes, install_crds  # noqa: E402
from gpuserve.api.models import GROUP, VERSION  # noqa: E402
from gpuserve.resources.naming import SERVICES_PLURAL  # noqa: E402

KINDS = 5  # ConfigMap, two Deployments (h100, l4), Service, PDB


def _cluster(command: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "e2e.cluster", command],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )


def _children(api: object, ns: str, name: str) -> int:
    from kubernetes import client

    sel = f"gpuserve.io/service={name}"
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    policy = client.PolicyV1Api(api)
    return (
        len(core.list_namespaced_config_map(ns, label_selector=sel).items)
        + len(apps.list_namespaced_deployment(ns, label_selector=sel).items)
        + len(core.list_namespaced_service(ns, label_selector=sel).items)
        + len(policy.list_namespaced_pod_disruption_budget(ns, label_selector=sel).items)
    )


def measure(handle: ClusterHandle, count: int) -> list[float]:
    from kubernetes import client

    api = handle.api_client()
    ns = "bench-reconcile"
    handle.kubectl("create", "namespace", ns)
    objects = client.CustomObjectsApi(api)
    times: list[float] = []
    for i in range(count):
        body = copy.deepcopy(valid_service(f"svc-{i}"))
        body["spec"]["accelerators"] = {"classes": ["h100", "l4"]}
        start = time.perf_counter()
        objects.create_namespaced_custom_object(
            GROUP, VERSION, ns, SERVICES_PLURAL, body
        )
        deadline = start + 30
        while _children(api, ns, f"svc-{i}") < KINDS:
            if time.perf_counter() > deadline:
                raise SystemExit(f"svc-{i}: children incomplete after 30 s")
            time.sleep(0.01)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--port-offset", type=int, default=2100)
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="gpuserve-bench-reconcile-")
    env = dict(os.environ, GPUSERVE_CLUSTER_DIR=state, GPUSERVE_PORT_OFFSET=str(args.port_offset))
    os.environ.update(GPUSERVE_CLUSTER_DIR=state, GPUSERVE_PORT_OFFSET=str(args.port_offset))
    _cluster("up", env)
    operator = None
    try:
        handle = ClusterHandle(Path(state) / "admin.kubeconfig", started_here=True, local=True)
        install_crds(handle)
        install_classes(handle)
        operator = OperatorProcess(handle, Path(state) / "operator.log").start()
        times = measure(handle, args.services)
    finally:
        if operator is not None:
            operator.stop()
        _cluster("down", env)
    ms = sorted(t * 1e3 for t in times)
    p95 = ms[max(0, round(0.95 * len(ms)) - 1)]
    print(f"\napply -> all {KINDS} children exist, {len(ms)} services, sequential")
    print("| median ms | p95 ms | min ms | max ms | goal |")
    print("|---|---|---|---|---|")
    print(
        f"| {statistics.median(ms):.0f} | {p95:.0f} | {ms[0]:.0f} | {ms[-1]:.0f} | p50 < 300 ms |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
