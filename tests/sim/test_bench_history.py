"""The suite's history mode: a service that served traffic of the same kind before the
measured part, and static provisioning sized on that history (bench/suite.py --history)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuserve.sim.comparing import Contender, Setup, prepare, run_contenders
from gpuserve.sim.oracle import OraclePlan
from gpuserve.sim.suite import SUITE
from gpuserve.sim.workload import Workload, rate_profile_workload


def test_a_workload_after_its_history_is_shifted_by_the_history_it_keeps() -> None:
    history = Workload(arrivals=(0.5, 3.0, 9.0), items=(1, 2, 3))
    today = Workload(arrivals=(0.0, 1.0), items=(4, 5))
    joined = today.after(history, seconds=5.0)
    # The history is cut at its first 5 s; today starts there.
    assert joined.arrivals == (0.5, 3.0, 5.0, 6.0)
    assert joined.items == (1, 2, 4, 5)


def test_a_plan_cut_to_a_span_keeps_the_windows_that_overlap_it() -> None:
    plan = OraclePlan(30.0, (1, 4, 2, 3))
    assert plan.within(0.0, 60.0).replicas == (1, 4)
    assert plan.within(60.0).replicas == (2, 3)
    assert plan.within(45.0, 75.0).replicas == (4, 2)
    assert plan.within(60.0).peak == 3
    with pytest.raises(ValueError, match="no window"):
        plan.within(200.0)


def test_only_generated_workloads_have_a_yesterday_and_it_is_another_draw() -> None:
    by_name = {w.name: w for w in SUITE}
    assert by_name["azure-conv"].yesterday({}, 1.0, 1) is None
    assert by_name["flash-4x"].yesterday({}, 1.0, 1) is None
    today = by_name["bursty"].build({}, 1.0, 1)
    yesterday = by_name["bursty"].yesterday({}, 1.0, 1)
    assert yesterday is not None and yesterday.arrivals != today.arrivals
    assert yesterday == by_name["bursty"].yesterday({}, 1.0, 1)  # seeded


def test_static_sized_on_the_history_holds_the_historys_peak() -> None:
    # A busy history, a quiet measured part: sized on the history, static holds more.
    history = rate_profile_workload(rates=[(120.0, 24.0)], seed=5)
    today = rate_profile_workload(rates=[(120.0, 3.0)], seed=6)
    setup = replace(Setup(), warmup=120.0, max_replicas=12)
    prepared = prepare(setup, today, 1, history=history)
    plan = prepared.plan
    busy, quiet = plan.within(0.0, 120.0).peak, plan.within(120.0).peak
    assert busy > quiet
    rows = [
        Contender("yesterday", "static", sized_on=(0.0, 120.0)),
        Contender("today", "static", sized_on=(120.0, float("inf"))),
    ]
    sizes = {
        r.label: {p.committed for p in r.result.timeline}
        for r in run_contenders(setup, prepared, rows)
    }
    # Static resizes once, at the start of the history: the measured part sees that size.
    assert sizes == {"yesterday": {busy}, "today": {quiet}}
