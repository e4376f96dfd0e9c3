"""The simulator routing around the pods a scaler's order names, and gpuserve's policy
naming a backlogged pod (rule 9 of docs/autoscaling.md)."""

from __future__ import annotations

from dataclasses import replace

from gpuserve.autoscaling import ClassAction, PolicyConfig, ServiceProfile
from gpuserve.sim.config import AcceleratorPool, BatcherConfig, ServiceTimes, SimConfig
from gpuserve.sim.results import SimResult
from gpuserve.sim.scalers import GpuserveScaler, ScaleOrder, Scaler, ScalerView
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import rate_profile_workload

CONFIG = SimConfig(
    batcher=BatcherConfig(max_batch_size=8, max_queue_delay=0.02),
    service=ServiceTimes(per_batch=0.06, per_item=0.12),
    classes=(AcceleratorPool("gpu", cold_start=30.0, warm_start=2.0, cost_per_hour=1.0),),
    slo_latency=2.0,
    scrape_interval=5.0,
)
POLICY = PolicyConfig(
    profile=ServiceProfile(
        time_per_batch=0.06, time_per_item=0.12, max_batch_size=8, max_queue_delay=0.02
    ),
    slo_latency=2.0,
    # Six pods from the start: the five left in routing carry the burst's height too.
    min_replicas=6,
    max_replicas=6,
    cold_start=30.0,
)
# 20 s at 25 req/s on the one ready pod leave it a queue of minutes; then 4 req/s.
BURST = rate_profile_workload(rates=[(10.0, 4.0), (20.0, 25.0), (150.0, 4.0)], seed=3)


class ThreeMoreAtStart:
    """Starts three pods at once (ready 30 s later, after the burst); from ``around_from``
    on, names the first pod in every order."""

    name = "three-more"
    interval = 5.0
    offset = 0.5

    def __init__(self, around_from: float = float("inf")) -> None:
        self.around_from = around_from
        self.seen: list[ScalerView] = []

    def step(self, view: ScalerView) -> ScaleOrder:
        self.seen.append(view)
        start = (ClassAction("gpu", start=3),) if view.now < 1.0 else ()
        around = ("pod-0",) if view.now >= self.around_from else ()
        return ScaleOrder(start, routed_around=around)


def run(scaler: Scaler, **config: object) -> SimResult:
    cfg = replace(CONFIG, **config)  # type: ignore[arg-type]
    return simulate(config=cfg, workload=BURST, scaler=scaler)


def test_arrivals_avoid_the_pod_an_order_names() -> None:
    spread, around = run(ThreeMoreAtStart()), run(ThreeMoreAtStart(around_from=35.0))
    # The burst's own requests sit in the first pod's queue either way.
    assert around.attainment(10.0, 30.0) == spread.attainment(10.0, 30.0)
    # Once the new pods are ready, a quarter of the Service's picks land in that queue.
    assert spread.attainment(40.0, 120.0) < 0.9
    assert around.attainment(40.0, 120.0) > 0.99
    # The same pods: only where requests go differs.
    assert [p.pods for p in around.timeline] == [p.pods for p in spread.timeline]
    # The timeline counts the pod routed around while the order names it, and only then.
    assert {p.routed_around for p in around.timeline if p.at > 40.0} == {1}
    assert {p.routed_around for p in around.timeline if p.at < 35.0} == {0}
    assert {p.routed_around for p in spread.timeline} == {0}


def test_the_scaler_sees_each_ready_pods_queue_as_last_scraped() -> None:
    scaler = ThreeMoreAtStart()
    run(scaler)
    at_35 = next(v for v in scaler.seen if v.now >= 35.0)
    queues = {q.pod: q.queued for q in at_35.queues}
    assert set(queues) == {"pod-0", "pod-1", "pod-2", "pod-3"}
    assert queues["pod-0"] > 100 and max(queues["pod-1"], queues["pod-2"]) < 5
    blind = ThreeMoreAtStart()
    run(blind, scrape_outages=((30.0, 60.0),))
    # No scrape, no queues: nothing to route around on.
    assert next(v for v in blind.seen if v.now >= 35.0).queues == ()


def test_gpuserve_routes_around_the_backlogged_pod_and_back() -> None:
    def policy(route_around: bool) -> GpuserveScaler:
        config = replace(POLICY, route_around_backlogs=route_around)
        return GpuserveScaler(config, keep_decisions=True)

    named, spread = policy(True), policy(False)
    with_rule, without = run(named, initial_replicas=1), run(spread, initial_replicas=1)
    around = [r for _, d in named.decisions for r in d.routed_around]
    assert {r.pod for r in around} == {"pod-0"}
    assert all(r.queued > r.clears > 0 for r in around)
    # It rejoins once its queue is cleared: the last decisions name no pod.
    assert not named.decisions[-1][1].routed_around
    assert not any(d.routed_around for _, d in spread.decisions)
    assert with_rule.attainment(60.0, 150.0) > 0.99 > without.attainment(60.0, 150.0)


def test_no_pod_leaves_while_the_rest_could_not_carry_a_burst_seen() -> None:
    # Four pods: the three left would carry today's 4 req/s but not the 25 req/s burst the
    # policy remembers and keeps pods for; a burst like it would land on too few pods.
    four = GpuserveScaler(replace(POLICY, min_replicas=4, max_replicas=4), keep_decisions=True)
    run(four, initial_replicas=1)
    assert any(d.signals.get("burstHeadroom", 0.0) > 0 for _, d in four.decisions)
    assert not any(d.routed_around for _, d in four.decisions)
