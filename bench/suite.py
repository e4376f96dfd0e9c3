"""Every policy on every workload of the suite, at 1x, 2x and 4x load.

    .venv/bin/python bench/suite.py [--seeds N] [--workloads bursty flash-4x ...] [--loads 1 2]

Prints one table per workload and load (totals over the seeds), then a summary: the
default policy's attainment, 5-minute window compliance and GPU-hours over the oracle's,
and which policies dominate it (better on one axis, no worse on the other).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuserve.sim.comparing import (  # noqa: E402
    DEFAULT_LABEL,
    Run,
    Setup,
    contenders,
    prepare,
    run_contenders,
)
from gpuserve.sim.generators import bin_stats  # noqa: E402
from gpuserve.sim.lineup import POLICIES  # noqa: E402
from gpuserve.sim.suite import LOADS, SUITE, TRACE_FILES  # noqa: E402
from gpuserve.sim.workload import parse_trace  # noqa: E402

WINDOW = 300.0  # users judge a p95 over 5 minutes
# "No worse" allows for ties a run cannot resolve: 0.01 percentage point of attainment
# and 1% of GPU-hours.
ATTAINMENT_TIE = 0.0001
GPU_TIE = 0.01


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workloads", nargs="+", default=[w.name for w in SUITE])
    p.add_argument("--loads", type=float, nargs="+", default=list(LOADS))
    p.add_argument("--warm-pool", type=int, nargs="+", default=[0])
    return p.parse_args(argv)


class Totals:
    """One policy's results added up over seeds."""

    def __init__(self) -> None:
        self.requests = self.misses = 0
        self.windows_ok = self.windows = 0
        self.gpu_hours = self.oracle_hours = 0.0

    def add(self, run: Run, oracle_hours: float) -> None:
        r = run.result
        self.requests += len(r.latencies)
        self.misses += r.misses()
        count = _windows(r.arrivals, WINDOW)
        self.windows += count
        self.windows_ok += round(r.window_attainment(WINDOW) * count)
        self.gpu_hours += r.gpu_hours
        self.oracle_hours += oracle_hours

    @property
    def attainment(self) -> float:
        return 1.0 - self.misses / self.requests if self.requests else 1.0

    @property
    def window_share(self) -> float:
        return self.windows_ok / self.windows if self.windows else 1.0

    @property
    def ratio(self) -> float:
        return self.gpu_hours / self.oracle_hours if self.oracle_hours else float("nan")


def _windows(arrivals: tuple[float, ...], window: float) -> int:
    return len({int(t // window) for t in arrivals})


def dominates(a: Totals, b: Totals) -> bool:
    """a is better than b on one axis and no worse on the other."""
    no_worse_att = a.attainment >= b.attainment - ATTAINMENT_TIE
    no_worse_gpu = a.gpu_hours <= b.gpu_hours * (1 + GPU_TIE)
    better_att = a.attainment > b.attainment + ATTAINMENT_TIE
    better_gpu = a.gpu_hours < b.gpu_hours * (1 - GPU_TIE)
    return (better_att and no_worse_gpu) or (better_gpu and no_worse_att)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    traces = {
        f: parse_trace(f, (REPO / "traces" / f).read_text().splitlines()) for f in TRACE_FILES
    }
    setup = Setup()
    rows = contenders(list(POLICIES), args.warm_pool, [0.0])
    summary = []
    started = time.perf_counter()
    for spec in [w for w in SUITE if w.name in args.workloads]:
        for load in args.loads:
            totals = {c.label: Totals() for c in rows}
            stats = []
            for seed in range(args.seed, args.seed + args.seeds):
                workload = spec.build(traces, load, seed)
                stats.append(bin_stats(workload))
                prepared = prepare(setup, workload, seed)
                runs = run_contenders(setup, prepared, rows)
                oracle = next(r.result.gpu_hours for r in runs if r.label == "oracle")
                for run in runs:
                    totals[run.label].add(run, oracle)
            s = stats[0]
            print(
                f"\n### {spec.name} at {load:g}x: {spec.description}\n\n"
                f"{s.mean_rate:.1f} req/s mean; 10 s bins: {s.empty_fraction:.0%} empty, "
                f"CV {s.cv:.2f}, peak {s.peak_to_mean:.1f}x the mean, longest quiet "
                f"{s.longest_quiet:.0f}s (seed {args.seed}); {args.seeds} seed(s)\n"
            )
            print(
                "| policy | attainment | over SLO | 5-min windows p95 ok | GPU-hours | x oracle |"
            )
            print("|---|---|---|---|---|---|")
            for label, t in totals.items():
                print(
                    f"| {label} | {t.attainment:.3%} | {t.misses} | {t.window_share:.1%} | "
                    f"{t.gpu_hours / args.seeds:.3f} | {t.ratio:.2f} |"
                )
            default = totals[DEFAULT_LABEL]
            peers = {k: v for k, v in totals.items() if k not in (DEFAULT_LABEL, "oracle")}
            over = [k for k, v in peers.items() if dominates(v, default)]
            under = [k for k, v in peers.items() if dominates(default, v)]
            best_peer = max(v.attainment for v in peers.values())
            summary.append((spec.name, load, default, over, under, best_peer))
            sys.stdout.flush()
    print(f"\n## Summary ({args.seeds} seed(s), {time.perf_counter() - started:.0f}s)\n")
    print(
        "| workload | load | default attainment | best peer attainment | 5-min windows ok | "
        "GPU-h / oracle | default dominated by | default dominates |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, load, d, over, under, best in summary:
        print(
            f"| {name} | {load:g}x | {d.attainment:.2%} | {best:.2%} | {d.window_share:.1%} | "
            f"{d.ratio:.2f} | {', '.join(over) or '-'} | {', '.join(under) or '-'} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
