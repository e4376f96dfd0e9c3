"""Chaos: the operator killed -9 at random points, the API server and etcd restarted.

A seeded fleet of services (GPUSERVE_CHAOS_SERVICES, default 100) is created, changed
(batching, minReplicas, warm pool), deleted and re-created under the same name while the
operator is SIGKILLed and restarted (GPUSERVE_CHAOS_KILLS, default 22); once mid-run the
API server and once etcd is restarted, with the operator left running. At
checkpoints and at the end everything must converge: one ConfigMap, Service and PDB per
live service, a serving Deployment per usable class (and a standby one with a warm pool),
no children of deleted services, pods = desired + warm pool, status Ready for the
current generation.
GPUSERVE_CHAOS_SEED picks the schedule; GPUSERVE_RELIABILITY_LOG=<file> appends the figures
as JSON lines.
"""

from __future__ import annotations

import copy
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.chaoskit import (
    Api,
    Fleet,
    Op,
    control_plane_works,
    fleet_problems,
    record,
    restart_component,
    tracebacks,
    unexpected_tracebacks,
    wait_converged,
)
from e2e.cluster import components
from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.operatorkit import OperatorProcess, install_classes, install_crds

pytestmark = pytest.mark.cluster

SERVICES = int(os.environ.get("GPUSERVE_CHAOS_SERVICES", "100"))
KILLS = int(os.environ.get("GPUSERVE_CHAOS_KILLS", "22"))
SEED = int(os.environ.get("GPUSERVE_CHAOS_SEED", "9"))
CHECK_EVERY = 5  # cycles between convergence checkpoints
CONVERGE_TIMEOUT_S = 240.0
# After the API server is back: the operator's own writes for changes made then. (Pods
# take longer: the harness's controller manager backs off for up to ~90 s after an API
# server crash, see docs/reliability.md.)
OPERATOR_RECOVERY_S = 60.0
MAX_GAP_S = 2.5  # longest random pause between a change and the next kill


@pytest.fixture(scope="module")
def crds(cluster: ClusterHandle) -> None:
    install_crds(cluster)
    install_classes(cluster)


@pytest.fixture
def api(cluster: ClusterHandle) -> Api:
    return Api(cluster.api_client())


def _local(cluster: ClusterHandle) -> None:
    if not cluster.local:
        pytest.skip("restarts daemons of the local harness cluster")


def drain(api: Api, namespace: str, timeout: float = 90.0) -> None:
    """Deletes the namespace's services and waits until they are gone."""
    for svc in api.services(namespace):
        api.delete_service(namespace, svc["metadata"]["name"])
    wait_for(lambda: not api.services(namespace), timeout, f"services of {namespace} deleted")


@pytest.fixture
def operator(cluster: ClusterHandle, crds: None, tmp_path: Path) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(cluster, tmp_path / "operator.log")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.timeout(2400)
def test_kill9_storm_converges_without_duplicates_or_orphans(
    cluster: ClusterHandle, operator: OperatorProcess, api: Api, namespace: str
) -> None:
    _local(cluster)
    rng = random.Random(SEED)
    fleet = Fleet(namespace, rng)
    api_cycle, etcd_cycle = KILLS // 3, 2 * KILLS // 3
    # Creations spread over the first cycles, so kills land mid-creation; every later cycle
    # makes 3-8 random changes. All randomness comes from `rng`, in a fixed order.
    creations = fleet.populate(SERVICES)
    spread = max(1, min(KILLS, 5))

    def check() -> list[str]:
        return fleet_problems(api, fleet)

    kills = recoveries = 0
    convergence: list[float] = []
    control_plane: list[dict[str, Any]] = []
    started = time.monotonic()
    operator.start()
    try:
        for cycle in range(KILLS):
            for op in creations[cycle::spread] if cycle < spread else []:
                fleet.apply(api, op)
            for _ in range(rng.randint(3, 8) if cycle else 0):
                fleet.apply(api, fleet.random_op())
            time.sleep(rng.uniform(0, MAX_GAP_S))
            if cycle in (api_cycle, etcd_cycle):
                # Mid-run, with the operator busy: restart the API server (SIGTERM: it closes
                # every watch; the crash is test_watches_recover_...) or etcd (the API
                # server answers 5xx meanwhile).
                name = components.APISERVER if cycle == api_cycle else components.ETCD
                restart = restart_component(name, downtime=1.0)
                began = time.monotonic()
                recovered = control_plane_works(api)
                _, problems = wait_converged(check, CONVERGE_TIMEOUT_S)
                elapsed = time.monotonic() - began
                assert not problems, f"no convergence after {name} restart: {problems[:20]}"
                assert operator.alive(), "the operator died with the control plane"
                control_plane.append({"component": name, "ready_s": round(restart.ready_s, 2),
                                      "control_plane_working_s": round(recovered, 1),
                                      "converged_s": round(elapsed, 1)})
            operator.kill9()
            kills += 1
            for _ in range(rng.randint(0, 3)):  # changes nobody is watching
                fleet.apply(api, fleet.random_op())
            restarted = time.monotonic()
            operator.start()
            recoveries += 1
            if cycle % CHECK_EVERY == CHECK_EVERY - 1 or cycle == KILLS - 1:
                _, problems = wait_converged(check, CONVERGE_TIMEOUT_S)
                elapsed = time.monotonic() - restarted
                assert not problems, (
                    f"not converged {CONVERGE_TIMEOUT_S:.0f} s after kill {kills}: "
                    f"{len(problems)} problems, first: {problems[:20]}"
                )
                convergence.append(round(elapsed, 1))
        assert operator.alive()
        log = operator.log_text()
        unexpected = unexpected_tracebacks(log)
        assert not unexpected, f"operator errors beyond transport failures: {unexpected[:10]}"
        record({
            "suite": "chaos", "seed": SEED, "services": SERVICES, "final_services":
            len(fleet.wanted), "deleted": len(fleet.deleted), "kills": kills,
            "recoveries": recoveries, "convergence_s": convergence,
            "worst_convergence_s": max(convergence), "control_plane": control_plane,
            "transport_tracebacks": len(tracebacks(log)),
            "total_s": round(time.monotonic() - started, 1),
        })
    finally:
        if not operator.alive():
            operator.start()
        drain(api, namespace)


@pytest.mark.parametrize(
    ("component", "hard", "downtime"),
    [(components.APISERVER, True, 2.0), (components.ETCD, False, 3.0)],
    ids=["apiserver-crash", "etcd-restart"],
)
def test_watches_recover_after_control_plane_restart(
    cluster: ClusterHandle,
    operator: OperatorProcess,
    api: Api,
    namespace: str,
    component: str,
    hard: bool,
    downtime: float,
) -> None:
    """The same operator process (no restart) must see changes made after every watch it
    had was cut: a spec change, a new service, a deletion."""
    _local(cluster)
    fleet = Fleet(namespace, random.Random(SEED), gpu_budget=4)
    operator.start()
    try:
        for op in fleet.populate(4):
            fleet.apply(api, op)
        _, problems = wait_converged(lambda: fleet_problems(api, fleet), 120)
        assert not problems, problems
        pid = operator.proc.pid if operator.proc else None
        restart = restart_component(component, hard=hard, downtime=downtime)
        changed_at = time.monotonic()
        first, second = sorted(fleet.wanted)[:2]
        changed = copy.copy(fleet.wanted[first])
        changed.delay_ms = 7
        fleet.apply(api, Op("change", first, changed))
        fleet.apply(api, Op("delete", second))
        fleet.apply(api, fleet.create_op())
        # First what the operator itself writes (status, children): its watches are back.
        caught_up, problems = wait_converged(
            lambda: fleet_problems(api, fleet, pods=False), OPERATOR_RECOVERY_S)
        assert not problems, f"operator did not react after the {component} restart: {problems}"
        # Then pods and garbage collection, which wait for the controller manager too.
        recovered = control_plane_works(api)
        _, problems = wait_converged(lambda: fleet_problems(api, fleet), CONVERGE_TIMEOUT_S)
        assert not problems, f"not converged after the {component} restart: {problems}"
        assert operator.alive() and operator.proc is not None and operator.proc.pid == pid
        unexpected = unexpected_tracebacks(operator.log_text())
        assert not unexpected, unexpected[:10]
        record({"suite": "watch-recovery", "component": component, "hard": hard,
                "downtime_s": downtime, "ready_s": round(restart.ready_s, 2),
                "operator_caught_up_s": round(caught_up, 1),
                "control_plane_working_s": round(recovered, 1),
                "converged_s": round(time.monotonic() - changed_at, 1)})
    finally:
        drain(api, namespace)
