"""The least the local control plane spends on N InferenceServices, with no operator.

    GPUSERVE_CLUSTER_DIR=... GPUSERVE_PORT_OFFSET=... .venv/bin/python -m e2e.cluster up
    .venv/bin/python bench/apiserver_floor.py [--services 1000] [--namespaces 50]

Issue 18 asks for 1,000 services reconciled in under 30 s on this 2-core machine, and the
scale benchmark (bench/scale.py) found the API server, not the operator, using most of
the two cores. This bench measures the floor under any operator that writes what gpuserve
writes: with no operator running, it

1. creates the services as bench/scale.py does (8 client threads, the same bodies);
2. writes for each what the operator writes once it is reconciled: the children rendered
   by gpuserve's own renderer, by server-side apply (ConfigMap, Deployment, Service,
   PodDisruptionBudget), and two status patches (the operator's count per new service in
   bench/scale.py's request table), from 16 threads as the operator's appliers do. It
   does no reads and watches nothing, which the operator must;
3. waits until the controller manager has created a ReplicaSet for every Deployment.

It prints the wall time and the CPU seconds of every control-plane process per phase.
If the CPU the phases need exceeds what two cores give in 30 s, the goal cannot be met on
this machine with these children, whatever the operator does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from e2e.cluster import settings  # noqa: E402

# controllers.kube loads the default kubeconfig, whose path the client reads at import.
os.environ["KUBECONFIG"] = str(settings.layout().admin_kubeconfig)

from kubernetes import client  # noqa: E402
from scale import process_cpu_seconds, service_body  # noqa: E402

from controllers import kube  # noqa: E402
from e2e.cluster import lifecycle  # noqa: E402
from e2e.cluster.testkit import ClusterHandle, tolerating, wait_for  # noqa: E402
from e2e.operatorkit import install_classes, install_crds  # noqa: E402
from gpuserve.api.models import (  # noqa: E402
    CLASSES_PLURAL,
    GROUP,
    VERSION,
    parse_accelerator_class,
    parse_inference_service,
)
from gpuserve.resources.naming import LABEL_SERVICE, SERVICES_PLURAL  # noqa: E402
from gpuserve.resources.rendering import RenderInput, render_children  # noqa: E402

NS_PREFIX = "gs-floor-"
LABEL = "gpuserve.io/bench=floor"
CORES = os.cpu_count() or 1


def cpu_seconds(state: settings.StateLayout) -> dict[str, float]:
    """CPU seconds used so far by every control-plane process."""
    records = lifecycle.read_records(state).items()
    return {name: used for name, r in records if (used := process_cpu_seconds(r.pid)) is not None}


def status_writes(name: str, namespace: str, generation: int) -> list[dict[str, Any]]:
    """Two status bodies with the fields the operator writes for a new service."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def conditions(ready: bool) -> list[dict[str, Any]]:
        states = {
            "Ready": ("True", "ServingPodsReady") if ready else ("False", "Reconciling"),
            "Schedulable": ("True", "CapacityAvailable"),
            "Stalled": ("False", "Progressing"),
            "Progressing": ("False", "Settled") if ready else ("True", "Applying"),
        }
        return [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": f"{reason}: 0/0 serving, 0/0 warm",
                "lastTransitionTime": now,
                "observedGeneration": generation,
            }
            for kind, (status, reason) in states.items()
        ]

    first = {
        "observedGeneration": generation,
        "configHash": "0" * 64,
        "endpoint": f"{name}.{namespace}.svc:8000",
        "replicas": 0,
        "warmReplicas": 0,
        "desiredReplicas": 0,
        "conditions": conditions(False),
    }
    return [first, {**first, "conditions": conditions(True)}]


def timed(
    state: settings.StateLayout,
    what: str,
    work: Callable[[], None],
    rows: list[tuple[str, float, dict[str, float]]],
) -> None:
    before, t0 = cpu_seconds(state), time.monotonic()
    work()
    after = cpu_seconds(state)
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    rows.append((what, time.monotonic() - t0, used))
    print(f"  {what}: {rows[-1][1]:.1f} s", flush=True)


def run(args: argparse.Namespace) -> int:
    state = settings.layout()
    if not lifecycle.is_up(state):
        print(
            f"no cluster up in {state.root}; run `python -m e2e.cluster up` with the same "
            "GPUSERVE_CLUSTER_DIR / GPUSERVE_PORT_OFFSET first",
            file=sys.stderr,
        )
        return 2
    cluster = ClusterHandle(state.admin_kubeconfig, started_here=False, local=True)
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    install_crds(cluster)
    install_classes(cluster)
    classes = {
        item["metadata"]["name"]: parse_accelerator_class(item).spec
        for item in custom.list_cluster_custom_object(GROUP, VERSION, CLASSES_PLURAL)["items"]
    }
    namespaces = [f"{NS_PREFIX}{i:03d}" for i in range(args.namespaces)]
    for ns in namespaces:
        with tolerating(409):
            core.create_namespace(
                {"metadata": {"name": ns, "labels": {"gpuserve.io/bench": "floor"}}}
            )
    created: list[dict[str, Any]] = []
    rows: list[tuple[str, float, dict[str, float]]] = []
    try:

        def create(index: int) -> dict[str, Any]:
            body = service_body(index, 0, 0)
            ns = namespaces[index % len(namespaces)]
            made: dict[str, Any] = custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, SERVICES_PLURAL, body
            )
            return made

        def create_all() -> None:
            with ThreadPoolExecutor(8) as pool:
                created.extend(pool.map(create, range(args.services)))

        def write(obj: dict[str, Any]) -> None:
            service = parse_inference_service(obj)
            for child in render_children(RenderInput(service=service, classes=classes)):
                kube.apply_if_changed(child, fetch=False)
            meta = obj["metadata"]
            live: dict[str, Any] = {}
            for status in status_writes(meta["name"], meta["namespace"], meta["generation"]):
                kube.patch_status(
                    plural=SERVICES_PLURAL,
                    name=meta["name"],
                    namespace=meta["namespace"],
                    status=status,
                    live_status=live,
                )
                live = {**live, **status}

        def write_all() -> None:
            with ThreadPoolExecutor(kube.APPLIER_THREADS) as pool:
                list(pool.map(write, created))

        def replica_sets() -> int:
            # One list every 10 s: listing 1,000 ReplicaSets a second cost the API server
            # as much CPU as the controller manager's own work in this phase.
            found = apps.list_replica_set_for_all_namespaces(label_selector=LABEL_SERVICE)
            return sum(1 for rs in found.items if rs.metadata.namespace.startswith(NS_PREFIX))

        print(f"{args.services} services in {args.namespaces} namespaces, no operator:")
        timed(state, "create the services (8 threads)", create_all, rows)
        timed(
            state,
            f"apply children + 2 status patches ({kube.APPLIER_THREADS} threads)",
            write_all,
            rows,
        )
        timed(
            state,
            "controller manager: a ReplicaSet per Deployment",
            lambda: wait_for(
                lambda: replica_sets() >= args.services, 600, "ReplicaSets", interval=10.0
            ),
            rows,
        )
    finally:
        for ns in namespaces:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        wait_for(
            lambda: (
                not cluster.kubectl(
                    "get", "namespaces", "-l", LABEL, "-o", "name", check=False
                ).stdout.strip()
            ),
            600,
            "benchmark namespaces deleted",
            interval=2.0,
        )
    print_table(rows)
    return 0


def print_table(rows: list[tuple[str, float, dict[str, float]]]) -> None:
    names = sorted(
        {n for _, _, used in rows for n in used},
        key=lambda n: -sum(used.get(n, 0.0) for _, _, used in rows),
    )
    print(f"\n| phase | wall s | {' | '.join(f'{n} CPU s' for n in names)} | all CPU s |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for what, wall, used in rows:
        cells = " | ".join(f"{used.get(n, 0.0):.1f}" for n in names)
        print(f"| {what} | {wall:.1f} | {cells} | {sum(used.values()):.1f} |")
    total_wall = sum(wall for _, wall, _ in rows)
    total_cpu = sum(sum(used.values()) for _, _, used in rows)
    cells = " | ".join(f"{sum(u.get(n, 0.0) for _, _, u in rows):.1f}" for n in names)
    print(f"| all | {total_wall:.1f} | {cells} | {total_cpu:.1f} |")
    print(
        f"\nControl-plane CPU {total_cpu:.1f} s on {CORES} cores: at least "
        f"{total_cpu / CORES:.1f} s of wall time with both cores on nothing else."
    )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--namespaces", type=int, default=50)
    return run(p.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
