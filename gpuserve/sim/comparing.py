"""Run the policies side by side on one workload: the set-up the benchmarks share.

``Setup`` is the simulated service and cluster (model, SLO, pods, Prometheus); a run adds
a warm-up at the workload's first-minute rate (excluded from the results), calibrates the
peers' thresholds, plans the oracle, and simulates each policy with the same seed.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from gpuserve.autoscaling.config import SCALE_DOWN_WINDOW_S, PolicyConfig, ServiceProfile
from gpuserve.sim.argtypes import non_negative_int, non_negative_number, positive_number
from gpuserve.sim.config import (
    AcceleratorPool,
    Balancing,
    BatcherConfig,
    QueuePolicy,
    ServiceTimes,
    SimConfig,
)
from gpuserve.sim.lineup import Calibration, PolicyName, calibrate, make_scaler, sim_config_for
from gpuserve.sim.oracle import OracleGoal, OraclePlan, plan_oracle
from gpuserve.sim.results import SimResult
from gpuserve.sim.simulating import simulate
from gpuserve.sim.workload import Workload

DEFAULT_LABEL = "gpuserve (default)"
# What users judge an objective by: the p95 of each 5-minute window.
COMPLIANCE_WINDOW = 300.0
# A warm pool of a fixed size, or "auto": the policy sizes it (scaling.warmPoolMode auto).
WarmPool = int | Literal["auto"]


def add_replay_arguments(parser: argparse.ArgumentParser, *, compress: float) -> None:
    """The flags every trace replay takes (`gpuserve simulate`, the benchmarks)."""
    parser.add_argument(
        "--compress",
        type=positive_number,
        default=compress,
        help=f"time compression (default {compress:g})",
    )
    parser.add_argument(
        "--tokens-per-item",
        type=non_negative_int,
        default=0,
        help="0: one batch item per request; N > 0: ceil(context tokens / N) items",
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_number,
        default=Setup().warmup,
        help="seconds of steady load at the trace's first-minute rate first (not counted; "
        f"default {Setup().warmup:g})",
    )


# The benchmarks' model, exactly as the policy's profile states it (the simulator runs
# these times), and its one GPU kind.
BENCH_MODEL = ServiceProfile(
    time_per_batch=0.060, time_per_item=0.120, max_batch_size=8, max_queue_delay=0.020
)
BENCH_GPU = AcceleratorPool("gpu", cost_per_hour=2.0, cold_start=45.0, warm_start=2.0)


@dataclass(frozen=True, slots=True)
class Setup:
    """The simulated service (one replica = one GPU) and cluster; times in seconds."""

    profile: ServiceProfile = BENCH_MODEL
    gpu: AcceleratorPool = BENCH_GPU
    slo: float = 2.0
    percentile: float = 95.0
    max_replicas: int = 40
    balancing: Balancing = "random"
    scrape: float = 5.0
    oracle: OracleGoal = field(default_factory=OracleGoal)
    warmup: float = 120.0
    queue_timeout: float = 0.0  # the model's queue policy: reject after waiting this long
    scale_down_window: float = SCALE_DOWN_WINDOW_S  # the spec's scaleDownStabilization
    # gpuserve routes around backlogged pods (PolicyConfig.route_around_backlogs)
    route_around: bool = True

    def sim_config(self, seed: int) -> SimConfig:
        p = self.profile
        return SimConfig(
            batcher=BatcherConfig(
                max_batch_size=p.max_batch_size,
                max_queue_delay=p.max_queue_delay,
                default_policy=QueuePolicy(timeout=self.queue_timeout),
            ),
            service=ServiceTimes(per_batch=p.time_per_batch, per_item=p.time_per_item),
            classes=(self.gpu,),
            slo_latency=self.slo,
            slo_quantile=self.percentile / 100.0,
            balancing=self.balancing,
            scrape_interval=self.scrape,
            rate_window=4 * self.scrape,
            seed=seed,
            measure_from=self.warmup,
        )

    def policy(self) -> PolicyConfig:
        """The policy as the operator builds it from a spec with default scaling fields."""
        return PolicyConfig(
            profile=self.profile,
            slo_latency=self.slo,
            slo_quantile=self.percentile / 100.0,
            min_replicas=1,
            max_replicas=self.max_replicas,
            cold_start=self.gpu.cold_start,
            warm_start=self.gpu.warm_start,
            max_sample_age=max(30.0, 3 * self.scrape),
            rate_window=4 * self.scrape,
            scale_down_window=self.scale_down_window,
            route_around_backlogs=self.route_around,
        )


@dataclass(frozen=True, slots=True)
class Contender:
    """One row: a policy, and for gpuserve a warm pool (a size, or "auto": sized by the
    policy) and a planning percentile (0 = the default)."""

    label: str
    name: PolicyName
    warm_pool: WarmPool = 0
    planning: float = 0.0
    # static only: sized on the oracle plan's peak over this span of the run (seconds;
    # None: the whole run), e.g. a history the service served before the measured part.
    sized_on: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Run:
    label: str
    result: SimResult
    seconds: float


@dataclass(frozen=True, slots=True)
class Prepared:
    """A workload with its warm-up, the peers' calibration and the oracle's plan."""

    workload: Workload
    config: SimConfig
    calibration: Calibration
    plan: OraclePlan
    seconds: float


def prepare(
    setup: Setup,
    workload: Workload,
    seed: int,
    *,
    warmup_span: float = 60.0,
    history: Workload | None = None,
) -> Prepared:
    """``warmup_span``: the warm-up runs at the workload's mean rate over its first
    ``warmup_span`` seconds (a trace's first minute, compressed). With a ``history``, the
    warm-up is its first ``setup.warmup`` seconds instead: traffic of the same kind the
    service served before (every policy runs through it; nothing in it is measured)."""
    started = time.perf_counter()
    if history is not None:
        warmed = workload.after(history, seconds=setup.warmup)
    else:
        first_minute = workload.rate_between(0.0, warmup_span)
        warmed = workload.with_warmup(seconds=setup.warmup, rate=first_minute, seed=seed)
    config = setup.sim_config(seed)
    mean_items = sum(warmed.items) / max(1, len(warmed))
    calibration = calibrate(config=config, items=round(mean_items))
    plan = plan_oracle(
        config=config, workload=warmed, goal=setup.oracle, max_replicas=setup.max_replicas
    )
    return Prepared(warmed, config, calibration, plan, time.perf_counter() - started)


def run_contenders(setup: Setup, prepared: Prepared, contenders: list[Contender]) -> list[Run]:
    """Every contender on the prepared workload, each starting at the oracle's first size."""
    policy = setup.policy()
    runs = []
    for c in contenders:
        tuned = replace(policy, planning_quantile=c.planning / 100) if c.planning else policy
        auto = c.warm_pool == "auto"
        tuned = replace(tuned, warm_pool_auto=True) if auto else tuned
        plan = prepared.plan.within(*c.sized_on) if c.sized_on else prepared.plan
        scaler = make_scaler(
            c.name,
            policy=tuned,
            calibration=prepared.calibration,
            plan=plan,
            scrape_interval=prepared.config.scrape_interval,
        )
        cfg = replace(
            sim_config_for(c.name, prepared.config, 0 if auto else int(c.warm_pool)),
            initial_replicas=prepared.plan.replicas[0],
        )
        t0 = time.perf_counter()
        result = simulate(config=cfg, workload=prepared.workload, scaler=scaler)
        runs.append(Run(c.label, result, time.perf_counter() - t0))
    return runs


def contenders(
    policies: list[PolicyName], warm_pools: list[WarmPool], plannings: list[float]
) -> list[Contender]:
    """gpuserve's rows first (the default, warm pool 0 at the default planning, leads),
    then the peers in the order given."""
    rows: list[Contender] = []
    if "gpuserve" in policies:
        for planning in plannings:
            for warm in warm_pools:
                default = warm == 0 and not planning
                label = DEFAULT_LABEL if default else f"gpuserve (warm {warm}"
                if not default:
                    label += f", plan p{planning:g})" if planning else ")"
                rows.append(Contender(label, "gpuserve", warm, planning))
        rows.sort(key=lambda c: c.label != DEFAULT_LABEL)
    rows += [Contender(name, name) for name in policies if name != "gpuserve"]
    return rows
