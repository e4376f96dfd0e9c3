"""`gpuserve simulate` for LLM services (model.format vllm or tensorrtllm).

The operator's LLM policy from the spec, on the engine of the class the service prefers,
replays a token trace through the token-level cluster simulator (gpuserve/sim/llm/), and
the prediction is printed: TTFT and TPOT attainment, GPU-hours, cost, cost per million
output tokens, goodput per GPU, replicas.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import cast

from cli.errors import SimulateError
from cli.plot_llm import plot_llm
from gpuserve.api.models import AcceleratorClassSpec, InferenceService
from gpuserve.llm.params import EngineParams
from gpuserve.sim.llm.cluster import ClusterRun, Routing
from gpuserve.sim.llm.from_spec import (
    LLMSetup,
    finished_at,
    fit_to_trace,
    llm_setup,
    run_llm_policy,
    within_context,
)
from gpuserve.sim.llm.lineup import LLM_POLICIES, LLMPolicyName
from gpuserve.sim.llm.traces import TokenTrace, azure_conversation, mooncake

# Policies only the LLM path runs (the CLI's --policy accepts them beside the others).
LLM_ONLY: tuple[str, ...] = tuple(p for p in LLM_POLICIES if p not in ("gpuserve", "oracle"))
_SAME = {"static": "static-peak"}  # the request-level name of the same policy


def run_llm(
    args: argparse.Namespace,
    service: InferenceService,
    classes: dict[str, AcceleratorClassSpec],
) -> int:
    name = service.metadata.name
    policy_name = _policy_name(args.policy, service)
    if not args.compress > 0:
        raise SimulateError(f"--compress: must be positive, got {args.compress:g}")
    try:
        setup = llm_setup(service.spec, classes)
    except ValueError as exc:
        raise SimulateError(f"InferenceService {name}: {exc}") from exc
    trace = load_token_trace(args.trace, compress=args.compress)
    served, refused = within_context(trace, setup.params.max_model_len)
    if not served.requests:
        raise SimulateError(
            f"{args.trace}: all {refused} requests exceed llm.maxContextLength "
            f"{setup.params.max_model_len} (prompt + output tokens)"
        )
    try:
        params = fit_to_trace(setup.params, served)
    except ValueError as exc:
        raise SimulateError(
            f"{args.trace}: the engine cannot use its prefix hashes: {exc}"
        ) from exc
    policy = replace(setup.policy, params=params)
    routing = cast(Routing, args.routing)
    started = time.perf_counter()
    run = run_llm_policy(policy_name, policy, served, routing=routing, seed=args.seed)
    elapsed = time.perf_counter() - started
    print(_inputs(setup, params, args.trace, served, refused))
    print(_report(name, setup, run, refused, routing, elapsed))
    if args.plot:
        title = (
            f"{name} ({run.policy}): {args.trace.name} at {args.compress:g}x, "
            f"{run.attainment():.2%} within TTFT and TPOT"
        )
        try:
            plot_llm(run, args.plot, title=title)
        except OSError as exc:
            raise SimulateError(f"--plot {args.plot}: {exc.strerror or exc}") from exc
        print(f"plot: {args.plot}")
    return 0


def _policy_name(given: str, service: InferenceService) -> LLMPolicyName:
    chosen = _SAME.get(given, given)
    if chosen not in LLM_POLICIES:
        raise SimulateError(
            f"--policy {given}: a request-level policy; {service.metadata.name} is an LLM "
            f"service ({service.spec.model.format}): one of {', '.join(LLM_POLICIES)}"
        )
    return chosen


def load_token_trace(path: Path, *, compress: float) -> TokenTrace:
    """An Azure conversation CSV, or Mooncake JSON lines (told apart by the first line)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SimulateError(f"{path}: {exc.strerror or exc}") from exc
    first = next((line for line in lines if line.strip()), "")
    try:
        if first.lstrip().startswith("{"):
            trace = mooncake(lines, compress=compress, name=path.stem)
        else:
            trace = azure_conversation(lines, compress=compress)
    except (ValueError, TypeError) as exc:
        kind = "Mooncake JSON lines" if first.lstrip().startswith("{") else "Azure CSV"
        raise SimulateError(f"{path} ({kind}): {exc}") from exc
    if not trace.requests:
        raise SimulateError(f"{path}: no requests")
    return trace


def _inputs(
    setup: LLMSetup, params: EngineParams, trace_path: Path, trace: TokenTrace, refused: int
) -> str:
    """What the prediction rests on: a user must see when defaults stood in for the
    class's own engine."""
    p, o = params, setup.policy.objectives
    cache = "on" if p.prefix_caching else "off"
    lines = [
        f"engine: {setup.engine_source}",
        f"  class {setup.class_name}: {setup.accelerator.gpu_product}, {setup.gpus_per_pod} "
        f"GPU(s) per replica at {setup.cost_per_gpu_hour:g}/h per GPU; start-up "
        f"{setup.policy.startup_s:g}s",
        f"  KV cache {p.num_blocks} blocks x {p.block_size} tokens ({p.capacity_tokens} "
        f"tokens), {p.max_running} running sequences, context {p.max_model_len}, prefix "
        f"caching {cache}; step {p.decode_base_s * 1e3:.3g}ms + {p.decode_s_per_seq * 1e6:.3g}us "
        f"per sequence + {p.decode_s_per_context_token * 1e9:.3g}ns per context token, "
        f"prefill {p.prefill_s_per_token * 1e6:.3g}us per token",
        f"objectives: TTFT {_duration(o.ttft_s)}, TPOT {_duration(o.tpot_s)}, met by "
        f"{o.quantile:.0%} of requests",
        f"trace: {trace_path.name} ({trace.name}): {len(trace.requests)} requests over "
        f"{trace.duration:.0f}s",
    ]
    if refused:
        lines.append(
            f"  refused: {refused} request(s) whose prompt + output exceed llm.maxContextLength "
            f"{p.max_model_len} (vLLM rejects them; counted as missed below)"
        )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return "unset" if seconds >= 1e8 else f"{seconds * 1000:g}ms"


def _report(
    name: str,
    setup: LLMSetup,
    run: ClusterRun,
    refused: int,
    routing: str,
    elapsed: float,
) -> str:
    outcomes = run.outcomes
    end = max(map(finished_at, outcomes))
    gpu_hours = run.gpu_hours * setup.gpus_per_pod
    cost = gpu_hours * setup.cost_per_gpu_hour
    tokens = sum(o.output_tokens for o in outcomes)
    most = max(n for _, n in run.replicas)
    total = len(outcomes) + refused
    both_all = sum(map(run.met, outcomes)) / total
    lines = [
        f"{name}: policy {run.policy}, routing {routing}, {len(outcomes)} requests served "
        f"until {end:.0f}s, simulated in {elapsed:.1f}s "
        f"({elapsed / max(end, 1.0) * 3600:.1f}s per simulated hour)",
        f"attainment of requests served: TTFT {run.ttft_attainment():.2%}, TPOT "
        f"{run.tpot_attainment():.2%}, both {run.attainment():.2%} (objective "
        f"{run.objectives.quantile:.0%})"
        + (f"; of all {total} requests: both {both_all:.2%}" if refused else ""),
        f"TTFT p50 {run.ttft_percentile(50) * 1000:.0f}ms p95 "
        f"{run.ttft_percentile(95) * 1000:.0f}ms; TPOT mean "
        f"{sum(o.tpot_s for o in outcomes) / len(outcomes) * 1000:.1f}ms; prefix-cache hits "
        f"{run.hit_rate:.1%} of prompt tokens; preemptions {run.preemptions}",
        f"GPU-hours {gpu_hours:.4f} (replicas from creation until drained, x{setup.gpus_per_pod}"
        f" GPU per replica), cost {cost:.3f} ({setup.cost_per_gpu_hour:g}/h per GPU), "
        f"{cost / tokens * 1e6:.3f} per million output tokens ({tokens} tokens)",
        f"goodput {run.goodput_per_gpu() / setup.gpus_per_pod:.0f} output tokens/s per GPU "
        f"(requests within both objectives); max replicas {most}, bounds "
        f"{setup.policy.min_replicas}-{setup.policy.max_replicas}; the warm pool is not "
        "simulated",
        f"replicas (per {end / 24:.0f}s): {_replicas_line(run, end)}",
    ]
    return "\n".join(lines)


def replicas_at(run: ClusterRun, at: float) -> int:
    """Replicas (serving + starting) the scaler had asked for at ``at``."""
    count = run.replicas[0][1]
    for when, n in run.replicas:
        if when > at:
            break
        count = n
    return count


def _replicas_line(run: ClusterRun, end: float) -> str:
    size = max(end / 24.0, 1e-9)
    return " ".join(str(replicas_at(run, (k + 0.5) * size)) for k in range(24))
