"""Pods, metrics and scalers in the simulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from gpuserve.autoscaling import ClassAction, PolicyConfig, ServiceProfile
from gpuserve.sim.baselines import HpaBehaviour, HpaQueueDepth, KedaPrometheus, KnativeKpa
from gpuserve.sim.config import AcceleratorPool, BatcherConfig, ServiceTimes, SimConfig
from gpuserve.sim.llm.traces import azure_conversation
from gpuserve.sim.oracle import OracleGoal, OracleScaler, plan_oracle
from gpuserve.sim.results import TimelinePoint
from gpuserve.sim.scalers import GpuserveScaler, ScaleOrder, ScalerView
from gpuserve.sim.simulating import Simulation, simulate
from gpuserve.sim.workload import (
    Workload,
    parse_azure_trace,
    poisson_workload,
    rate_profile_workload,
    workload_from_trace,
)

PROFILE = ServiceProfile(
    time_per_batch=0.06, time_per_item=0.12, max_batch_size=8, max_queue_delay=0.02
)


def policy(**kw: object) -> PolicyConfig:
    base = PolicyConfig(profile=PROFILE, slo_latency=2.0, min_replicas=1, max_replicas=20)
    return replace(base, **kw)  # type: ignore[arg-type]


def config(**kw: object) -> SimConfig:
    base = SimConfig(
        batcher=BatcherConfig(max_batch_size=8, max_queue_delay=0.02),
        service=ServiceTimes(per_batch=0.06, per_item=0.12),
        classes=(AcceleratorPool("gpu", cold_start=30.0, warm_start=2.0, cost_per_hour=3.6),),
        slo_latency=2.0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@dataclass
class Scripted:
    """Applies fixed orders at given times and records what it saw."""

    orders: dict[float, ScaleOrder]
    name: str = "scripted"
    interval: float = 1.0
    offset: float = 0.0
    seen: list[ScalerView] = field(default_factory=list)

    def step(self, view: ScalerView) -> ScaleOrder:
        self.seen.append(view)
        return self.orders.get(round(view.now, 3), ScaleOrder())


def test_new_pods_serve_only_after_the_cold_start() -> None:
    scaler = Scripted({5.0: ScaleOrder((ClassAction("gpu", start=2),))})
    result = simulate(
        config=config(initial_replicas=1),
        workload=poisson_workload(rate=1.0, duration=60, seed=3),
        scaler=scaler,
    )
    at = {round(p.at): p for p in result.timeline}
    assert at[30].serving_ready == 1 and at[30].committed == 3
    assert at[40].serving_ready == 3
    views = {round(v.now, 3): v for v in scaler.seen}
    assert views[10.0].pools.classes[0].starting == pytest.approx((5.0, 5.0))


def with_one_warm_pod(orders: dict[float, ScaleOrder], duration: float) -> dict[int, TimelinePoint]:
    """The timeline, by whole second, of one serving and one warm pod given ``orders``."""
    result = simulate(
        config=config(initial_replicas=1, warm_pool=1),
        workload=poisson_workload(rate=1.0, duration=duration, seed=3),
        scaler=Scripted(orders),
    )
    return {round(p.at): p for p in result.timeline}


def test_warm_pods_promote_in_seconds_and_the_pool_refills() -> None:
    at = with_one_warm_pod({5.0: ScaleOrder((ClassAction("gpu", promote_warm=1),))}, 60)
    assert at[10].serving_ready == 2
    assert at[10].warm == 1  # a replacement is starting
    assert at[10].pods == 3


def test_the_warm_pool_follows_the_size_the_policy_asks_for() -> None:
    at = with_one_warm_pod({5.0: ScaleOrder(warm_pool=2), 60.0: ScaleOrder(warm_pool=0)}, 90)
    assert at[0].warm == 1
    assert at[10].warm == 2 and at[10].pods == 3  # one more standby pod (starting)
    assert at[70].warm == 0 and at[70].pods == 1
    assert at[70].serving_ready == 1  # standby pods go, serving ones stay


def test_gpu_time_and_cost_count_warm_and_starting_pods() -> None:
    workload = Workload(arrivals=(0.0, 100.0), items=(1, 1))
    result = simulate(
        config=config(initial_replicas=2, warm_pool=1), workload=workload, scaler=Scripted({})
    )
    assert result.gpu_seconds == pytest.approx(3 * result.duration, rel=1e-6)
    assert result.cost == pytest.approx(3 * result.duration / 3600 * 3.6, rel=1e-6)


def test_removed_pods_drain_their_queue() -> None:
    workload = Workload(arrivals=tuple(0.001 * k for k in range(40)), items=(1,) * 40)
    scaler = Scripted({0.5: ScaleOrder((ClassAction("gpu", remove=1),))}, offset=0.5)
    result = simulate(
        config=config(initial_replicas=2, balancing="round_robin"),
        workload=workload,
        scaler=scaler,
    )
    assert result.rejected == 0
    assert all(lat < float("inf") for lat in result.latencies)


def test_round_robin_spreads_requests_evenly() -> None:
    sim = Simulation(
        config=config(initial_replicas=4, balancing="round_robin"),
        workload=poisson_workload(rate=20.0, duration=20, seed=1),
        scaler=Scripted({}),
    )
    sim.run()
    served = [p.success for p in sim.pods]
    assert max(served) - min(served) <= 1


def test_metrics_show_the_offered_rate_and_nan_queue_time_when_idle() -> None:
    busy_part = rate_profile_workload(rates=[(60.0, 5.0)], seed=2)
    workload = Workload(arrivals=(*busy_part.arrivals, 130.0), items=(1,) * (len(busy_part) + 1))
    scaler = Scripted({})
    sim = Simulation(config=config(initial_replicas=3), workload=workload, scaler=scaler)
    sim.run()
    busy = sim.store.history(60.0, 30.0).samples
    assert sum(s.get("arrival_rate") or 0 for s in busy) / len(busy) == pytest.approx(5.0, rel=0.3)
    idle = sim.store.history(119.0, 10.0).latest
    assert idle is not None
    assert idle.get("avg_queue_time") is None  # 0/0 over an idle window
    assert idle.get("success_rate") == 0.0


def test_scrape_outage_makes_the_policy_hold() -> None:
    scaler = GpuserveScaler(config=policy(max_replicas=10), keep_decisions=True)
    simulate(
        config=config(initial_replicas=6, scrape_outages=((100.0, 200.0),)),
        workload=poisson_workload(rate=1.0, duration=240, seed=5),
        scaler=scaler,
    )
    during = [d for t, d in scaler.decisions if 140.0 <= t < 200.0]
    assert during and all(d.mode == "hold" and "stale" in d.reason for d in during)
    assert all(d.desired_replicas >= d.current_replicas for d in during)


def test_gpuserve_policy_follows_a_step_in_load() -> None:
    # Without burst memory: the step's pods go once the load is back down.
    workload = rate_profile_workload(rates=[(120.0, 5.0), (240.0, 25.0), (240.0, 5.0)], seed=4)
    result = simulate(
        config=config(initial_replicas=2),
        workload=workload,
        scaler=GpuserveScaler(config=policy(cold_start=30.0, burst_memory=0.0)),
    )
    at = {round(p.at): p for p in result.timeline}
    assert at[100].committed <= 2
    assert at[340].serving_ready >= 5
    assert at[595].committed <= 3
    assert result.attainment(start=180.0, end=360.0) > 0.95


def test_hpa_behaviour_follows_the_documented_defaults() -> None:
    hpa = HpaBehaviour(min_replicas=1, max_replicas=50)
    # Scale-up: at most max(4 pods, 100%) per sync.
    assert hpa.next_size(now=0.0, current=2, ready=2, usage_ratio=10.0) == 6
    assert hpa.next_size(now=15.0, current=6, ready=6, usage_ratio=10.0) == 12
    # Within the 10% tolerance nothing moves.
    assert hpa.next_size(now=30.0, current=12, ready=12, usage_ratio=1.05) == 12
    # Scale-down waits for the highest recommendation of the last 300 s.
    assert hpa.next_size(now=100.0, current=12, ready=12, usage_ratio=0.1) == 12
    assert hpa.next_size(now=310.0, current=12, ready=12, usage_ratio=0.1) == 12
    assert hpa.next_size(now=420.0, current=12, ready=12, usage_ratio=0.1) == 2
    # No metric: no change.
    assert hpa.next_size(now=430.0, current=2, ready=2, usage_ratio=None) == 2


def test_baselines_scale_with_load_in_the_simulator() -> None:
    workload = rate_profile_workload(rates=[(200.0, 20.0), (250.0, 2.0)], seed=4)
    for scaler in (
        HpaQueueDepth(target_per_pod=0.5, min_replicas=1, max_replicas=20),
        KedaPrometheus(threshold=4.0, min_replicas=1, max_replicas=20),
        KnativeKpa(target_concurrency=3.0, min_replicas=1, max_replicas=20),
    ):
        result = simulate(config=config(initial_replicas=2), workload=workload, scaler=scaler)
        assert max(p.committed for p in result.timeline) >= 4, scaler.name


def test_kpa_panics_on_a_burst_and_never_scales_down_in_panic() -> None:
    workload = rate_profile_workload(rates=[(90.0, 2.0), (30.0, 30.0), (60.0, 2.0)], seed=4)
    kpa = KnativeKpa(target_concurrency=3.0, min_replicas=1, max_replicas=30)
    result = simulate(config=config(initial_replicas=2), workload=workload, scaler=kpa)
    sizes = [p.committed for p in result.timeline if 95 <= p.at <= 150]
    assert max(sizes) > 2
    peak_at = next(p.at for p in result.timeline if p.committed == max(sizes))
    after = [p.committed for p in result.timeline if peak_at <= p.at <= peak_at + 50]
    assert min(after) == max(sizes)  # held for the 60 s panic period


def test_oracle_plan_meets_its_target_with_the_fewest_replicas() -> None:
    workload = rate_profile_workload(rates=[(60.0, 4.0), (60.0, 20.0), (60.0, 8.0)], seed=6)
    plan = plan_oracle(config=config(), workload=workload, goal=OracleGoal(30.0, 0.99))
    assert plan.replicas[2] > plan.replicas[0]
    result = simulate(
        config=config(initial_replicas=plan.replicas[0]),
        workload=workload,
        scaler=OracleScaler(plan),
    )
    assert result.attainment() >= 0.99
    fewer = replace(plan, replicas=tuple(max(1, n - 1) for n in plan.replicas))
    worse = simulate(
        config=config(initial_replicas=fewer.replicas[0]),
        workload=workload,
        scaler=OracleScaler(fewer),
    )
    assert worse.attainment() < result.attainment()
    # The count behind attainment: misses and attainment describe the same requests.
    for run in (result, worse):
        share = 1 - run.misses() / len(run.latencies)
        assert share == pytest.approx(run.attainment())
    assert worse.misses() > result.misses()


def test_trace_rows_become_requests_with_compressed_time() -> None:
    lines = [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.6805900,374,44",
        "2023-11-16 18:15:50.9951690,1396,109",
    ]
    rows = parse_azure_trace(lines)
    assert rows[1].at == pytest.approx(4.314579, abs=1e-5)
    workload = workload_from_trace(rows, compress=2.0, tokens_per_item=512, max_items=8)
    assert workload.arrivals[1] == pytest.approx(4.314579 / 2, abs=1e-5)
    assert workload.items == (1, 3)


HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_azure_columns_are_found_by_name_in_any_order_case_and_quoting() -> None:
    # A spreadsheet's export: columns reordered among others, names in another case,
    # cells quoted, another separator. Each is read by its name (the old reader took the
    # first three columns by position and read prompts as outputs when two were swapped).
    expected = [(0.0, 374, 44), (1.0, 1396, 109)]
    for lines in (
        [
            "TIMESTAMP,GeneratedTokens,ContextTokens",
            "2023-11-16 18:15:46,44,374",
            "2023-11-16 18:15:47,109,1396",
        ],
        [
            '"Id","generated_tokens","timestamp","Model","context_tokens"',
            '"a","44","2023-11-16 18:15:46","m","374"',
            '"b","109","2023-11-16 18:15:47","m","1396"',
        ],
        ["TIMESTAMP;ContextTokens;GeneratedTokens", "10;374;44", "11;1396;109"],
        ["TIMESTAMP\tContextTokens\tGeneratedTokens", "10\t374\t44", "11\t1396\t109"],
    ):
        rows = parse_azure_trace(lines)
        assert [(r.at, r.context_tokens, r.generated_tokens) for r in rows] == expected, lines


def test_an_azure_header_without_a_column_names_what_is_missing() -> None:
    with pytest.raises(ValueError) as refused:
        parse_azure_trace(["TIMESTAMP,Tokens,GeneratedTokens", "1,2,3"])
    assert str(refused.value) == (
        "line 1: header: no column ContextTokens in 'TIMESTAMP,Tokens,GeneratedTokens' "
        "(expected TIMESTAMP, ContextTokens, GeneratedTokens, in any order)"
    )


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            ["2023-11-16 18:15:46,374,44", "2023-11-16 18:15:47,abc,44"],
            "line 3: ContextTokens: 'abc' is not a whole number",
        ),
        (["2023-11-16 18:15:46,374,4.5"], "line 2: GeneratedTokens: '4.5' is not a whole number"),
        (
            ["1.0,374,44", "2.0"],
            "line 3: expected 3 columns (GeneratedTokens is column 3 of the header), got 1",
        ),
        (["time,374,44"], "line 2: TIMESTAMP: 'time' is neither a date-time nor seconds"),
        (["nan,374,44"], "line 2: TIMESTAMP: 'nan' is neither a date-time nor seconds"),
        (["1.0,374,44", "", "", "2.0,-3,44"], "line 5: ContextTokens: -3 is negative"),
        (["1.0,374,-1"], "line 2: GeneratedTokens: -1 is negative"),
        (
            ["2023-11-16 18:15:46,374,44", "12.5,374,44"],
            "line 3: TIMESTAMP: seconds where line 2 has a date-time; use one kind for every row",
        ),
        (
            # Read as UTC, the row without an offset would land 8 hours from the others.
            ["2024-05-10 00:00:00-08:00,1,1", "2024-05-10 00:00:01,1,1"],
            "line 3: TIMESTAMP: no UTC offset where line 2 has one; give every row an offset "
            "or none",
        ),
    ],
)
@pytest.mark.parametrize("parser", [parse_azure_trace, azure_conversation])
def test_a_bad_azure_row_is_named_by_line_and_column(
    parser: Callable[[list[str]], object], rows: list[str], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        parser([HEADER, *rows])
    assert str(refused.value) == message


def test_the_clock_starts_at_the_earliest_row_even_out_of_order() -> None:
    lines = [
        HEADER,
        "2023-11-16 18:15:50,100,1",
        "2023-11-16 18:15:47,200,2",  # earlier than the first row
        "2023-11-16 18:15:55,300,3",
    ]
    rows = parse_azure_trace(lines)
    assert [(r.at, r.context_tokens) for r in rows] == [(0.0, 200), (3.0, 100), (8.0, 300)]
    workload = workload_from_trace(rows)
    assert len(workload.window(0.0, 60.0)) == 3  # none before 0, so none lost
    llm = azure_conversation(lines)
    assert [(r.arrival_s, r.prompt_tokens) for r in llm.requests] == [
        (0.0, 200),
        (3.0, 100),
        (8.0, 300),
    ]


def test_seconds_and_an_utc_offset_are_read_as_timestamps() -> None:
    seconds = parse_azure_trace([HEADER, "", "10.5,1,0", "12,2,0", ""])
    assert [(r.at, r.generated_tokens) for r in seconds] == [(0.0, 0), (1.5, 0)]
    offset = parse_azure_trace(
        [HEADER, "2023-11-16 18:15:46+00:00,1,1", "2023-11-16T19:15:47.5+01:00,1,1"]
    )
    assert [r.at for r in offset] == [0.0, 1.5]


def test_both_simulators_read_the_shipped_azure_trace_alike() -> None:
    # One reader: same clock (exact microseconds), same tokens on both paths.
    lines = (REPO_ROOT / "traces" / "azure-llm-conv-2023.csv").read_text().splitlines()
    requests = sorted(
        (r.at, max(1, r.context_tokens), max(1, r.generated_tokens))
        for r in parse_azure_trace(lines)
    )
    tokens = azure_conversation(lines).requests
    assert requests == [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in tokens]
    assert len(requests) == len(lines) - 1


def test_burst_memory_keeps_headroom_for_the_next_burst() -> None:
    """Bursts shorter than a cold start cannot be chased; the policy remembers the surge
    it measured and keeps capacity for it, so the second burst meets the objective."""
    workload = rate_profile_workload(
        rates=[(180.0, 3.0), (40.0, 30.0), (300.0, 3.0), (40.0, 30.0), (120.0, 3.0)], seed=6
    )
    second = (520.0, 580.0)

    def run(memory: float) -> tuple[float, float]:  # attainment in the second burst, GPU-h
        result = simulate(
            config=config(initial_replicas=1),
            workload=workload,
            scaler=GpuserveScaler(config=policy(cold_start=45.0, burst_memory=memory)),
        )
        return result.attainment(*second), result.gpu_hours

    remembered, _ = run(1800.0)
    forgotten, _ = run(0.0)
    assert remembered > 0.99 > forgotten


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # A comma inside a quoted name: the separator is the one all three names are under.
        (['TIMESTAMP;ContextTokens;GeneratedTokens;"Model, v"', "1;374;44;x"], (374, 44)),
        # A space after each separator, quoted cells.
        (['"TIMESTAMP", "ContextTokens", "GeneratedTokens"', '1, "374", 44'], (374, 44)),
    ],
)
def test_the_separator_is_the_one_the_names_are_found_under(
    lines: list[str], expected: tuple[int, int]
) -> None:
    (row,) = parse_azure_trace(lines)
    assert (row.context_tokens, row.generated_tokens) == expected


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [HEADER + ",context_tokens", "1,2,3,4"],
            "line 1: header: column ContextTokens given twice",
        ),
        ([HEADER, "1," + "9" * 200_000 + ",3"], "line 2: field larger than field limit"),
    ],
)
def test_a_header_naming_a_column_twice_or_an_oversized_cell_is_refused(
    lines: list[str], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        parse_azure_trace(lines)
    assert str(refused.value).startswith(message)
