"""Engine time costs fitted to what a replica was seen to do (gpuserve.llm.calibrating)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpuserve.autoscaling.decision import Decision, PolicyMemory
from gpuserve.autoscaling.pools import ClassPool, PoolState
from gpuserve.llm.calibrating import (
    FIT_EVERY_S,
    FIT_LOAD_BAND,
    FIT_MEMORY_S,
    PREFILL_BOUNDS,
    SCALE_BOUNDS,
    bursting,
    contended,
    decide_priced,
    fit_or_known,
    fitted_scale,
    kept_after,
    load_of,
    prefill_floor,
    scaled,
    steadied,
)
from gpuserve.llm.capacity import (
    LoadShape,
    TokenObjectives,
    output_gap_s,
    replica_capacity,
    time_scale,
)
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.observing import Observation
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import replay
from gpuserve.sim.llm.cluster import ClusterConfig, simulate_cluster
from gpuserve.sim.llm.scalers import GpuserveLLM
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace

OBJECTIVES = TokenObjectives(ttft_s=2.0, tpot_s=0.2, quantile=0.95)
SHAPE = LoadShape(prompt_mean=600.0, prompt_high=1500.0, output_mean=120.0)


@pytest.mark.parametrize("factor", [0.25, 1.0, 6.0])
@pytest.mark.parametrize("share", [0.1, 0.7])
def test_the_fitted_factor_is_the_one_that_made_the_measured_gap(
    factor: float, share: float
) -> None:
    base = EngineParams()
    slow = base.slower(factor)
    rate = share * replica_capacity(slow, SHAPE, OBJECTIVES).rate
    measured = output_gap_s(slow, SHAPE, rate)
    assert time_scale(base, SHAPE, rate, measured) == pytest.approx(factor, rel=1e-9)
    assert time_scale(base, SHAPE, rate, 0.0) is None
    assert time_scale(base, SHAPE, 0.0, measured) is None


def _window(rate: float, params: EngineParams, seconds: float) -> Observation:
    """Poisson traffic of SHAPE-like requests through the engine; what the metrics would
    show of it (the mean output-token gap is what vLLM's TPOT histogram averages)."""
    rng = random.Random(3)
    clock, requests = 0.0, []
    while clock < seconds:
        clock += rng.expovariate(rate)
        prompt = max(1, int(rng.lognormvariate(6.2, 0.6)))
        requests.append((clock, prompt, max(2, int(rng.lognormvariate(4.7, 0.5))), ()))
    run = replay(requests, params, fast=True)
    gaps = [
        b - a
        for timing in run.timings.values()
        for a, b in zip(timing.token_s, timing.token_s[1:], strict=False)
    ]
    prompts = [p for _, p, _, _ in requests]
    outputs = [o for _, _, o, _ in requests]
    shape = LoadShape(
        prompt_mean=sum(prompts) / len(prompts),
        prompt_high=sorted(prompts)[int(0.95 * len(prompts))],
        output_mean=sum(outputs) / len(outputs),
    )
    tpot = sum(gaps) / len(gaps)
    ttfts = sorted(t.ttft_s for t in run.timings.values() if t.ttft_s is not None)
    ttft = ttfts[int(OBJECTIVES.quantile * len(ttfts))]
    return Observation(
        seconds, seconds, len(requests) / seconds, shape, ttft, None, tpot, 0.0, 0.0, 0.0, 0.0
    )


def test_a_replica_five_times_slower_than_the_defaults_is_priced_as_such() -> None:
    defaults = EngineParams()
    truth = defaults.slower(5.0)
    rate = 0.6 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    seen = _window(rate, truth, seconds=600.0)
    factor = fitted_scale(LLMPolicy(OBJECTIVES, defaults), seen, replicas=1)
    assert factor is not None and factor == pytest.approx(5.0, rel=0.15)
    fitted = scaled(LLMPolicy(OBJECTIVES, defaults), factor)
    assert seen.shape is not None
    true_rate = replica_capacity(truth, seen.shape, OBJECTIVES).rate
    priced = replica_capacity(fitted.params, seen.shape, OBJECTIVES).rate
    unfitted = replica_capacity(defaults, seen.shape, OBJECTIVES).rate
    assert priced == pytest.approx(true_rate, rel=0.15)
    assert unfitted > 3 * true_rate  # what the defaults alone would promise
    # Two replicas sharing the same traffic each carried half of it.
    halves = fitted_scale(LLMPolicy(OBJECTIVES, defaults), seen, replicas=2)
    assert halves is not None and halves > factor


def test_an_engine_counts_for_the_part_of_the_window_it_served() -> None:
    """One engine served the whole minute; a second, ready at its last scrape, served
    none of it. Counted at the window's end the rate per engine halves and the fit reads
    the engine as slower at a lighter load; counted over the window it is one engine's."""
    defaults = EngineParams()
    truth = defaults.slower(5.0)
    policy = LLMPolicy(OBJECTIVES, defaults)
    rate = 0.6 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    seen = _window(rate, truth, seconds=600.0)
    alone = fitted_scale(policy, seen, replicas=1)
    at_end = fitted_scale(policy, seen, replicas=2)
    over = replace(seen, engines=1.0 + 5.0 / 600.0)
    assert alone is not None and at_end is not None and at_end > 1.1 * alone
    assert fitted_scale(policy, over, replicas=2) == pytest.approx(alone, rel=0.02)
    assert load_of(policy, over, 2) == pytest.approx(load_of(policy, seen, 1), rel=0.01)
    # A fresh service's only engine, up for the second half of its first window.
    half = replace(seen, rate=seen.rate / 2, engines=0.5)
    assert fitted_scale(policy, half, replicas=1) == pytest.approx(alone, rel=1e-9)
    assert fitted_scale(policy, replace(seen, engines=0.0), replicas=1) is None


def test_nothing_measured_leaves_the_policy_as_it_is() -> None:
    policy = LLMPolicy(OBJECTIVES)
    assert fitted_scale(policy, None, replicas=1) is None
    idle = Observation(60.0, 60.0, 0.0, None, None, None, None, 0.0, 0.0, 0.0, 0.0)
    assert fitted_scale(policy, idle, replicas=1) is None
    assert scaled(policy, None) is policy


def test_the_decision_is_priced_at_its_stable_windows_fit() -> None:
    """The minute of a 5x-slow engine fits about 5 (the 15-s window, which measured no
    token time here, is not what is fitted), and the decision sizes replicas for it; with
    nothing measured the engine is as modelled."""
    defaults = EngineParams()
    truth = defaults.slower(5.0)
    rate = 0.6 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    seen = _window(rate, truth, seconds=600.0)
    recent = replace(seen, tpot_mean_s=None)
    policy = LLMPolicy(OBJECTIVES, defaults)
    pools = PoolState((ClassPool("h100", serving_ready=2, cold_start=45.0),))

    def decide(stable: Observation | None, replicas: int) -> tuple[Decision, float | None]:
        return decide_priced(
            policy=policy,
            stable=stable,
            recent=recent,
            pools=pools,
            now=600.0,
            memory=PolicyMemory(),
            replicas=replicas,
        )

    priced, factor = decide(seen, replicas=1)
    assert factor is not None and factor == pytest.approx(5.0, rel=0.15)
    assert priced.signals["capacityPerReplica"] == pytest.approx(
        policy.utilization * replica_capacity(truth, SHAPE, OBJECTIVES).rate, rel=0.3
    )
    unpriced, none = decide(seen, replicas=0)  # no engine reported
    assert none is None
    assert unpriced.signals["capacityPerReplica"] > 3 * priced.signals["capacityPerReplica"]


def test_a_contended_window_keeps_the_factor_known() -> None:
    """Requests waiting stretch the steps beyond the model's steady state, so such a
    window reads the engine as slower than it is: the factor last fitted stands, and the
    memory carries it (through status too). Without one the contended fit is taken: an
    engine overloaded from its start must still be priced."""
    defaults = EngineParams()
    truth = defaults.slower(2.0)
    rate = 0.5 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    calm = _window(rate, truth, seconds=300.0)
    queued = replace(calm, waiting=4.0, tpot_mean_s=3 * (calm.tpot_mean_s or 0.0))
    policy = LLMPolicy(OBJECTIVES, defaults)
    assert contended(queued) and not contended(calm)
    assert contended(replace(calm, queue_growth=0.1)) and contended(replace(calm, preemptions=1))
    alone = fit_or_known(policy, queued, 1, None, None)
    assert alone is not None and alone > 3.0
    known = fit_or_known(policy, calm, 1, None, alone)
    assert known is not None and known == pytest.approx(2.0, rel=0.15)
    assert fit_or_known(policy, queued, 1, None, known) == known
    assert fit_or_known(policy, None, 1, None, known) == known
    pools = PoolState((ClassPool("h100", serving_ready=2, cold_start=45.0),))
    decision, factor = decide_priced(
        policy=policy,
        stable=queued,
        recent=queued,
        pools=pools,
        now=5.0,
        memory=PolicyMemory(time_scale=known),
        replicas=1,
    )
    assert factor == known and decision.memory.time_scale == known
    assert PolicyMemory.from_status(decision.memory.to_status()).time_scale == known


def test_the_simulated_rule_prices_a_slow_engine_as_the_operator_does() -> None:
    """gpuserve's scaler in the simulator decides through ``decide_priced``: on engines
    twice as slow as its policy says, it prices them at about 2."""
    policy = LLMPolicy(OBJECTIVES, EngineParams(), max_replicas=8)
    rng = random.Random(5)
    clock, requests = 0.0, []
    while clock < 300.0:
        clock += rng.expovariate(1.5)
        requests.append(TokenRequest(clock, rng.randint(200, 1500), rng.randint(80, 160)))
    config = ClusterConfig(EngineParams().slower(2.0), OBJECTIVES, initial_replicas=1, seed=2)
    scaler = GpuserveLLM(policy, keep_decisions=True)
    simulate_cluster(config, TokenTrace("chat", tuple(requests)), scaler)
    priced = [d.signals for _, d in scaler.decisions if "timeScale" in d.signals]
    factors = sorted(signals["timeScale"] for signals in priced)
    assert len(factors) > 20 and 1.6 < factors[len(factors) // 2] < 2.5


def test_a_fit_is_steadied_by_those_kept_at_like_loads_only() -> None:
    """The factor: the median of the window's and the kept ones within the band of its
    load, when there are three of them; kept fits at other loads, or too few, change
    nothing. The floor on the prompts' costs: the median over every kept fit."""
    near = ((0.0, 0.30, 1.0, 1.0), (60.0, 0.32, 1.1, 1.0), (120.0, 0.28, 0.9, 1.2))
    far = ((180.0, 0.60, 3.0, 1.3), (240.0, 0.62, 3.2, 1.3), (300.0, 0.58, 2.8, 1.3))
    assert steadied((1.6, 1.0), 0.31, near + far) == pytest.approx((1.05, 1.2))
    assert steadied((1.6, 1.0), 0.61, near + far) == pytest.approx((2.9, 1.2))
    assert steadied((1.6, 1.0), 0.31 + 2 * FIT_LOAD_BAND, near + far)[0] == 1.6  # none near
    assert steadied((1.6, 1.4), 0.31, near[:2]) == (1.6, 1.4)  # two kept: too few


def test_one_fit_is_kept_a_minute_and_none_beyond_the_memory() -> None:
    kept = kept_after((), 10.0, (1.2, 1.0), 0.3)
    assert kept == ((10.0, 0.3, 1.2, 1.0),)
    assert kept_after(kept, 10.0 + FIT_EVERY_S / 2, (1.4, 1.0), 0.3) == kept  # same minute
    assert kept_after(kept, 10.0 + FIT_EVERY_S, None, None) == kept  # nothing fitted
    later = kept_after(kept, 10.0 + FIT_EVERY_S, (1.4, 1.1), 0.35)
    assert later == ((10.0, 0.3, 1.2, 1.0), (10.0 + FIT_EVERY_S, 0.35, 1.4, 1.1))
    assert kept_after(later, 10.0 + FIT_MEMORY_S + 1.0, None, None) == later[1:]


def test_prompts_slower_than_the_decode_steps_say_raise_the_floor() -> None:
    """An engine twice as slow in every cost and three times more in its prompts' costs:
    the time per output token fits about 2 (the prompts weigh little in it), and the
    measured TTFT, above what the model predicts at 2, raises the floor on the prompts'
    costs. On an engine slower in every cost alike the floor stays 1: the model's TTFT
    errs high."""
    defaults = EngineParams()
    policy = LLMPolicy(OBJECTIVES, defaults)
    alike = defaults.slower(2.0)
    prompts = defaults.slower(2.0, prefill=3.0)
    rate = 0.5 * replica_capacity(prompts, SHAPE, OBJECTIVES).rate
    for engine, lowest, highest in ((alike, 1.0, 1.0), (prompts, 1.5, 4.0)):
        seen = _window(rate, engine, seconds=600.0)
        fit = fitted_scale(policy, seen, 1)
        assert fit is not None
        floor = prefill_floor(scaled(policy, fit), seen, 1)
        assert lowest <= floor <= highest, (engine, fit, floor)
    assert prefill_floor(policy, replace(seen, ttft_high_s=None), 1) == 1.0


def test_an_outlying_window_is_priced_with_the_fits_kept_at_its_load() -> None:
    """A 2x-slow engine measured well for minutes: one window that fits 3.5 (a burst of
    long outputs, say) is priced near 2, not at 3.5; at a load never seen it is priced by
    its own fit. Kept fits go through status, and a hand-edited status is read within
    bounds."""
    defaults = EngineParams()
    truth = defaults.slower(2.0)
    rate = 0.5 * replica_capacity(truth, SHAPE, OBJECTIVES).rate
    calm = _window(rate, truth, seconds=300.0)
    policy = LLMPolicy(OBJECTIVES, defaults)
    fit, load = fitted_scale(policy, calm, 1), load_of(policy, calm, 1)
    assert fit is not None and load is not None and not contended(calm)
    memory = PolicyMemory(
        time_scale=fit, time_fits=tuple((60.0 * i, load, fit, 1.0) for i in range(1, 5))
    )
    odd = replace(calm, tpot_mean_s=3.0 * (calm.tpot_mean_s or 0.0))
    odd_fit = fitted_scale(policy, odd, 1)
    assert odd_fit is not None and odd_fit > 1.5 * fit
    pools = PoolState((ClassPool("h100", serving_ready=2, cold_start=45.0),))

    def decide(stable: Observation, memory: PolicyMemory) -> tuple[Decision, float | None]:
        return decide_priced(
            policy=policy,
            stable=stable,
            recent=stable,
            pools=pools,
            now=300.0,
            memory=memory,
            replicas=1,
        )

    decision, factor = decide(odd, memory)
    assert factor == pytest.approx(fit)
    assert decision.memory.time_fits[-1][:3] == (
        300.0,
        pytest.approx(load),
        pytest.approx(odd_fit),
    )
    read_back = PolicyMemory.from_status(decision.memory.to_status()).time_fits
    flat = [x for entry in decision.memory.time_fits for x in entry]
    assert [x for entry in read_back for x in entry] == pytest.approx(flat, rel=1e-3)
    busier = replace(odd, rate=3.0 * odd.rate)  # three times the load: no fit kept near it
    _, alone = decide(busier, memory)
    assert alone == fitted_scale(policy, busier, 1)
    edited = PolicyMemory.from_status(
        {
            "timeScale": 1e9,
            "prefillScale": 1e9,
            "timeFits": [[1, 0.3, "x", 1], [2, -1, 2.0, 1], [3, 0.3, 2.0, 1.5], [4, 0.3, 2.0]],
        }
    )
    assert edited.time_fits == ((3.0, 0.3, 2.0, 1.5),)
    queued = replace(calm, waiting=3.0)
    held, factor = decide(queued, edited)
    assert factor == SCALE_BOUNDS[1]  # the known factor, as far as a fit can go
    assert held.signals["prefillScale"] == PREFILL_BOUNDS[1]
    # A service the rule holds burst headroom for: each window priced by its own fit.
    bursty = replace(memory, surges=((240.0, 20.0 * calm.rate, calm.rate, calm.rate),))
    assert bursting(policy, odd, bursty) and not bursting(policy, odd, memory)
    decision, own = decide(odd, bursty)
    assert own == odd_fit and decision.memory.time_fits == memory.time_fits
    assert decision.signals["prefillScale"] == 1.0  # and no floor on the prompts
    slow_prompts = replace(bursty, prefill_scale=2.0)
    assert decide(odd, slow_prompts)[0].signals["prefillScale"] == 1.0
    queued_after, _ = decide(replace(odd, waiting=3.0), replace(memory, prefill_scale=2.0))
    assert queued_after.signals["prefillScale"] == 2.0  # held through a contended window


def test_a_slower_engine_keeps_its_sizes_and_may_pay_more_for_its_prompts() -> None:
    base = EngineParams()
    slow = base.slower(2.0, prefill=3.0)
    assert slow.decode_base_s == pytest.approx(2 * base.decode_base_s)
    assert slow.decode_s_per_context_token == pytest.approx(2 * base.decode_s_per_context_token)
    assert slow.prefill_s_per_token == pytest.approx(6 * base.prefill_s_per_token)
    assert slow.prefill_s_per_token_pair == pytest.approx(6 * base.prefill_s_per_token_pair)
    assert (slow.num_blocks, slow.max_batched_tokens) == (base.num_blocks, base.max_batched_tokens)
    with pytest.raises(ValueError, match="prefill"):
        base.slower(2.0, prefill=0.0)
