"""The token-level cluster simulator: traces, replicas, routing, scalers and the oracle."""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from gpuserve.llm.capacity import TokenObjectives
from gpuserve.llm.chunking import chunk_for_objective
from gpuserve.llm.deciding import LLMPolicy
from gpuserve.llm.params import EngineParams
from gpuserve.llm.replay import replay
from gpuserve.sim.llm.cluster import (
    ClusterConfig,
    ClusterRun,
    ClusterScaler,
    ClusterView,
    RequestOutcome,
    simulate_cluster,
)
from gpuserve.sim.llm.from_spec import fit_to_trace
from gpuserve.sim.llm.lineup import compare, yardsticks
from gpuserve.sim.llm.oracle import plan_oracle
from gpuserve.sim.llm.scalers import GpuserveLLM, Static, window
from gpuserve.sim.llm.traces import (
    TokenRequest,
    TokenTrace,
    azure_conversation,
    flash_crowd_tokens,
    mooncake,
)
from gpuserve.sim.workload import parse_mooncake_trace

REPO_ROOT = Path(__file__).resolve().parents[2]
OBJECTIVES = TokenObjectives(ttft_s=1.0, tpot_s=0.05)
PARAMS = EngineParams()


def _chat(rate: float, seconds: float, seed: int = 1) -> TokenTrace:
    rng = random.Random(seed)
    clock, out = 0.0, []
    while clock < seconds:
        clock += rng.expovariate(rate)
        out.append(TokenRequest(clock, rng.randint(100, 2000), rng.randint(20, 300)))
    return TokenTrace("chat", tuple(out))


def _static(trace: TokenTrace, n: int, **config: object) -> ClusterRun:
    base = ClusterConfig(PARAMS, OBJECTIVES, initial_replicas=n)
    return simulate_cluster(replace(base, **config), trace, Static(n))  # type: ignore[arg-type]


def test_parsers_read_the_trace_formats_and_compress_time() -> None:
    azure = [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.6805900,374,44",
        "2023-11-16 18:15:50.6805900,396,0",
    ]
    trace = azure_conversation(azure, compress=2.0)
    assert [r.arrival_s for r in trace.requests] == pytest.approx([0.0, 2.0])
    assert trace.requests[1].output_tokens == 1  # a request always yields a token
    with pytest.raises(ValueError, match="header"):
        azure_conversation(["a,b,c"])
    line = '{"timestamp": 1500, "input_length": 1100, "output_length": 9, "hash_ids": [4, 5, 6]}'
    first = '{"timestamp": 500, "input_length": 7, "output_length": 1}'
    moon = mooncake([line, first], compress=2.0)  # the clock starts at the earliest row
    assert moon.requests[1] == TokenRequest(0.5, 1100, 9, (4, 5, 6)) and moon.block_size == 512
    with pytest.raises(ValueError, match="input_length"):
        mooncake(['{"timestamp": 0, "output_length": 1}'])


def test_the_azure_parser_reads_seconds_as_timestamps() -> None:
    # The request-level simulator always read them; this parser stopped at fromisoformat.
    trace = azure_conversation(
        ["TIMESTAMP,ContextTokens,GeneratedTokens", "1.5,374,44", "4.5,396,9"], compress=2.0
    )
    assert [(r.arrival_s, r.prompt_tokens) for r in trace.requests] == [(0.0, 374), (1.5, 396)]


MOON = '{"timestamp": 1500, "input_length": 1100, "output_length": 9, "hash_ids": [4, 5]}'


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ('{"timestamp": 5 "input_length": 1}', "line 3: not valid JSON (Expecting ',' delimiter"),
        ("[1, 2]", "line 3: expected a JSON object, got [1, 2]"),
        ('{"input_length": 1, "output_length": 1}', "line 3: missing field 'timestamp'"),
        ('{"timestamp": "abc"}', 'line 3: timestamp: "abc" is not a number'),
        ('{"timestamp": true}', "line 3: timestamp: true is not a number"),
        ('{"timestamp": -5}', "line 3: timestamp: -5 is negative"),
        (
            '{"timestamp": 0, "input_length": "12"}',
            'line 3: input_length: "12" is not a whole number',
        ),
        ('{"timestamp": 0, "input_length": -3}', "line 3: input_length: -3 is negative"),
        (
            '{"timestamp": 0, "output_length": 2.5}',
            "line 3: output_length: 2.5 is not a whole number",
        ),
        (
            '{"timestamp": 0, "hash_ids": "45"}',
            'line 3: hash_ids: expected a list of whole numbers, got "45"',
        ),
    ],
)
@pytest.mark.parametrize("parser", [mooncake, parse_mooncake_trace])
def test_a_bad_mooncake_line_is_named_by_its_number_and_field(
    parser: Callable[[list[str]], object], broken: str, message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        parser([MOON, "", broken])  # the blank line still counts
    assert str(refused.value).startswith(message)


def test_the_token_level_mooncake_parser_needs_both_lengths() -> None:
    with pytest.raises(ValueError) as refused:
        mooncake([MOON, '{"timestamp": 2000, "output_length": 1}'])
    assert str(refused.value) == "line 2: missing field 'input_length'"
    # The request-level parser reads an absent length as 0 tokens, as before.
    assert parse_mooncake_trace(['{"timestamp": 2000}'])[0].context_tokens == 0


def test_more_replicas_serve_an_overload_and_cost_their_gpu_time() -> None:
    trace = _chat(rate=28.0, seconds=120.0)
    one, three = _static(trace, 1), _static(trace, 3)
    assert one.attainment() < 0.5 < 0.99 <= three.attainment()
    span = max(o.arrival_s for o in three.outcomes)
    assert span * 3 <= three.gpu_seconds <= (span + 30) * 3
    assert len(three.outcomes) == len(trace.requests)


class _GrowsAt(ClusterScaler):
    """One replica, then two from ``at``; the windows seen at each evaluation kept."""

    interval_s = 5.0
    offset_s = 0.5

    def __init__(self, at: float) -> None:
        self.at = at
        self.seen: list[tuple[float, int, int, float | None]] = []

    def target(self, view: ClusterView) -> int:
        last = window(view, 60.0, OBJECTIVES.quantile)
        engines = None if last is None else last.engines
        self.seen.append((view.now, view.serving, view.snapshots[-1].replicas, engines))
        return 1 if view.now < self.at else 2


def test_a_starting_replica_answers_no_scrape_and_counts_for_the_time_it_served() -> None:
    """The engines a window's fit divides its rate by: a replica still starting exports
    nothing (its pod's server is not up), and one ready for part of the window counts for
    that part."""
    scaler = _GrowsAt(60.0)
    config = ClusterConfig(PARAMS, OBJECTIVES, initial_replicas=1, startup_s=45.0)
    simulate_cluster(config, _chat(rate=4.0, seconds=240.0), scaler)
    starting = [(r, e) for t, serving, r, e in scaler.seen if 65.0 < t < 100.0]
    assert starting and all(r == 1 and e == 1.0 for r, e in starting)
    partly = [e for t, _, _, e in scaler.seen if 115.0 < t < 150.0]
    assert partly and all(e is not None and 1.0 < e < 2.0 for e in partly)
    assert partly == sorted(partly)  # each scrape with two engines raises the mean
    whole = [e for t, _, _, e in scaler.seen if 170.0 < t < 230.0]
    assert whole and all(e == 2.0 for e in whole)


def test_random_spreading_serves_each_replica_as_one_engine_alone_would() -> None:
    # Random routing draws a replica per arrival whatever the engines hold, so each
    # replica must time its share exactly as one engine replaying that share alone. The
    # simulator draws routes ahead to let a replica's decode stretch run past arrivals
    # that go elsewhere; one run past its own arrival would change these times.
    trace = _chat(rate=12.0, seconds=60.0, seed=4)
    run = _static(trace, 3, seed=7)
    draws = random.Random(7)  # the simulator's routing stream: one draw per arrival
    shares: list[list[int]] = [[], [], []]
    for index in range(len(trace.requests)):
        shares[draws.randrange(3)].append(index)
    for share in shares:
        mine = [trace.requests[i] for i in share]
        alone = replay(
            [(r.arrival_s, r.prompt_tokens, r.output_tokens, ()) for r in mine], PARAMS, fast=True
        )
        for position, index in enumerate(share):
            tokens = alone.timings[str(position)].token_s
            outcome = run.outcomes[index]
            assert outcome.ttft_s == tokens[0] - trace.requests[index].arrival_s
            gaps = (tokens[-1] - tokens[0]) / (len(tokens) - 1) if len(tokens) > 1 else 0.0
            assert outcome.tpot_s == gaps
    assert min(len(share) for share in shares) > 100


class _Watching(ClusterScaler):
    """Holds one replica and notes whether the garbage collector ran during the run."""

    interval_s = 5.0

    def __init__(self, fail_at: float | None = None) -> None:
        self.seen: list[bool] = []
        self.fail_at = fail_at

    def target(self, view: ClusterView) -> int | None:
        self.seen.append(gc.isenabled())
        if self.fail_at is not None and view.now >= self.fail_at:
            raise RuntimeError("the scaler failed")
        return 1


def test_a_run_pauses_the_garbage_collector_and_leaves_it_as_it_found_it() -> None:
    trace = _chat(rate=4.0, seconds=30.0)
    config = ClusterConfig(PARAMS, OBJECTIVES, initial_replicas=1)
    assert gc.isenabled()
    try:
        watching = _Watching()
        simulate_cluster(config, trace, watching)
        assert watching.seen and not any(watching.seen) and gc.isenabled()
        failing = _Watching(fail_at=10.0)
        with pytest.raises(RuntimeError, match="the scaler failed"):
            simulate_cluster(config, trace, failing)
        assert gc.isenabled()  # restored on the way out of a failed run too
        gc.disable()  # a caller that paused it keeps it paused
        simulate_cluster(config, trace, _Watching())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_trace_with_hashes_needs_the_engines_block_size() -> None:
    trace = TokenTrace("x", (TokenRequest(0.0, 600, 2, (1,)),), block_size=512)
    with pytest.raises(ValueError, match="block_size"):
        _static(trace, 1)


def _conversations(seed: int) -> TokenTrace:
    """Conversations whose turns resend the whole history: each turn's prompt extends the
    previous one's blocks (16-token blocks, as the engine's)."""
    rng = random.Random(seed)
    requests, next_block = [], 0
    for _ in range(60):
        blocks: list[int] = []
        clock = rng.uniform(0, 100)
        for _ in range(4):
            blocks += range(next_block, next_block + 40)
            next_block += 40
            requests.append(TokenRequest(clock, len(blocks) * 16 + 5, 30, tuple(blocks)))
            clock += rng.uniform(3, 10)
    requests.sort(key=lambda r: r.arrival_s)
    return TokenTrace("conversations", tuple(requests))


def test_prefix_affinity_finds_the_history_that_random_spreading_misses() -> None:
    trace = _conversations(3)
    spread = _static(trace, 4, routing="random")
    affine = _static(trace, 4, routing="prefix")
    assert affine.hit_rate > spread.hit_rate + 0.2
    assert affine.ttft_percentile(95) < spread.ttft_percentile(95)


def test_gpuserve_grows_for_a_flash_crowd_and_lets_it_go_once_it_has_passed() -> None:
    mix = _chat(5.0, 60.0, seed=2)
    trace = flash_crowd_tokens(mix, mean_rate=8.0, duration=1200.0, factor=3.0, seed=4)
    config = ClusterConfig(PARAMS, OBJECTIVES, initial_replicas=1)
    crowd_start, crowd_end = 500.0, 700.0  # duration x 5/12 and + duration / 6
    run = simulate_cluster(config, trace, GpuserveLLM(LLMPolicy(OBJECTIVES, PARAMS)))
    # The crowd outlasted a start-up: the replicas it started served it, and it keeps no
    # headroom in the 30-minute burst memory once it has gone.
    assert max(n for t, n in run.replicas if crowd_start <= t < crowd_end) >= 2
    assert run.replicas[-1][1] == 1


def test_bursts_shorter_than_a_start_up_keep_headroom_for_the_burst_memory() -> None:
    quiet = _chat(5.0, 1200.0, seed=2)
    bursts = [
        replace(r, arrival_s=r.arrival_s + start)
        for start in (300.0, 600.0)
        for r in _chat(40.0, 30.0, seed=int(start)).requests
    ]
    trace = TokenTrace("bursts", tuple(sorted(quiet.requests + tuple(bursts), key=_arrival)))
    config = ClusterConfig(PARAMS, OBJECTIVES, initial_replicas=1)

    def last_size(memory_s: float) -> int:
        policy = replace(LLMPolicy(OBJECTIVES, PARAMS), burst_memory_s=memory_s)
        return simulate_cluster(config, trace, GpuserveLLM(policy)).replicas[-1][1]

    # Ten minutes after the last 30-s burst: held with the default 30-minute memory, let
    # go with a 5-minute one.
    assert last_size(1800.0) >= 2
    assert last_size(300.0) == 1


def _arrival(request: TokenRequest) -> float:
    return request.arrival_s


def test_the_oracle_plans_per_window_and_costs_no_more_than_static_at_its_peak() -> None:
    quiet, busy = _chat(4.0, 120.0, seed=5), _chat(30.0, 120.0, seed=6)
    shifted = tuple(replace(r, arrival_s=r.arrival_s + 120.0) for r in busy.requests)
    trace = TokenTrace("step", quiet.requests + shifted)
    config = ClusterConfig(PARAMS, OBJECTIVES)
    plan, run, _ = plan_oracle(config, trace, window_s=60.0)
    assert plan.plan[0] == 1 and max(plan.plan) >= 2
    assert run.attainment() >= 0.98
    assert run.gpu_hours < _static(trace, max(plan.plan)).gpu_hours


def test_the_lineup_gives_gpuserve_the_scale_down_window_asked_for() -> None:
    # A busy four minutes between quiet ones (long enough to be chased, so the burst
    # memory keeps no headroom for it): gpuserve's replicas for the busy stretch go
    # sooner with a 30-s stabilisation than with the API's 120 s; the baselines are the
    # same either way.
    quiet, busy = _chat(4.0, 120.0, seed=5), _chat(30.0, 240.0, seed=6)
    after = _chat(4.0, 180.0, seed=7)
    trace = TokenTrace(
        "step",
        quiet.requests
        + tuple(replace(r, arrival_s=r.arrival_s + 120.0) for r in busy.requests)
        + tuple(replace(r, arrival_s=r.arrival_s + 360.0) for r in after.requests),
    )
    config = ClusterConfig(PARAMS, OBJECTIVES, seed=1)
    # One full comparison, and the yardsticks computed apart for the rest (the oracle's
    # search is most of the test's time).
    short = {e.name: e.run for e in compare(config, trace, scale_down_window_s=30.0)}
    sticks = yardsticks(config, trace)
    held = {e.name: e.run for e in compare(config, trace, reuse=sticks)}
    assert short["gpuserve"].gpu_hours < held["gpuserve"].gpu_hours
    for name in ("keda-waiting", "hpa-kv", "planner-like", "static-peak"):
        assert short[name].gpu_hours == held[name].gpu_hours
    # A rerun that reuses the yardsticks (the bench's --cache) takes the oracle and the
    # baselines as given and simulates gpuserve alone, to the same result.
    again = compare(config, trace, scale_down_window_s=30.0, reuse=sticks)
    assert [e.name for e in again] == [
        "oracle",
        "static-peak",
        "gpuserve",
        "keda-waiting",
        "hpa-kv",
        "planner-like",
    ]
    given = {e.name: e for e in sticks.entries}
    assert all(e is given[e.name] for e in again if e.name != "gpuserve")
    ours = next(e.run for e in again if e.name == "gpuserve")
    assert ours.outcomes == short["gpuserve"].outcomes
    assert ours.gpu_seconds == short["gpuserve"].gpu_seconds


def test_the_oracle_adds_replicas_where_a_window_falls_short_in_context() -> None:
    # Minutes 8-12 of the shipped Mooncake conversation trace on the benchmark's
    # long-prompt engine: sized alone, the third minute gets replicas that fall short once
    # the minutes before have left their long prompts running (92.7% after one end-to-end
    # check). Every window must reach what ample replicas reach in the same run.
    lines = (REPO_ROOT / "traces" / "mooncake-conversation-2025.jsonl").read_text().splitlines()
    full = mooncake(lines)
    part = tuple(
        replace(r, arrival_s=r.arrival_s - 480.0)
        for r in full.requests
        if 480.0 <= r.arrival_s < 720.0
    )
    trace = replace(full, requests=part)
    objectives = TokenObjectives(ttft_s=10.0, tpot_s=0.1)
    engine = fit_to_trace(EngineParams(max_model_len=131_072), trace)
    engine = replace(engine, max_batched_tokens=chunk_for_objective(engine, objectives.tpot_s))
    config = ClusterConfig(engine, objectives, seed=1)
    plan, run, _ = plan_oracle(config, trace)
    ample = simulate_cluster(replace(config, initial_replicas=8), trace, Static(8))
    for k in range(4):
        reachable = min(0.99, ample.attainment(60.0 * k, 60.0 * (k + 1)))
        assert run.attainment(60.0 * k, 60.0 * (k + 1)) >= reachable - 1e-9, (k, plan.plan)


def test_a_history_is_served_first_and_left_out_of_what_is_measured() -> None:
    # Two busy minutes yesterday, two quiet ones today: every contender serves both, the
    # measured runs hold today's requests and the GPU time from today's start, and static
    # sized on yesterday's busiest minute holds more than static sized on today's.
    yesterday, today = _chat(30.0, 120.0, seed=6), _chat(4.0, 120.0, seed=5)
    trace = today.after(yesterday, seconds=120.0)
    assert [r.arrival_s for r in trace.requests] == [
        *(r.arrival_s for r in yesterday.requests if r.arrival_s < 120.0),
        *(r.arrival_s + 120.0 for r in today.requests),
    ]
    config = ClusterConfig(PARAMS, OBJECTIVES, seed=1)
    sticks = yardsticks(config, trace, history_s=120.0)
    entries = compare(config, trace, reuse=sticks)
    assert [e.name for e in entries][-1] == "static-yesterday"
    runs = {e.name: e.run for e in entries}
    sizes = {name: runs[name].replicas[0][1] for name in ("static-peak", "static-yesterday")}
    assert sizes["static-yesterday"] > sizes["static-peak"] >= 1
    for name, run in runs.items():
        measured = run.measured_from(120.0)
        assert len(measured.outcomes) == len(today.requests), name
        assert measured.gpu_seconds < run.gpu_seconds, name
    for name, size in sizes.items():
        whole = runs[name]
        end = whole.gpu_seconds / size  # static replicas live from 0 to the run's end
        assert whole.measured_from(120.0).gpu_seconds == pytest.approx(size * (end - 120.0))
        assert whole.measured_from(120.0).replicas == ((120.0, size),)


def test_a_run_measured_from_a_time_counts_the_gpu_time_and_sizes_held_from_then() -> None:
    # Three replicas: one gone before the measured part, one held across it, one added in
    # it and held to the end (at 300 s).
    run = ClusterRun(
        "hand-built",
        OBJECTIVES,
        (
            RequestOutcome(50.0, 10, 5, 0.1, 0.01, 0),
            RequestOutcome(150.0, 10, 5, 0.1, 0.01, 0),
        ),
        gpu_seconds=0.0,
        replicas=((0.0, 2), (90.0, 1), (200.0, 2)),
        prefix_queried=0,
        prefix_hits=0,
        preemptions=0,
        lifetimes=((0.0, 90.0), (0.0, 300.0), (200.0, 300.0)),
    )
    measured = run.measured_from(100.0)
    assert measured.gpu_seconds == pytest.approx(200.0 + 100.0)
    assert [o.arrival_s for o in measured.outcomes] == [150.0]
    assert measured.replicas == ((100.0, 1), (200.0, 2))


def test_least_loaded_routing_keeps_a_replica_from_queueing_while_others_idle() -> None:
    # Near capacity, random picks queue on one replica while another has room; the
    # picker that reads the replicas' loads does not.
    trace = _chat(65.0, 120.0, seed=5)
    spread = _static(trace, 3, routing="random")
    picked = _static(trace, 3, routing="least_loaded")
    assert picked.ttft_percentile(99) < 0.85 * spread.ttft_percentile(99)
    assert picked.attainment() > spread.attainment()
