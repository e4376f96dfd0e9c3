"""How gpuserve prices an LLM service's engines from what its replicas measured, and why so
(``gpuserve.llm.calibrating``).

A spec states the model; the operator derives its engine's time costs from datasheets,
and fits one factor on them from the replicas' mean time per output token. For each
workload, on engines as modelled and on engines 1.5x slower than gpuserve is told, this
prints the spread of one window's fits (tenth, fiftieth and ninetieth percentile over the
evaluations, on the 60-s and on the 15-s window) and gpuserve's rule under three ways of
turning them into a price:

- ``unpriced``: no factor (how the simulator ran the rule until 2026-12-07);
- ``each minute``: each evaluation at its own 60-s window's fit (the operator until
  2026-12-07);
- ``guarded``: the same, but a window in which requests waited keeps the factor last
  fitted (the operator of a5a1a0b);
- ``shipped``: ``decide_priced`` as the operator calls it: guarded, an uncontended
  window's fit steadied by those kept, one a minute, at like loads, the floor on the
  prompts' costs, and (since 2026-12-07, night) the mix pooled over ten minutes from a
  run's tenth minute on (``gpuserve.llm.mixing``; the other pricings size for the 60-s
  window's mix).

An engine speed is one factor on every time cost, or ``F:W``: the fixed cost per step
times F and every other cost times W (an engine whose costs are off by different
factors, which one fitted factor cannot describe).

Within both objectives, % (worst seed), on GPU-hours and their ratio to the oracle's.
The workloads and engines are those of ``bench/llm_capacity.py``.

    .venv/bin/python bench/llm_time_scale.py --seeds 3 --minutes 20
    .venv/bin/python bench/llm_time_scale.py --seeds 3 --minutes 20 --engine-scales 1 \
        --only "diurnal 16/s,diurnal 40/s,drift 16/s,drift 40/s,periodic 16/s,periodic 40/s"
    .venv/bin/python bench/llm_time_scale.py --seeds 3 --minutes 20 --engine-scales 1.2:2.5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_capacity import Workload, workloads

from gpuserve.autoscaling.config import SCALE_DOWN_WINDOW_S
from gpuserve.autoscaling.decision import PolicyMemory
from gpuserve.llm.calibrating import decide_priced, fit_or_known, fitted_scale, scaled
from gpuserve.llm.deciding import LLMPolicy, decide_llm
from gpuserve.llm.params import EngineParams
from gpuserve.sim.argtypes import positive_int
from gpuserve.sim.llm.cluster import (
    ClusterConfig,
    ClusterScaler,
    ClusterView,
    simulate_cluster,
)
from gpuserve.sim.llm.oracle import plan_oracle
from gpuserve.sim.llm.scalers import CLASS, pool_of, pooled_window, window

PRICINGS = ("unpriced", "each minute", "guarded", "shipped")
WORKLOADS = ("azure-conv x2", "azure-conv x4", "mooncake-conv x1", "bursty 8/s")


@dataclass
class Priced(ClusterScaler):
    """gpuserve's LLM rule with its engines priced one of ``PRICINGS`` ways; every
    evaluation's fits on both windows are kept for the spread."""

    policy: LLMPolicy
    pricing: str
    name: str = "gpuserve"
    interval_s: float = 5.0
    offset_s: float = 0.5
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    fits: dict[str, list[float]] = field(default_factory=lambda: {"60 s": [], "15 s": []})

    def target(self, view: ClusterView) -> int | None:
        memory = self.memory
        q = self.policy.objectives.quantile
        stable, recent = window(view, 60.0, q), window(view, 15.0, q)
        replicas = view.snapshots[-1].replicas if view.snapshots else 0
        for name, seen in (("60 s", stable), ("15 s", recent)):
            fit = fitted_scale(self.policy, seen, replicas, CLASS)
            if fit is not None:
                self.fits[name].append(fit)
        pools = pool_of(view, self.policy)
        if self.pricing == "shipped":
            decision, _ = decide_priced(
                policy=self.policy,
                stable=stable,
                recent=recent,
                pools=pools,
                now=view.now,
                memory=memory,
                replicas=replicas,
                pooled=pooled_window(view, q),
            )
        else:
            factor = None
            if self.pricing == "each minute":
                factor = fitted_scale(self.policy, stable, replicas, CLASS)
            elif self.pricing == "guarded":
                factor = fit_or_known(self.policy, stable, replicas, CLASS, memory.time_scale)
            decision = decide_llm(
                policy=scaled(self.policy, factor),
                stable=stable,
                recent=recent,
                pools=pools,
                now=view.now,
                memory=replace(memory, time_scale=factor),
            )
        self.memory = decision.memory
        return decision.desired_replicas


def _spread(values: list[float]) -> str:
    if len(values) < 10:
        return "-"
    cuts = statistics.quantiles(values, n=10)
    return f"{cuts[0]:.2f} / {statistics.median(values):.2f} / {cuts[-1]:.2f}"


def _factors(speed: str) -> tuple[float, float]:
    """(on the fixed cost per step, on the others) of one ``--engine-scales`` entry: ``F``
    on every time cost, or ``F:W``."""
    fixed, _, work = speed.partition(":")
    return float(fixed), float(work or fixed)


def engine_at(params: EngineParams, speed: str) -> EngineParams:
    """``params`` at one ``--engine-scales`` entry."""
    fixed, work = _factors(speed)
    return replace(params.slower(work), decode_base_s=params.decode_base_s * fixed)


def table(workload: Workload, engine_scale: str, seeds: int) -> None:
    served = engine_at(workload.params, engine_scale)
    rows: dict[str, list[tuple[float, float]]] = {p: [] for p in PRICINGS}
    oracle_hours: list[float] = []
    fits: dict[str, list[float]] = {"60 s": [], "15 s": []}
    for seed in range(seeds):
        trace = workload.trace(seed, 0.0)
        config = ClusterConfig(served, workload.objectives, seed=seed)
        planned = plan_oracle(config, trace, window_s=60.0, target=config.objectives.quantile)
        oracle_hours.append(planned.run.gpu_hours)
        policy = LLMPolicy(
            workload.objectives,
            workload.params,
            max_replicas=2 * planned.peak,
            startup_s=config.startup_s,
            scale_down_window_s=SCALE_DOWN_WINDOW_S,
        )
        start = replace(config, initial_replicas=planned.scaler.plan[0])
        for pricing in PRICINGS:
            scaler = Priced(policy, pricing)
            run = simulate_cluster(start, trace, scaler)
            rows[pricing].append((run.attainment(), run.gpu_hours))
            if pricing == "shipped":
                for name, values in scaler.fits.items():
                    fits[name].extend(values)
    oracle = sum(oracle_hours) / seeds
    print(
        f"\n### {workload.name} {workload.load}, engines {_speed(engine_scale)}; {seeds} seed(s)\n"
    )
    print(
        f"one window's fit, p10 / p50 / p90: 60 s {_spread(fits['60 s'])}; "
        f"15 s {_spread(fits['15 s'])}\n"
    )
    print("| pricing | both % (worst seed) | GPU-h | x oracle |")
    print("|---|---|---|---|")
    for pricing, runs in rows.items():
        both = [a for a, _ in runs]
        hours = sum(h for _, h in runs) / seeds
        print(
            f"| {pricing} | {100 * sum(both) / seeds:.2f} ({100 * min(both):.2f}) "
            f"| {hours:.3f} | {hours / oracle:.2f} |"
        )
    print(f"| oracle | | {oracle:.3f} | 1.00 |")
    sys.stdout.flush()


def _speed(speed: str) -> str:
    fixed, work = _factors(speed)
    if fixed == work:
        return f"{fixed:g}x the modelled time costs"
    return f"{fixed:g}x the modelled fixed cost per step, {work:g}x the others"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=positive_int, default=3)
    p.add_argument("--minutes", type=float, default=20.0, help="clip every trace")
    p.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated 'name load'")
    p.add_argument(
        "--engine-scales",
        default="1,1.5",
        help="comma-separated factors on the modelled time costs the engines run at "
        "(F, or F:W for the fixed cost per step and the others)",
    )
    args = p.parse_args(argv)
    chosen = [w for w in args.only.split(",") if w]
    began = time.perf_counter()
    for workload in workloads(args.minutes):
        if f"{workload.name} {workload.load}" in chosen:
            for engine_scale in (x for x in args.engine_scales.split(",") if x):
                table(workload, engine_scale, args.seeds)
    print(f"\nwall time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
