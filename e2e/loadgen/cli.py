"""Command line of the load generator (``python -m e2e.loadgen``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from e2e.loadgen.results import LoadResult
from e2e.loadgen.runner import Limits, Target, run_closed_loop, run_constant_rate, run_trace


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.loadgen",
        description="Replay a trace (or constant-rate / closed-loop load) against Triton "
        "over gRPC. Loopback endpoints only.",
    )
    parser.add_argument("--model", required=True, help="Triton model name")
    parser.add_argument(
        "--endpoint",
        action="append",
        required=True,
        help="gRPC host:port (127.0.0.0/8 or localhost); repeat for round-robin",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        help="Azure-format CSV (a header naming TIMESTAMP, ContextTokens and GeneratedTokens); "
        "selects trace replay",
    )
    parser.add_argument(
        "--compress",
        type=float,
        default=1.0,
        help="time compression of the trace (10 = ten times faster)",
    )
    parser.add_argument(
        "--start", type=float, default=0.0, help="skip this many replay seconds (after compression)"
    )
    parser.add_argument(
        "--duration", type=float, default=60.0, help="replay/run seconds (after compression)"
    )
    parser.add_argument("--rate", type=float, help="open loop at this many requests/s")
    parser.add_argument("--concurrency", type=int, help="closed loop with this many workers")
    parser.add_argument("--warmup", type=float, default=0.0, help="closed loop warm-up seconds")
    parser.add_argument(
        "--connections", type=int, default=1, help="independent gRPC connections per endpoint"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="per-request timeout (s)")
    parser.add_argument("--max-requests", type=int, default=100_000, help="hard stop")
    parser.add_argument("--max-wall", type=float, default=600.0, help="hard stop (seconds)")
    parser.add_argument("--series", action="store_true", help="also print the per-second series")
    parser.add_argument("--json", type=Path, help="write summary, series and records here")
    return parser


def run(args: argparse.Namespace) -> LoadResult:
    target = Target(
        model=args.model,
        endpoints=list(args.endpoint),
        connections_per_endpoint=args.connections,
        request_timeout_s=args.timeout,
    )
    limits = Limits(max_requests=args.max_requests, max_wall_s=args.max_wall)
    chosen = [x is not None for x in (args.trace, args.rate, args.concurrency)]
    if sum(chosen) != 1:
        raise SystemExit("choose exactly one of --trace, --rate, --concurrency")
    if args.trace is not None:
        return run_trace(
            args.trace,
            target,
            compress=args.compress,
            start_s=args.start,
            duration_s=args.duration,
            limits=limits,
        )
    if args.rate is not None:
        return run_constant_rate(target, args.rate, args.duration, limits)
    return run_closed_loop(target, args.concurrency, args.duration, limits, args.warmup)


def format_series(result: LoadResult) -> str:
    lines = ["second  arrivals  completions  failures  p95_ms"]
    for s in result.time_series():
        p95 = "-" if s.p95_ms is None else f"{s.p95_ms:.1f}"
        lines.append(f"{s.second:6d}  {s.arrivals:8d}  {s.completions:11d}  {s.failures:8d}  {p95}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run(args)
    except ValueError as err:  # bad endpoint, bad trace, bad numbers
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.summary_table())
    if args.series:
        print()
        print(format_series(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_dict(), indent=1))
    return 0 if result.successes > 0 else 1
