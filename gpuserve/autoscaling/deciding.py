"""The autoscaling policy: (config, metric history, pools, now, memory) -> Decision.

Pure and deterministic: no clock, no I/O. The operator's autoscaler controller and the
simulator call it the same way, every evaluation interval, and store the returned memory
for the next call. See docs/autoscaling.md for the model and the rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median

from gpuserve.autoscaling.allocating import allocate, free_room
from gpuserve.autoscaling.bursts import burst_bound, burst_headroom, remember_minute
from gpuserve.autoscaling.capacity import CapacityEstimate, replica_capacity
from gpuserve.autoscaling.config import PolicyConfig
from gpuserve.autoscaling.decision import Decision, Mode, PolicyMemory, added_up
from gpuserve.autoscaling.limits import note_cap
from gpuserve.autoscaling.metrics import MetricHistory, MetricSample, latest_of, mean_of
from gpuserve.autoscaling.outruns import OutrunReport, Seen, track_outruns
from gpuserve.autoscaling.pools import PoolState
from gpuserve.autoscaling.service_scale import measured_compute, ready_speed, service_scale
from gpuserve.autoscaling.shedding import Backlog, PodQueue, RoutedAround, backlogged
from gpuserve.autoscaling.trend import hold_window, significant_slope

# A sample stamped exactly at `now` belongs to the current evaluation.
_EPS = 1e-9
# Standard deviations of measured noise a rise must exceed to count as a surge. The test
# runs every evaluation (hundreds per burst memory), so it must be stricter than a single
# 3-sigma test for false alarms on smooth traffic to stay rare.
SURGE_Z = 4.0
# The median absolute deviation of normal noise times this is its standard deviation.
MAD_TO_SD = 1.4826


@dataclass(frozen=True, slots=True)
class _Demand:
    stable: float  # mean over the stable window
    panic: float  # mean over the panic window
    slope: float  # req/s per second over the stable window, 0 unless significant
    fitted: float  # the trend's value now (= stable without a significant trend)
    items_per_request: float


@dataclass(frozen=True, slots=True)
class _Needs:
    """Serving replicas each piece of evidence asks for (0: it has no say)."""

    now: int  # the demand of the window in force
    ahead: int  # the demand expected when a pod started now is ready, less ready warm pods
    queue: int  # the backlog, drained within the queue budget
    latency: int  # measured latency over its budget


def decide(
    *,
    config: PolicyConfig,
    history: MetricHistory,
    pools: PoolState,
    now: float,
    memory: PolicyMemory,
    queues: Sequence[PodQueue] = (),
) -> Decision:
    """Decide how many serving pods the service needs now, and how to get there, and
    which of the ready pods (``queues``: each one's queue depth) to route around."""
    committed = pools.committed
    latest = history.latest
    if latest is None:
        return _hold(config, pools, memory, "no metrics yet")
    age = now - latest.at
    if age > config.max_sample_age:
        return _hold(
            config,
            pools,
            memory,
            f"metrics stale: newest sample is {age:.0f}s old (limit {config.max_sample_age:.0f}s)",
        )
    stable = history.between(now - config.stable_window - _EPS, now + _EPS)
    recent = history.between(now - config.panic_window - _EPS, now + _EPS) or (latest,)
    demand = _demand(config, stable, recent, now)
    queue_depth = latest_of(recent, "queue_depth")
    scale = service_scale(config.profile, measured_compute(stable), ready_speed(pools))
    caps = {
        pool.name: replica_capacity(
            profile=config.profile,
            slo_latency=config.slo_latency,
            quantile=config.plan_quantile,
            items_per_request=demand.items_per_request if demand else config.items_per_request,
            speed=pool.speed,
            service_scale=scale,
            overhead=config.latency_overhead,
        )
        for pool in pools.classes
    }
    reference = _reference_capacity(caps, pools)
    signals: dict[str, float] = {
        "committed": float(committed),
        "servingReady": float(pools.serving_ready),
        "warmReady": float(pools.warm_ready),
        "capacityPerReplica": reference.rate,
        "batchItems": reference.batch_items,
        "queueBudget": reference.queue_budget,
        "serviceScale": scale,
    }
    if queue_depth is not None:
        signals["queueDepth"] = queue_depth
    # Queued requests sit in the queues of the pods that have them: new pods cannot drain
    # them, so the queue only argues for more pods once earlier ones have started, and not
    # while it is already shrinking (the pods that hold it are clearing it).
    draining = _queue_draining(history, now - config.rate_window, now)
    queue_need = _replicas_for_queue(queue_depth, reference)
    need_queue = queue_need if pools.starting == 0 and not draining else 0

    if demand is None:
        # Partial evidence may scale up (a deep queue is unambiguous), never down.
        if need_queue > committed:
            target = _clamp(config, min(need_queue, _scale_up_limit(config, committed)))
            return finish_decision(
                pools=pools,
                memory=memory,
                now=now,
                mode="panic",
                target=target,
                panic_until=now + config.panic_hold,
                reason=f"request rates missing; queue depth {queue_depth:.0f} needs "
                f"{need_queue} replicas to drain within the queue budget",
                signals=signals,
            )
        return _hold(config, pools, memory, "request rates missing or NaN", signals)

    signals.update(
        demandStable=demand.stable,
        demandPanic=demand.panic,
        demandSlope=demand.slope,
        itemsPerRequest=demand.items_per_request,
    )
    ready_capacity = sum(p.serving_ready * caps[p.name].rate for p in pools.classes)
    signals["readyCapacity"] = ready_capacity
    pressure = _latency_pressure(config, recent, reference, memory, pools, now)
    signals["latencyPressure"] = pressure
    latest = history.latest
    rated_from = (latest.at if latest is not None else now) - config.rate_window
    if draining or _queue_draining(history, rated_from, now):
        # Latency measured while a backlog drains describes requests queued before the
        # pods came: more pods cannot reach a queue that sits in other pods. The queue
        # time is a mean over the window the latest rates cover: a backlog that drained
        # inside it still fills that mean, though the scrapes since show an empty queue.
        pressure = 0.0
        signals["queueDraining"] = 1.0
    bursting = demand.panic > config.panic_threshold * ready_capacity and demand.panic > 0
    panic_trigger = bursting or pressure > 1.0
    panic_until = now + config.panic_hold if panic_trigger else memory.panic_until
    panicking = panic_until is not None and now < panic_until

    level = max(demand.stable, demand.fitted) if config.lookahead else demand.stable
    rate_now = max(level, demand.panic) if panicking else level
    horizon = _startup_horizon(config, pools)
    # Bursts faster than a cold start cannot be chased: keep headroom for the surges
    # measured over the burst memory, less those whose excess fits the miss budget.
    clearable = pools.serving_ready * reference.rate * reference.queue_budget
    arriving = _queue_growth(history, clearable, config.scrape_interval)
    surge, rose_from = _surge(config, history, now, horizon, reference.rate, arriving)
    clump = (
        _clump(history, reference, pools.serving_ready, level)
        if not (draining or panicking)
        else 0.0
    )
    if clump > surge:  # a clump is measured beyond the level
        recorded, rose_from = clump, demand.stable
    else:
        recorded = surge
    surges = remember_minute(
        memory.surges,
        now,
        recorded,
        demand.stable,
        rose_from=rose_from,
        memory_s=config.burst_memory,
    )
    burst = burst_headroom(surges, horizon, level, quantile=config.plan_quantile)
    bound = burst_bound(
        surges,
        now,
        horizon,
        level,
        level_window_s=config.stable_window,
        window_s=config.rate_window,
    )
    # The arrivals now against what the pods able to serve within seconds (ready or warm)
    # serve: the panic window's rate, or the last scrape interval's where larger (as the
    # surge test reads them).
    measured, over = demand.panic, config.rate_window
    if arriving[1] > 0 and arriving[0] > measured:
        measured, over = arriving
    seen = Seen(
        rate=measured,
        window_s=over,
        surge=surge > 0.0,
        able=pools.serving_ready + pools.warm_ready,
        capacity=sum((p.serving_ready + p.warm_ready) * caps[p.name].rate for p in pools.classes),
    )
    outruns, outran_report = track_outruns(
        memory.outruns,
        seen,
        now=now,
        memory_s=config.burst_memory,
        gap_s=config.rate_window,
        horizon_s=horizon,
        pods_for=lambda rate: _replicas_for_rate(rate, caps, pools),
    )
    warm_pool: int | None = None
    if config.warm_pool_auto:
        # Standby pods answer a surge in a promotion instead of a cold start, so the miss
        # budget lets serving pods keep less headroom; standby pods hold the rest.
        promotion = _promotion_horizon(config, pools)
        serving_burst = min(
            burst, burst_headroom(surges, promotion, level, quantile=config.plan_quantile)
        )
        wanted_warm = _replicas_for_rate(
            bound.provision(level, burst), caps, pools
        ) - _replicas_for_rate(bound.provision(level, serving_burst), caps, pools)
        ceiling = config.warm_pool_max if config.warm_pool_max is not None else config.max_replicas
        warm_pool = max(0, min(ceiling, wanted_warm))
        burst = serving_burst
        signals["warmPool"] = float(warm_pool)
    # A rate measured within its noise of the height the bursts seen reached is one of
    # them: what served them serves it, so neither the rate, a line fitted through its
    # rise nor that line's extrapolation asks for more.
    highest = bound.ceiling(demand.panic, demand.stable) if burst > 0.0 else math.inf
    level = min(level, highest)
    rate_now = min(rate_now, highest)
    rate_recent = min(demand.panic, highest)
    # Growth expected before a pod started now is ready (rising trends only), capped at
    # doubling. Short bursts are not extrapolated: they revert as often as they grow.
    growth = min(max(0.0, demand.slope) * horizon, level) if config.lookahead else 0.0
    rate_ahead = min(level + growth, highest)
    need_now = _replicas_for_rate(rate_now, caps, pools)
    need_ahead = _replicas_for_rate(rate_ahead, caps, pools) - pools.warm_ready
    # Measured latency over budget: grow by the overshoot (at most 1.5x per round), once
    # the pods of the previous round are ready (pressure is 0 while any are starting).
    need_latency = (
        max(pools.serving_ready + 1, math.ceil(pools.serving_ready * min(pressure, 1.5)))
        if pressure > 1.0
        else 0
    )
    if config.target_queue_depth is not None:
        # An explicit per-pod queue target replaces the SLO-derived rate target.
        depth = mean_of(stable, "queue_depth") or 0.0
        need_now = math.ceil(depth / config.target_queue_depth)
        need_ahead = need_latency = 0
    needs = _Needs(now=need_now, ahead=need_ahead, queue=need_queue, latency=need_latency)
    signals.update(
        rateAhead=rate_ahead,
        startupHorizon=horizon,
        needNow=float(needs.now),
        needAhead=float(needs.ahead),
        needQueue=float(needs.queue),
        needLatency=float(needs.latency),
    )
    # What the evidence needs now; the lookahead adds a speculative part on top which is
    # kept out of the stabilisation window, so pods bought for a trend that faded can go
    # as soon as the trend does instead of a whole window later.
    # Recommendations kept for scale-down also cover the latest short-window demand: the
    # max over the window then remembers bursts the averaged demand smooths away.
    need_recent = _replicas_for_rate(rate_recent, caps, pools)
    need_burst = _replicas_for_rate(bound.provision(level, burst), caps, pools) if burst > 0 else 0
    signals.update(burstHeadroom=burst, needBurst=float(need_burst))
    if math.isfinite(bound.reach):
        signals["burstReach"] = bound.reach
    # Everything the evidence asks for now, before the bounds: its clamp is the target.
    wanted = max(needs.now, needs.queue, needs.latency, needs.ahead, need_burst)
    # Queue and latency needs answer a backlog: once it is drained they are no evidence of
    # demand, so they are not remembered for scale-down (pods bought to drain a burst go
    # as soon as the burst is over instead of a whole window later).
    remembered = _clamp(config, max(needs.now, need_recent, need_burst))
    if surge <= 0.0 and not bursting:
        # A backlog with no surge of demand behind it says the pods are too few for this
        # traffic (arrivals clumped finer than the rates show): keep them for a window.
        remembered = max(remembered, _clamp(config, max(needs.queue, needs.latency)))
    raw = _clamp(config, wanted)
    # Keep a full window of recommendations; judge scale-down over the window that fits
    # how fast a wrong cut can be undone (warm promotion or cold start).
    window = [
        (t, n) for t, n in memory.recommendations if t > now - config.scale_down_window + _EPS
    ]
    window.append((now, remembered))
    down_window = config.scale_down_window
    if pools.warm_ready >= committed - raw:
        down_window = min(down_window, config.warm_scale_down_window)
    since = memory.since if memory.since is not None else now
    held_for = hold_window(
        window,
        now,
        since=since,
        window_s=down_window,
        startup_s=horizon,
        slope=demand.slope,
        burst_headroom=burst,
        # A record is a need from the stable window's mean: half that window behind
        # the fitted line.
        line_now=demand.fitted - demand.slope * config.stable_window / 2.0,
        replicas_for=lambda rate: _clamp(config, _replicas_for_rate(rate, caps, pools)),
    )
    falling = held_for < down_window
    down_window = held_for
    stabilised = max(n for t, n in window if t > now - down_window + _EPS or t == now)
    stabilised = max(stabilised, raw)
    if now - since < down_window:
        stabilised = max(stabilised, committed)  # not a whole window observed yet
    signals["scaleDownWindow"] = down_window
    signals["recommendation"] = float(raw)
    signals["stabilised"] = float(stabilised)

    why = _explain_target(
        config,
        demand,
        reference,
        needs,
        rate_now=rate_now,
        pressure=pressure,
        horizon=horizon,
        panicking=panicking,
        bursting=bursting,
    )
    # Say that the bound, not the demand, set the size: status must show the gap.
    why = note_cap(why, signals, wanted=wanted, max_replicas=config.max_replicas)
    if raw >= committed:
        target = min(raw, _scale_up_limit(config, committed))
        if target < raw:
            why += f"; scale-up limited to {target} this step"
    elif panicking:
        target = committed
        why += "; no scale-down while panicking"
    elif queue_need > pools.serving_ready:
        # A backlog the ready pods cannot clear within the budget: demand lags it (rates
        # cover 20 s), and cancelling pods that are starting would only deepen it.
        target = committed
        why += f"; no scale-down while {queue_depth:.0f} requests are queued"
    else:
        # Holding a scale-down never grows: a record above the pods committed was a need
        # the rate limit cut, and the evidence now asks for fewer.
        target = min(committed, max(stabilised, committed - _scale_down_limit(config, committed)))
        if stabilised > raw:
            why += (
                f"; scale-down held at {stabilised} (highest recommendation over "
                f"{down_window:.0f}s{', demand falling' if falling else ''})"
            )
        elif target > raw:
            why += f"; scale-down limited to {committed - target} pods this step"
    reach = bound.reach if math.isfinite(bound.reach) else 0.0
    return finish_decision(
        pools=pools,
        memory=replace(
            memory,
            recommendations=tuple(window),
            since=since,
            surges=surges,
            outruns=outruns,
        ),
        now=now,
        mode="panic" if panicking else "steady",
        target=_clamp(config, target),
        panic_until=panic_until,
        reason=why,
        signals=signals,
        warm_pool=warm_pool,
        outran=outran_report,
        # The pods left in routing must carry the arrivals now and the bursts the
        # service is known to have: the rate it keeps pods for, and the height the bursts
        # seen reached (a next burst lands on them alone until the next decision).
        routed_around=_routed_around(
            config,
            queues,
            caps,
            max(demand.panic, bound.provision(level, burst), reach),
            keep=_clamp(config, target),
        ),
    )


def _routed_around(
    config: PolicyConfig,
    queues: Sequence[PodQueue],
    caps: dict[str, CapacityEstimate],
    carry: float,
    *,
    keep: int,
) -> tuple[RoutedAround, ...]:
    """The ready pods to route around while they clear their queues, as long as the rest
    carry ``carry`` req/s: each clears what its class serves within the objective over
    the queue budget (rule 9). ``keep``: the serving pods this decision keeps. A
    scale-down demotes the idle pods first (``placement.roles``), so only the ``keep``
    deepest queues stay, and only the rest of those carry."""
    if not config.route_around_backlogs:
        return ()
    pods = {
        q.pod: Backlog(q.queued, caps[q.class_name].rate, caps[q.class_name].queue_budget)
        for q in queues
        if q.class_name in caps
    }
    kept = sorted(pods.items(), key=lambda kv: kv[1].queued, reverse=True)[: max(keep, 0)]
    return tuple(
        RoutedAround(pod, pods[pod].queued, pods[pod].clearable)
        for pod in backlogged(kept, carry=carry)
    )


# --------------------------------------------------------------------------- signals


def _demand(
    config: PolicyConfig,
    stable: Sequence[MetricSample],
    recent: Sequence[MetricSample],
    now: float,
) -> _Demand | None:
    points = [(s.at, d) for s in stable if (d := s.demand) is not None]
    if not points:
        return None
    stable_rate = sum(d for _, d in points) / len(points)
    recent_points = [d for s in recent if (d := s.demand) is not None]
    panic_rate = sum(recent_points) / len(recent_points) if recent_points else stable_rate
    # A request carries at least one item and, when batching, at most a full batch.
    top = float(config.profile.max_batch_size) if config.profile.batching else math.inf
    items = [min(top, max(1.0, v)) for s in stable if (v := s.items_per_request) is not None]
    slope = significant_slope(points, config.rate_window)
    # The mean describes the middle of the window; a trend is extrapolated from there.
    centre = sum(t for t, _ in points) / len(points)
    return _Demand(
        stable=stable_rate,
        panic=panic_rate,
        slope=slope,
        fitted=max(0.0, stable_rate + slope * (now - centre)),
        items_per_request=sum(items) / len(items) if items else config.items_per_request,
    )


def _reference_capacity(caps: dict[str, CapacityEstimate], pools: PoolState) -> CapacityEstimate:
    """The capacity of the class new pods would go to first (the most preferred)."""
    for pool in pools.classes:
        if pool.free_capacity is None or pool.free_capacity > 0 or pool.committed > 0:
            return caps[pool.name]
    return caps[pools.classes[0].name]


def _latency_pressure(
    config: PolicyConfig,
    recent: Sequence[MetricSample],
    reference: CapacityEstimate,
    memory: PolicyMemory,
    pools: PoolState,
    now: float,
) -> float:
    """How far measured latency exceeds its budget (>1 means the SLO is being eaten).

    Queue time is a rate over a short window and reacts fast; it counts unless pods are
    still starting (their capacity is already on the way). p95 comes from Triton's sliding
    summaries, which remember the last minute and lag behind a problem already fixed: it
    only adds to a queue time that confirms the problem (or stands in when queue time is
    missing), and only once the last scale-up is older than the stable window. Once no
    request completes any more (load ended), both describe requests that are gone.
    """
    served = latest_of(recent, "success_rate")
    if pools.starting or (served is not None and served <= 0.0):
        return 0.0
    queue_time = latest_of(recent, "avg_queue_time")
    queued = None
    if queue_time is not None and reference.queue_budget > 0:
        # The budget is for the quantile; the mean queue time should stay well below it.
        queued = queue_time / (0.5 * reference.queue_budget)
    p95 = latest_of(recent, "p95_latency")
    settled = memory.last_scale_up is None or now - memory.last_scale_up > config.stable_window
    tail = (p95 + config.latency_overhead) / config.slo_latency if p95 is not None else None
    if queued is None:
        return tail if tail is not None and settled else 0.0
    if tail is not None and settled and queued > 1.0:
        return max(queued, tail)
    return queued


def _clump(history: MetricHistory, reference: CapacityEstimate, ready: int, level: float) -> float:
    """Arrivals clumped finer than the rate window: one scrape showed a queue the ready
    pods cannot clear within the budget, and neither the scrape before nor the one after
    did (a backlog that lasts is a surge or a stuck queue, judged by the other rules).
    As a surge (req/s): the rate that clears the clump within the budget, beyond the
    level."""
    if reference.queue_budget <= 0 or ready <= 0:
        return 0.0
    depths = [q for x in history.samples[-3:] if (q := x.get("queue_depth")) is not None]
    clearable = ready * reference.rate * reference.queue_budget
    if len(depths) < 3 or not depths[0] <= clearable < depths[1] or depths[2] > clearable:
        return 0.0
    return max(0.0, depths[1] / reference.queue_budget - level)


def _queue_growth(
    history: MetricHistory, clearable: float, scrape_interval: float
) -> tuple[float, float]:
    """Arrivals per second over the last scrape interval while the queue holds more than
    the ready pods clear within the budget: its growth plus the requests that left it
    (completed or failed) since the scrape before. Rates over the rate window see a burst
    shorter than the window only in part; the queue gauge and the last scrapes see it at
    once. A queue policy's timeouts cap the queue in a burst, so growth alone would miss
    it; the failures they cause are counted as they happen. 0 unless the queue grew past
    ``clearable``. Also returns the seconds it was measured over (its noise follows them):
    at least a ``scrape_interval``, since behind a scrape slower than the evaluations the
    gauge moves once per scrape, by a whole interval's growth."""
    samples = [x for x in history.samples[-2:] if x.get("queue_depth") is not None]
    if len(samples) < 2 or samples[1].at <= samples[0].at:
        return 0.0, 0.0
    before, after = samples[0].get("queue_depth") or 0.0, samples[1].get("queue_depth") or 0.0
    if after <= clearable or after <= before:
        return 0.0, 0.0
    gap = max(samples[1].at - samples[0].at, scrape_interval)
    done = samples[1].get("recent_completion_rate")
    if done is None:
        done = samples[1].get("success_rate") or 0.0
    return (after - before) / gap + done, gap


def _queue_draining(history: MetricHistory, start: float, end: float) -> bool:
    """Queue depth at the last sample up to ``end`` is below that at the first from
    ``start`` on (a backlog on its way out)."""
    samples = history.between(start - _EPS, end + _EPS)
    depths = [q for x in samples if (q := x.get("queue_depth")) is not None]
    return len(depths) >= 2 and depths[-1] < depths[0]


def _surge(
    config: PolicyConfig,
    history: MetricHistory,
    now: float,
    horizon: float,
    per_pod: float,
    arriving: tuple[float, float],
) -> tuple[float, float]:
    """How far demand rose within one start-up time beyond what its own noise explains,
    and the demand it rose from.

    Compares the short-window demand now (or the arrivals of the last scrape interval,
    ``arriving``: rate and seconds, when larger) with the mean demand one to two start-up
    times ago. Rates over ``w`` seconds of Poisson arrivals at ``r`` have variance
    ``r / w``; traffic more variable than Poisson scales that by its index of
    dispersion, measured over the same earlier stretch. A rise counts (whole) only above
    ``SURGE_Z`` standard deviations of the difference: smooth traffic keeps no headroom,
    and a trace that is merely noisier than Poisson is not taken for a burst.
    """
    if config.burst_memory <= 0:
        return 0.0, 0.0
    recent = history.between(now - config.panic_window - _EPS, now + _EPS)
    before = history.between(now - 2 * horizon - _EPS, now - horizon + _EPS)
    now_points = [d for x in recent if (d := x.demand) is not None]
    base_points = [d for x in before if (d := x.demand) is not None]
    if not now_points or not base_points:
        return 0.0, 0.0
    window = max(config.rate_window, 1e-9)
    now_rate, now_window = sum(now_points) / len(now_points), window
    if arriving[0] > now_rate and arriving[1] > 0:
        now_rate, now_window = arriving  # one scrape interval: noisier than the rate window
    base = sum(base_points) / len(base_points)
    dispersion = _dispersion(base_points, base, window)
    noise = SURGE_Z * math.sqrt(dispersion * max(now_rate / now_window + base / window, 0.0))
    rise = now_rate - base
    sized_for_base = max(1, math.ceil(base / per_pod - 1e-9)) * per_pod if per_pod > 0 else 0.0
    return (rise if rise > noise and now_rate > sized_for_base else 0.0), base


def _dispersion(points: Sequence[float], mean: float, window: float) -> float:
    """Index of dispersion of arrivals (variance over mean of counts per rate window),
    at least 1 (Poisson): how much noisier than Poisson the measured rates are.

    The variance is read from the median absolute deviation, not the sample variance: an
    earlier burst inside the stretch is the kind of rise being tested for, not noise (with
    the sample variance, a small burst hid a larger one that followed it). So variation on
    fewer than half the points counts as bursts, not as noise."""
    if len(points) < 3 or mean <= 0.0:
        return 1.0
    centre = median(points)
    spread = MAD_TO_SD * median(abs(d - centre) for d in points)
    return max(1.0, spread * spread * window / mean)


def _promotion_horizon(config: PolicyConfig, pools: PoolState) -> float:
    """Seconds from a surge to a promoted standby pod serving: one panic window to see
    it, then the promotion of the first class that has standby pods (or the prior)."""
    for pool in pools.classes:
        if pool.warm_ready > 0 and pool.warm_start is not None:
            return config.panic_window + pool.warm_start
    return config.panic_window + config.warm_start


def _startup_horizon(config: PolicyConfig, pools: PoolState) -> float:
    """Seconds until a pod started now serves: the cold start of the first placeable class."""
    for pool in pools.classes:
        if pool.free_capacity is None or pool.free_capacity > 0:
            return pool.cold_start if pool.cold_start is not None else config.cold_start
    return config.cold_start


# --------------------------------------------------------------------------- sizing


def _replicas_for_rate(rate: float, caps: dict[str, CapacityEstimate], pools: PoolState) -> int:
    """Fewest pods whose SLO capacity covers ``rate``: existing pods first, then new ones
    in preference order (warm pods count as existing: they are promoted before any start).
    """
    if rate <= 0.0:
        return 0
    remaining = rate
    count = 0
    for pool in pools.classes:
        cap = caps[pool.name].rate
        have = pool.committed + pool.warm_ready
        if cap <= 0.0:
            continue
        use = min(have, math.ceil(remaining / cap - 1e-9))
        count += use
        remaining -= use * cap
        if remaining <= 1e-9:
            return count
    for pool in pools.classes:
        cap = caps[pool.name].rate
        if cap <= 0.0:
            continue
        room = free_room(pool)
        add = min(room, math.ceil(remaining / cap - 1e-9))
        count += add
        remaining -= add * cap
        if remaining <= 1e-9:
            return count
    # Nowhere to place enough pods: still ask, in units of the reference capacity.
    best = max((c.rate for c in caps.values()), default=0.0)
    return count + (math.ceil(remaining / best) if best > 0 else 1)


def _replicas_for_queue(queue_depth: float | None, reference: CapacityEstimate) -> int:
    """Pods needed to clear the queued requests within one queue-time budget."""
    if queue_depth is None or queue_depth <= 0 or reference.rate <= 0:
        return 0
    per_pod = reference.rate * max(reference.queue_budget, 1e-3)
    return math.ceil(queue_depth / per_pod - 1e-9)


def _clamp(config: PolicyConfig, n: int) -> int:
    return max(config.min_replicas, min(config.max_replicas, n))


def _scale_up_limit(config: PolicyConfig, committed: int) -> int:
    grown = math.ceil(committed * config.scale_up_max_factor)
    return max(grown, committed + config.scale_up_min_step)


def _scale_down_limit(config: PolicyConfig, committed: int) -> int:
    return max(1, math.floor(committed * config.scale_down_max_fraction))


# --------------------------------------------------------------------------- actions


def finish_decision(
    *,
    pools: PoolState,
    memory: PolicyMemory,
    now: float,
    mode: Mode,
    target: int,
    panic_until: float | None,
    reason: str,
    signals: dict[str, float],
    warm_pool: int | None = None,
    outran: OutrunReport | None = None,
    routed_around: tuple[RoutedAround, ...] = (),
) -> Decision:
    """The actions that take ``pools`` to ``target`` serving pods, the resulting size and
    the memory after it: the last step of every rule (the LLM rule's too)."""
    committed = pools.committed
    actions, unplaced = allocate(pools, target)
    total = added_up(actions)
    desired = committed + total.delta
    if unplaced:
        reason += f"; {unplaced} pods could not be placed (no free capacity in any class)"
    if total.promote_warm:
        reason += f"; promoting {total.promote_warm} warm pods first"
    signals["desired"] = float(desired)
    return Decision(
        mode=mode,
        current_replicas=committed,
        desired_replicas=desired,
        actions=actions,
        reason=reason,
        memory=replace(
            memory,
            last_scale_up=now if desired > committed else memory.last_scale_up,
            last_scale_down=now if desired < committed else memory.last_scale_down,
            panic_until=panic_until,
        ),
        signals=signals,
        warm_pool=warm_pool,
        outran=outran,
        routed_around=routed_around,
    )


def _hold(
    config: PolicyConfig,
    pools: PoolState,
    memory: PolicyMemory,
    why: str,
    signals: dict[str, float] | None = None,
) -> Decision:
    """Keep the current size (bounds still apply: they come from the spec, not metrics)."""
    committed = pools.committed
    target = _clamp(config, committed)
    reason = f"holding at {committed}: {why}"
    if target != committed:
        reason += f"; moving to {target} to respect min/max replicas"
    actions, unplaced = allocate(pools, target)
    if unplaced:
        reason += f"; {unplaced} pods could not be placed"
    desired = committed + added_up(actions).delta
    return Decision(
        mode="hold",
        current_replicas=committed,
        desired_replicas=desired,
        actions=actions,
        reason=reason,
        memory=memory,
        signals=dict(signals or {}, committed=float(committed), desired=float(desired)),
    )


def _explain_target(
    config: PolicyConfig,
    demand: _Demand,
    reference: CapacityEstimate,
    needs: _Needs,
    *,
    rate_now: float,
    pressure: float,
    horizon: float,
    panicking: bool,
    bursting: bool,
) -> str:
    slo = f"p{config.slo_quantile * 100:.0f} {config.slo_latency * 1000:.0f}ms"
    if config.planning_quantile is not None:  # the user's headroom, named where it acts
        slo += f" planned at the p{config.planning_quantile * 100:g} backlog"
    if config.target_queue_depth is not None:
        return (
            f"queue depth target {config.target_queue_depth}/pod (spec override) "
            f"needs {needs.now} replicas"
        )
    parts = [
        f"demand {rate_now:.1f} req/s "
        f"({'panic' if panicking else 'stable'} window) needs {needs.now} replicas at "
        f"{reference.rate:.1f} req/s each within {slo} (batch {reference.batch_items:.1f} "
        f"items, queue budget {reference.queue_budget * 1000:.0f}ms)"
    ]
    if bursting:
        parts.append(f"panic: short-window demand {demand.panic:.1f} req/s exceeds ready capacity")
    if needs.ahead > needs.now:
        parts.append(
            f"lookahead: +{demand.slope:.2f} req/s per s over {horizon:.0f}s start-up "
            f"needs {needs.ahead}"
        )
    if needs.queue > max(needs.now, needs.ahead):
        parts.append(f"queue depth needs {needs.queue} to drain within budget")
    if needs.latency > 0:
        parts.append(f"measured latency at {pressure:.2f}x its budget needs {needs.latency}")
    return "; ".join(parts)
