"""Burst memory: which rises count as surges, how much headroom they buy, and backlogs."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from policy_helpers import capacity, config, history, pools

from gpuserve.autoscaling import Decision, PolicyMemory, decide
from gpuserve.autoscaling.bursts import BurstBound, burst_bound, burst_headroom, remember_minute

NOW = 300.0


def decide_on(
    rate: Callable[[float], float] | float,
    *,
    serving: int,
    memory: PolicyMemory | None = None,
    queue: Callable[[float], float] | float = 0.0,
    queue_time: float | None = 0.2,
    p95: float = 1.0,
    recent: Callable[[float], float] | None = None,
) -> Decision:
    return decide(
        config=config(),
        history=history(
            rate,
            start=NOW - 120,
            end=NOW,
            queue=queue,
            queue_time=queue_time,
            p95=p95,
            recent=recent,
        ),
        pools=pools(serving),
        now=NOW,
        memory=memory or PolicyMemory(since=0.0),
    )


def surge_now(decision: Decision) -> float:
    t, surge, *_ = decision.memory.surges[-1]
    assert t == NOW
    return surge


def test_a_rise_no_larger_than_the_measured_noise_is_no_surge() -> None:
    cap = capacity()

    def after_flat(t: float) -> float:
        return 3 * cap if t >= NOW - 5 else 2 * cap

    def after_noise(t: float) -> float:
        # Same mean before the rise, but alternating by a whole replica's worth: half the
        # reference stretch's samples at each value, so the spread is the whole swing
        # (variation on fewer than half of them would read as bursts).
        if t >= NOW - 5:
            return 3 * cap
        return 3 * cap if int(t // 5) % 2 else 1 * cap

    assert surge_now(decide_on(after_flat, serving=2)) == pytest.approx(cap)
    assert surge_now(decide_on(after_noise, serving=2)) == 0.0


def test_an_earlier_burst_in_the_reference_stretch_does_not_hide_a_rise() -> None:
    cap = capacity()

    def rise(t: float) -> float:
        return 6 * cap if t >= NOW - 5 else 0.5 * cap

    def rise_after_a_burst(t: float) -> float:
        # Three of the reference stretch's samples (one to two start-ups back) are a
        # burst: its sample variance alone would put the rise within the noise.
        return 4 * cap if NOW - 80 <= t < NOW - 65 else rise(t)

    alone = surge_now(decide_on(rise, serving=1))
    assert alone == pytest.approx(5.5 * cap)
    # Measured against a base the burst lifts, the rise is a little smaller, but recorded.
    assert 4 * cap < surge_now(decide_on(rise_after_a_burst, serving=1)) < alone


def test_a_rise_the_pods_absorb_is_no_surge() -> None:
    cap = capacity()

    def rise_to(peak: float) -> Callable[[float], float]:
        return lambda t: peak if t >= NOW - 5 else 1.2 * cap

    # 1.2 replicas' worth needs 2 pods; a rise to 1.9 stays within them, 2.8 does not.
    assert surge_now(decide_on(rise_to(1.9 * cap), serving=2)) == 0.0
    assert surge_now(decide_on(rise_to(2.8 * cap), serving=2)) == pytest.approx(1.6 * cap)


Minutes = tuple[tuple[float, float, float, float], ...]


def minutes(surge: float, level: float, count: int) -> Minutes:
    """``count`` minutes up to now at ``level``, each with a rise of ``surge`` from it."""
    return tuple((NOW - 60.0 * (count - i), surge, level, level) for i in range(count))


def decide_with(
    memory: PolicyMemory, rate: float, serving: int, cold_start: float = 45.0, **knobs: object
) -> Decision:
    return decide(
        config=config(**knobs),
        history=history(rate, start=NOW - 120, end=NOW),
        pools=pools(serving, cold_start=cold_start),
        now=NOW,
        memory=memory,
    )


def test_a_surge_fits_the_miss_budget_while_the_overload_it_causes_does() -> None:
    cap = capacity()
    heavy = minutes(0.0, 5 * cap, 28)
    # 30 minutes at 5 pods' worth allow 1% misses: 90 pods' worth of a second. A surge of
    # one pod's worth overloads 5 + 1 pods' worth of requests for the 10 s start-up: 60.
    once = PolicyMemory(
        since=0.0,
        surges=(*heavy, (NOW - 90, 0.0, 5 * cap, 5 * cap), (NOW - 30, cap, 5 * cap, 5 * cap)),
    )
    assert decide_with(once, 5 * cap, 5, cold_start=10.0).signals["burstHeadroom"] == 0.0
    # Twice that overload (120) no longer fits: the smaller surge is covered.
    twice = PolicyMemory(
        since=0.0,
        surges=(*heavy, (NOW - 90, 0.8 * cap, 5 * cap, 5 * cap), (NOW - 30, cap, 5 * cap, 5 * cap)),
    )
    decision = decide_with(twice, 5 * cap, 5, cold_start=10.0)
    assert decision.signals["burstHeadroom"] == pytest.approx(0.8 * cap)
    assert decision.desired_replicas == 6
    # With a 45 s start-up even the single surge overloads too many requests.
    assert decide_with(once, 5 * cap, 5).signals["burstHeadroom"] == pytest.approx(cap)


def test_frequent_bursts_keep_headroom_for_the_largest() -> None:
    cap = capacity()
    memory = PolicyMemory(since=0.0, surges=minutes(5 * cap, 0.5 * cap, 10))
    decision = decide_on(0.5 * cap, serving=1, memory=memory)
    # Each burst alone overloads more requests than the budget (1% of the memory's) allows.
    assert decision.signals["burstHeadroom"] == pytest.approx(5 * cap)
    assert decision.signals["needBurst"] == 6  # 5.5 replicas' worth
    assert decision.desired_replicas > 1


def test_a_shrinking_backlog_buys_no_pods_a_standing_one_does() -> None:
    cap = capacity()
    slow = {"queue_time": 5.0, "p95": 6.0}
    draining = decide_on(2 * cap, serving=4, queue=lambda t: 2 * (NOW + 100 - t), **slow)
    standing = decide_on(2 * cap, serving=4, queue=200.0, **slow)
    assert draining.desired_replicas == 4
    assert draining.signals["queueDraining"] == 1.0
    assert standing.desired_replicas > 4


def test_a_backlog_that_drained_inside_the_latest_rate_window_buys_no_pods() -> None:
    cap = capacity()

    # A backlog on one pod drained 15-20 s before the last scrape: the mean queue time
    # over the latest rate window (20 s) still holds its long waits, though every scrape
    # but the window's first shows an empty queue. The decision runs 2.5 s after the
    # scrape, so a window counted back from the decision would start after the backlog.
    def decided(queue: Callable[[float], float] | float) -> Decision:
        return decide(
            config=config(),
            history=history(cap, start=NOW - 120, end=NOW, queue=queue, queue_time=5.0, p95=6.0),
            pools=pools(4),
            now=NOW + 2.5,
            memory=PolicyMemory(since=0.0),
        )

    drained = decided(lambda t: 30.0 if t <= NOW - 20 else 0.0)
    assert drained.desired_replicas <= 4
    assert drained.signals["queueDraining"] == 1.0
    # The same queue time with the queue still standing is evidence of too few pods.
    standing = decided(30.0)
    assert "queueDraining" not in standing.signals
    assert standing.desired_replicas > 4


def test_a_queue_one_scrape_shows_is_a_clump_a_lasting_one_is_not() -> None:
    cap = capacity()
    budget = decide_on(cap, serving=2).signals["queueBudget"]
    spike = 4 * cap * budget  # twice what two pods clear within the budget

    def once(t: float) -> float:
        return spike if abs(t - (NOW - 5)) < 1e-6 else 0.0

    def lasting(t: float) -> float:
        return spike if t >= NOW - 5 else 0.0

    # Clumps finer than the rate window: the rates stay flat, only the queue shows them.
    assert surge_now(decide_on(cap, serving=2, queue=once)) == pytest.approx(3 * cap)
    assert surge_now(decide_on(cap, serving=2, queue=lasting)) == 0.0


def test_a_burst_shorter_than_the_rate_window_is_measured_by_the_queue_growth() -> None:
    cap = capacity()

    def queue(t: float) -> float:  # 10 replicas' worth of a second arrived since the last scrape
        return 10 * cap if t >= NOW else 0.0

    # The rates (20 s windows) have not moved yet; the queue grew by 2 * cap per second on
    # top of what the pods completed: 3 * cap arriving against 1 * cap before.
    assert surge_now(decide_on(cap, serving=2)) == 0.0
    assert surge_now(decide_on(cap, serving=2, queue=queue)) == pytest.approx(2 * cap)


def test_requests_that_left_the_queue_since_the_last_scrape_count_as_arrived() -> None:
    cap = capacity()

    def queue(t: float) -> float:  # 4 replicas' worth of a second queued since the last scrape
        return 4 * cap if t >= NOW else 0.0

    def recent(t: float) -> float:  # completed or timed out (a queue policy) since then
        return 3 * cap if t >= NOW else cap

    # With only the 20 s success rate, 0.8 * cap per second of growth plus cap: a rise of
    # 0.8 * cap, within the noise of one 5 s scrape interval. Counting what left the queue
    # in that interval (a timeout caps the queue, and the rates lag), 3.8 * cap arrived.
    assert surge_now(decide_on(cap, serving=2, queue=queue)) == 0.0
    assert surge_now(decide_on(cap, serving=2, queue=queue, recent=recent)) == pytest.approx(
        2.8 * cap
    )


def every(period: int, surge: float, level: float) -> Minutes:
    """30 minutes of records with a surge every ``period`` minutes."""
    return tuple(
        (t, surge if i % period == 0 else 0.0, d, b)
        for i, (t, _, d, b) in enumerate(minutes(0.0, level, 30))
    )


def test_an_automatic_warm_pool_holds_what_a_promotion_lets_serving_pods_give_up() -> None:
    cap = capacity()
    # One surge of a pod's worth on 5 pods' worth of traffic: over a 45 s cold start
    # its overload exceeds the miss budget, over a promotion (6 s to notice, 2 s) it fits.
    memory = PolicyMemory(
        since=0.0, surges=(*minutes(0.0, 5 * cap, 29), (NOW - 30, cap, 5 * cap, 5 * cap))
    )
    fixed = decide_with(memory, 5 * cap, 5)
    auto = decide_with(memory, 5 * cap, 5, warm_pool_auto=True)
    assert fixed.warm_pool is None  # a fixed pool keeps the size of the spec
    assert fixed.signals["burstHeadroom"] == pytest.approx(cap)
    assert fixed.signals["needBurst"] == 6
    # Serving pods keep no headroom; one standby pod answers the surge in seconds.
    assert auto.signals["burstHeadroom"] == 0.0
    assert auto.warm_pool == 1
    assert auto.desired_replicas == 5 < fixed.desired_replicas


def test_an_automatic_warm_pool_is_empty_without_surges_and_stays_under_its_ceiling() -> None:
    cap = capacity()
    quiet = decide(
        config=config(warm_pool_auto=True),
        history=history(0.5 * cap, start=NOW - 120, end=NOW),
        pools=pools(1),
        now=NOW,
        memory=PolicyMemory(since=0.0),
    )
    assert quiet.warm_pool == 0
    capped = decide(
        config=config(warm_pool_auto=True, warm_pool_max=0),
        history=history(0.5 * cap, start=NOW - 120, end=NOW),
        pools=pools(1),
        now=NOW,
        memory=PolicyMemory(since=0.0, surges=every(15, 5 * cap, 0.5 * cap)),
    )
    assert capped.warm_pool == 0


def test_latency_measured_before_the_load_ended_buys_no_pods() -> None:
    cap = capacity()
    # Triton's p95 summary remembers the last minute: it stays over the objective after
    # the last request, while nothing completes any more.
    ended = decide(
        config=config(),
        history=history(
            lambda t: 3 * cap if t < NOW - 20 else 0.0,
            start=NOW - 120,
            end=NOW,
            queue_time=None,
            p95=3.0,
        ),
        pools=pools(3),
        now=NOW,
        memory=PolicyMemory(since=0.0),
    )
    assert ended.signals["latencyPressure"] == 0.0
    assert ended.desired_replicas <= 3
    # The same latency while requests still complete is evidence of too few pods.
    ongoing = decide_on(3 * cap, serving=3, queue_time=None, p95=3.0)
    assert ongoing.signals["latencyPressure"] > 1.0
    assert ongoing.desired_replicas > 3


def test_a_rise_demand_stayed_at_keeps_no_headroom_a_burst_that_went_away_does() -> None:
    cap = capacity()
    # A rise of 3 pods' worth from 1 pod's worth, 20 minutes ago; every minute since at
    # the level it rose to (a step), or back at the old level (a burst).
    step = PolicyMemory(
        since=0.0, surges=((NOW - 1260, 3 * cap, cap, cap), *minutes(0.0, 4 * cap, 20))
    )
    burst = PolicyMemory(
        since=0.0, surges=((NOW - 1260, 3 * cap, cap, cap), *minutes(0.0, cap, 20))
    )
    assert decide_with(step, 4 * cap, 4).signals["burstHeadroom"] == 0.0
    assert decide_with(burst, cap, 1).signals["burstHeadroom"] == pytest.approx(3 * cap)
    # A step part-way: demand stayed 1 pod's worth above the old level; 2 remain a burst.
    part = PolicyMemory(
        since=0.0, surges=((NOW - 1260, 3 * cap, cap, cap), *minutes(0.0, 2 * cap, 20))
    )
    assert decide_with(part, 2 * cap, 2).signals["burstHeadroom"] == pytest.approx(2 * cap)


def test_a_ramp_counts_from_the_demand_it_rose_from_not_from_its_minutes_level() -> None:
    cap = capacity()
    # A ramp from 1 to 4 pods' worth, measured against the demand a start-up or two
    # before it: its minute began at 2.5 pods' worth, half-way up. Demand stayed at the
    # top since: the whole rise is the level now, nothing of it a burst (counted from the
    # minute's level, 1.5 pods' worth of it was kept as headroom for 20 minutes).
    ramp = ((NOW - 1260, 3 * cap, 2.5 * cap, cap),)
    stayed = PolicyMemory(since=0.0, surges=(*ramp, *minutes(0.0, 4 * cap, 20)))
    assert decide_with(stayed, 4 * cap, 4).signals["burstHeadroom"] == 0.0
    # Back at the old level: the whole rise is a burst.
    went = PolicyMemory(since=0.0, surges=(*ramp, *minutes(0.0, cap, 20)))
    assert decide_with(went, cap, 1).signals["burstHeadroom"] == pytest.approx(3 * cap)


def test_a_surge_is_remembered_with_the_demand_it_rose_from() -> None:
    cap = capacity()
    decision = decide_on(lambda t: 5 * cap if t > NOW - 10 else cap, serving=1)
    _, surge, _, rose_from = decision.memory.surges[-1]
    assert surge > 3 * cap
    assert rose_from == pytest.approx(cap)


def test_a_minutes_level_is_its_latest_so_a_crowd_that_stays_is_carried_by_the_level() -> None:
    # A crowd from 5 to 20 req/s, recorded as a surge of 15 from 5. The next minute's
    # record begins while the 60-s mean is half-way up (10): its level is what the mean
    # reaches by the minute's end (20), so while the crowd lasts it is the level that
    # serves it, not 10 req/s of headroom on top (which held 7 pods where 4 served).
    memory: Minutes = ()
    for now, surge, level in ((0.0, 15.0, 5.0), (60.0, 0.0, 10.0), (90.0, 0.0, 20.0)):
        memory = remember_minute(memory, now, surge, level, memory_s=1800.0, rose_from=5.0)
    assert [d for _, _, d, _ in memory] == [5.0, 20.0]
    assert burst_headroom(memory, 45.0, 20.0, quantile=0.99) == 0.0
    # Once the crowd has gone, the whole rise is a burst again.
    memory = remember_minute(memory, 120.0, 0.0, 5.0, memory_s=1800.0, rose_from=5.0)
    assert burst_headroom(memory, 45.0, 5.0, quantile=0.99) == pytest.approx(15.0)


def test_a_surge_that_outlasted_a_start_up_was_chased_and_keeps_no_headroom() -> None:
    # A rise of 15 req/s from 5, then back at 5: held only if it went away before the
    # whole minutes after it that span a start-up (two for 45 s, three for 90 s) were over.
    def memory(minutes_up: int) -> Minutes:
        levels = [5.0, *[20.0] * minutes_up, *[5.0] * (10 - minutes_up)]
        return tuple(
            (60.0 * k, 15.0 if k == 0 else 0.0, level, 5.0) for k, level in enumerate(levels)
        )

    assert burst_headroom(memory(0), 45.0, 5.0, quantile=0.99) == pytest.approx(15.0)
    assert burst_headroom(memory(1), 45.0, 5.0, quantile=0.99) == pytest.approx(15.0)
    assert burst_headroom(memory(2), 45.0, 5.0, quantile=0.99) == 0.0
    assert burst_headroom(memory(2), 90.0, 5.0, quantile=0.99) == pytest.approx(15.0)
    assert burst_headroom(memory(3), 90.0, 5.0, quantile=0.99) == 0.0
    # Demand that stayed at less than half the rise is a burst that went away.
    halfway = tuple((t, v, 12.0 if 0 < t < 180 else d, b) for t, v, d, b in memory(2))
    assert burst_headroom(halfway, 45.0, 5.0, quantile=0.99) == pytest.approx(15.0)


def spikes(heights: list[float], level: float) -> Minutes:
    """30 minutes of records at ``level``, a spike rising from it to each of ``heights``
    in turn, one every 5 minutes (the newest 5 minutes ago)."""
    records = list(minutes(0.0, level, 30))
    for i, height in enumerate(heights):
        t, _, d, b = records[-5 * (len(heights) - i) - 1]
        records[-5 * (len(heights) - i) - 1] = (t, height - level, d, b)
    return tuple(records)


def bound_of(records: Minutes, level: float) -> BurstBound:
    """The bound at ``NOW`` for a 45-s start-up, a 60-s level and 20-s rates (a burst
    recorded in the last 165 s may be under way)."""
    return burst_bound(records, NOW, 45.0, level, level_window_s=60.0, window_s=20.0)


def test_the_bound_sits_near_alike_bursts_heights_and_far_off_spread_ones() -> None:
    alike = bound_of(spikes([4.0, 3.8, 4.2, 4.0], 1.0), 1.0)
    spread = bound_of(spikes([1.5, 2.0, 3.5, 6.0], 1.0), 1.0)
    # The largest of 4 noisy heights leads their median by sqrt(2 ln 4) = 1.67 standard
    # deviations of a 20-s rate's noise alone: 4.2's lead over 4.0 is within it (0.76).
    assert alike.reach == pytest.approx(4.0)
    # 6.0 leads 3.5 by more: less that noise, stretched by its ratio to the median.
    top = 6.0 - math.sqrt(2.0 * math.log(4.0)) * math.sqrt(6.0 / 20.0)
    assert spread.reach == pytest.approx(top * top / 3.5)
    assert spread.reach > 6.0
    # A burst under way that goes past the reach shows the heights are not alike: its
    # own height (1 + 6) bounds the headroom while it is recent, so the level that holds
    # it gets none on top; a rate beyond that height's noise is chased.
    beyond = (*spikes([4.0, 3.8], 1.0)[:-1], (NOW - 30.0, 6.0, 6.0, 1.0))
    passed = bound_of(beyond, 6.0)
    assert passed.reach == pytest.approx(7.0)
    assert passed.provision(6.5, 3.0) == pytest.approx(7.0)  # not 6.5 + 3
    assert passed.extrapolate(12.0, 10.0, 6.5) == 12.0  # 4 sd of 7 req/s over 20 s: 2.4
    # No burst on record: nothing bounds the headroom.
    assert bound_of(minutes(0.0, 1.0, 30), 1.0).reach == math.inf
    # Between spikes, the level and the largest rise seen (3.2, a noisy maximum) reach
    # past the height the spikes reached; the headroom stops there.
    assert alike.provision(1.0, 3.2) == pytest.approx(4.0)
    assert alike.provision(1.0, 2.5) == pytest.approx(3.5)
    # A burst recorded in the recent span may be the one under way: not the reach's
    # evidence, and the headroom on the level that holds it stops at the reach.
    under_way = (*spikes([4.0, 3.8], 1.0)[:-1], (NOW - 30.0, 3.0, 3.5, 1.0))
    bound = bound_of(under_way, 3.5)
    assert bound.reach == pytest.approx(4.0)
    assert bound.provision(3.5, 3.0) == pytest.approx(4.0)  # not 3.5 + 3
    # Demand that grew since the bursts rose (from 1.0) moves the reach up with it,
    # less the level's own noise (4 sd of a 60-s mean of 1 req/s); noise moves nothing.
    grown = bound_of(spikes([4.0, 3.8, 4.2, 4.0], 1.0), 3.0)
    assert grown.reach == pytest.approx(4.0 + 2.0 - 4.0 * math.sqrt(1.0 / 60.0))
    assert bound_of(spikes([4.0, 3.8, 4.2, 4.0], 1.0), 1.4).reach == pytest.approx(4.0)
    # A level above the reach (a lookahead past it) is held whatever the headroom.
    assert bound.provision(7.0, 0.0) == bound.provision(7.0, 5.0) == pytest.approx(7.0)


def test_a_rise_is_extrapolated_past_the_reach_only_once_it_measures_beyond() -> None:
    bound = BurstBound(reach=4.0, window_s=20.0)  # noise: 4 sd of 0.45
    assert bound.extrapolate(7.0, 3.5, 3.0) == 4.0  # one of the spikes seen
    assert bound.extrapolate(7.0, 5.5, 3.0) == 4.0  # past the reach within its noise
    assert bound.extrapolate(9.0, 6.0, 4.5) == 9.0  # higher than any: a crowd, chased
    assert bound.extrapolate(3.0, 2.0, 2.0) == 3.0  # below the reach: unchanged
    assert BurstBound(math.inf, 20.0).extrapolate(9.0, 4.5, 4.5) == 9.0


def test_a_spike_under_way_as_high_as_those_before_it_gets_no_headroom_on_top() -> None:
    """Scheduled spikes (``periodic``): while one is in the level, the headroom for the
    next no longer stacks on it (the default held 5 pods where 3 served); bursts of
    spread heights keep the stacked headroom, which serves a larger one landing on one."""
    cap = capacity()

    def under_way(heights: list[float]) -> Decision:
        records = (*spikes(heights, cap)[:-1], (NOW - 30.0, 2.4 * cap, 3.5 * cap, cap))
        return decide_on(3.5 * cap, serving=4, memory=PolicyMemory(since=0.0, surges=records))

    alike = under_way([3.5 * cap, 3.4 * cap, 3.5 * cap])
    assert alike.signals["burstHeadroom"] == pytest.approx(2.5 * cap)
    assert alike.signals["needBurst"] == 4  # the spikes' height, not 3.5 + 2.5 pods' worth
    spread = under_way([1.2 * cap, 1.5 * cap, 3.5 * cap])
    assert spread.signals["needBurst"] == 6


def test_spikes_of_alike_heights_get_the_pods_for_their_height_not_for_noisy_maxima() -> None:
    """Scheduled spikes measured over 5-20 s windows: each record is a noisy maximum.
    Between spikes the headroom stops at the height they reached (not the level plus
    the largest rise, one pod more), and during one a rate within its noise of that
    height asks for no more pods than the height."""
    cap = capacity()
    heights = [3.5 * cap, 3.6 * cap, 3.6 * cap, 3.8 * cap]  # 3.8: 3.6 plus noise
    memory = PolicyMemory(since=0.0, surges=spikes(heights, cap))
    assert decide_on(cap, serving=4, memory=memory).signals["burstReach"] == pytest.approx(
        3.6 * cap
    )
    # The level up by 0.3 pods' worth, little more than its noise, plus the largest rise.
    between = decide_on(1.3 * cap, serving=4, memory=memory)
    assert between.signals["burstReach"] < 3.8 * cap
    assert between.signals["needBurst"] == 4  # not 5 for 1.3 + 2.8 pods' worth

    records = (*spikes(heights, cap)[:-1], (NOW - 30.0, 2.6 * cap, 2.0 * cap, cap))

    def spike(t: float) -> float:
        return 4.2 * cap if t > NOW - 20.0 else cap

    during = decide_on(spike, serving=4, memory=PolicyMemory(since=0.0, surges=records))
    assert during.signals["needNow"] == 4  # 4.2 pods' worth measured, within its noise
    assert during.desired_replicas == 4
    # A rate beyond the height's noise is a larger spike, and is chased.
    higher = decide_on(
        lambda t: 5.0 * cap if t > NOW - 20.0 else cap,
        serving=4,
        memory=PolicyMemory(since=0.0, surges=records),
    )
    assert higher.signals["needNow"] >= 5
