"""What holding the pods the BurstsCovered condition names does, on the suite's generated
workloads after 30 minutes of history.

    .venv/bin/python bench/burst_advice.py [--workloads bursty ...] [--loads 1 2 4]
        [--seeds N] [--cache out/suite-cache]

For each seed, gpuserve's default policy serves the history and the measured half hour as
in ``bench/suite.py --history``. Where the condition it would have written when the
history ended says short bursts outran the ready pods (``BurstsCovered=False``), it names
the pods that serve the tallest of them; a user who holds that many sets
``scaling.minReplicas`` to it: the policy with that minReplicas over the same run, and
static at that size beside it. Where the condition is True (or the pods are more than
maxReplicas), those rows are gpuserve's own run. Beside them: static sized on the
history's peak (a capacity plan from past traffic) and on the measured part's (foresight).
Totals over the seeds; the sizes per seed. ``--cache`` shares bench/suite.py's prepared
workloads (the same folder for the same tree).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from pickle_cache import code_scoped, pickled  # noqa: E402

from gpuserve.sim.argtypes import positive_int  # noqa: E402
from gpuserve.sim.baselines import StaticPeak  # noqa: E402
from gpuserve.sim.comparing import Contender, Prepared, Setup, prepare, run_contenders  # noqa: E402
from gpuserve.sim.lineup import sim_config_for  # noqa: E402
from gpuserve.sim.results import SimResult  # noqa: E402
from gpuserve.sim.scalers import GpuserveScaler  # noqa: E402
from gpuserve.sim.simulating import simulate  # noqa: E402
from gpuserve.sim.suite import DURATION, SUITE, TRACE_FILES, SuiteWorkload, Traces  # noqa: E402
from gpuserve.sim.workload import parse_trace  # noqa: E402

FOLLOWED = "gpuserve, minReplicas at the pods named"
ADVICE = "static at the pods named"


@dataclass
class Total:
    requests: int = 0
    misses: int = 0
    gpu_hours: float = 0.0

    def add(self, result: SimResult) -> None:
        self.requests += len(result.latencies)
        self.misses += result.misses()
        self.gpu_hours += result.gpu_hours

    @property
    def attainment(self) -> float:
        return 1.0 - self.misses / self.requests if self.requests else 1.0


def gpuserve_run(
    setup: Setup, prepared: Prepared, min_replicas: int = 1
) -> tuple[SimResult, GpuserveScaler]:
    """gpuserve's default policy (with ``min_replicas``) over the prepared run."""
    scaler = GpuserveScaler(
        config=replace(setup.policy(), min_replicas=min_replicas), keep_decisions=True
    )
    config = replace(
        sim_config_for("gpuserve", prepared.config, 0),
        initial_replicas=max(min_replicas, prepared.plan.replicas[0]),
    )
    return simulate(config=config, workload=prepared.workload, scaler=scaler), scaler


def named(setup: Setup, scaler: GpuserveScaler) -> int | None:
    """The pods the BurstsCovered condition names when the history ends (None: it is
    True, or they are more than maxReplicas)."""
    reports = [d.outran for t, d in scaler.decisions if t <= setup.warmup and d.outran]
    if not reports or not reports[-1].bursts:
        return None
    needed = reports[-1].needed
    return needed if needed <= setup.policy().max_replicas else None


def prepared_run(
    setup: Setup, spec: SuiteWorkload, traces: Traces, load: float, seed: int, cache: Path | None
) -> Prepared:
    """The workload after its history, prepared as bench/suite.py prepares it (and from the
    same cache file)."""
    key = f"{spec.name}-{load:g}x-seed{seed}-history"
    return pickled(
        cache / f"{key}.prepared.pickle" if cache else None,
        lambda: prepare(
            setup, spec.build(traces, load, seed), seed, history=spec.yesterday(traces, load, seed)
        ),
    )


def static_at(prepared: Prepared, replicas: int) -> SimResult:
    config = replace(sim_config_for("static", prepared.config, 0), initial_replicas=replicas)
    return simulate(config=config, workload=prepared.workload, scaler=StaticPeak(replicas))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    generated = [w.name for w in SUITE if w.has_history]
    p.add_argument("--workloads", nargs="+", default=["bursty"], choices=generated)
    p.add_argument("--loads", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    p.add_argument("--seeds", type=positive_int, default=10)
    p.add_argument("--cache", type=Path, default=None)
    args = p.parse_args(argv)
    args.cache = code_scoped(args.cache)
    if args.cache is not None:
        print(f"cache: {args.cache}", file=sys.stderr)
    traces = {f: parse_trace((REPO / "traces" / f).read_text().splitlines()) for f in TRACE_FILES}
    setup = replace(Setup(), warmup=DURATION)
    started = time.perf_counter()
    for spec in (w for w in SUITE if w.name in args.workloads):
        for load in args.loads:
            names = ("gpuserve (default)", FOLLOWED, ADVICE, "static (yesterday's peak)", "static")
            totals = {name: Total() for name in names}
            sizes: list[str] = []
            for seed in range(1, args.seeds + 1):
                prepared = prepared_run(setup, spec, traces, load, seed, args.cache)
                ours, scaler = gpuserve_run(setup, prepared)
                size = named(setup, scaler)
                totals["gpuserve (default)"].add(ours)
                totals[FOLLOWED].add(gpuserve_run(setup, prepared, size)[0] if size else ours)
                totals[ADVICE].add(static_at(prepared, size) if size else ours)
                sizes.append(str(size) if size else "-")
                peers = [
                    Contender("static (yesterday's peak)", "static", sized_on=(0.0, DURATION)),
                    Contender("static", "static", sized_on=(DURATION, float("inf"))),
                ]
                for run in run_contenders(setup, prepared, peers):
                    totals[run.label].add(run.result)
            print(
                f"\n### {spec.name} at {load:g}x after {DURATION / 60:g} minutes of history, "
                f"{args.seeds} seed(s)\n\npods named per seed: {', '.join(sizes)} "
                "(-: BurstsCovered=True or beyond maxReplicas: gpuserve's own run)\n"
            )
            print("| policy | attainment | over SLO | GPU-hours per seed |")
            print("|---|---|---|---|")
            for name, t in totals.items():
                print(
                    f"| {name} | {t.attainment:.3%} | {t.misses} | "
                    f"{t.gpu_hours / args.seeds:.3f} |"
                )
            sys.stdout.flush()
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
