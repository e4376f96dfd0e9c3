"""Simulator vs real Triton: the sleeper model on CPU, batching on and off, three loads.

    .venv/bin/python bench/fidelity.py [--seconds 10] [--seed 7]

Starts one tritonserver (nvidia-pytriton wheel) on loopback with two copies of the
catalogue "sleeper" model (5 ms per execution + 0.2 ms per item): one with dynamic
batching (max batch 32, preferred 8/16/32, 2 ms delay), one without. The same Poisson
arrival times are replayed open-loop against Triton (e2e.loadgen) and fed to the
simulator (one replica, one instance). Two numbers are calibrated from Triton on a light
unbatched load and stated: the per-execution overhead of the Python backend (Triton's own
compute_infer time per execution minus the model's 5.2 ms; it costs capacity, so the
simulator adds it to the time per execution), the remaining fixed per-request overhead
(gRPC, client; median latency minus the execution time; it adds latency only), and the
spread of execution times (log-normal CV from Triton's compute-time summary p50/p95).

Prints simulated vs measured p50, p95 and throughput per load and whether each is within
+-10%. Every load is bounded in requests and wall time; the server is stopped by its own
process group.
"""

from __future__ import annotations

import argparse
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
from gpuserve.sim.scalers import ScaleOrder, ScalerView  # noqa: E402
from gpuserve.sim.simulating import simulate  # noqa: E402
from gpuserve.sim.workload import Workload, poisson_workload  # noqa: E402

EXEC_MS, ITEM_MS = 5.0, 0.2
TOLERANCE = 0.10

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


class _Idle:
    name = "fixed"
    interval = 1e9
    offset = 1e9

    def step(self, view: ScalerView) -> ScaleOrder:
        return ScaleOrder()


@dataclass(frozen=True)
class Row:
    config: str
    rate: float
    sim: tuple[float, float, float]  # p50 ms, p95 ms, throughput req/s
    real: tuple[float, float, float]
    failures: int


def measure(grpc: str, model: str, workload: Workload, seconds: float) -> LoadResult:
    arrivals = [Arrival(t, 0, 0) for t in workload.arrivals]
    target = Target(model=model, endpoints=[grpc], connections_per_endpoint=4)
    limits = Limits(max_requests=len(arrivals), max_wall_s=seconds + 30.0, max_in_flight=512)
    return replay(arrivals, target, limits, mode="fidelity")


def simulated(
    kind: str, workload: Workload, *, exec_extra: float, overhead: float, jitter: float
) -> SimResult:
    config = SimConfig(
        batcher=BATCHERS[kind],
        service=ServiceTimes(
            per_batch=EXEC_MS / 1000 + exec_extra, per_item=ITEM_MS / 1000, jitter_cv=jitter
        ),
        classes=(AcceleratorPool("cpu"),),
        slo_latency=1.0,
        latency_overhead=overhead,
    )
    return simulate(config=config, workload=workload, scaler=_Idle())


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


def table(rows: list[Row], exec_ms: float, overhead_ms: float, jitter: float) -> str:
    out = [
        f"calibrated from Triton (light unbatched load): +{exec_ms:.2f} ms per execution "
        f"(Python backend), +{overhead_ms:.2f} ms per request outside Triton's compute, "
        f"execution-time CV {jitter:.2f} (from its compute p50/p95)",
        "",
        "| config | offered req/s | p50 sim / real ms | p95 sim / real ms | "
        "throughput sim / real req/s | within +-10% (p50, p95, thr) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        flags = ", ".join(
            "yes" if within(s, m) else "no" for s, m in zip(r.sim, r.real, strict=True)
        )
        fail = f" ({r.failures} failed)" if r.failures else ""
        out.append(
            f"| {r.config} | {r.rate:g}{fail} | {r.sim[0]:.1f} / {r.real[0]:.1f} | "
            f"{r.sim[1]:.1f} / {r.real[1]:.1f} | {r.sim[2]:.0f} / {r.real[2]:.0f} | {flags} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="duration of each load")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--batching-rates", type=float, nargs=3, default=[100.0, 300.0, 600.0])
    p.add_argument("--single-rates", type=float, nargs=3, default=[40.0, 90.0, 140.0])
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpuserve-fidelity-") as tmp:
        repo = Path(tmp) / "models"
        for kind, pbtxt in CONFIGS.items():
            write_model(repo, MODEL[kind], pbtxt)
        extra = ["--metrics-config", "summary_latencies=true"]
        with TritonServer(repo, extra_flags=extra) as triton:
            grpc = triton.grpc_url.removeprefix("grpc://")
            # Warm both models, then calibrate the fixed overhead on a light load.
            for kind in CONFIGS:
                measure(grpc, MODEL[kind], poisson_workload(rate=20, duration=2, seed=1), 2)
            before = counters(triton.metrics_url, MODEL["no batching"])
            light = measure(
                grpc, MODEL["no batching"], poisson_workload(rate=20, duration=5, seed=2), 5
            )
            after = counters(triton.metrics_url, MODEL["no batching"])
            execs = after["nv_inference_exec_count"] - before["nv_inference_exec_count"]
            compute_us = (
                after["nv_inference_compute_infer_duration_us"]
                - before["nv_inference_compute_infer_duration_us"]
            )
            per_exec = compute_us / 1e6 / max(execs, 1.0)
            exec_extra = max(0.0, per_exec - (EXEC_MS + ITEM_MS) / 1000)
            lat = [r.latency_s for r in light.records if r.ok and r.latency_s is not None]
            overhead = max(0.0, statistics.median(lat) - per_exec)
            jitter = jitter_cv(after)
            rows: list[Row] = []
            plan = [("no batching", r) for r in args.single_rates]
            plan += [("batching", r) for r in args.batching_rates]
            for kind, rate in plan:
                workload = poisson_workload(rate=rate, duration=args.seconds, seed=args.seed)
                real = measure(grpc, MODEL[kind], workload, args.seconds)
                sim = simulated(
                    kind, workload, exec_extra=exec_extra, overhead=overhead, jitter=jitter
                )
                rows.append(Row(kind, rate, sim_stats(sim), real_stats(real), real.failures))
                print(f"  measured {kind} at {rate:g} req/s", file=sys.stderr)
    print(table(rows, exec_extra * 1e3, overhead * 1e3, jitter))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
