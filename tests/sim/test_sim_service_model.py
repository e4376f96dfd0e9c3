"""Model terms measured against real Triton: per-request occupancy, per-class jitter and
per-request overrides, and the dynamic batcher's payload prefetching."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from gpuserve.sim.config import (
    AcceleratorPool,
    BatcherConfig,
    QueuePolicy,
    ServiceTimes,
    SimConfig,
)
from gpuserve.sim.from_spec import parse_service_time_model
from gpuserve.sim.results import SimResult
from gpuserve.sim.scalers import HoldScaler
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import Workload

EXEC = 0.010
ITEM = 0.001



def config(
    batcher: BatcherConfig, service: ServiceTimes | None = None, pool: AcceleratorPool | None = None
) -> SimConfig:
    return SimConfig(
        batcher=batcher,
        service=service or ServiceTimes(per_batch=EXEC, per_item=ITEM),
        classes=(pool or AcceleratorPool("a"),),
        slo_latency=1.0,
    )


def run(cfg: SimConfig, arrivals: list[float]) -> SimResult:
    workload = Workload(arrivals=tuple(arrivals), items=(1,) * len(arrivals))
    return simulate(config=cfg, workload=workload, scaler=HoldScaler())


def done(result: SimResult) -> list[float]:
    return [a + x for a, x in zip(result.arrivals, result.latencies, strict=True)]


# ---------------------------------------------------------------- per-request occupancy


def test_per_request_time_adds_per_request_of_a_batch_and_ignores_speed() -> None:
    batcher = BatcherConfig(max_batch_size=8, max_queue_delay=0.005)
    service = ServiceTimes(per_batch=EXEC, per_item=ITEM, per_request=0.002)
    result = run(config(batcher, service, AcceleratorPool("a", speed=2.0)), [0.0, 0.001, 0.002])
    # One batch of 3 at 5 ms: model time halves on a 2x class, the host's share does not.
    assert done(result) == pytest.approx([0.005 + (EXEC + 3 * ITEM) / 2 + 3 * 0.002] * 3)


def test_per_request_time_costs_capacity_not_only_latency() -> None:
    single = BatcherConfig(max_batch_size=8, dynamic_batching=False)
    service = ServiceTimes(per_batch=EXEC, per_item=ITEM, per_request=0.004)
    result = run(config(single, service), [0.0, 0.0])
    # The second request waits for the first's whole occupancy (15 ms), then takes its own.
    assert done(result) == pytest.approx([0.015, 0.030])


def test_a_class_overrides_the_per_request_time() -> None:
    batcher = BatcherConfig(max_batch_size=8, max_queue_delay=0.0)
    service = ServiceTimes(per_batch=EXEC, per_item=ITEM, per_request=0.002)
    result = run(config(batcher, service, AcceleratorPool("a", per_request=0.0)), [0.0])
    assert result.latencies[0] == pytest.approx(EXEC + ITEM)


def test_negative_times_are_refused() -> None:
    with pytest.raises(ValueError):
        ServiceTimes(per_batch=EXEC, per_item=ITEM, per_request=-0.001)


# ---------------------------------------------------------------- jitter


def _isolated_times(cfg: SimConfig, n: int = 4000) -> list[float]:
    result = run(cfg, [i * 1.0 for i in range(n)])  # 1 s apart: no queueing
    return list(result.latencies)


def test_class_jitter_has_mean_one_and_the_given_spread() -> None:
    batcher = BatcherConfig(max_batch_size=8, max_queue_delay=0.0)
    times = _isolated_times(config(batcher, pool=AcceleratorPool("a", jitter_cv=0.4)))
    mean = statistics.fmean(times)
    assert mean == pytest.approx(EXEC + ITEM, rel=0.03)
    assert statistics.pstdev(times) / mean == pytest.approx(0.4, rel=0.1)
    assert min(times) > 0


def test_a_class_can_turn_the_service_jitter_off() -> None:
    batcher = BatcherConfig(max_batch_size=8, max_queue_delay=0.0)
    service = ServiceTimes(per_batch=EXEC, per_item=ITEM, jitter_cv=0.5)
    times = _isolated_times(config(batcher, service, AcceleratorPool("a", jitter_cv=0.0)), 50)
    assert times == pytest.approx([EXEC + ITEM] * 50)


def test_service_times_file_reads_per_request_time_and_class_jitter() -> None:
    model = parse_service_time_model(
        {
            "timePerBatch": "5ms",
            "timePerItem": "0.2ms",
            "timePerRequest": "0.1ms",
            "jitter": 0.05,
            "classes": {"l4": {"jitter": 0.2}, "t4": {"timePerBatch": "9ms", "timePerItem": "1ms"}},
        }
    )
    assert model.per_request == pytest.approx(0.0001)
    assert model.jitter_cv == pytest.approx(0.05)
    assert model.classes["l4"].jitter_cv == pytest.approx(0.2)
    assert model.classes["l4"].per_batch is None
    assert model.classes["t4"].per_item == pytest.approx(0.001)
    with pytest.raises(ValueError, match="together"):
        parse_service_time_model(
            {"timePerBatch": "5ms", "timePerItem": "1ms", "classes": {"x": {"timePerBatch": "1ms"}}}
        )
    with pytest.raises(ValueError, match="jitter"):
        parse_service_time_model({"timePerBatch": "5ms", "timePerItem": "1ms", "jitter": -1})


# ---------------------------------------------------------------- prefetching

PREFETCHING = BatcherConfig(max_batch_size=8, preferred_batch_sizes=(4, 8), max_queue_delay=0.002)


def test_prefetching_applies_only_without_priorities_or_queue_policy() -> None:
    assert PREFETCHING.prefetching
    assert not replace(PREFETCHING, prefetch=False).prefetching
    assert not replace(PREFETCHING, priority_levels=2).prefetching
    assert not replace(PREFETCHING, default_policy=QueuePolicy(timeout=0.1)).prefetching
    assert not replace(PREFETCHING, default_policy=QueuePolicy(max_queue_size=10)).prefetching
    assert not replace(PREFETCHING, max_batch_size=0).prefetching


# r0 runs alone from 2 ms to 13 ms. r1 and r2 arrive meanwhile: 2 ms after r1 the batcher
# closes a batch of the two and queues it for the busy instance. r3 arrives after that.
ARRIVALS = [0.0, 0.003, 0.004, 0.006]


def test_a_batch_formed_while_the_instance_is_busy_does_not_take_a_late_request() -> None:
    result = run(config(PREFETCHING), ARRIVALS)
    first = 0.002 + EXEC + ITEM
    second = first + EXEC + 2 * ITEM
    third = second + EXEC + ITEM
    assert done(result) == pytest.approx([first, second, second, third])


def test_without_prefetching_the_batch_forms_when_the_instance_is_free() -> None:
    result = run(config(replace(PREFETCHING, prefetch=False)), ARRIVALS)
    first = 0.002 + EXEC + ITEM
    assert done(result) == pytest.approx([first] + [first + EXEC + 3 * ITEM] * 3)


def test_late_requests_join_a_waiting_batch_once_they_reach_the_next_preferred_size() -> None:
    # Four more arrive while [r1, r2] waits: at the fourth the queue holds the 4 items the
    # batcher asked for (the next preferred size), so two join at once (making 4, a
    # preferred size) and the last two join when their queue delay expires, before the
    # instance is free at 13 ms: one batch of six.
    result = run(config(PREFETCHING), [0.0, 0.003, 0.004, 0.006, 0.0065, 0.007, 0.0075])
    first = 0.002 + EXEC + ITEM
    assert done(result) == pytest.approx([first] + [first + EXEC + 6 * ITEM] * 6)


def test_prefetching_without_preferred_sizes_matches_forming_at_a_free_instance() -> None:
    plain = BatcherConfig(max_batch_size=8, max_queue_delay=0.002)
    arrivals = [i * 0.0013 for i in range(200)]
    a = done(run(config(plain), arrivals))
    b = done(run(config(replace(plain, prefetch=False)), arrivals))
    assert a == pytest.approx(b)
    assert not math.isinf(max(a))
