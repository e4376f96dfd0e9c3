"""The factor the LLM rule fits on the engine its model describes, which should read 1.

    .venv/bin/python bench/llm_fit_check.py [--requests 4000] [--loads 0.1,0.2,...,0.7]
        [--only azure,azure-x8,mooncake,mooncake-flat,mooncake-quarter,mooncake-x3-out,lognormal]

The builtin LLM rule prices a service's engines by one factor on the model's time costs,
fitted from its replicas' mean time per output token at the load they carried
(``gpuserve.llm.calibrating``; ``gpuserve.llm.capacity.time_scale``). On the simulator's
engine with the model's own parameters (``gpuserve.llm.engine``) a fit that is right
reads 1 at every mix and load; one that reads more sizes every replica for an engine
that slow. Here one replica of that engine serves Poisson arrivals at the given shares
of its time (the model's ``r w``), ``requests`` requests drawn from each token mix, and
the table prints two fits of the measured mean gap between a stream's tokens: the mean
step run backwards (``k b / (1 - k r w)``, the rule until 2026-12-07) and the mean over
the tokens (``output_gap_s``, since then).

The mixes, on the engines of ``bench/llm_capacity.py`` (the chunks gpuserve renders for
each objective): the Azure conversation trace on the chat engine, and with its prompts
eight times as long on the long-context one; the Mooncake conversation trace on the
long-context engine, as it is, with every prompt its mean length, a quarter as long, and
with outputs three times as long; and log-normal prompts (median 4,000 tokens, sigma
1.2, capped at 120,000) with exponential outputs (mean 150). ``output_gap_s`` fits no
constant to them; its form was chosen among four on them (docs/bench-notes/
llm-capacity.md, "2026-12-07 (end of the day)"). Each mix draws the same requests at
every load (seed 3), and the same arrivals' gaps (seed 1). With outputs three times as
long the KV cache fills from 0.4 on, and sequences are preempted (54 times at 0.4, 706
at 0.5, 7,419 at 0.6): the rule fits no window with a preemption (it keeps the last
factor).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from llm_capacity import AZURE, MOONCAKE, _engines  # noqa: E402

from gpuserve.llm.capacity import LoadShape, request_work_s, time_scale  # noqa: E402
from gpuserve.llm.params import EngineParams  # noqa: E402
from gpuserve.llm.replay import mean_output_gap_s, poisson_requests, replay  # noqa: E402
from gpuserve.sim.argtypes import positive_int  # noqa: E402
from gpuserve.sim.llm.lineup import trace_shape  # noqa: E402
from gpuserve.sim.llm.traces import TokenRequest, TokenTrace, azure_conversation, mooncake  # noqa: E402

Tokens = list[tuple[int, int]]  # (prompt, output) of each request


@dataclass(frozen=True)
class Mix:
    name: str
    engine: str
    params: EngineParams
    tokens: Callable[[], Tokens]


def _azure() -> Tokens:
    trace = azure_conversation(AZURE.read_text().splitlines())
    return [(r.prompt_tokens, r.output_tokens) for r in trace.requests]


def _mooncake() -> Tokens:
    trace = mooncake(MOONCAKE.read_text().splitlines())
    return [(r.prompt_tokens, r.output_tokens) for r in trace.requests]


def _flat(tokens: Tokens) -> Tokens:
    mean = sum(p for p, _ in tokens) // len(tokens)
    return [(mean, o) for _, o in tokens]


def _lognormal() -> Tokens:
    rng = random.Random(7)
    return [
        (
            max(1, min(120_000, int(rng.lognormvariate(math.log(4000), 1.2)))),
            max(1, int(rng.expovariate(1 / 150))),
        )
        for _ in range(5000)
    ]


def mixes() -> dict[str, Mix]:
    chat, long = _engines(False)
    return {
        m.name: m
        for m in (
            Mix("azure", "chat", chat, _azure),
            Mix("azure-x8", "long", long, lambda: [(8 * p, o) for p, o in _azure()]),
            Mix("mooncake", "long", long, _mooncake),
            Mix("mooncake-flat", "long", long, lambda: _flat(_mooncake())),
            Mix(
                "mooncake-quarter",
                "long",
                long,
                lambda: [(max(1, p // 4), o) for p, o in _mooncake()],
            ),
            Mix("mooncake-x3-out", "long", long, lambda: [(p, 3 * o) for p, o in _mooncake()]),
            Mix("lognormal", "long", long, _lognormal),
        )
    }


@dataclass(frozen=True)
class Row:
    load: float
    gap_s: float
    ttft_mean_s: float
    per_step: float
    over_tokens: float | None


def measure(params: EngineParams, shape: LoadShape, load: float, drawn: Tokens) -> Row:
    """One replica serving ``drawn`` (whose mix is ``shape``) at ``load``."""
    rate = load / request_work_s(params, shape)
    run = replay(poisson_requests(drawn, rate, seed=1), params, fast=True)
    gap = mean_output_gap_s(run)
    ttft = sum(t.token_s[0] - t.arrival_s for t in run.timings.values()) / len(drawn)
    per_step = gap / (params.decode_base_s + gap * load)
    return Row(load, gap, ttft, per_step, time_scale(params, shape, rate, gap))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=positive_int, default=4000)
    parser.add_argument("--loads", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7")
    known = mixes()
    parser.add_argument("--only", default=",".join(known), help=", ".join(known))
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"--only: unknown mix {', '.join(unknown)} (known: {', '.join(known)})")
    try:
        loads = [float(x) for x in args.loads.split(",") if x]
    except ValueError:
        parser.error(f"--loads: comma-separated numbers, got {args.loads!r}")
    if not loads or not all(0 < x < 1 for x in loads):
        parser.error(f"--loads: shares of an engine's time in (0, 1), got {args.loads!r}")
    print(
        f"{args.requests} requests per mix and load, Poisson arrivals, one replica of the "
        "engine the model describes (a right fit reads 1).\n"
    )
    print(
        "| mix | engine | load (r w) | mean gap ms | mean TTFT / output token ms "
        "| fit: mean step | fit: over tokens |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        mix = known[name]
        pool = mix.tokens()
        pick = random.Random(3)
        drawn = [pool[pick.randrange(len(pool))] for _ in range(args.requests)]
        shape = trace_shape(
            TokenTrace(name, tuple(TokenRequest(0.0, p, o) for p, o in drawn)), 0.99
        )
        engine = f"{mix.engine} ({mix.params.max_batched_tokens}-token chunks)"
        for load in loads:
            row = measure(mix.params, shape, load, drawn)
            fit = "-" if row.over_tokens is None else f"{row.over_tokens:.3f}"
            output = shape.output_mean
            print(
                f"| {name} | {engine} | {load:.2f} | {1e3 * row.gap_s:.1f} | "
                f"{1e3 * row.ttft_mean_s / output:.2f} | {row.per_step:.3f} | {fit} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
