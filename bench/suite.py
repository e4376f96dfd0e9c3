"""Every policy on every workload of the suite, at 1x, 2x and 4x load.

    .venv/bin/python bench/suite.py [--seeds N] [--workloads bursty flash-4x ...] [--loads 1 2]
        [--cache out/suite-cache] [--queue-timeout SECONDS] [--scale-down-window SECONDS]
        [--history] [--spread-only] [--balancing least_loaded] [--rendered-keda]

Prints one table per workload and load (totals over the seeds), then a summary: the
default policy's attainment, 5-minute window compliance and GPU-hours over the oracle's
(and over what the oracle's plan costs once it pays for its start-ups as a real cluster
would: ``gpuserve.sim.start_costs``),
attainment after the first burst (nothing can be remembered before it), the share of its
misses that arrived in a new peak (see ``new_peaks``: load busier than anything in the
burst memory, which only foresight could have provisioned for), its attainment outside
new peaks, and which policies dominate it (better on one axis, no worse on the other).

``--cache DIR`` keeps the prepared workloads (warm-up, calibration, oracle plan) and the
peers' results per workload, load and seed, in a folder of DIR named after a digest of the
package, the benches and the traces (``pickle_cache.code_scoped``): a rerun of the same tree
(other ``--warm-pool`` rows, bench/burst_advice.py) reads them; a change to any of that code
starts a new folder, so a cache never gives figures the tree would not.

``--queue-timeout S`` gives the service a queue policy that rejects requests after S
seconds in the queue (a rejected request counts as a miss), for every policy.

``--scale-down-window S`` runs gpuserve's rows with the spec's ``scaleDownStabilization``
set to S seconds (default: the API's default); the peers keep their own.

``--spread-only`` runs gpuserve's rows without routing around backlogged pods (rule 9 of
docs/autoscaling.md, since 2026-12-02): every ready pod takes its random share of requests,
as before, and as the peers' pods do behind a plain Service.

``--balancing least_loaded`` sends every policy's requests to the ready pod with the fewest
waiting and running (what a load-aware gateway's endpoint picker does) instead of a random
one (a Kubernetes Service): the bound on what routing alone could give, beside rule 9.

``--rendered-keda`` adds a row for gpuserve's ``scaling.engine: keda``: the ScaledObject
the operator renders for the suite's service (its threshold from the stated service
times, its windows and steps from the spec's defaults), replayed as KEDA's HPA acts on it.

``--history`` runs the generated workloads (bursty, diurnal, drift, periodic) after 30
minutes of the same kind of traffic, another draw of the generator ("yesterday"), instead
of the 2-minute steady warm-up: every policy has served it, nothing in it is measured, and
new peaks are judged against it too. ``static`` is then sized on the measured part's peak
(foresight) and a second row, ``static (yesterday's peak)``, on the history's (what a
capacity plan sized from past traffic holds). The traces and flash crowds have no such
draw and are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from pickle_cache import code_scoped, pickled  # noqa: E402

from gpuserve.autoscaling.config import SCALE_DOWN_WINDOW_S  # noqa: E402
from gpuserve.sim.argtypes import positive_int  # noqa: E402
from gpuserve.sim.comparing import (  # noqa: E402
    COMPLIANCE_WINDOW,
    DEFAULT_LABEL,
    Contender,
    Prepared,
    Run,
    Setup,
    contenders,
    prepare,
    run_contenders,
)
from gpuserve.sim.generators import (  # noqa: E402
    BinStats,
    bin_counts,
    bin_stats,
    in_spans,
    new_peaks,
)
from gpuserve.sim.keda_engine import RENDERED_KEDA  # noqa: E402
from gpuserve.sim.lineup import POLICIES  # noqa: E402
from gpuserve.sim.start_costs import start_cost_s  # noqa: E402
from gpuserve.sim.suite import DURATION, LOADS, SUITE, TRACE_FILES, SuiteWorkload, Traces  # noqa: E402
from gpuserve.sim.workload import parse_trace  # noqa: E402

# "No worse" allows for ties a run cannot resolve: 0.01 percentage point of attainment
# and 1% of GPU-hours.
ATTAINMENT_TIE = 0.0001
GPU_TIE = 0.01
YESTERDAY_STATIC = "static (yesterday's peak)"
# Rows of gpuserve's own code: simulated on every run, never taken from the cache.
GPUSERVE_ROWS = ("gpuserve", RENDERED_KEDA)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=positive_int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workloads", nargs="+", default=[w.name for w in SUITE])
    p.add_argument("--loads", type=float, nargs="+", default=list(LOADS))
    p.add_argument(
        "--warm-pool",
        type=lambda v: v if v == "auto" else int(v),
        nargs="+",
        default=[0],
        help="warm pools of gpuserve's rows beside the default (none): sizes, or auto "
        "(sized by the policy)",
    )
    p.add_argument("--cache", type=Path, default=None)
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=0.0,
        help="seconds: the service's queue policy rejects requests that waited longer "
        "(Triton's default_timeout_microseconds; 0 = none)",
    )
    p.add_argument(
        "--scale-down-window",
        type=float,
        default=SCALE_DOWN_WINDOW_S,
        help="seconds: gpuserve's scaleDownStabilization (default: the API's default)",
    )
    p.add_argument(
        "--spread-only",
        action="store_true",
        help="gpuserve's rows do not route around backlogged pods (the peers never do)",
    )
    p.add_argument(
        "--balancing",
        choices=["random", "least_loaded"],
        default="random",
        help="how every policy's requests pick a ready pod (default: at random, as a "
        "Kubernetes Service does)",
    )
    p.add_argument(
        "--history",
        action="store_true",
        help="generated workloads only, each after 30 minutes of another draw of the same "
        "generator instead of the steady warm-up; adds static sized on that history",
    )
    p.add_argument(
        "--rendered-keda",
        action="store_true",
        help="add a row for gpuserve's own scaling.engine keda: the ScaledObject the "
        "operator renders for the suite's service, replayed (gpuserve.sim.keda_engine)",
    )
    return p.parse_args(argv)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the tables need from one run."""

    requests: int
    misses: int
    windows: int
    windows_ok: int
    gpu_hours: float
    after_requests: int  # requests arriving after the first burst ended
    after_misses: int  # of which over the objective
    peak_requests: int  # requests arriving in a new peak (``new_peaks``)
    peak_misses: int  # of which over the objective

    @classmethod
    def of(cls, run: Run, burst_end: float, peaks: list[tuple[float, float]]) -> Outcome:
        r = run.result
        count = _windows(r.arrivals, COMPLIANCE_WINDOW)
        in_peak = in_spans(r.arrivals, peaks)
        return cls(
            requests=len(r.latencies),
            misses=r.misses(),
            windows=count,
            windows_ok=round(r.window_attainment(COMPLIANCE_WINDOW) * count),
            gpu_hours=r.gpu_hours,
            after_requests=sum(1 for t in r.arrivals if t >= burst_end),
            after_misses=sum(
                1
                for t, x in zip(r.arrivals, r.latencies, strict=True)
                if t >= burst_end and x > r.slo_latency + 1e-12
            ),
            peak_requests=sum(in_peak),
            peak_misses=sum(
                1
                for p, x in zip(in_peak, r.latencies, strict=True)
                if p and x > r.slo_latency + 1e-12
            ),
        )


class Totals:
    """One policy's results added up over seeds."""

    def __init__(self) -> None:
        self.requests = self.misses = 0
        self.windows_ok = self.windows = 0
        self.gpu_hours = self.oracle_hours = self.paid_oracle_hours = 0.0
        self.after_requests = self.after_misses = 0
        self.peak_requests = self.peak_misses = 0

    def add(self, o: Outcome, oracle_hours: float, paid_oracle_hours: float) -> None:
        self.requests += o.requests
        self.misses += o.misses
        self.windows += o.windows
        self.windows_ok += o.windows_ok
        self.gpu_hours += o.gpu_hours
        self.oracle_hours += oracle_hours
        self.paid_oracle_hours += paid_oracle_hours
        self.after_requests += o.after_requests
        self.after_misses += o.after_misses
        self.peak_requests += o.peak_requests
        self.peak_misses += o.peak_misses

    @property
    def attainment(self) -> float:
        return 1.0 - self.misses / self.requests if self.requests else 1.0

    @property
    def window_share(self) -> float:
        return self.windows_ok / self.windows if self.windows else 1.0

    @property
    def ratio(self) -> float:
        return self.gpu_hours / self.oracle_hours if self.oracle_hours else float("nan")

    @property
    def paid_ratio(self) -> float:
        """Over the oracle's plan paying for its start-ups."""
        return self.gpu_hours / self.paid_oracle_hours if self.paid_oracle_hours else float("nan")


def _windows(arrivals: tuple[float, ...], window: float) -> int:
    return len({int(t // window) for t in arrivals})


def first_burst_end(arrivals: tuple[float, ...], bin_seconds: float = 10.0) -> float:
    """When the first burst is over: the first 10 s bin with at least twice the mean count,
    then the first bin after it back below the mean. 0 if there is no such bin."""
    counts = bin_counts(arrivals, bin_seconds)
    if not counts:
        return 0.0
    bins = len(counts)
    mean = len(arrivals) / bins
    peak = next((i for i, c in enumerate(counts) if c >= 2 * mean), None)
    if peak is None:
        return 0.0
    end = next((i for i in range(peak, bins) if counts[i] < mean), bins)
    return end * bin_seconds


def _prepared(
    setup: Setup,
    args: argparse.Namespace,
    spec: SuiteWorkload,
    traces: Traces,
    load: float,
    seed: int,
    key: str,
) -> Prepared:
    """The workload (after its history with ``--history``) prepared, from the cache."""
    path = args.cache / f"{key}.prepared.pickle" if args.cache else None
    return pickled(
        path,
        lambda: prepare(
            setup,
            spec.build(traces, load, seed),
            seed,
            warmup_span=spec.warmup_span(load),
            # Without --history the steady warm-up: a history is what that flag adds.
            history=spec.yesterday(traces, load, seed) if args.history else None,
        ),
    )


def dominates(a: Totals, b: Totals) -> bool:
    """a is better than b on one axis and no worse on the other."""
    no_worse_att = a.attainment >= b.attainment - ATTAINMENT_TIE
    no_worse_gpu = a.gpu_hours <= b.gpu_hours * (1 + GPU_TIE)
    better_att = a.attainment > b.attainment + ATTAINMENT_TIE
    better_gpu = a.gpu_hours < b.gpu_hours * (1 - GPU_TIE)
    return (better_att and no_worse_gpu) or (better_gpu and no_worse_att)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.cache = code_scoped(args.cache)
    if args.cache is not None:
        print(f"cache: {args.cache}", file=sys.stderr)
    traces = {
        f: parse_trace((REPO / "traces" / f).read_text().splitlines()) for f in TRACE_FILES
    }
    setup = Setup(
        queue_timeout=args.queue_timeout,
        scale_down_window=args.scale_down_window,
        route_around=not args.spread_only,
        balancing=args.balancing,
    )
    # The default row is what the summary judges: it runs beside any warm pools asked for.
    rows = contenders(list(POLICIES), [0, *(w for w in args.warm_pool if w != 0)], [0.0])
    if args.rendered_keda:
        rows.append(Contender(RENDERED_KEDA, RENDERED_KEDA))
    chosen = [w for w in SUITE if w.name in args.workloads]
    if args.history:
        setup = replace(setup, warmup=DURATION)
        rows = _history_rows(rows, DURATION)
        skipped = [w.name for w in chosen if not w.has_history]
        chosen = [w for w in chosen if w.has_history]
        if skipped:
            print(
                f"--history: left out {', '.join(skipped)} (a trace or a crowd on it has "
                "no other draw of the same traffic)",
                file=sys.stderr,
            )
        if not chosen:
            print(
                "--history: none of the workloads asked for has a history; generated "
                "ones do: " + ", ".join(w.name for w in SUITE if w.has_history),
                file=sys.stderr,
            )
            return 2
    summary = []
    started = time.perf_counter()
    for spec in chosen:
        for load in args.loads:
            totals = {c.label: Totals() for c in rows}
            stats: list[BinStats] = []
            for seed in range(args.seed, args.seed + args.seeds):
                key = f"{spec.name}-{load:g}x-seed{seed}"
                if args.queue_timeout:
                    key += f"-timeout{args.queue_timeout:g}"
                if args.history:
                    key += "-history"
                if args.balancing != "random":
                    key += f"-{args.balancing}"
                prepared = _prepared(setup, args, spec, traces, load, seed, key)
                measured = prepared.workload.window(setup.warmup, float("inf"))
                if not stats:  # the table prints the first seed's statistics
                    stats.append(bin_stats(measured))
                burst_end = first_burst_end(measured.arrivals)
                # Judged against a history the policies served, not the steady warm-up.
                judged, offset = (
                    (prepared.workload, setup.warmup) if args.history else (measured, 0.0)
                )
                peaks = new_peaks(
                    judged.arrivals,
                    memory=setup.policy().burst_memory,
                    horizon=setup.gpu.cold_start,
                    measured_from=offset,
                )
                outcomes = _outcomes(setup, args, prepared, rows, key, burst_end, peaks)
                oracle = outcomes["oracle"].gpu_hours
                # What the oracle's starts cost in the measured part.
                plan, cold = prepared.plan, setup.gpu.cold_start
                first = plan.window_of(setup.warmup)
                paid = (
                    oracle
                    + start_cost_s(plan.replicas, plan.window, cold, from_window=first) / 3600.0
                )
                for label, o in outcomes.items():
                    totals[label].add(o, oracle, paid)
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
    held = ""
    if setup.scale_down_window != SCALE_DOWN_WINDOW_S:
        held = f"; gpuserve's scaleDownStabilization {setup.scale_down_window:g}s"
    if args.history:
        held += f"; after {setup.warmup / 60:g} minutes of history"
    print(f"\n## Summary ({args.seeds} seed(s), {time.perf_counter() - started:.0f}s{held})\n")
    print(
        "| workload | load | default attainment | after first burst | misses in new peaks | "
        "outside new peaks | best peer attainment | 5-min windows ok | GPU-h / oracle | "
        "GPU-h / oracle paying starts | default dominated by | default dominates |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, load, d, over, under, best in summary:
        after = 1.0 - d.after_misses / d.after_requests if d.after_requests else 1.0
        in_peaks = d.peak_misses / d.misses if d.misses else 0.0
        outside = d.requests - d.peak_requests
        rest = 1.0 - (d.misses - d.peak_misses) / outside if outside else 1.0
        print(
            f"| {name} | {load:g}x | {d.attainment:.2%} | {after:.2%} | {in_peaks:.0%} | "
            f"{rest:.2%} | {best:.2%} | {d.window_share:.1%} | {d.ratio:.2f} | "
            f"{d.paid_ratio:.2f} | "
            f"{', '.join(over) or '-'} | {', '.join(under) or '-'} |"
        )
    return 0


def _outcomes(
    setup: Setup,
    args: argparse.Namespace,
    prepared: Prepared,
    rows: list[Contender],
    key: str,
    burst_end: float,
    peaks: list[tuple[float, float]],
) -> dict[str, Outcome]:
    """gpuserve's rows simulated every time (its KEDA rendering's too: both follow the
    spec's scaling fields, which the cache's key leaves out); the peers' from the cache
    when it has them."""
    path = args.cache / f"{key}.peers.json" if args.cache else None
    cached: dict[str, Outcome] = {}
    if path is not None and path.exists():
        cached = {k: Outcome(**v) for k, v in json.loads(path.read_text()).items()}
    todo = [c for c in rows if c.name in GPUSERVE_ROWS or c.label not in cached]
    fresh = {
        run.label: Outcome.of(run, burst_end, peaks)
        for run in run_contenders(setup, prepared, todo)
    }
    if path is not None:
        labels = _peer_labels(rows)
        peers = {k: asdict(v) for k, v in {**cached, **fresh}.items() if k in labels}
        path.write_text(json.dumps(peers))
    return {c.label: fresh.get(c.label) or cached[c.label] for c in rows}


def _history_rows(rows: list[Contender], history_s: float) -> list[Contender]:
    """With a history: static sized on the measured part's peak (foresight, as without
    one), and beside it static sized on the history's peak."""
    out: list[Contender] = []
    for c in rows:
        if c.name != "static":
            out.append(c)
            continue
        out.append(replace(c, sized_on=(history_s, float("inf"))))
        out.append(replace(c, label=YESTERDAY_STATIC, sized_on=(0.0, history_s)))
    return out


def _peer_labels(rows: list[Contender]) -> set[str]:
    return {c.label for c in rows if c.name not in GPUSERVE_ROWS}


if __name__ == "__main__":
    raise SystemExit(main())
