"""Triton dynamic-batcher semantics in the simulator, on hand-placed arrivals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuserve.sim.config import (
    AcceleratorPool,
    BatcherConfig,
    QueuePolicy,
    ServiceTimes,
    SimConfig,
)
from gpuserve.sim.results import SimResult
from gpuserve.sim.scalers import HoldScaler
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import Workload

EXEC = 0.010  # per execution
ITEM = 0.001  # per item


def cfg(**batcher: object) -> SimConfig:
    return SimConfig(
        batcher=replace(BatcherConfig(max_batch_size=8), **batcher),  # type: ignore[arg-type]
        service=ServiceTimes(per_batch=EXEC, per_item=ITEM),
        classes=(AcceleratorPool("a"),),
        slo_latency=1.0,
    )


def one_at_a_time(**batcher: object) -> SimConfig:
    """One request per execution, none held back: each waits only for the one ahead."""
    return cfg(max_queue_delay=0.0, max_batch_size=1, **batcher)


def run(
    config: SimConfig,
    arrivals: list[float],
    items: list[int] | None = None,
    priorities: list[int] | None = None,
) -> SimResult:
    workload = Workload(
        arrivals=tuple(arrivals),
        items=tuple(items or [1] * len(arrivals)),
        priorities=tuple(priorities or ()),
    )
    return simulate(config=config, workload=workload, scaler=HoldScaler())


def t(items: int) -> float:
    return EXEC + ITEM * items


def test_a_lone_request_waits_the_queue_delay_then_runs() -> None:
    result = run(cfg(max_queue_delay=0.005), [0.0])
    assert result.latencies[0] == pytest.approx(0.005 + t(1))


def test_zero_delay_runs_at_once() -> None:
    result = run(cfg(max_queue_delay=0.0), [0.0])
    assert result.latencies[0] == pytest.approx(t(1))


def test_requests_arriving_within_the_delay_share_a_batch() -> None:
    result = run(cfg(max_queue_delay=0.005), [0.0, 0.001, 0.002])
    done = [a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True)]
    assert done == pytest.approx([0.005 + t(3)] * 3)


def test_a_preferred_size_is_sent_without_waiting() -> None:
    result = run(cfg(max_queue_delay=0.5, preferred_batch_sizes=(2,)), [0.0, 0.001])
    done = [a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True)]
    assert done == pytest.approx([0.001 + t(2)] * 2)


def test_batches_never_exceed_max_batch_size() -> None:
    # 12 requests queued behind a busy instance: the next batch takes 8, then 4 (in order).
    arrivals = [0.0] + [0.0001 * k for k in range(1, 13)]
    result = run(cfg(max_queue_delay=0.0), arrivals)
    first_done = t(1)
    done = [a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True)]
    assert done[1:9] == pytest.approx([first_done + t(8)] * 8)
    assert done[9:] == pytest.approx([first_done + t(8) + t(4)] * 4)


def test_request_larger_than_the_remaining_room_waits_for_the_next_batch() -> None:
    # Sizes 5 then 4 with max batch 8: order is kept, so they run in two batches.
    result = run(cfg(max_queue_delay=0.0), [0.0, 0.0001, 0.0002], items=[1, 5, 4])
    done = [a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True)]
    assert done[1] == pytest.approx(t(1) + t(5))
    assert done[2] == pytest.approx(t(1) + t(5) + t(4))


def test_oversized_request_is_rejected() -> None:
    result = run(cfg(), [0.0], items=[9])
    assert result.rejected == 1


def test_without_dynamic_batching_requests_run_one_by_one() -> None:
    result = run(cfg(dynamic_batching=False), [0.0, 0.0, 0.0])
    done = sorted(a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True))
    assert done == pytest.approx([t(1), 2 * t(1), 3 * t(1)])


def test_two_instances_run_two_batches_at_once() -> None:
    config = replace(cfg(dynamic_batching=False), instances=2)
    result = run(config, [0.0, 0.0])
    assert result.latencies == pytest.approx((t(1), t(1)))


def test_full_queue_rejects_new_requests() -> None:
    config = cfg(max_queue_delay=0.0, default_policy=QueuePolicy(max_queue_size=2))
    # One executes at once, two wait, the fourth finds the queue full.
    result = run(config, [0.0, 0.0001, 0.0002, 0.0003])
    assert result.rejected == 1
    assert result.latencies[3] == float("inf")


def test_timeout_reject_fails_requests_that_wait_too_long() -> None:
    config = one_at_a_time(default_policy=QueuePolicy(timeout=0.015, action="reject"))
    result = run(config, [0.0, 0.0001, 0.0002])
    # Each execution takes 11 ms: the second starts at 11 ms (in time), the third would
    # start at 22 ms, after its 15 ms timeout.
    assert result.rejected == 1
    assert result.latencies[2] == float("inf")


def test_timeout_delay_moves_requests_behind_fresh_ones() -> None:
    config = one_at_a_time(default_policy=QueuePolicy(timeout=0.005, action="delay"))
    # r1 times out while r0 runs; r2 arrives after the timeout and overtakes it.
    result = run(config, [0.0, 0.001, 0.0065])
    done = [a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True)]
    assert result.rejected == 0
    assert done[2] < done[1]


def test_priority_level_one_is_served_first() -> None:
    config = one_at_a_time(priority_levels=2, default_priority=2)
    result = run(config, [0.0, 0.001, 0.002], priorities=[2, 2, 1])
    done = [a + lat for a, lat in zip(result.arrivals, result.latencies, strict=True)]
    assert done[2] < done[1]


def test_precision_factor_and_class_speed_scale_execution_time() -> None:
    config = replace(
        cfg(max_queue_delay=0.0),
        service=ServiceTimes(per_batch=EXEC, per_item=ITEM, precision_factor=0.5),
        classes=(AcceleratorPool("fast", speed=2.0),),
    )
    result = run(config, [0.0])
    assert result.latencies[0] == pytest.approx(t(1) * 0.5 / 2.0)
