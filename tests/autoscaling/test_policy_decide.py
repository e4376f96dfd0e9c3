"""Behaviour of the autoscaling policy on synthetic metric histories."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace

import pytest
from policy_helpers import capacity, config, history, pools

from e2e.invalid_cases import valid_service
from gpuserve.api.models import parse_inference_service
from gpuserve.autoscaling import (
    ClassPool,
    Decision,
    MetricHistory,
    MetricSample,
    PolicyConfig,
    PolicyMemory,
    PoolState,
    decide,
    replica_capacity,
)
from gpuserve.autoscaling.from_spec import policy_config_from_spec


def run(
    *,
    rate: float | object,
    serving: int,
    now: float = 300.0,
    memory: PolicyMemory | None = None,
    **kw: object,
) -> Decision:
    cfg = kw.pop("cfg", config())
    hist = kw.pop("hist", None) or history(rate, start=now - 120, end=now)  # type: ignore[arg-type]
    state = kw.pop("state", None) or pools(serving)
    return decide(
        config=cfg,  # type: ignore[arg-type]
        history=hist,  # type: ignore[arg-type]
        pools=state,  # type: ignore[arg-type]
        now=now,
        memory=memory or PolicyMemory(since=0.0),
    )


# --------------------------------------------------------------------------- steady load


def test_steady_load_sizes_from_the_slo_capacity() -> None:
    cap = capacity()
    decision = run(rate=4.5 * cap, serving=5)
    assert decision.mode == "steady"
    assert decision.desired_replicas == 5
    assert decision.actions == ()
    assert "needs 5 replicas" in decision.reason
    assert math.isclose(decision.signals["demandStable"], 4.5 * cap, rel_tol=1e-9)


def test_steady_load_above_capacity_scales_up_at_once() -> None:
    cap = capacity()
    decision = run(rate=7.5 * cap, serving=5)
    assert decision.desired_replicas == 8
    assert decision.started == 3 and decision.removed == 0


def test_capacity_grows_with_a_looser_slo() -> None:
    cfg = config()
    tight = replica_capacity(profile=cfg.profile, slo_latency=1.2, quantile=0.99)
    loose = replica_capacity(profile=cfg.profile, slo_latency=4.0, quantile=0.99)
    assert 0 < tight.rate < loose.rate < loose.saturation_rate


def test_slo_shorter_than_one_execution_is_infeasible() -> None:
    cfg = config()
    estimate = replica_capacity(profile=cfg.profile, slo_latency=0.1, quantile=0.95)
    assert not estimate.feasible


# --------------------------------------------------------------------------- missing data


def test_no_samples_holds_and_says_so() -> None:
    decision = run(rate=0.0, serving=4, hist=MetricHistory(()))
    assert decision.mode == "hold"
    assert decision.desired_replicas == 4
    assert "no metrics" in decision.reason


def test_stale_samples_hold_and_never_scale_down() -> None:
    # Demand would need one replica, but the newest sample is 100 s old.
    old = history(0.5, start=100.0, end=200.0)
    decision = run(rate=0.5, serving=6, hist=old, now=300.0)
    assert decision.mode == "hold"
    assert decision.desired_replicas == 6
    assert "stale" in decision.reason


def test_nan_rates_hold() -> None:
    nan = float("nan")
    samples = tuple(
        MetricSample(at=t, queue_depth=0.0, arrival_rate=nan, success_rate=nan)
        for t in range(180, 301, 5)
    )
    decision = run(rate=0.0, serving=6, hist=MetricHistory(samples))
    assert decision.mode == "hold"
    assert decision.desired_replicas == 6
    assert "missing or NaN" in decision.reason


def test_missing_rates_with_a_deep_queue_scale_up() -> None:
    samples = tuple(MetricSample(at=t, queue_depth=200.0) for t in range(180, 301, 5))
    decision = run(rate=0.0, serving=2, hist=MetricHistory(samples))
    assert decision.desired_replicas > 2
    assert "queue depth 200" in decision.reason


def test_hold_still_respects_min_replicas() -> None:
    decision = run(rate=0.0, serving=0, hist=MetricHistory(()), cfg=config(min_replicas=2))
    assert decision.desired_replicas == 2
    assert decision.started == 2


def test_memory_survives_a_status_round_trip_and_bad_status() -> None:
    memory = PolicyMemory(
        recommendations=((1.0, 3), (6.0, 4)),
        since=0.5,
        last_scale_up=6.0,
        panic_until=70.0,
        dispersions=((0.0, 12.5, 12), (60.0, 30.25, 11)),
        time_scale=3.4,
        prefill_scale=1.2,
        time_fits=((5.0, 0.25, 3.3, 1.0), (65.0, 0.5, 3.6, 1.25)),
    )
    assert PolicyMemory.from_status(memory.to_status()) == memory
    bad = {
        "recommendations": [["x"]],
        "since": "y",
        "dispersions": [[0.0, "z", 3], [1.0]],
        "outruns": "w",
        "timeScale": -2.0,
        "prefillScale": "fast",
        "timeFits": [[1.0, 0.2, 0.0, 1.0], [2.0, float("nan"), 1.0, 1.0], [3.0], [4, 0.2, 1, 0]],
    }
    assert PolicyMemory.from_status(bad) == PolicyMemory()


# --------------------------------------------------------------------------- bursts and panic


def test_burst_in_the_short_window_panics_and_scales_up() -> None:
    cap = capacity()

    # 60 s at 3 replicas' worth, then the last 6 s at 8 replicas' worth.
    def rate(t: float) -> float:
        return 8 * cap if t >= 295 else 3 * cap

    decision = run(rate=rate, serving=4)
    assert decision.mode == "panic"
    assert decision.desired_replicas >= 8
    assert "panic" in decision.reason


def test_no_scale_down_while_panicking() -> None:
    cap = capacity()
    memory = PolicyMemory(since=0.0, panic_until=330.0)
    decision = run(rate=1 * cap, serving=8, memory=memory)
    assert decision.mode == "panic"
    assert decision.desired_replicas == 8
    assert "no scale-down while panicking" in decision.reason


# --------------------------------------------------------------------------- stabilisation


def test_scale_down_waits_for_the_stabilisation_window() -> None:
    cap = capacity()
    cfg = config(scale_down_window=120.0)
    memory = PolicyMemory(since=0.0, recommendations=((250.0, 8),))
    held = run(rate=3 * cap, serving=8, memory=memory, cfg=cfg)
    assert held.desired_replicas == 8
    assert "held at 8" in held.reason
    later = run(
        rate=3 * cap,
        serving=8,
        memory=held.memory,
        cfg=cfg,
        now=390.0,
        hist=history(3 * cap, start=270.0, end=390.0),
    )
    assert later.desired_replicas < 8


def test_holding_a_scale_down_never_grows_past_the_pods_committed() -> None:
    # A need the scale-up limit cut (40 asked, 10 started) stays in the window; when the
    # evidence then asks for fewer than 10, holding the scale-down keeps 10, not 40 (a
    # flash crowd's drained backlog once took a service from 10 pods to 40 this way).
    cap = capacity()
    memory = PolicyMemory(since=0.0, recommendations=((250.0, 40),))
    held = run(rate=3 * cap, serving=10, memory=memory)
    assert held.desired_replicas == 10
    assert held.started == 0


def test_scale_down_is_rate_limited_per_step() -> None:
    decision = run(rate=0.5, serving=16, cfg=config(scale_down_max_fraction=0.25))
    assert decision.desired_replicas == 12


def test_flapping_load_does_not_oscillate() -> None:
    cap = capacity()
    cfg = config()
    memory = PolicyMemory(since=0.0)

    def rate(t: float) -> float:  # alternating every 20 s between 3 and 6 replicas' worth
        return 6 * cap if int(t // 20) % 2 else 3 * cap

    five_minutes = _follow(rate, cfg, serving=6, memory=memory, start=300.0, steps=60)
    sizes = list(five_minutes.values())
    changes = sum(1 for a, b in itertools.pairwise(sizes) if a != b)
    assert changes <= 2, sizes
    assert min(sizes) >= 5  # never sized for the troughs


def _follow(
    rate: Callable[[float], float],
    cfg: PolicyConfig,
    *,
    serving: int,
    memory: PolicyMemory,
    start: float = 0.0,
    steps: int = 120,
) -> dict[float, int]:
    """Serving pods every 5 s from ``start`` while ``decide`` sizes the service (changes
    take effect at once)."""
    sizes = {}
    for step in range(steps):
        now = start + 5.0 * step
        decision = decide(
            config=cfg,
            history=history(rate, start=now - 130, end=now),
            pools=pools(serving),
            now=now,
            memory=memory,
        )
        memory, serving = decision.memory, decision.desired_replicas
        sizes[now] = serving
    return sizes


# A whole window of records at 8 replicas before 0 s.
_WHOLE_WINDOW_OF_8 = PolicyMemory(
    since=-300.0, recommendations=tuple((float(t), 8) for t in range(-115, 1, 5))
)


def _falling(t: float, spike_at: float | None = None) -> float:
    """8 replicas' worth of demand until 200 s, down to 2 by 440 s, then flat; with
    ``spike_at``, 12 replicas' worth in the two scrapes up to it."""
    cap = capacity()
    if spike_at is not None and spike_at - 5.0 - 1e-9 <= t <= spike_at + 1e-9:
        return 12 * cap
    return cap * (8.0 - 6.0 * min(1.0, max(0.0, (t - 200.0) / 240.0)))


def test_a_falling_trend_lets_pods_go_after_a_start_up_not_a_whole_window() -> None:
    # The records of the last 120 s follow the fitted line back: they are demand that has
    # gone, so the hold keeps only a start-up's worth (45 s) of them.
    cap = capacity()
    cfg = config(scale_down_window=120.0, burst_memory=0.0)
    sizes = _follow(_falling, cfg, serving=8, memory=_WHOLE_WINDOW_OF_8)
    for now, n in sizes.items():
        assert n >= math.ceil(_falling(now) / cap - 1e-9), (now, n)  # never below the need
    # A record is a need from the 60-s mean, 30 s behind the line: at 380 s the hold
    # keeps what the demand needed 45 + 30 s before (6 pods; it needs 4 now), where the
    # whole window would keep what it needed 120 + 30 s before (8).
    assert sizes[380.0] == math.ceil(_falling(380.0 - 45.0 - 30.0) / cap) == 6
    assert sizes[380.0] < math.ceil(_falling(380.0 - 120.0 - 30.0) / cap) == 8


def test_a_record_the_falling_line_does_not_explain_keeps_the_whole_hold() -> None:
    # Two scrapes at 12 replicas' worth during the fall: the line followed back does not
    # reach them, so they are no past of the trend; the window holds them for its 120 s.
    cfg = config(scale_down_window=120.0, burst_memory=0.0)
    sizes = _follow(
        lambda t: _falling(t, spike_at=300.0), cfg, serving=8, memory=_WHOLE_WINDOW_OF_8
    )
    assert sizes[300.0] == 12
    assert sizes[415.0] == 12
    assert sizes[425.0] < 12


def test_first_window_after_restart_does_not_scale_down() -> None:
    decision = run(rate=0.5, serving=8, memory=PolicyMemory())
    assert decision.desired_replicas == 8


# --------------------------------------------------------------------------- bounds


def test_min_and_max_replicas_clamp_the_target() -> None:
    cap = capacity()
    capped = run(rate=40 * cap, serving=5, cfg=config(max_replicas=7))
    assert capped.desired_replicas == 7
    # The decision says the bound, not the demand, set its size.
    assert "capped at maxReplicas 7 (needs " in capped.reason
    assert capped.signals["uncapped"] > 7
    assert run(rate=0.0, serving=3, cfg=config(min_replicas=3)).desired_replicas == 3
    assert "capped" not in run(rate=2 * cap, serving=5, cfg=config(max_replicas=7)).reason


def test_scale_up_is_rate_limited_but_at_least_the_minimum_step() -> None:
    cap = capacity()
    decision = run(rate=30 * cap, serving=2, cfg=config(max_replicas=50))
    assert decision.desired_replicas == 6  # max(2 * 2, 2 + 4)
    assert "limited" in decision.reason


# --------------------------------------------------------------------------- warm pool, classes


def test_warm_pods_are_promoted_before_new_pods_start() -> None:
    cap = capacity()
    decision = run(rate=7.5 * cap, serving=5, state=pools(5, warm=2))
    assert decision.promoted == 2
    assert decision.started == 1
    assert "promoting 2 warm pods" in decision.reason


def test_classes_fill_in_preference_order_within_free_capacity() -> None:
    cap = capacity()
    state = PoolState(
        (
            ClassPool(name="h100", speed=1.0, serving_ready=2, free_capacity=1),
            ClassPool(name="l4", speed=1.0, serving_ready=0, free_capacity=None),
        )
    )
    decision = run(rate=5.5 * cap, serving=2, state=state)
    by_name = {a.name: a for a in decision.actions}
    assert by_name["h100"].start == 1
    assert by_name["l4"].start == 3


def test_faster_class_needs_fewer_pods() -> None:
    cap = capacity()
    slow = PoolState((ClassPool(name="t4", speed=1.0, serving_ready=1),))
    fast = PoolState((ClassPool(name="h100", speed=2.0, serving_ready=1),))
    assert (
        run(rate=6 * cap, serving=1, state=fast).desired_replicas
        < run(rate=6 * cap, serving=1, state=slow).desired_replicas
    )


def test_unplaceable_pods_are_reported() -> None:
    cap = capacity()
    decision = run(rate=6 * cap, serving=2, state=pools(2, free=1))
    assert decision.desired_replicas == 3
    assert "could not be placed" in decision.reason


def test_scale_down_removes_from_the_least_preferred_class() -> None:
    state = PoolState(
        (
            ClassPool(name="h100", serving_ready=3),
            ClassPool(name="l4", serving_ready=3),
        )
    )
    decision = run(rate=0.5, serving=6, state=state, cfg=config(scale_down_max_fraction=0.5))
    removed = {a.name: a.remove for a in decision.actions}
    assert removed == {"l4": 3}


# --------------------------------------------------------------------------- start-up lookahead


def test_rising_trend_scales_ahead_by_the_startup_time() -> None:
    cap = capacity()

    def ramp(t: float) -> float:  # +1 replica's worth every 15 s
        return cap * (3 + (t - 180) / 15)

    slow = run(rate=ramp, serving=11, state=replace_cold(pools(11), 120.0))
    fast = run(rate=ramp, serving=11, state=replace_cold(pools(11), 5.0))
    assert slow.desired_replicas > fast.desired_replicas >= 11
    assert "lookahead" in slow.reason


def test_noisy_flat_load_buys_no_lookahead() -> None:
    cap = capacity()

    def noisy(t: float) -> float:
        return cap * (4.5 + (0.3 if int(t) % 10 else -0.3))

    decision = run(rate=noisy, serving=5, state=replace_cold(pools(5), 120.0))
    assert decision.signals["demandSlope"] == 0.0
    assert decision.desired_replicas == 5


def test_latency_over_budget_scales_up_even_if_the_rate_model_is_fine() -> None:
    cap = capacity()
    hist = history(3 * cap, start=180, end=300, queue_time=2.5, p95=4.0)
    decision = run(rate=3 * cap, serving=4, hist=hist)
    assert decision.desired_replicas > 4
    assert "measured latency" in decision.reason


def replace_cold(state: PoolState, cold: float) -> PoolState:
    return PoolState(tuple(replace(p, cold_start=cold) for p in state.classes))


def test_planning_percentile_from_the_spec_buys_headroom() -> None:
    body = valid_service()
    body["spec"]["scaling"]["planningPercentile"] = 99.99  # type: ignore[index]
    strict = policy_config_from_spec(parse_inference_service(body).spec)
    default = policy_config_from_spec(parse_inference_service(valid_service()).spec)
    assert default.plan_quantile == pytest.approx(0.99)  # p95 objective -> p99 backlog
    assert strict.plan_quantile == pytest.approx(0.9999)
    # The same demand needs more pods when planned for a rarer backlog.
    rate = 4.5 * capacity()
    loose = run(rate=rate, serving=5, cfg=config())
    tight = run(rate=rate, serving=5, cfg=config(planning_quantile=0.9999))
    assert tight.desired_replicas > loose.desired_replicas == 5
    assert "planned at the p99.99 backlog" in tight.reason
    assert "planned at" not in loose.reason


def test_surges_survive_the_status_round_trip() -> None:
    memory = PolicyMemory(surges=((10.0, 4.5, 3.0, 2.5), (80.0, 0.0, 12.25, 12.25)))
    assert PolicyMemory.from_status(memory.to_status()).surges == memory.surges
    # A record written before the base was kept takes its level as the base.
    assert PolicyMemory.from_status({"surges": [[10.0, 4.5, 3.0]]}).surges == (
        (10.0, 4.5, 3.0, 3.0),
    )
    assert PolicyMemory.from_status({"surges": [["x", 1, 2], [5.0, 1.0]]}).surges == ()


def test_an_auto_warm_pool_from_the_spec_is_bounded_by_warm_pool_or_max_replicas() -> None:
    body = valid_service()
    scaling = body["spec"]["scaling"]  # type: ignore[index]
    scaling.update(warmPoolMode="auto", maxReplicas=6)
    auto = policy_config_from_spec(parse_inference_service(body).spec)
    assert auto.warm_pool_auto and auto.warm_pool_max == 6
    scaling["warmPool"] = 2
    assert policy_config_from_spec(parse_inference_service(body).spec).warm_pool_max == 2
    fixed = policy_config_from_spec(parse_inference_service(valid_service()).spec)
    assert not fixed.warm_pool_auto
