"""Benchmark: no batching vs dynamic batching on the real Triton (CPU, sleeper model).

For each configuration and concurrency, a closed loop (one gRPC connection per worker) runs a
short warm-up and then ``--seconds`` of measurement; mean batch size comes from Triton's own
counters (nv_inference_count / nv_inference_exec_count) over the measured window.

    python bench/triton_batching.py                      # 1/8/32, 8 s per point
    python bench/triton_batching.py --with-queue-policy  # + dynamic batching with a queue policy
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

try:
    import e2e  # noqa: F401 - installed (editable) or run from the repository root
except ImportError:  # running as a script from elsewhere: use this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e.loadgen import Limits, Target, run_closed_loop
from e2e.models import sleeper_config
from e2e.triton import TritonServer, write_model

CONFIGS = {
    "no batching": sleeper_config("nobatch", max_batch_size=0, dynamic_batching=False),
    "dynamic batching": sleeper_config("dynamic", max_batch_size=32),
}
QUEUE_POLICY = (
    "dynamic + queue policy",
    sleeper_config(
        "policy", max_batch_size=32, batcher_extra="default_queue_policy { max_queue_size: 1000 }"
    ),
)


@dataclass
class Point:
    config: str
    model: str
    concurrency: int
    requests: int
    failures: int
    req_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_batch: float


def _counters(server: TritonServer, model: str) -> tuple[float, float]:
    count = execs = 0.0
    for line in server.metrics_text().splitlines():
        if f'model="{model}"' not in line:
            continue
        if line.startswith("nv_inference_count{"):
            count += float(line.rsplit(" ", 1)[1])
        elif line.startswith("nv_inference_exec_count{"):
            execs += float(line.rsplit(" ", 1)[1])
    return count, execs


def measure(
    server: TritonServer, label: str, model: str, concurrency: int, seconds: float, warmup: float
) -> Point:
    target = Target(model, [server.grpc_url], connections_per_endpoint=concurrency)
    limits = Limits(max_requests=1_000_000, max_wall_s=seconds + 30)
    run_closed_loop(target, concurrency, warmup, limits)  # warm-up, discarded
    count0, execs0 = _counters(server, model)
    result = run_closed_loop(target, concurrency, seconds, limits)
    count1, execs1 = _counters(server, model)
    execs = execs1 - execs0
    return Point(
        label,
        model,
        concurrency,
        result.sent,
        result.failures,
        round(result.throughput, 1),
        round(result.p50_ms or 0, 1),
        round(result.p95_ms or 0, 1),
        round(result.p99_ms or 0, 1),
        round((count1 - count0) / execs, 1) if execs else 0.0,
    )


def table(points: list[Point]) -> str:
    lines = [
        "| config | concurrency | req/s | p50 ms | p95 ms | p99 ms | mean batch | failures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(
            f"| {p.config} | {p.concurrency} | {p.req_per_s} | {p.p50_ms} | {p.p95_ms} "
            f"| {p.p99_ms} | {p.mean_batch} | {p.failures} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per point")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument(
        "--with-queue-policy",
        action="store_true",
        help="also measure dynamic batching with default_queue_policy",
    )
    parser.add_argument("--json", type=Path, help="also write the points as JSON here")
    args = parser.parse_args()
    if not 0 < args.seconds <= 120 or not 0 <= args.warmup <= 30:
        parser.error("--seconds must be in (0, 120] and --warmup in [0, 30]")

    configs = dict(CONFIGS)
    if args.with_queue_policy:
        configs[QUEUE_POLICY[0]] = QUEUE_POLICY[1]
    points: list[Point] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuserve-triton-bench-") as tmp:
        repo = Path(tmp)
        models = {}
        for label, config in configs.items():
            model = config.split('"')[1]  # name: "<model>" is the first line
            write_model(repo, model, config)
            models[label] = model
        with TritonServer(repo) as server:
            for label, model in models.items():
                for concurrency in args.concurrency:
                    point = measure(server, label, model, concurrency, args.seconds, args.warmup)
                    points.append(point)
                    print(
                        f"  {label:24s} c={concurrency:<3d} {point.req_per_s:8.1f} req/s "
                        f"p95 {point.p95_ms} ms",
                        file=sys.stderr,
                        flush=True,
                    )
    print(table(points))
    print(
        f"\n{args.seconds:g} s per point after {args.warmup:g} s warm-up; "
        f"total {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    if args.json:
        args.json.write_text(json.dumps([asdict(p) for p in points], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
