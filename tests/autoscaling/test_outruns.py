"""Bursts that outran the ready pods: the records both rules keep, which of them were over
within a start-up, and the BurstsCovered condition that says so."""

from __future__ import annotations

from dataclasses import replace

import pytest
from policy_helpers import capacity, config, history, pools

from gpuserve.autoscaling import Decision, PolicyMemory, decide
from gpuserve.autoscaling.outruns import (
    MAX_RECORDS,
    OutrunReport,
    Outruns,
    Seen,
    covered_condition,
    outran,
    outran_bursts,
    remember_outrun,
)
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.llm.capacity import LoadShape, TokenObjectives, replica_capacity
from gpuserve.llm.deciding import LLMPolicy, decide_llm
from gpuserve.llm.observing import Observation

GAP = 20.0
HORIZON = 45.0
PER_POD = 10.0  # req/s a pod serves


def seen(rate: float, pods: int = 2, *, surge: bool | None = None) -> Seen:
    """A 20-s rate against ``pods`` pods; a surge wherever it is past them (by default)."""
    capacity = pods * PER_POD
    rose = outran(rate, capacity, 20.0) if surge is None else surge
    return Seen(rate, 20.0, rose, pods, capacity)


def measured(rates: dict[float, float], pods: dict[float, int] | None = None) -> Outruns:
    """The records after evaluations at the given times, with 2 pods unless ``pods`` says."""
    records: Outruns = ()
    for now, rate in sorted(rates.items()):
        view = seen(rate, (pods or {}).get(now, 2))
        records = remember_outrun(records, view, now=now, memory_s=1800.0, gap_s=GAP)
    return records


def judged(records: Outruns, now: float) -> OutrunReport:
    return outran_bursts(records, now=now, gap_s=GAP, horizon_s=HORIZON, memory_s=1800.0)


def test_a_rate_at_the_capacity_is_no_overload_one_beyond_its_noise_is() -> None:
    assert not outran(10.5, 10.0, window_s=20.0)  # within 4 sd of Poisson noise
    assert outran(30.0, 10.0, window_s=20.0)
    assert not outran(30.0, 30.0, window_s=20.0)


def test_one_stretch_per_burst_with_its_highest_rate() -> None:
    # Overloads at 0, 10 and 25 s (a dip within the gap), then at 100 s: two stretches.
    records = measured({0.0: 30.0, 10.0: 45.0, 15.0: 5.0, 25.0: 40.0, 50.0: 5.0, 100.0: 35.0})
    assert [(first, last, rate) for first, last, rate, _, _ in records] == [
        (0.0, 25.0, 45.0),
        (100.0, 100.0, 35.0),
    ]


def test_an_overload_goes_on_without_a_surge_but_only_a_surge_starts_one() -> None:
    begun = measured({0.0: 40.0})
    # The rise is no longer beyond its noise (the reference caught up): still overloaded.
    going = remember_outrun(
        begun, seen(40.0, surge=False), now=15.0, memory_s=1800.0, gap_s=GAP
    )
    assert [(first, last) for first, last, *_ in going] == [(0.0, 15.0)]
    assert remember_outrun((), seen(40.0, surge=False), now=0.0, memory_s=1800.0, gap_s=GAP) == ()


def test_records_older_than_the_memory_go_and_the_tallest_are_kept() -> None:
    old = measured({0.0: 30.0})
    assert remember_outrun(old, seen(5.0), now=1801.0, memory_s=1800.0, gap_s=GAP) == ()
    many = measured({30.0 * k: 30.0 + k for k in range(MAX_RECORDS + 5)})
    assert len(many) == MAX_RECORDS
    heights = [rate for _, _, rate, _, _ in many]
    assert heights[-1] == 30.0 + MAX_RECORDS + 4  # the newest stays, whatever its height
    assert min(heights) == 35.0  # the five lowest went first


def test_a_stretch_over_within_a_start_up_that_no_added_pod_ended_outran_the_pods() -> None:
    short = measured({0.0: 30.0, 10.0: 45.0, 30.0: 35.0})  # 30 s of overload on 2 pods
    found = judged(short, 60.0)
    assert (found.bursts, found.height, found.ready) == (1, 45.0, 2)
    assert judged(short, 40.0).bursts == 0  # not judged while it may still go on
    # Lasting a start-up, it was chased: pods started at its beginning served its end.
    long = measured({0.0: 30.0, 20.0: 45.0, 40.0: 45.0, 50.0: 35.0})
    assert judged(long, 80.0).bursts == 0
    # Pods that became ready while it was measured served part of it.
    assert judged(measured({0.0: 30.0, 10.0: 45.0, 30.0: 45.0}, {30.0: 4}), 60.0).bursts == 0
    # Pods that became ready as it ended, with more arriving than its first pods serve:
    # they ended it, not the burst.
    ended = measured({0.0: 30.0, 10.0: 45.0, 30.0: 35.0, 35.0: 35.0}, {35.0: 4})
    assert judged(ended, 70.0).bursts == 0
    # The burst went away by itself, and the pods came after it: it outran them.
    gone = measured({0.0: 30.0, 10.0: 45.0, 30.0: 35.0, 35.0: 5.0}, {35.0: 4})
    assert judged(gone, 70.0).bursts == 1


def test_the_condition_names_the_tallest_burst_and_the_pods_it_needs() -> None:
    clear = covered_condition(
        OutrunReport(0, memory_s=1800.0, horizon_s=45.0), min_replicas=1, max_replicas=20
    )
    assert clear[:2] == ("True", "WithinReadyCapacity")
    found = OutrunReport(3, height=94.04, ready=7, needed=16, memory_s=1800.0, horizon_s=45.0)
    status, reason, message = covered_condition(found, min_replicas=1, max_replicas=20)
    assert (status, reason) == ("False", "ShortBurstsOutranReadyPods")
    assert "94.0 req/s with 7 pods ready; 16 serve it." in message
    assert "45 s" in message and "30 min" in message and "scaling.minReplicas" in message
    # Beyond maxReplicas, or already within minReplicas, it says so.
    beyond = covered_condition(found, min_replicas=1, max_replicas=10)[2]
    assert "16 serve it, more than scaling.maxReplicas (10)." in beyond
    held = covered_condition(found, min_replicas=16, max_replicas=20)[2]
    assert "scaling.minReplicas (16) holds them: not all were ready." in held
    # The count of bursts is not in the message: it moves as records age and is judged.
    assert covered_condition(replace(found, bursts=1), min_replicas=1, max_replicas=20)[2] == (
        message
    )


def test_the_memory_keeps_its_records_through_status_and_skips_broken_ones() -> None:
    records = measured({0.0: 30.0, 10.0: 45.5})
    memory = PolicyMemory(outruns=records)
    body = memory.to_status()
    body["outruns"].append(["x", 1])
    assert PolicyMemory.from_status(body).outruns == records


NOW = 300.0


def request_rule(serving: int, *, warm: int = 0, memory_s: float = 1800.0) -> Decision:
    """The request rule with a burst to 5 pods' worth in the last 10 s, from 1."""
    cap = capacity()
    return decide(
        config=config(burst_memory=memory_s),
        history=history(lambda t: 5 * cap if t > NOW - 10 else cap, start=NOW - 120, end=NOW),
        pools=pools(serving, warm=warm),
        now=NOW,
        memory=PolicyMemory(since=0.0),
    )


def test_the_request_rule_records_a_burst_past_the_ready_pods_and_reports_it_once_over() -> None:
    decision = request_rule(1)
    ((first, last, rate, able, most),) = decision.memory.outruns
    assert first == last == NOW and rate > 3 * capacity() and able == most == 1
    assert decision.outran is not None and decision.outran.bursts == 0  # under way
    later = outran_bursts(
        decision.memory.outruns, now=NOW + 60, gap_s=20.0, horizon_s=45.0, memory_s=1800.0
    )
    assert later.bursts == 1
    # The pods able to serve within seconds, warm ones among them, serve it: no record.
    assert request_rule(6).memory.outruns == ()
    assert request_rule(1, warm=5).memory.outruns == ()
    # No burst memory, no report.
    assert request_rule(1, memory_s=0.0).outran is None


def test_the_llm_rule_records_a_surge_past_its_replicas_and_prices_the_pods_it_needs() -> None:
    objectives = TokenObjectives(ttft_s=1.0, tpot_s=0.05)
    shape = LoadShape(1000.0, 4000.0, 200.0)
    policy = LLMPolicy(objectives)
    per_replica = replica_capacity(policy.params, shape, objectives).rate

    def seen(at: float, rate: float, window: float) -> Observation:
        return Observation(at, window, rate, shape, 0.2, 0.03, 0.02, 10.0, 0.0, 0.2, 0.0)

    ready = PoolState((ClassPool("h100", serving_ready=1),))
    memory = PolicyMemory(since=0.0)
    # A spike to 6 replicas' worth for one evaluation, then back at one replica's worth.
    for now, rate in ((100.0, 6 * per_replica), (160.0, 0.5 * per_replica)):
        decision = decide_llm(
            policy=policy,
            stable=seen(now, 0.5 * per_replica, 60.0),
            recent=seen(now, rate, 15.0),
            pools=ready,
            now=now,
            memory=memory,
        )
        memory = decision.memory
    assert decision.outran is not None
    assert decision.outran.bursts == 1 and decision.outran.ready == 1
    assert decision.outran.height == pytest.approx(6 * per_replica)
    assert decision.outran.needed == 6
