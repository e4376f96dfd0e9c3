"""The LLM capacity model (gpuserve.llm.capacity) against the engine it models.

    .venv/bin/python bench/llm_model_check.py [--seconds 900] [--seeds 3]
        [--factors 0.5 0.8 1.0 1.1 1.2 1.3] [--only azure,mooncake]
        [--ttft S] [--tpot S]

The autoscaler sizes an LLM service by the rate one replica sustains within its token
objectives (``replica_capacity``). This bench asks how close that rate is, per token mix
of the LLM capacity bench (``bench/llm_capacity.py``): the Azure conversation trace's mix
on the chat engine (TTFT 1 s, TPOT 50 ms; the bursty, flash-crowd, diurnal and drift
workloads draw the same mix) and the Mooncake conversation trace's on the long-context
engine (TTFT 30 s, TPOT 100 ms). One replica of the simulator's engine serves Poisson
arrivals whose token counts are drawn from the mix (without prefix hashes: no hits, as the
model is told), at multiples of the model's capacity, ``seeds`` runs of ``seconds`` each.

Per rate it prints the share of requests within both objectives and within each, and the
model's figures beside the engine's: its mean gap between a stream's tokens
(``output_gap_s``) against the engine's, over the tokens as vLLM's TPOT histogram takes
it (until 2026-12-07 the column held the model's mean step against the mean of the
requests' own times per output token), and both objectives' figures at the quantile.
Then the measured capacity: the largest rate at which the runs' mean attainment reaches
the objectives' quantile, found by bisection, and its ratio to the model's; and where the
engine saturates (what it admits when offered twice the model's rate) against the rate at
which the model's work per request fills the engine. The model is given the mix's exact
statistics (the prompts' mean, quantile and higher moments, the mean output), its best
case: the operator reads them from one minute's histograms.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llm_capacity import workloads  # noqa: E402

from gpuserve.llm.capacity import (  # noqa: E402
    LoadShape,
    TokenObjectives,
    output_gap_s,
    predict,
    replica_capacity,
    request_work_s,
)
from gpuserve.llm.params import EngineParams  # noqa: E402
from gpuserve.sim.argtypes import positive_int  # noqa: E402
from gpuserve.sim.llm.cluster import ClusterConfig, ClusterRun, simulate_cluster  # noqa: E402
from gpuserve.sim.llm.lineup import trace_shape  # noqa: E402
from gpuserve.sim.llm.scalers import Static  # noqa: E402
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace  # noqa: E402

MIXES = {"azure": ("azure-conv", "x2"), "mooncake": ("mooncake-conv", "x1")}
BISECTIONS = 6


@dataclass(frozen=True)
class Mix:
    name: str
    params: EngineParams
    objectives: TokenObjectives
    trace: TokenTrace  # its requests' token counts are drawn; their times are not used

    def shape(self) -> LoadShape:
        return trace_shape(self.trace, self.objectives.quantile)


@dataclass(frozen=True)
class Measured:
    both: float
    ttft: float
    tpot: float
    tpot_mean_s: float
    tpot_high_s: float
    ttft_high_s: float


def mixes(only: list[str], ttft_s: float | None = None, tpot_s: float | None = None) -> list[Mix]:
    """The mixes named, each with its workload's objectives unless ``ttft_s`` or ``tpot_s``
    replace them (the model against objectives the benches do not use)."""
    found = {(w.name, w.load): w for w in workloads(None)}
    out = []
    for name in only:
        w = found[MIXES[name]]
        objectives = replace(
            w.objectives,
            ttft_s=w.objectives.ttft_s if ttft_s is None else ttft_s,
            tpot_s=w.objectives.tpot_s if tpot_s is None else tpot_s,
        )
        out.append(Mix(name, w.params, objectives, w.make(0)))
    return out


def poisson_run(mix: Mix, rate: float, seconds: float, seed: int) -> ClusterRun:
    rng = random.Random(seed)
    clock, requests = 0.0, []
    while True:
        clock += rng.expovariate(rate)
        if clock >= seconds:
            break
        drawn = rng.choice(mix.trace.requests)
        requests.append(TokenRequest(clock, drawn.prompt_tokens, drawn.output_tokens))
    config = ClusterConfig(mix.params, mix.objectives, seed=seed)
    trace = TokenTrace(f"{mix.name} poisson {rate:.3f}/s", tuple(requests))
    return simulate_cluster(replace(config, initial_replicas=1), trace, Static(1))


def measure(mix: Mix, rate: float, seconds: float, seeds: int) -> Measured:
    runs = [poisson_run(mix, rate, seconds, seed) for seed in range(seeds)]
    outcomes = [o for run in runs for o in run.outcomes]
    q = mix.objectives.quantile
    gaps = np.array([o.tpot_s for o in outcomes if o.output_tokens > 1])
    firsts = np.array([o.ttft_s for o in outcomes])
    return Measured(
        both=float(np.mean([run.attainment() for run in runs])),
        ttft=float(np.mean(firsts <= mix.objectives.ttft_s)),
        tpot=float(np.mean(gaps <= mix.objectives.tpot_s)),
        # Over the tokens, as vLLM's TPOT histogram averages (each request's gaps).
        tpot_mean_s=float(
            sum(o.tpot_s * (o.output_tokens - 1) for o in outcomes if o.output_tokens > 1)
            / sum(o.output_tokens - 1 for o in outcomes if o.output_tokens > 1)
        ),
        tpot_high_s=float(np.quantile(gaps, q)),
        ttft_high_s=float(np.quantile(firsts, q)),
    )


def saturation(mix: Mix, model_rate: float, seconds: float) -> float:
    """Requests/s the engine admits (first tokens) over the last two thirds of a run offered
    twice ``model_rate``: its throughput when prompts always wait."""
    run = poisson_run(mix, 2.0 * model_rate, seconds, 0)
    firsts = sorted(o.arrival_s + o.ttft_s for o in run.outcomes)
    begin, end = firsts[len(firsts) // 3], firsts[-1]
    return sum(begin <= t <= end for t in firsts) / (end - begin)


def measured_capacity(mix: Mix, model_rate: float, seconds: float, seeds: int) -> float:
    """The largest rate whose mean attainment reaches the quantile: bisection between 0.5x
    and 1.5x the model's (0.5x is assumed to meet it), the upper end doubled while it still
    meets it (a model far below the engine)."""
    low, high = 0.5 * model_rate, 1.5 * model_rate
    for _ in range(4):
        if measure(mix, high, seconds, seeds).both < mix.objectives.quantile:
            break
        low, high = high, 2.0 * high
    for _ in range(BISECTIONS):
        mid = (low + high) / 2.0
        if measure(mix, mid, seconds, seeds).both >= mix.objectives.quantile:
            low = mid
        else:
            high = mid
    return low


def table(mix: Mix, factors: list[float], seconds: float, seeds: int) -> None:
    shape = mix.shape()
    cap = replica_capacity(mix.params, shape, mix.objectives)
    o = mix.objectives
    print(
        f"\n### {mix.name}: TTFT {o.ttft_s:g} s, TPOT {1e3 * o.tpot_s:g} ms, "
        f"p{100 * o.quantile:g}; {seeds} x {seconds:g} s of Poisson arrivals per rate\n"
    )
    print(
        f"The model: **{cap.rate:.3f} req/s** per replica ({cap.limit}-bound); mix: prompt mean "
        f"{shape.prompt_mean:.0f}, p{100 * o.quantile:g} {shape.prompt_high:.0f}, rms "
        f"{shape.prompt_rms:.0f} tokens, output mean {shape.output_mean:.0f}.\n"
    )
    print(
        "| x model | req/s | both % | TTFT % | TPOT % | mean gap model / TPOT mean ms "
        "| TPOT at q model / engine ms | TTFT at q model / engine ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for factor in factors:
        rate = cap.rate * factor
        p = predict(mix.params, shape, o.quantile, rate)
        gap = output_gap_s(mix.params, shape, rate)
        m = measure(mix, rate, seconds, seeds)
        print(
            f"| {factor:.2f} | {rate:.3f} | {100 * m.both:.2f} | {100 * m.ttft:.2f} | "
            f"{100 * m.tpot:.2f} | {1e3 * gap:.1f} / {1e3 * m.tpot_mean_s:.1f} | "
            f"{1e3 * p.tpot_s:.1f} / {1e3 * m.tpot_high_s:.1f} | "
            f"{_ms(p.ttft_s)} / {1e3 * m.ttft_high_s:.0f} |",
            flush=True,
        )
    found = measured_capacity(mix, cap.rate, seconds, seeds)
    print(
        f"\nMeasured capacity (mean attainment >= {100 * o.quantile:g}%): **{found:.3f} req/s**, "
        f"{found / cap.rate:.2f}x the model's."
    )
    work = request_work_s(mix.params, shape)
    print(
        f"Saturation: the engine admits **{saturation(mix, cap.rate, seconds):.3f} req/s** "
        f"when offered {2 * cap.rate:.3f}; the model's work per request ({1e3 * work:.1f} ms "
        f"beyond the fixed cost per step) fills the engine at {1 / work:.3f}."
    )


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.0f}" if math.isfinite(seconds) else "inf"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=900.0)
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--factors", type=float, nargs="+", default=[0.5, 0.8, 1.0, 1.1, 1.2, 1.3])
    parser.add_argument("--only", default=",".join(MIXES), help="mixes: azure, mooncake")
    parser.add_argument("--ttft", type=float, default=None, help="TTFT objective (s) for all")
    parser.add_argument("--tpot", type=float, default=None, help="TPOT objective (s) for all")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in MIXES]
    if unknown:
        parser.error(f"--only: unknown mix {', '.join(unknown)} (known: {', '.join(MIXES)})")
    for mix in mixes(names, args.ttft, args.tpot):
        table(mix, args.factors, args.seconds, args.seeds)


if __name__ == "__main__":
    main()
