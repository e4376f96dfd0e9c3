"""The closed loop on the local stack: real Triton per pod (the runner), real Prometheus
scraping it, the operator's autoscaler reading Prometheus and scaling the pools.

- A load step beyond one replica's capacity scales the service up, and latency comes back
  under the SLO while the load goes on; once the load stops the service returns to
  minReplicas after the scale-down stabilisation window. Decisions and their reasons are
  in status and in events; BurstsCovered says no burst outran the ready pods.
- A load past maxReplicas shows ScalingLimited=True until the load is gone.
- A switch to KEDA removes the autoscaler's conditions; a switch back restores them.
- Under KEDA the operator measures a model slower than its spec states and records it for
  the ScaledObject's threshold (status.kedaCalibration); a switch back removes the record.
- A Prometheus outage holds the replica count (no scale-down on missing data), shows
  MetricsAvailable=False, and scaling resumes once Prometheus is back on the same port.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.loadgen import Limits, LoadResult, Target, percentile, run_constant_rate
from e2e.manifests import sleeper_service
from e2e.marks import LOCAL_DATA_PLANE
from e2e.runner.stack import Stack, apply, condition, events, local_stack, service_status
from gpuserve.autoscaling.query_windows import RATE_WINDOW_S

pytestmark = LOCAL_DATA_PLANE

SLO_MS = 150.0
# One replica runs 40 ms + 2 ms/item batches of up to 8: it saturates near 140 req/s and
# the policy plans ~120 req/s per replica for this SLO, so 200 req/s needs two replicas.
RATE = 200.0
STABILISATION_S = 20.0
READY_S = 120.0


def loop_service(name: str, **scaling: Any) -> dict[str, Any]:
    return sleeper_service(
        name,
        classes=["l4"],  # relative speed 1: no class-speed prior
        slo=f"{SLO_MS:g}ms",
        scaling={
            "minReplicas": 1,
            "maxReplicas": 4,
            "warmPool": 0,
            "scaleDownStabilization": f"{STABILISATION_S:g}s",
            "stableWindow": "20s",
            "panicWindow": "6s",
            **scaling,
        },
        triton={"exitTimeoutSeconds": 5},
    )


@pytest.fixture
def stack(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    with local_stack(cluster, tmp_path, namespaces=frozenset({namespace})) as s:
        yield s


class Load:
    """A bounded constant-rate run in a thread, through the service's serving endpoints."""

    def __init__(self, stack: Stack, namespace: str, name: str, seconds: float) -> None:
        target = Target(
            model="sleeper",
            endpoints=stack.plane.runner.endpoints_for(namespace, name),
            request_timeout_s=10.0,
        )
        limits = Limits(max_requests=int(RATE * seconds) + 10, max_wall_s=seconds + 60)
        self.result: LoadResult | None = None
        self._thread = threading.Thread(
            target=lambda: setattr(
                self, "result", run_constant_rate(target, RATE, seconds, limits)
            ),
            daemon=True,
        )

    def start(self) -> Load:
        self._thread.start()
        return self

    def join(self, timeout: float) -> LoadResult:
        self._thread.join(timeout)
        assert self.result is not None, "the load run did not finish"
        return self.result


def wait_ready(stack: Stack, namespace: str, name: str, timeout: float = READY_S) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = service_status(stack.cluster, namespace, name)
        ready = condition(status, "Ready")
        metrics = condition(status, "MetricsAvailable")
        fine = ready and ready["status"] == "True" and metrics and metrics["status"] == "True"
        return status if fine and status.get("replicas") == 1 else None

    return wait_for(probe, timeout, f"{name} Ready with fresh metrics and 1 replica")


def desired(stack: Stack, namespace: str, name: str) -> int:
    return int(service_status(stack.cluster, namespace, name).get("desiredReplicas", 0))


def test_load_step_scales_up_meets_the_slo_and_scales_back_down(
    stack: Stack, namespace: str
) -> None:
    name = "loop"
    apply(stack.cluster, namespace, loop_service(name))
    wait_ready(stack, namespace, name)

    load = Load(stack, namespace, name, seconds=60).start()
    peak = wait_for(
        lambda: (s := service_status(stack.cluster, namespace, name)).get("replicas", 0) >= 2 and s,
        60,
        "a second serving replica under load",
    )
    result = load.join(timeout=150)
    assert result.failures == 0, [r.error for r in result.records if not r.ok][:5]
    # Latency of the last 15 s of the step: back within the objective.
    tail = [
        r.latency_s
        for r in result.records
        if r.ok and r.latency_s is not None and r.send_s >= result.duration_s - 15
    ]
    tail_p95 = percentile(tail, 95)
    assert tail_p95 is not None and tail_p95 * 1e3 < SLO_MS, (
        f"p95 of the last 15 s is {tail_p95 and tail_p95 * 1e3:.0f} ms\n" + result.summary_table()
    )

    status = service_status(stack.cluster, namespace, name)
    ups = [d for d in status.get("decisions", []) if d["desiredReplicas"] >= 2]
    assert ups and all(d["reason"] for d in ups), status.get("decisions")
    # The step overloaded one replica until the second was ready: a scale-up served it,
    # so it is no burst that outran the pods (that would be BurstsCovered=False).
    covered = condition(status, "BurstsCovered")
    assert covered and (covered["status"], covered["reason"]) == ("True", "WithinReadyCapacity"), (
        covered
    )
    assert ups[0]["applied"] is True
    assert peak["desiredReplicas"] >= 2
    # Two replicas were within maxReplicas: no bound held the decisions back.
    limited = condition(status, "ScalingLimited")
    assert limited and (limited["status"], limited["reason"]) == ("False", "DesiredWithinRange")

    # Load gone: back to minReplicas, but not before the stabilisation window has passed.
    stopped_at = time.monotonic()
    wait_for(
        lambda: (
            (s := service_status(stack.cluster, namespace, name)).get("desiredReplicas") == 1
            and s.get("replicas") == 1
        ),
        120,
        "scale-down to minReplicas",
    )
    assert time.monotonic() - stopped_at >= STABILISATION_S - 5  # the window holds it
    status = service_status(stack.cluster, namespace, name)
    last = status["lastDecision"]
    assert last["desiredReplicas"] == 1 and last["reason"]
    reasons = [e["reason"] for e in events(stack.cluster, namespace, name)]
    assert "ScaledUp" in reasons and "ScaledDown" in reasons, reasons
    messages = [
        e["message"] for e in events(stack.cluster, namespace, name) if e["reason"] == "ScaledUp"
    ]
    assert any("-> " in m for m in messages), messages


def test_max_replicas_holding_a_decision_back_is_a_condition(stack: Stack, namespace: str) -> None:
    """The load needs two replicas and maxReplicas is one: status says the bound, not the
    demand, set the size, and stops saying so once the load is gone."""
    name = "capped"
    apply(stack.cluster, namespace, loop_service(name, maxReplicas=1))
    wait_ready(stack, namespace, name)
    load = Load(stack, namespace, name, seconds=20).start()

    def limited(status: str) -> dict[str, Any] | None:
        c = condition(service_status(stack.cluster, namespace, name), "ScalingLimited")
        return c if c and c["status"] == status else None

    cond = wait_for(lambda: limited("True"), 40, "ScalingLimited=True under the load")
    assert cond["reason"] == "TooManyReplicas", cond
    assert "scaling.maxReplicas (1)" in cond["message"], cond
    assert desired(stack, namespace, name) == 1
    load.join(timeout=120)  # one replica queues what it cannot serve: failures are not judged
    cond = wait_for(lambda: limited("False"), 60, "ScalingLimited=False after the load")
    assert cond["reason"] == "DesiredWithinRange", cond


def test_a_switch_to_keda_drops_the_autoscalers_conditions(stack: Stack, namespace: str) -> None:
    """Under KEDA the builtin autoscaler evaluates nothing, so its conditions would go on
    saying what its last evaluation found: the reconcile removes them, and they come back
    with the first evaluation after a switch back. (This cluster serves no ScaledObject,
    so the KEDA service is Stalled, which its status says.)"""
    name = "switched"
    apply(stack.cluster, namespace, loop_service(name))
    wait_ready(stack, namespace, name)
    ours = ("MetricsAvailable", "ScalingLimited", "BurstsCovered")
    before = service_status(stack.cluster, namespace, name)
    assert condition(before, "ScalingLimited") is not None, before.get("conditions")

    apply(stack.cluster, namespace, loop_service(name, engine="keda"))

    def dropped() -> dict[str, Any] | None:
        status = service_status(stack.cluster, namespace, name)
        stalled = condition(status, "Stalled")
        gone = all(condition(status, t) is None for t in ours)
        return status if gone and stalled and stalled["status"] == "True" else None

    status = wait_for(dropped, 30, f"{name}: the autoscaler's conditions gone under KEDA")
    stalled = condition(status, "Stalled")
    assert stalled and stalled["reason"] == "EngineUnavailable", stalled
    assert "ScaledObject" in stalled["message"], stalled
    # And they stay gone: an evaluation in flight at the switch must not write them back.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = service_status(stack.cluster, namespace, name)
        assert all(condition(status, t) is None for t in ours), status.get("conditions")
        time.sleep(1)

    apply(stack.cluster, namespace, loop_service(name))
    back = wait_ready(stack, namespace, name)
    assert condition(back, "ScalingLimited") is not None, back.get("conditions")
    stalled = condition(back, "Stalled")
    assert stalled and stalled["status"] == "False", stalled


def slow_sleeper(name: str, exec_time_ms: float = 10, **scaling: Any) -> dict[str, Any]:
    """A sleeper that states ``exec_time_ms`` per request and sleeps three times that."""
    return sleeper_service(
        name,
        classes=["l4"],
        exec_time_ms=exec_time_ms,
        per_item_ms=0,
        slowdown=3,
        batching={"maxBatchSize": 0},  # one request per execution: measured = stated x3
        slo=f"{SLO_MS:g}ms",
        scaling={
            "minReplicas": 1,
            "maxReplicas": 2,
            "warmPool": 0,
            "stableWindow": "20s",
            **scaling,
        },
        triton={"exitTimeoutSeconds": 5},
    )


def loaded_under_keda(stack: Stack, namespace: str, name: str) -> float:
    """Starts the slow sleeper under the builtin engine, switches it to KEDA (which this
    cluster does not serve: Stalled), and sends it 30 s of load; returns when that ended."""
    apply(stack.cluster, namespace, slow_sleeper(name))
    wait_ready(stack, namespace, name)
    apply(stack.cluster, namespace, slow_sleeper(name, engine="keda"))

    def stalled() -> bool:
        found = condition(service_status(stack.cluster, namespace, name), "Stalled")
        return found is not None and found["status"] == "True"

    wait_for(stalled, 30, f"{name}: the KEDA rendering reported")
    target = Target(
        model="sleeper",
        endpoints=stack.plane.runner.endpoints_for(namespace, name),
        request_timeout_s=10.0,
    )
    rate, seconds = 10.0, 30.0  # a third of one pod's 33 req/s: nothing queues
    limits = Limits(max_requests=int(rate * seconds) + 10, max_wall_s=seconds + 60)
    result = run_constant_rate(target, rate, seconds, limits)
    assert result.failures == 0, [r.error for r in result.records if not r.ok][:5]
    return time.monotonic()


def test_under_keda_the_measured_compute_time_sizes_the_threshold(
    stack: Stack, namespace: str
) -> None:
    """The model states 10 ms per request and takes 30 (its sleep is tripled): under KEDA
    the operator records Triton's measurement, the scale the ScaledObject's threshold is
    rendered for, and says so in an event; new stated times within the band keep the
    record and are quoted in it; a switch back to the builtin engine removes it.
    (This cluster serves no ScaledObject: the rendering from the record is a unit test's,
    tests/test_keda_calibration.py.)"""
    name = "calibrated"
    ended = loaded_under_keda(stack, namespace, name)

    def recorded() -> dict[str, Any] | None:
        found: dict[str, Any] | None = service_status(stack.cluster, namespace, name).get(
            "kedaCalibration"
        )
        return found

    calibration = wait_for(recorded, 30, f"{name}: status.kedaCalibration")
    # The first window can hold the slower first executions: 27-40 ms, and the scale is
    # what was measured over the 10 ms stated (a later window within 15 % keeps it).
    assert 27.0 <= calibration["computeMs"] <= 40.0, calibration
    assert calibration["serviceScale"] == pytest.approx(calibration["computeMs"] / 10.0, rel=0.01)
    assert "where the spec's service times predict 10.0-10.0 ms" in calibration["message"]
    said = [e for e in events(stack.cluster, namespace, name) if e["reason"] == "KedaCalibrated"]
    assert any(e["message"] == calibration["message"] for e in said), said

    # Stated times that move the threshold by less than the band keep the record, and its
    # message is told again against them: it never quotes times the spec no longer states.
    # First the stable window (20 s) and the rate range behind its samples let the load
    # go, so the new spec judges the record alone: 10 % longer stated times stay within
    # the band. (A fresh measurement would be judged on its own, as the unit tests show.)
    time.sleep(max(0.0, ended + 20.0 + RATE_WINDOW_S + 10.0 - time.monotonic()))
    settled = wait_for(recorded, 5, f"{name}: status.kedaCalibration")
    apply(stack.cluster, namespace, slow_sleeper(name, exec_time_ms=11, engine="keda"))

    def told_again() -> dict[str, Any] | None:
        found = recorded()
        return found if found and "predict 11.0-11.0 ms" in found["message"] else None

    retold = wait_for(told_again, 30, f"{name}: the record told against the new service times")
    assert retold["serviceScale"] == settled["serviceScale"], (settled, retold)
    assert retold["time"] == settled["time"], (settled, retold)

    apply(stack.cluster, namespace, slow_sleeper(name))
    wait_for(
        lambda: "kedaCalibration" not in service_status(stack.cluster, namespace, name),
        30,
        f"{name}: status.kedaCalibration removed under the builtin engine",
    )


CRD = "customresourcedefinition/inferenceservices.gpuserve.io"
RECORD_SCHEMA = (
    "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/kedaCalibration"
)


def test_a_crd_that_does_not_keep_the_record_is_reported_once(stack: Stack, namespace: str) -> None:
    """A CRD older than status.kedaCalibration (helm upgrade leaves CRDs as they are)
    prunes the record: the operator says so once, in a warning naming the fix, and does
    not write it again pass after pass."""
    name = "unkept"
    crd = json.loads(stack.cluster.kubectl("get", CRD, "-o", "json").stdout)
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1", version["name"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    saved = schema["kedaCalibration"]

    def patch(op: dict[str, Any]) -> None:
        stack.cluster.kubectl("patch", CRD, "--type=json", "-p", json.dumps([op]))

    patch({"op": "remove", "path": RECORD_SCHEMA})
    try:
        loaded_under_keda(stack, namespace, name)

        def warned() -> list[dict[str, Any]] | None:
            found = [
                e
                for e in events(stack.cluster, namespace, name)
                if e["reason"] == "KedaCalibrationNotKept"
            ]
            return found or None

        said = wait_for(warned, 30, f"{name}: the record reported as not kept")
        assert said[0]["type"] == "Warning" and "apply this release's crds/" in said[0]["message"]
        time.sleep(10.0)  # several more passes, each with the measurement in its window
        reasons = [e["reason"] for e in events(stack.cluster, namespace, name)]
        assert reasons.count("KedaCalibrationNotKept") == 1, reasons
        assert "KedaCalibrated" not in reasons, reasons
        assert "kedaCalibration" not in service_status(stack.cluster, namespace, name)
    finally:
        patch({"op": "add", "path": RECORD_SCHEMA, "value": saved})


def test_prometheus_outage_holds_replicas_and_scaling_resumes(stack: Stack, namespace: str) -> None:
    name = "outage"
    # A user-set planning percentile reaches the running autoscaler and its reasons.
    apply(stack.cluster, namespace, loop_service(name, planningPercentile=99.9))
    wait_ready(stack, namespace, name)
    load = Load(stack, namespace, name, seconds=30).start()
    wait_for(
        lambda: service_status(stack.cluster, namespace, name).get("replicas", 0) >= 2,
        60,
        "a second serving replica under load",
    )
    ups = service_status(stack.cluster, namespace, name).get("decisions") or []
    assert any("planned at the p99.9 backlog" in d["reason"] for d in ups), ups
    load.join(timeout=120)

    url = stack.plane.prometheus_url
    stack.plane.stop_prometheus()
    held = desired(stack, namespace, name)
    assert held >= 2

    def unavailable() -> dict[str, Any] | None:
        c = condition(service_status(stack.cluster, namespace, name), "MetricsAvailable")
        return c if c and c["status"] == "False" else None

    cond = wait_for(unavailable, 30, "MetricsAvailable=False")
    assert cond["reason"] == "PrometheusUnreachable", cond
    # Longer than the stabilisation window: without data the autoscaler must not shrink.
    deadline = time.monotonic() + STABILISATION_S + 15
    while time.monotonic() < deadline:
        assert desired(stack, namespace, name) >= held
        time.sleep(1.0)
    assert service_status(stack.cluster, namespace, name).get("replicas", 0) >= held

    stack.plane.start_prometheus()
    assert stack.plane.prometheus_url == url  # same port: the operator's URL still holds
    wait_for(
        lambda: (
            (c := condition(service_status(stack.cluster, namespace, name), "MetricsAvailable"))
            and c["status"] == "True"
        ),
        60,
        "MetricsAvailable=True after Prometheus returned",
    )
    wait_for(
        lambda: desired(stack, namespace, name) == 1,
        120,
        "scale-down to minReplicas once metrics are back",
    )


def test_an_auto_warm_pool_is_sized_by_the_autoscaler(stack: Stack, namespace: str) -> None:
    """warmPoolMode auto: the autoscaler records the pool it wants in status, and the
    standby Deployment runs exactly that many pods (warmPool is only the ceiling)."""
    name = "autowarm"
    apply(stack.cluster, namespace, loop_service(name, warmPool=2, warmPoolMode="auto"))
    wait_ready(stack, namespace, name)
    status: dict[str, Any] = {}

    def recorded() -> bool:
        status.update(service_status(stack.cluster, namespace, name))
        return status.get("desiredWarmPool") is not None

    wait_for(recorded, 60, "the autoscaler's warm-pool size in status")
    wanted = int(status["desiredWarmPool"])
    assert 0 <= wanted <= 2
    standby = f"{name}-l4-standby"

    def sized() -> bool:
        out = stack.cluster.kubectl("get", "deployment", standby, "-n", namespace, "-o", "json")
        return int(json.loads(out.stdout)["spec"].get("replicas") or 0) == wanted

    wait_for(sized, 60, f"{standby} at the {wanted} standby pod(s) the autoscaler wants")
    schedulable = condition(service_status(stack.cluster, namespace, name), "Schedulable")
    assert schedulable and f"{wanted} warm" in schedulable["message"], schedulable


def test_behind_a_15s_scrape_the_autoscaler_reads_its_rates_and_scales_up(
    cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    """Prometheus scraping every 15 s, the chart's PodMonitor default. The operator is told
    the interval (as the chart tells it) and queries four intervals; its fixed 15-s range
    held one sample, so the rates stayed missing and the service never showed fresh
    metrics here."""
    scrape = 15.0
    with local_stack(
        cluster, tmp_path, namespaces=frozenset({namespace}), scrape_interval_s=scrape
    ) as stack:
        assert stack.plane.operator_env["GPUSERVE_PROMETHEUS_SCRAPE_INTERVAL"] == "15s"
        name = "slow-scrape"
        apply(stack.cluster, namespace, loop_service(name))
        # Rates need two scrapes in their 60-s range: up to a minute more than at 1 s.
        wait_ready(stack, namespace, name, timeout=READY_S + 4 * scrape)
        load = Load(stack, namespace, name, seconds=90).start()
        wait_for(
            lambda: service_status(stack.cluster, namespace, name).get("replicas", 0) >= 2,
            90,
            "a second serving replica under load behind a 15-s scrape",
        )
        result = load.join(timeout=180)
        assert result.failures == 0, [r.error for r in result.records if not r.ok][:5]
        status = service_status(stack.cluster, namespace, name)
        metrics = condition(status, "MetricsAvailable")
        assert metrics and metrics["status"] == "True", metrics
        ups = [d for d in status.get("decisions", []) if d["desiredReplicas"] >= 2]
        assert ups and all(d["reason"] for d in ups), status.get("decisions")
