"""`gpuserve simulate` for LLM services (model.format vllm or tensorrtllm).

The operator's LLM policy from the spec, on the engine of the class placement puts it on,
replays a token trace through the token-level cluster simulator (gpuserve/sim/llm/), and
the prediction is printed: TTFT and TPOT attainment, GPU-hours, cost, cost per million
output tokens, goodput per GPU, replicas. With --compare-classes the same run is made on
each class the service names, alone, and one table names the cheapest class that meets the
objectives.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from cli.errors import SimulateError
from cli.keda_line import keda_line
from cli.plot_llm import plot_llm
from cli.trace_files import quiet_note, trace_lines
from gpuserve.api.models import AcceleratorClassSpec, InferenceService
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.llm.capacity import TokenObjectives
from gpuserve.llm.params import EngineParams
from gpuserve.resources.keda import llm_keda_scaling
from gpuserve.sim.keda_engine import RENDERED_KEDA
from gpuserve.sim.llm.cluster import ClusterRun, Routing
from gpuserve.sim.llm.from_spec import (
    LLMSetup,
    finished_at,
    fit_to_trace,
    llm_setup,
    run_llm_policy,
    within_context,
)
from gpuserve.sim.llm.keda_rendered import KedaReplay
from gpuserve.sim.llm.lineup import LLM_POLICIES, LLMPolicyName, trace_shape
from gpuserve.sim.llm.traces import TokenTrace, azure_conversation, mooncake
from gpuserve.sim.trace_rows import is_mooncake

# Policies only the LLM path runs (the CLI's --policy accepts them beside the others).
LLM_ONLY: tuple[str, ...] = tuple(
    p for p in LLM_POLICIES if p not in ("gpuserve", RENDERED_KEDA, "oracle")
)
_SAME = {"static": "static-peak"}  # the request-level name of the same policy


def run_llm(
    args: argparse.Namespace,
    service: InferenceService,
    classes: dict[str, AcceleratorClassSpec],
) -> int:
    name = service.metadata.name
    _refuse_request_flags(args, name)
    policy_name = _policy_name(args.policy, service)
    if args.no_keda_calibration and policy_name != RENDERED_KEDA:
        raise SimulateError(f"--no-keda-calibration goes with --policy {RENDERED_KEDA}")
    # --compare-classes takes every class the service names, whichever placement uses; the
    # spec is checked on the first of them before the trace is read.
    first = service.spec.accelerators.classes[0] if args.compare_classes else None
    try:
        setup = llm_setup(service.spec, classes, first)
    except ValueError as exc:
        raise SimulateError(f"InferenceService {name}: {exc}") from exc
    trace = load_token_trace(args.trace, compress=args.compress)
    if args.compare_classes:
        return _compare_classes(args, service, classes, policy_name, trace)
    if not setup.fits:
        # Placement would put the pods there and they would not load: a figure for it
        # would be made up.
        fix = (
            "state the class's memoryGiB so placement skips it, or put a larger class first"
            if setup.accelerator.memory_gib is None
            else "its memoryGiB passes placement's check, which leaves out the engine's "
            "activations: put a larger class first"
        )
        raise SimulateError(
            f"InferenceService {name}: class {setup.class_name}, where placement puts it, "
            f"cannot hold the model ({setup.no_engine}); {fix} (--compare-classes lists "
            "each class with what it can do)"
        )
    sim = _simulate_setup(args, service, setup, policy_name, trace)
    print(_inputs(setup, sim.params, args.trace, sim.served, sim.refused))
    print(_report(name, setup, sim, args.routing))
    for line in (sim.bursts_covered, sim.scaling_limited, sim.keda_token_mix):
        if line is not None:
            print(line)
    if args.plot:
        _plot(args, name, sim.run, args.plot)
    return 0


def _refuse_request_flags(args: argparse.Namespace, name: str) -> None:
    """Flags of the request-level replay, which a token replay has no use for: taken
    silently, a user would read a figure as one made with them."""
    given = []
    if args.warmup is not None:
        given.append(
            "--warmup (a token replay starts with the replicas the trace's first minute "
            "needs, and measures from its first request)"
        )
    if args.tokens_per_item is not None:
        given.append("--tokens-per-item (a token replay batches tokens, not items)")
    if given:
        raise SimulateError(
            f"InferenceService {name} is an LLM service, replayed token by token: "
            + "; ".join(given)
            + " applies to request-level services only"
        )


@dataclass(frozen=True, slots=True)
class Simulated:
    """One policy's run of the trace on one class, and the figures reported of it."""

    params: EngineParams  # the engine as simulated (fitted to the trace's hash blocks)
    served: TokenTrace  # the requests within the context length
    refused: int
    run: ClusterRun
    elapsed_s: float  # wall-clock time of the simulation itself
    gpu_hours: float
    cost: float
    output_tokens: int
    max_replicas: int
    both_of_all: float  # within both objectives, of all requests (refused ones missed)
    bursts_covered: str | None  # what the BurstsCovered condition would have said
    scaling_limited: str | None  # and the ScalingLimited condition
    keda_token_mix: str | None  # gpuserve-keda: the last status.kedaTokenMix


def _simulate_setup(
    args: argparse.Namespace,
    service: InferenceService,
    setup: LLMSetup,
    policy_name: LLMPolicyName,
    trace: TokenTrace,
) -> Simulated:
    """The one simulation both the single-class and the per-class comparison run."""
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
    # The ScaledObject as the operator renders it: from the spec and the class's engine,
    # which knows nothing of the trace.
    keda = (
        KedaReplay(
            policy_config_from_spec(service.spec),
            setup.class_name,
            calibrate=not args.no_keda_calibration,
        )
        if policy_name == RENDERED_KEDA
        else None
    )
    if keda is not None:
        first = llm_keda_scaling(keda.config, setup.policy, setup.class_name)
        print(keda_line(first, min_replicas=setup.policy.min_replicas, llm=True))
    started = time.perf_counter()
    ran = run_llm_policy(
        policy_name,
        policy,
        served,
        routing=cast(Routing, args.routing),
        seed=args.seed,
        keda=keda,
    )
    run = ran.run
    elapsed = time.perf_counter() - started
    gpu_hours = run.gpu_hours * setup.gpus_per_pod
    outcomes = run.outcomes
    return Simulated(
        params=params,
        served=served,
        refused=refused,
        run=run,
        elapsed_s=elapsed,
        gpu_hours=gpu_hours,
        cost=gpu_hours * setup.cost_per_gpu_hour,
        output_tokens=sum(o.output_tokens for o in outcomes),
        max_replicas=max(n for _, n in run.replicas),
        both_of_all=sum(map(run.met, outcomes)) / (len(outcomes) + refused),
        bursts_covered=ran.bursts_covered,
        scaling_limited=ran.scaling_limited,
        keda_token_mix=ran.keda_token_mix,
    )


def _plot(args: argparse.Namespace, name: str, run: ClusterRun, out: Path) -> None:
    title = (
        f"{name} ({run.policy}): {args.trace.name} at {args.compress:g}x, "
        f"{run.attainment():.2%} within TTFT and TPOT"
    )
    try:
        plot_llm(run, out, title=title)
    except OSError as exc:
        raise SimulateError(f"--plot {out}: {exc.strerror or exc}") from exc
    print(f"plot: {out}")


def _compare_classes(
    args: argparse.Namespace,
    service: InferenceService,
    classes: dict[str, AcceleratorClassSpec],
    policy_name: LLMPolicyName,
    trace: TokenTrace,
) -> int:
    """Each class the service names, alone, on the same trace and policy: one table and
    the cheapest class that meets both objectives."""
    name = service.metadata.name
    rows: list[tuple[LLMSetup, Simulated | None]] = []
    for class_name in service.spec.accelerators.classes:
        try:
            setup = llm_setup(service.spec, classes, class_name)
        except ValueError as exc:
            raise SimulateError(f"InferenceService {name}: {exc}") from exc
        # Without an engine of its own a class would be priced as the defaults' H100, and
        # one placement skips would never run the service: a comparison on either would be
        # made up, so the class is listed, not simulated.
        unused = setup.no_engine or setup.refused_by_placement
        sim = None if unused else _simulate_setup(args, service, setup, policy_name, trace)
        rows.append((setup, sim))
    print(_comparison(name, policy_name, args, trace, rows))
    if args.plot:
        for setup, sim in rows:
            if sim is not None:
                out = args.plot.with_name(f"{args.plot.stem}-{setup.class_name}{args.plot.suffix}")
                _plot(args, f"{name} on {setup.class_name}", sim.run, out)
    return 0


def _comparison(
    name: str,
    policy_name: str,
    args: argparse.Namespace,
    trace: TokenTrace,
    rows: list[tuple[LLMSetup, Simulated | None]],
) -> str:
    objectives = rows[0][0].policy.objectives
    simulated = [(setup, sim) for setup, sim in rows if sim is not None]
    elapsed = sum(sim.elapsed_s for _, sim in simulated)
    refused = simulated[0][1].refused if simulated else 0
    lines = [
        _objectives_line(objectives),
        _trace_line(args.trace, trace),
        f"{name}: policy {policy_name}, routing {args.routing}, each class alone "
        f"({len(simulated)} simulated in {elapsed:.1f}s)",
    ]
    if refused:
        lines.append(
            f"  refused on every class: {refused} request(s) whose prompt + output exceed "
            "llm.maxContextLength (attainment below is of those served; the verdict counts "
            "them as missed)"
        )
    header = (
        "class",
        "GPU",
        "ms/token b1",
        "prefill us/tok",
        "KV blocks",
        "TTFT %",
        "TPOT %",
        "both %",
        "GPU-hours",
        "cost",
        "per M out",
        "max repl",
    )
    table: list[tuple[str, ...]] = [header]
    notes: list[str] = []
    for setup, sim in rows:
        gpu = setup.accelerator.gpu_product + (
            f" {setup.accelerator.mig.profile}" if setup.accelerator.mig else ""
        )
        if sim is None:
            table.append((setup.class_name, gpu, *("-" for _ in header[2:])))
            why = setup.no_engine or setup.refused_by_placement
            notes.append(f"  {setup.class_name}: not simulated, {why}")
            continue
        p, run = sim.params, sim.run
        # Batch 1 at a 1024-token context: the figure docs/llm.md compares with vLLM's.
        per_token = p.step_cost_s(0, 1, 1024)
        table.append(
            (
                setup.class_name,
                gpu,
                f"{per_token * 1e3:.1f}",
                f"{p.prefill_s_per_token * 1e6:.1f}",
                str(p.num_blocks),
                f"{run.ttft_attainment():.2%}"[:-1],
                f"{run.tpot_attainment():.2%}"[:-1],
                f"{run.attainment():.2%}"[:-1],
                f"{sim.gpu_hours:.3f}",
                f"{sim.cost:.3f}",
                f"{sim.cost / sim.output_tokens * 1e6:.3f}",
                str(sim.max_replicas),
            )
        )
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    for row in table:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    lines.extend(notes)
    lines.append(_verdict(simulated, objectives.quantile))
    return "\n".join(lines)


def _verdict(simulated: list[tuple[LLMSetup, Simulated]], quantile: float) -> str:
    met = [(sim.cost, setup.class_name) for setup, sim in simulated if sim.both_of_all >= quantile]
    if met:
        cost, best = min(met)
        return (
            f"cheapest meeting both objectives for {quantile:.0%} of requests: {best} "
            f"(cost {cost:.3f})"
        )
    if not simulated:
        return "no class was simulated"
    closest, sim = max(simulated, key=lambda row: row[1].both_of_all)
    return (
        f"no class meets both objectives for {quantile:.0%} of requests; closest: "
        f"{closest.class_name} ({sim.both_of_all:.2%} of requests, cost {sim.cost:.3f})"
    )


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
        lines = trace_lines(path)
    except OSError as exc:
        raise SimulateError(f"{path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise SimulateError(f"{path}: {exc}") from exc
    jsonl = is_mooncake(lines)
    try:
        if jsonl:
            trace = mooncake(lines, compress=compress, name=path.stem)
        else:
            trace = azure_conversation(lines, compress=compress, name=path.stem)
    except (ValueError, TypeError) as exc:
        kind = "Mooncake JSON lines" if jsonl else "Azure CSV"
        raise SimulateError(f"{path} ({kind}): {exc}") from exc
    if not trace.requests:
        raise SimulateError(f"{path}: no requests")
    if note := quiet_note([r.arrival_s * compress for r in trace.requests]):
        print(note)
    return trace


def _inputs(
    setup: LLMSetup, params: EngineParams, trace_path: Path, trace: TokenTrace, refused: int
) -> str:
    """What the prediction rests on: a user must see when defaults stood in for the
    class's own engine."""
    p, o = params, setup.policy.objectives
    cache = "on" if p.prefix_caching else "off"
    lines = [
        *(f"placement skips: {why}" for why in setup.skipped),
        f"engine: {setup.engine_source}",
        f"  class {setup.class_name}: {setup.accelerator.gpu_product}, {setup.gpus_per_pod} "
        f"GPU(s) per replica at {setup.cost_per_gpu_hour:g}/h per GPU; start-up "
        f"{setup.policy.startup_s:g}s",
        f"  KV cache {p.num_blocks} blocks x {p.block_size} tokens ({p.capacity_tokens} "
        f"tokens), {p.max_running} running sequences, context {p.max_model_len}, prefix "
        f"caching {cache}; step {p.decode_base_s * 1e3:.3g}ms + {p.decode_s_per_seq * 1e6:.3g}us "
        f"per sequence + {p.decode_s_per_context_token * 1e9:.3g}ns per context token, "
        f"prefill {p.prefill_s_per_token * 1e6:.3g}us per token + "
        f"{p.prefill_s_per_token_pair * 1e9:.3g}ns per token it attends to, in chunks of at most "
        f"{p.max_batched_tokens} tokens a step (llm.maxBatchedTokens)",
        _objectives_line(o),
        _trace_line(trace_path, trace, refused=refused),
        _mix_line(setup, trace),
    ]
    if refused:
        lines.append(
            f"  refused: {refused} request(s) whose prompt + output exceed llm.maxContextLength "
            f"{p.max_model_len} (the engine rejects them; counted as missed below); "
            f"{len(trace.requests)} replayed"
        )
    return "\n".join(lines)


def _mix_line(setup: LLMSetup, trace: TokenTrace) -> str:
    """The trace's token mix beside the one the service states (or the default it
    gets): the rule sizes for the stated one until it measures traffic, and a KEDA
    service's thresholds always are."""
    q = setup.policy.objectives.quantile
    seen, stated = trace_shape(trace, q), setup.policy.fallback_shape
    return (
        f"  token mix: prompts {seen.prompt_mean:.0f} tokens on average ({seen.prompt_high:.0f} "
        f"at p{100 * q:g}), {seen.output_mean:.0f} output tokens; llm.expectedTokens "
        f"{{prompt: {stated.prompt_mean:.0f}, output: {stated.output_mean:.0f}, promptHigh: "
        f"{stated.prompt_high:.0f}}} is sized for before a measurement (under scaling.engine "
        "keda, always)"
    )


def _objectives_line(o: TokenObjectives) -> str:
    return (
        f"objectives: TTFT {_duration(o.ttft_s)}, TPOT {_duration(o.tpot_s)}, met by "
        f"{o.quantile:.0%} of requests"
    )


def _trace_line(path: Path, trace: TokenTrace, *, refused: int = 0) -> str:
    """``refused``: requests the engine refuses, already left out of ``trace``."""
    return (
        f"trace: {path.name} ({trace.name}): {len(trace.requests) + refused} requests over "
        f"{trace.duration:.0f}s"
        + (f", prefix hashes of {trace.block_size}-token blocks" if trace.hashed else "")
    )


def _duration(seconds: float) -> str:
    return "unset" if seconds >= 1e8 else f"{seconds * 1000:g}ms"


def _report(name: str, setup: LLMSetup, sim: Simulated, routing: str) -> str:
    run, outcomes, refused = sim.run, sim.run.outcomes, sim.refused
    end = max(map(finished_at, outcomes))
    total = len(outcomes) + refused
    lines = [
        f"{name}: policy {run.policy}, routing {routing}, {len(outcomes)} requests served "
        f"until {end:.0f}s, simulated in {sim.elapsed_s:.1f}s "
        f"({sim.elapsed_s / max(end, 1.0) * 3600:.1f}s per simulated hour)",
        f"attainment of requests served: TTFT {run.ttft_attainment():.2%}, TPOT "
        f"{run.tpot_attainment():.2%}, both {run.attainment():.2%} (objective "
        f"{run.objectives.quantile:.0%})"
        + (f"; of all {total} requests: both {sim.both_of_all:.2%}" if refused else ""),
        f"TTFT p50 {run.ttft_percentile(50) * 1000:.0f}ms p95 "
        f"{run.ttft_percentile(95) * 1000:.0f}ms; TPOT mean "
        f"{sum(o.tpot_s for o in outcomes) / len(outcomes) * 1000:.1f}ms; prefix-cache hits "
        f"{run.hit_rate:.1%} of prompt tokens; preemptions {run.preemptions}",
        f"GPU-hours {sim.gpu_hours:.4f} (replicas from creation until drained, "
        f"x{setup.gpus_per_pod} GPU per replica), cost {sim.cost:.3f} "
        f"({setup.cost_per_gpu_hour:g}/h per GPU), "
        f"{sim.cost / sim.output_tokens * 1e6:.3f} per million output tokens "
        f"({sim.output_tokens} tokens)",
        f"goodput {run.goodput_per_gpu() / setup.gpus_per_pod:.0f} output tokens/s per GPU "
        f"(requests within both objectives); max replicas {sim.max_replicas}, bounds "
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
