"""The simulator routing around a backlogged pod (``SimConfig.shedding``)."""

from __future__ import annotations

from dataclasses import replace

from gpuserve.autoscaling import ClassAction
from gpuserve.sim.config import AcceleratorPool, BatcherConfig, ServiceTimes, Shedding, SimConfig
from gpuserve.sim.results import SimResult
from gpuserve.sim.scalers import ScaleOrder, ScalerView
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import rate_profile_workload

BASE = SimConfig(
    batcher=BatcherConfig(max_batch_size=8, max_queue_delay=0.02),
    service=ServiceTimes(per_batch=0.06, per_item=0.12),
    classes=(AcceleratorPool("gpu", cold_start=30.0, warm_start=2.0, cost_per_hour=1.0),),
    slo_latency=2.0,
    scrape_interval=5.0,
)
# One pod serves about 6.5 req/s within 2 s, a request waiting up to 1.2 s.
RULE = Shedding(rate=6.5, budget=1.2)


class ThreeMoreAtStart:
    """Starts three pods at once: they are ready 30 s later, after the burst."""

    name = "three-more"
    interval = 5.0
    offset = 0.0

    def step(self, view: ScalerView) -> ScaleOrder:
        if view.now == 0.0:
            return ScaleOrder((ClassAction("gpu", start=3),))
        return ScaleOrder()


def run(
    shedding: Shedding | None, scrape_outages: tuple[tuple[float, float], ...] = ()
) -> SimResult:
    # 20 s at 25 req/s on the one ready pod leaves it a queue of minutes; then 4 req/s.
    workload = rate_profile_workload(rates=[(10.0, 4.0), (20.0, 25.0), (150.0, 4.0)], seed=3)
    cfg = replace(BASE, shedding=shedding, scrape_outages=scrape_outages)
    return simulate(config=cfg, workload=workload, scaler=ThreeMoreAtStart())


def test_requests_after_the_burst_go_around_the_backlogged_pod() -> None:
    spread, shed = run(None), run(RULE)
    # The burst's own requests sit in the first pod's queue either way.
    assert shed.attainment(10.0, 30.0) == spread.attainment(10.0, 30.0)
    # Once the new pods are ready, a quarter of the Service's picks land in that queue.
    assert spread.attainment(40.0, 120.0) < 0.9
    assert shed.attainment(40.0, 120.0) > 0.99
    # The same pods: only where requests go differs.
    assert [p.pods for p in shed.timeline] == [p.pods for p in spread.timeline]


def test_without_measurements_every_pod_takes_requests_again() -> None:
    # Scrapes fail from 35 s on: nothing says the queue is still deep, so it is routed to.
    blind = run(RULE, scrape_outages=((35.0, 180.0),))
    assert blind.attainment(40.0, 120.0) < 0.9
