"""Simulator vs real Triton: the sleeper model on CPU, batching on and off, three loads.

    .venv/bin/python bench/fidelity.py [--seconds 10] [--seed 7] [--repeats 3]

Starts one tritonserver (nvidia-pytriton wheel) on loopback with two copies of the
catalogue "sleeper" model (5 ms per execution + 0.2 ms per item): one with dynamic
batching (max batch 32, preferred 8/16/32, 2 ms delay), one without. Poisson arrivals are
replayed open-loop against Triton (e2e.loadgen); the simulator (one replica, one
instance) gets the times at which the load generator actually sent each request, since
that is where the measured latency starts.

One calibration, made before the six loads and reused for all of them, measures what the
simulator cannot know from the model's stated times:

* the instance's occupancy per execution, from Triton's per-batch-size statistics
  (compute_input + compute_infer + compute_output per execution, fitted to
  a + b * batch size over a light unbatched load and a 400 req/s batched load): the
  Python backend's cost per execution (a - 5 ms) and per request (b - 0.2 ms);
* the spread of execution times (log-normal CV from Triton's compute-time summary
  p50/p95 on the light load);
* the time outside Triton (client, gRPC): the client's mean latency minus Triton's mean
  request duration, on both calibration loads. It falls as the rate rises (1.3 ms at
  20 req/s, 0.8 ms at 300-600 req/s, measured), so each load gets a value between the
  two by log of its offered rate. This describes the measuring client, not the service.

Each load runs ``--repeats`` times (default 3, interleaved with the others, each with its
own Poisson seed) and the table reports medians. Two simulations per run:

A. with the one calibration: a prediction, and what a user of ``gpuserve simulate`` gets;
B. with the occupancy per execution and per request that Triton's own statistics report
   for that run (still none of its latencies). This separates the batcher and queue
   model from the machine's speed, which drifts by a few percent as other work comes and
   goes on shared cores; near saturation that drift alone moves queueing delay by tens
   of percent.

Prints simulated vs measured p50, p95 and throughput per load and whether each is within
+-10%, then every run. Every load is bounded in requests and wall time; the server is
stopped by its own process group.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from e2e.loadgen.results import LoadResult  # noqa: E402
from e2e.loadgen.runner import Limits, Target, replay  # noqa: E402
from e2e.loadgen.trace import Arrival  # noqa: E402
from e2e.triton.process import http_text  # noqa: E402
from e2e.triton.repository import write_model  # noqa: E402
from e2e.triton.server import TritonServer  # noqa: E402
from gpuserve.sim.config import AcceleratorPool, BatcherConfig, ServiceTimes, SimConfig  # noqa: E402
from gpuserve.sim.results import SimResult  # noqa: E402
from gpuserve.sim.scalers import HoldScaler  # noqa: E402
from gpuserve.sim.simulating import simulate  # noqa: E402
from gpuserve.sim.workload import Workload, poisson_workload  # noqa: E402

EXEC_MS, ITEM_MS = 5.0, 0.2
TOLERANCE = 0.10
CALIBRATION_RATES = (20.0, 400.0)  # light unbatched, moderate batched (req/s)
CALIBRATION_SECONDS = 10.0

_SIGNATURE = (
    'input [ { name: "INPUT", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
    "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
    f'parameters {{ key: "exec_time_ms" value: {{ string_value: "{EXEC_MS}" }} }}\n'
    f'parameters {{ key: "per_item_ms" value: {{ string_value: "{ITEM_MS}" }} }}\n'
)

CONFIGS = {
    "batching": (
        'name: "sleeper_batching"\nbackend: "python"\nmax_batch_size: 32\n'
        + _SIGNATURE
        + "dynamic_batching {\n  preferred_batch_size: [ 8, 16, 32 ]\n"
        "  max_queue_delay_microseconds: 2000\n}\n"
    ),
    "no batching": ('name: "sleeper_single"\nbackend: "python"\nmax_batch_size: 32\n' + _SIGNATURE),
}
MODEL = {"batching": "sleeper_batching", "no batching": "sleeper_single"}
BATCHERS = {
    "batching": BatcherConfig(
        max_batch_size=32, preferred_batch_sizes=(8, 16, 32), max_queue_delay=0.002
    ),
    "no batching": BatcherConfig(max_batch_size=32, dynamic_batching=False),
}



Figures = tuple[float, float, float]  # p50 ms, p95 ms, throughput req/s


@dataclass(frozen=True)
class Trial:
    """One repetition of one load: what Triton did and what the simulator predicted."""

    real: Figures
    sim: Figures  # service times from the one calibration
    sim_load: Figures  # service times Triton reported for this load
    failures: int
    drift: float  # Triton's occupancy during this load / the calibrated model's, minus 1


@dataclass(frozen=True)
class Row:
    """The median of each figure over the repetitions of one load."""

    config: str
    rate: float
    trials: tuple[Trial, ...]

    def median(self, pick: str) -> Figures:
        values = [getattr(t, pick) for t in self.trials]
        return (
            statistics.median(v[0] for v in values),
            statistics.median(v[1] for v in values),
            statistics.median(v[2] for v in values),
        )

    @property
    def failures(self) -> int:
        return sum(t.failures for t in self.trials)

    @property
    def drift(self) -> float:
        return statistics.median(t.drift for t in self.trials)


def measure(grpc: str, model: str, workload: Workload, seconds: float) -> LoadResult:
    arrivals = [Arrival(t, 0, 0) for t in workload.arrivals]
    target = Target(model=model, endpoints=[grpc], connections_per_endpoint=4)
    limits = Limits(max_requests=len(arrivals), max_wall_s=seconds + 30.0, max_in_flight=512)
    return replay(arrivals, target, limits, mode="fidelity")


@dataclass(frozen=True)
class Calibration:
    """Measured once, before the loads, and used for all of them (seconds)."""

    per_batch: float  # instance occupancy per execution (model + backend)
    per_request: float  # backend's occupancy per request, beyond the model's per-item time
    jitter: float  # CV of execution time
    # Client + gRPC time outside Triton's request duration, at the light and the batched
    # calibration rate: it shrinks as the rate grows (threads stay awake), 1.3 -> 0.8 ms.
    overhead: tuple[float, float]
    occupancy: dict[int, tuple[int, float]]  # batch size -> (executions, mean seconds)

    def overhead_at(self, rate: float) -> float:
        """The client's time outside Triton at ``rate``: between the two calibration
        points by log of the rate, held at the ends."""
        lo, hi = CALIBRATION_RATES
        where = math.log(min(max(rate, lo), hi) / lo) / math.log(hi / lo)
        return self.overhead[0] + where * (self.overhead[1] - self.overhead[0])


def simulated(
    kind: str,
    rate: float,
    arrivals: list[float],
    cal: Calibration,
    times: tuple[float, float] | None = None,
) -> SimResult:
    """Simulate one replica on the sent times of a load offered at ``rate``; ``times`` =
    (per execution, per request) overrides the calibrated occupancy."""
    per_batch, per_request = times if times is not None else (cal.per_batch, cal.per_request)
    config = SimConfig(
        batcher=BATCHERS[kind],
        service=ServiceTimes(
            per_batch=per_batch,
            per_item=ITEM_MS / 1000,
            per_request=per_request,
            jitter_cv=cal.jitter,
        ),
        classes=(AcceleratorPool("cpu"),),
        slo_latency=1.0,
        latency_overhead=cal.overhead_at(rate),
    )
    workload = Workload(arrivals=tuple(arrivals), items=(1,) * len(arrivals))
    return simulate(config=config, workload=workload, scaler=HoldScaler())


def sent_times(result: LoadResult) -> list[float]:
    """When the load generator actually sent each answered request (its latency starts
    there), sorted; its event loop sends a little after the scheduled time, by an amount
    that varies with the machine's load."""
    return sorted(r.send_s for r in result.records if r.ok and r.latency_s is not None)


def counters(metrics_url: str, model: str) -> dict[str, float]:
    """Triton's cumulative counters of one model from its metrics endpoint."""
    _, text = http_text(metrics_url)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or f'model="{model}"' not in line:
            continue
        name = line.split("{", 1)[0]
        if 'quantile="' in line:
            name += "@" + line.split('quantile="', 1)[1].split('"', 1)[0]
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def jitter_cv(after: dict[str, float]) -> float:
    """Coefficient of variation of execution time from Triton's compute summary (p50, p95),
    taking the times as log-normal: p95 / p50 = exp(1.645 sigma)."""
    p50 = after.get("nv_inference_compute_infer_summary_us@0.5", 0.0)
    p95 = after.get("nv_inference_compute_infer_summary_us@0.95", 0.0)
    if p50 <= 0 or p95 <= p50:
        return 0.0
    sigma = math.log(p95 / p50) / 1.645
    return math.sqrt(math.expm1(sigma * sigma))


@dataclass(frozen=True)
class ModelStats:
    """Cumulative figures from Triton's statistics extension for one model."""

    requests: int
    request_ns: int
    # batch size -> (executions, ns of compute_input + compute_infer + compute_output)
    batches: dict[int, tuple[int, int]]

    def since(self, before: ModelStats) -> ModelStats:
        batches = {}
        for size, (count, ns) in self.batches.items():
            c0, ns0 = before.batches.get(size, (0, 0))
            if count > c0:
                batches[size] = (count - c0, ns - ns0)
        return ModelStats(
            self.requests - before.requests, self.request_ns - before.request_ns, batches
        )


def model_stats(http_url: str, model: str) -> ModelStats:
    _, text = http_text(f"{http_url}/v2/models/{model}/stats")
    stats = json.loads(text)["model_stats"][0]
    success = stats["inference_stats"]["success"]
    batches = {}
    for entry in stats.get("batch_stats", []):
        parts = ("compute_input", "compute_infer", "compute_output")
        batches[int(entry["batch_size"])] = (
            int(entry["compute_infer"]["count"]),
            sum(int(entry[p]["ns"]) for p in parts),
        )
    return ModelStats(int(success["count"]), int(success["ns"]), batches)


def _centre(points: dict[int, tuple[int, float]]) -> tuple[float, float]:
    """Count-weighted mean batch size and mean occupancy of (n, (count, mean)) points."""
    total = sum(c for c, _ in points.values())
    mean_n = sum(n * c for n, (c, _) in points.items()) / total
    mean_y = sum(y * c for _, (c, y) in points.items()) / total
    return mean_n, mean_y


def line_through(points: dict[int, tuple[int, float]], slope: float) -> tuple[float, float]:
    """a + slope * n through the points' weighted centre."""
    mean_n, mean_y = _centre(points)
    return mean_y - slope * mean_n, slope


def fit_line(points: dict[int, tuple[int, float]]) -> tuple[float, float]:
    """Least squares a + b * n through (n, mean) points weighted by their counts."""
    mean_n, mean_y = _centre(points)
    var = sum(c * (n - mean_n) ** 2 for n, (c, _) in points.items())
    if var <= 0:
        return line_through(points, ITEM_MS / 1000)
    slope = sum(c * (n - mean_n) * (y - mean_y) for n, (c, y) in points.items()) / var
    return mean_y - slope * mean_n, slope


def calibrate(triton: TritonServer, grpc: str) -> Calibration:
    """One light unbatched load and one moderate batched load."""
    light_rate, batched_rate = CALIBRATION_RATES
    single, batched = MODEL["no batching"], MODEL["batching"]
    before = model_stats(triton.http_url, single)
    secs = CALIBRATION_SECONDS
    light = measure(grpc, single, poisson_workload(rate=light_rate, duration=secs, seed=2), secs)
    light_stats = model_stats(triton.http_url, single).since(before)
    jitter = jitter_cv(counters(triton.metrics_url, single))
    before = model_stats(triton.http_url, batched)
    busy = measure(grpc, batched, poisson_workload(rate=batched_rate, duration=secs, seed=3), secs)
    batched_stats = model_stats(triton.http_url, batched).since(before)
    occupancy: dict[int, tuple[int, float]] = {}
    for stats in (light_stats, batched_stats):
        for size, (count, ns) in stats.batches.items():
            c0, mean0 = occupancy.get(size, (0, 0.0))
            occupancy[size] = (c0 + count, (c0 * mean0 + ns / 1e9) / (c0 + count))
    per_batch, slope = fit_line(occupancy)

    def outside(result: LoadResult, stats: ModelStats) -> float:
        server = stats.request_ns / 1e9 / max(stats.requests, 1)
        return max(0.0, statistics.fmean(result.latencies_s()) - server)

    return Calibration(
        per_batch=max(0.0, per_batch),
        per_request=max(0.0, slope - ITEM_MS / 1000),
        jitter=jitter,
        overhead=(outside(light, light_stats), outside(busy, batched_stats)),
        occupancy=occupancy,
    )


def occupancy_drift(stats: ModelStats, cal: Calibration) -> float:
    """How much longer (+) or shorter (-) Triton's executions were during one load than the
    calibrated model predicts for the same batch sizes: a diagnostic of the machine's load
    at that moment, not an input to the simulator."""
    slope = cal.per_request + ITEM_MS / 1000
    expected = sum(c * (cal.per_batch + slope * n) for n, (c, _) in stats.batches.items())
    measured = sum(ns / 1e9 for _, ns in stats.batches.values())
    return measured / expected - 1 if expected > 0 else 0.0


def load_times(stats: ModelStats, cal: Calibration) -> tuple[float, float]:
    """(per execution, per request) occupancy Triton reported during one load: a line
    through its per-batch-size means when it ran several sizes, else the calibrated slope
    through the one size it ran. Taken from Triton's execution statistics only; none of
    the load's latencies goes in."""
    points = {n: (c, ns / 1e9 / c) for n, (c, ns) in stats.batches.items() if c > 0}
    if not points:
        return cal.per_batch, cal.per_request
    if len([n for n, (c, _) in points.items() if c >= 5]) >= 3:
        per_batch, slope = fit_line(points)
    else:
        per_batch, slope = line_through(points, cal.per_request + ITEM_MS / 1000)
    return max(0.0, per_batch), max(0.0, slope - ITEM_MS / 1000)


def real_stats(result: LoadResult) -> tuple[float, float, float]:
    ok = [r for r in result.records if r.ok and r.latency_s is not None]
    lat = sorted(r.latency_s for r in ok if r.latency_s is not None)
    span = max(r.send_s + (r.latency_s or 0) for r in ok) - min(r.send_s for r in ok)
    return _pct(lat, 50) * 1e3, _pct(lat, 95) * 1e3, len(ok) / span


def sim_stats(result: SimResult) -> tuple[float, float, float]:
    lat = sorted(result.latencies)
    done = [a + x for a, x in zip(result.arrivals, result.latencies, strict=True)]
    span = max(done) - min(result.arrivals)
    return _pct(lat, 50) * 1e3, _pct(lat, 95) * 1e3, len(lat) / span


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


def within(sim: float, real: float) -> bool:
    return abs(sim - real) <= TOLERANCE * real


def calibration_line(cal: Calibration, when: str = "once") -> str:
    sizes = ", ".join(
        f"{n}: {mean * 1e3:.2f}" for n, (count, mean) in sorted(cal.occupancy.items()) if count >= 5
    )
    return (
        f"calibrated {when} from Triton ({CALIBRATION_RATES[0]:g} req/s unbatched, "
        f"{CALIBRATION_RATES[1]:g} req/s batched, {CALIBRATION_SECONDS:g} s each): occupancy "
        f"per execution {cal.per_batch * 1e3:.2f} ms + {(cal.per_request * 1e3 + ITEM_MS):.3f} ms "
        f"per request (Python backend +{cal.per_batch * 1e3 - EXEC_MS:.2f} ms per execution, "
        f"+{cal.per_request * 1e3:.3f} ms per request), execution-time CV {cal.jitter:.2f}, "
        f"{cal.overhead[0] * 1e3:.2f} ms per request outside Triton at "
        f"{CALIBRATION_RATES[0]:g} req/s, {cal.overhead[1] * 1e3:.2f} ms at "
        f"{CALIBRATION_RATES[1]:g}\n"
        f"measured occupancy by batch size (ms; 5+ executions): {sizes}"
    )


def table(rows: list[Row], pick: str) -> str:
    """Medians over the repetitions, simulator ``pick`` ("sim" or "sim_load") vs Triton."""
    out = [
        "| config | offered req/s | p50 sim / real ms | p95 sim / real ms | "
        "throughput sim / real req/s | error p50, p95, thr | within +-10% (p50, p95, thr) "
        "| Triton occupancy vs calibration |",
        "|---|---|---|---|---|---|---|---|",
    ]
    inside = [0, 0, 0]
    for r in rows:
        sim, real = r.median(pick), r.median("real")
        ok = [within(a, b) for a, b in zip(sim, real, strict=True)]
        inside = [n + k for n, k in zip(inside, ok, strict=True)]
        errors = ", ".join(f"{(a - b) / b:+.0%}" for a, b in zip(sim, real, strict=True))
        fail = f" ({r.failures} failed)" if r.failures else ""
        out.append(
            f"| {r.config} | {r.rate:g}{fail} | {sim[0]:.1f} / {real[0]:.1f} | "
            f"{sim[1]:.1f} / {real[1]:.1f} | {sim[2]:.0f} / {real[2]:.0f} | {errors} "
            f"| {', '.join('yes' if k else 'no' for k in ok)} | {r.drift:+.1%} |"
        )
    out.append("")
    out.append(
        f"within +-10%: p50 {inside[0]}/{len(rows)}, p95 {inside[1]}/{len(rows)}, "
        f"throughput {inside[2]}/{len(rows)}"
    )
    return "\n".join(out)


def trials_table(rows: list[Row]) -> str:
    """Every repetition, for the record: real, calibrated-once and per-load p50/p95 (ms)."""
    out = [
        "| config | offered req/s | run | real p50 / p95 | sim (once) p50 / p95 "
        "| sim (load) p50 / p95 | occupancy vs calibration |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for i, t in enumerate(r.trials, 1):
            out.append(
                f"| {r.config} | {r.rate:g} | {i} | {t.real[0]:.1f} / {t.real[1]:.1f} | "
                f"{t.sim[0]:.1f} / {t.sim[1]:.1f} | {t.sim_load[0]:.1f} / {t.sim_load[1]:.1f} "
                f"| {t.drift:+.1%} |"
            )
    return "\n".join(out)


def run_trial(
    triton: TritonServer,
    grpc: str,
    kind: str,
    rate: float,
    seconds: float,
    seed: int,
    cal: Calibration,
) -> Trial:
    workload = poisson_workload(rate=rate, duration=seconds, seed=seed)
    before = model_stats(triton.http_url, MODEL[kind])
    real = measure(grpc, MODEL[kind], workload, seconds)
    stats = model_stats(triton.http_url, MODEL[kind]).since(before)
    sent = sent_times(real)
    return Trial(
        real=real_stats(real),
        sim=sim_stats(simulated(kind, rate, sent, cal)),
        sim_load=sim_stats(simulated(kind, rate, sent, cal, load_times(stats, cal))),
        failures=real.failures,
        drift=occupancy_drift(stats, cal),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each load")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeats", type=int, default=3, help="repetitions of each load (interleaved)")
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="calibrate again before each round of the six loads (A then predicts from "
        "measurements a minute old rather than several)",
    )
    p.add_argument("--batching-rates", type=float, nargs=3, default=[100.0, 300.0, 600.0])
    p.add_argument("--single-rates", type=float, nargs=3, default=[40.0, 90.0, 140.0])
    args = p.parse_args(argv)
    plan = [("no batching", r) for r in args.single_rates]
    plan += [("batching", r) for r in args.batching_rates]
    with tempfile.TemporaryDirectory(prefix="gpuserve-fidelity-") as tmp:
        repo = Path(tmp) / "models"
        for kind, pbtxt in CONFIGS.items():
            write_model(repo, MODEL[kind], pbtxt)
        extra = ["--metrics-config", "summary_latencies=true"]
        with TritonServer(repo, extra_flags=extra) as triton:
            grpc = triton.grpc_url.removeprefix("grpc://")
            # Warm both models and the client under load first, so that the calibration
            # does not measure a server and client that are still starting up.
            for kind, rate in (("no batching", 60.0), ("batching", 300.0)):
                measure(grpc, MODEL[kind], poisson_workload(rate=rate, duration=5, seed=1), 5)
            cals = [calibrate(triton, grpc)]
            trials: dict[tuple[str, float], list[Trial]] = {key: [] for key in plan}
            # Interleaved, so that a slow minute of the machine touches every load once
            # rather than all repetitions of one.
            for rep in range(args.repeats):
                if args.recalibrate and rep:
                    cals.append(calibrate(triton, grpc))
                cal = cals[-1]
                for kind, rate in plan:
                    trial = run_trial(triton, grpc, kind, rate, args.seconds, args.seed + rep, cal)
                    trials[(kind, rate)].append(trial)
                    print(f"  run {rep + 1}: measured {kind} at {rate:g} req/s", file=sys.stderr)
    rows = [Row(kind, rate, tuple(trials[(kind, rate)])) for kind, rate in plan]
    for i, cal in enumerate(cals, 1):
        print(calibration_line(cal, f"before round {i}" if args.recalibrate else "once"))
    print(f"\nmedians over {args.repeats} interleaved runs of {args.seconds:g} s per load")
    which = "each round's calibration" if args.recalibrate else "the one calibration"
    print(f"\nA. service times from {which} (a prediction):\n")
    print(table(rows, "sim"))
    print(
        "\nB. service times Triton reported for each load (its execution statistics, "
        "not its latencies): the batcher and queue model alone\n"
    )
    print(table(rows, "sim_load"))
    print("\nevery run:\n")
    print(trials_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
