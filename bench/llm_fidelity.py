"""The LLM engine emulator on real Triton against the simulator, on the same replay.

    .venv/bin/python bench/llm_fidelity.py [--seconds 40] [--rates 2 4 6] [--seed 7]

One tritonserver (the pytriton wheel, CPU) serves the decoupled emulator model
(``demo://llm_emulator``). Per load: Poisson arrivals at ``rate`` for ``seconds``, each
request's prompt and output token counts drawn from the Azure conversation trace
(capped: every streamed token is a response round trip on this 2-core machine), streamed
over gRPC by the load generator, which records each request's time to first token and mean
time per output token as the client felt them. The simulator (gpuserve.llm.replay) serves
the same requests at the same offsets with the same engine parameters on a virtual clock.
The table compares the two per load: TTFT and TPOT mean, p50 and p95, and whether each is
within +-10%. The engine is slowed (20 ms a step) so that response round trips stay a small
part of a step, as docs/llm.md "How the emulator runs" asks.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from google.protobuf import text_format  # noqa: E402
from tritonclient.grpc import model_config_pb2 as pb  # noqa: E402

from e2e.loadgen.results import percentile  # noqa: E402
from e2e.loadgen.runner import Limits, Target  # noqa: E402
from e2e.loadgen.streams import StreamReplay, TimedRequest  # noqa: E402
from e2e.loadgen.trace import read_trace_rows  # noqa: E402
from e2e.models import resolve_demo_uri  # noqa: E402
from e2e.triton import TritonServer, write_model  # noqa: E402
from e2e.triton.requests import LLMRequest  # noqa: E402
from gpuserve.llm.params import EngineParams, params_from_strings  # noqa: E402
from gpuserve.llm.replay import replay  # noqa: E402

TRACE = REPO / "traces" / "azure-llm-conv-2023.csv"
EMULATOR = "demo://llm_emulator"
MODEL = "llm"
ENGINE = {
    "decode_base_s": "0.02",
    "prefill_s_per_token": "0.0001",
    "decode_s_per_seq": "0.001",
    "max_model_len": "4096",
}
MAX_PROMPT, MAX_OUTPUT = 2048, 48
TOLERANCE = 0.10


def requests_for(rate: float, seconds: float, seed: int) -> list[TimedRequest]:
    """Poisson arrivals at ``rate`` for ``seconds``, token counts from the Azure trace."""
    rng = random.Random(seed)
    mix = [(c, g) for _, c, g in read_trace_rows(TRACE)]
    out: list[TimedRequest] = []
    t = rng.expovariate(rate)
    while t < seconds:
        prompt, output = rng.choice(mix)
        request = LLMRequest(max(1, min(prompt, MAX_PROMPT)), max(1, min(output, MAX_OUTPUT)))
        out.append(TimedRequest(t, request))
        t += rng.expovariate(rate)
    return out


def simulated(
    requests: list[TimedRequest], params: EngineParams
) -> tuple[list[float], list[float]]:
    """TTFT and per-request mean TPOT (seconds) from the simulator."""
    run = replay(
        [(r.offset_s, r.request.prompt_tokens, r.request.output_tokens, ()) for r in requests],
        params,
    )
    ttft, tpot = [], []
    for timing in run.timings.values():
        first = timing.first_token_s
        if first is None:
            continue
        ttft.append(first - timing.arrival_s)
        if len(timing.token_s) > 1:
            tpot.append((timing.token_s[-1] - first) / (len(timing.token_s) - 1))
    return ttft, tpot


def measured(
    server: TritonServer, requests: list[TimedRequest], seconds: float
) -> tuple[list[float], list[float], int]:
    """TTFT and per-request mean TPOT (seconds) at the client, and the failures."""
    target = Target(model=MODEL, endpoints=[server.grpc_url], request_timeout_s=60.0)
    result = StreamReplay(requests, target, Limits(max_wall_s=seconds + 90)).start().join()
    ok = [r for r in result.records if r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    return ttft, tpot, result.failures


def _figures(values: list[float]) -> tuple[float, float, float]:
    mean = sum(values) / len(values) if values else float("nan")
    return mean, percentile(values, 50) or float("nan"), percentile(values, 95) or float("nan")


def start_server(repo: Path) -> TritonServer:
    config = pb.ModelConfig()
    text_format.Parse(resolve_demo_uri(EMULATOR).reference_config.read_text(), config)
    config.name = MODEL
    for key, value in ENGINE.items():
        config.parameters[key].string_value = value
    write_model(repo, MODEL, text_format.MessageToString(config), source=EMULATOR)
    return TritonServer(repo).start()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 4.0, 6.0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    params = params_from_strings(ENGINE)
    print(
        f"engine: {ENGINE}; prompts <= {MAX_PROMPT}, outputs <= {MAX_OUTPUT} tokens "
        f"(Azure conversation mix); {args.seconds:.0f} s per load, seed {args.seed}"
    )
    rows: list[str] = []
    misses = 0
    with tempfile.TemporaryDirectory(prefix="gpuserve-llm-fidelity-") as tmp:
        server = start_server(Path(tmp))
        try:
            for rate in args.rates:
                requests = requests_for(rate, args.seconds, args.seed)
                real_ttft, real_tpot, failed = measured(server, requests, args.seconds)
                sim_ttft, sim_tpot = simulated(requests, params)
                for name, real, sim in (
                    ("TTFT", real_ttft, sim_ttft),
                    ("TPOT", real_tpot, sim_tpot),
                ):
                    cells = []
                    for r, s in zip(_figures(real), _figures(sim), strict=True):
                        ratio = r / s - 1.0 if s > 0 else float("nan")
                        ok = abs(ratio) <= TOLERANCE
                        misses += 0 if ok else 1
                        cells.append(
                            f"{r * 1e3:.1f} / {s * 1e3:.1f} ({ratio:+.1%}{'' if ok else ' !'})"
                        )
                    rows.append(
                        f"| {rate:g} | {len(requests)} | {failed} | {name} | "
                        + " | ".join(cells)
                        + " |"
                    )
        finally:
            server.stop()
    print("\n| req/s | requests | failed | metric | mean ms real / sim | p50 | p95 |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{misses} figure(s) outside +-{TOLERANCE:.0%} (marked !)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
