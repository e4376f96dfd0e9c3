"""Properties of the policy over arbitrary (including broken) metric histories."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import config

from gpuserve.autoscaling import (
    ClassPool,
    MetricHistory,
    MetricSample,
    PolicyMemory,
    PoolState,
    decide,
)

NOW = 1000.0
maybe = st.one_of(
    st.none(),
    st.just(math.nan),
    st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False),
)
samples = st.lists(
    st.builds(
        MetricSample,
        at=st.floats(min_value=NOW - 300, max_value=NOW),
        queue_depth=maybe,
        arrival_rate=maybe,
        success_rate=maybe,
        item_rate=maybe,
        exec_rate=maybe,
        avg_queue_time=maybe,
        avg_request_time=maybe,
        avg_compute_time=maybe,
        p95_latency=maybe,
    ),
    max_size=40,
)
pool_states = st.builds(
    lambda serving, warm, starting, free: PoolState(
        (
            ClassPool(
                name="a",
                serving_ready=serving,
                warm_ready=warm,
                starting=tuple(starting),
                free_capacity=free,
            ),
            ClassPool(name="b", speed=0.5, serving_ready=serving // 2),
        )
    ),
    st.integers(0, 30),
    st.integers(0, 4),
    st.lists(st.floats(0, 300), max_size=5),
    st.one_of(st.none(), st.integers(0, 10)),
)
bounds = st.tuples(st.integers(0, 10), st.integers(0, 25)).map(
    lambda b: (min(b), max(b[1], 1, min(b)))
)
memories = st.builds(
    PolicyMemory,
    recommendations=st.lists(
        st.tuples(st.floats(NOW - 500, NOW), st.integers(0, 40)), max_size=10
    ).map(lambda xs: tuple(sorted(xs))),
    since=st.one_of(st.none(), st.floats(0, NOW)),
    panic_until=st.one_of(st.none(), st.floats(NOW - 100, NOW + 100)),
)


@settings(max_examples=300, deadline=None)
@given(samples=samples, state=pool_states, limits=bounds, memory=memories)
def test_target_stays_within_bounds_and_capacity(
    samples: list[MetricSample],
    state: PoolState,
    limits: tuple[int, int],
    memory: PolicyMemory,
) -> None:
    lo, hi = limits
    decision = decide(
        config=config(min_replicas=lo, max_replicas=hi),
        history=MetricHistory.of(samples),
        pools=state,
        now=NOW,
        memory=memory,
    )
    committed = state.committed
    # Within [min, max] unless the cluster cannot place enough pods or the current size
    # is above max and removal is the move.
    assert decision.desired_replicas <= max(hi, committed)
    if decision.desired_replicas < lo:
        assert "could not be placed" in decision.reason
    assert decision.reason
    for action in decision.actions:
        pool = state.by_name(action.name)
        assert 0 <= action.promote_warm <= pool.warm_ready
        assert action.remove <= pool.committed
        if pool.free_capacity is not None:
            assert action.start <= pool.free_capacity
    assert all(math.isfinite(v) for v in decision.signals.values())


@settings(max_examples=300, deadline=None)
@given(state=pool_states, memory=memories, data=st.data())
def test_never_scales_down_on_missing_or_stale_rates(
    state: PoolState, memory: PolicyMemory, data: st.DataObject
) -> None:
    stale = data.draw(st.booleans())
    if stale:
        history = MetricHistory.of(
            [MetricSample(at=NOW - 120 - k, arrival_rate=0.0, success_rate=0.0) for k in range(5)]
        )
    else:
        history = MetricHistory.of(
            [
                MetricSample(
                    at=NOW - 5 * k,
                    arrival_rate=data.draw(st.sampled_from([None, math.nan])),
                    success_rate=data.draw(st.sampled_from([None, math.nan])),
                    queue_depth=data.draw(maybe),
                )
                for k in range(10)
            ]
        )
    decision = decide(
        config=config(min_replicas=0, max_replicas=100),
        history=history,
        pools=state,
        now=NOW,
        memory=memory,
    )
    assert decision.desired_replicas >= state.committed
    assert decision.removed == 0
