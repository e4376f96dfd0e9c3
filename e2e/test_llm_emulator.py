"""The LLM engine emulator on the real tritonserver (pytriton wheel, CPU): token streaming
over gRPC, continuous batching, the prefix cache and vLLM's metric names."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from e2e.loadgen.runner import Limits, Target
from e2e.loadgen.streams import StreamReplay, trace_requests
from e2e.models import resolve_demo_uri
from e2e.prometheus import PrometheusServer, prometheus_available
from e2e.triton import TritonServer, emulate_on_python_backend, triton_available, write_model
from e2e.triton.metrics import model_value, samples
from e2e.triton.pbtxt import top_level_name
from e2e.triton.process import wait_until
from e2e.triton.requests import LLMRequest, stream_llm
from gpuserve.api.models import InferenceServiceSpec
from gpuserve.llm import metrics as vllm
from gpuserve.llm.params import params_from_strings
from gpuserve.llm.replay import replay
from gpuserve.sim.llm.traces import mooncake
from gpuserve.triton.modelconfig import render_model_files

REPO_ROOT = Path(__file__).resolve().parent.parent

MODEL = "llm"
EMULATOR = "demo://llm_emulator"
# Slow steps, so that a CPU shared with other work cannot blur what the tests compare:
# 10 ms per step, 0.2 ms per uncached prompt token.
ENGINE = {
    "block_size": "16",
    "decode_base_s": "0.01",
    "prefill_s_per_token": "0.0002",
    "decode_s_per_seq": "0.0005",
}

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(not triton_available(), reason="nvidia-pytriton wheel not installed"),
]


def reference_config() -> pb.ModelConfig:
    config = pb.ModelConfig()
    text_format.Parse(resolve_demo_uri(EMULATOR).reference_config.read_text(), config)
    return config


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    config = reference_config()
    config.name = MODEL
    for key, value in ENGINE.items():
        config.parameters[key].string_value = value
    repo: Path = tmp_path_factory.mktemp("llm-repo")
    write_model(repo, MODEL, text_format.MessageToString(config), source=EMULATOR)
    server = TritonServer(repo).start()
    try:
        yield server
    finally:
        server.stop()
        assert server.process_group_pids() == [], "the Python stub outlived the server"
        assert server.errors() == []


def counter(triton: TritonServer, name: str, model: str = MODEL) -> float:
    return model_value(triton.metrics_text(), name, model)


def growth(
    triton: TritonServer, name: str, before: float, expected: float, model: str = MODEL
) -> float:
    """How much a counter grew, once it reached ``expected`` or 5 s passed: the model
    records its metrics just after it sends the tokens."""

    def grown() -> float:
        return counter(triton, name, model) - before

    wait_until(lambda: grown() >= expected, timeout=5.0, interval=0.05)
    return grown()


def test_catalogue_entry_matches_the_reference_config() -> None:
    entry, config = resolve_demo_uri(EMULATOR), reference_config()
    assert entry.decoupled and config.model_transaction_policy.decoupled
    assert entry.max_batch_size == config.max_batch_size == 0
    assert list(config.input) == list(entry.inputs)
    assert list(config.output) == list(entry.outputs)
    assert entry.parameters == {k: v.string_value for k, v in config.parameters.items()}


def test_tokens_stream_one_per_response_and_the_last_is_final(triton: TritonServer) -> None:
    run = stream_llm(triton.grpc_url, MODEL, [LLMRequest(40, 8), LLMRequest(40, 8, stream=False)])
    assert run.errors == []
    streamed, whole = run.responses
    assert streamed.texts == [f"t{i}" for i in range(8)]
    assert streamed.finals == [False] * 7 + [True]
    assert streamed.times_s == sorted(streamed.times_s)
    assert whole.texts == [" ".join(f"t{i}" for i in range(8))] and whole.finals == [True]


def test_an_impossible_request_is_refused_naming_the_field(triton: TritonServer) -> None:
    run = stream_llm(triton.grpc_url, MODEL, [LLMRequest(40, 0)])
    assert len(run.errors) == 1 and "output_tokens: must be at least 1" in run.errors[0]


def test_concurrent_requests_share_engine_steps_and_fill_the_histograms(
    triton: TritonServer,
) -> None:
    names = (
        vllm.ITERATION_TOKENS.name + "_count",
        vllm.TIME_TO_FIRST_TOKEN.name + "_count",
        vllm.TIME_PER_OUTPUT_TOKEN.name + "_count",
        vllm.E2E_REQUEST_LATENCY.name + "_count",
        "vllm:request_generation_tokens_sum",
        vllm.GENERATION_TOKENS.name,
        vllm.PROMPT_TOKENS.name,
    )
    before = {name: counter(triton, name) for name in names}
    requests = [LLMRequest(64, 16)] * 4
    run = stream_llm(triton.grpc_url, MODEL, requests)
    assert run.errors == [] and all(len(r.texts) == 16 and r.done for r in run.responses)
    # The model records metrics in order: once the last request's latency is in, so is
    # everything before it.
    e2e_count = vllm.E2E_REQUEST_LATENCY.name + "_count"
    assert growth(triton, e2e_count, before[e2e_count], 4) == 4
    steps, ttft, tpot, e2e, sizes, generated, prompts = (
        counter(triton, name) - before[name] for name in names
    )
    assert (ttft, tpot, e2e) == (4, 4 * 15, 4)
    assert sizes == generated == 64 and prompts == 4 * 64
    assert steps < 64, f"{steps} engine steps for 64 tokens: the requests were not batched"
    text = triton.metrics_text()
    for gauge in (vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING, vllm.KV_CACHE_USAGE):
        assert model_value(text, gauge.name, MODEL, version="1") == 0.0
    # Histograms carry the buckets of vLLM's logger.
    buckets = samples(text, vllm.TIME_TO_FIRST_TOKEN.name + "_bucket")
    bounds = [labels["le"] for labels, _ in buckets if labels["model"] == MODEL]
    assert bounds[:3] == ["0.001", "0.005", "0.01"] and bounds[-1] == "+Inf"


def test_a_repeated_prefix_has_a_lower_ttft_and_counts_as_hits(triton: TritonServer) -> None:
    prompt, hashes = 1024, tuple(range(5000, 5064))  # 64 blocks of 16 tokens
    queried = counter(triton, vllm.PREFIX_CACHE_QUERIES.name)
    hits = counter(triton, vllm.PREFIX_CACHE_HITS.name)
    cold = stream_llm(triton.grpc_url, MODEL, [LLMRequest(prompt, 2, hashes)]).responses[0]
    warm = stream_llm(triton.grpc_url, MODEL, [LLMRequest(prompt, 2, hashes)]).responses[0]
    other = stream_llm(triton.grpc_url, MODEL, [LLMRequest(prompt, 2, (1, *hashes[1:]))]).responses[
        0
    ]
    # Uncached, the prompt costs ~0.2 s of prefill; cached, 16 tokens (the last block).
    assert warm.ttft_s < cold.ttft_s / 2, (cold.ttft_s, warm.ttft_s)
    assert other.ttft_s > warm.ttft_s * 2, "a different first block shares nothing"
    assert growth(triton, vllm.PREFIX_CACHE_QUERIES.name, queried, 3 * prompt) == 3 * prompt
    assert growth(triton, vllm.PREFIX_CACHE_HITS.name, hits, 63 * 16) == 63 * 16


def test_a_cancelled_stream_leaves_the_engine(triton: TritonServer) -> None:
    # 1000 tokens take 10 s or more; the client gives up after 0.5 s and cancels its stream.
    with pytest.raises(TimeoutError):
        stream_llm(triton.grpc_url, MODEL, [LLMRequest(64, 1000)], timeout_s=0.5)

    def engine_empty() -> bool:
        text = triton.metrics_text()
        return model_value(text, vllm.NUM_REQUESTS_RUNNING.name, MODEL) == 0.0 and (
            model_value(text, vllm.KV_CACHE_USAGE.name, MODEL) == 0.0
        )

    assert wait_until(engine_empty, timeout=3.0), "the cancelled request kept its sequence"


def test_the_operators_vllm_config_streams_through_the_emulator(tmp_path: Path) -> None:
    """gpuserve's rendering of the vLLM example (backend vllm, decoupled, custom metrics
    on, tensors left to the backend) served with the emulator standing in for vLLM."""
    spec = yaml.safe_load((REPO_ROOT / "examples" / "llama-vllm.yaml").read_text())["spec"]
    rendered = render_model_files(InferenceServiceSpec.model_validate(spec))["config.pbtxt"]
    config, changes = emulate_on_python_backend(rendered, resolve_demo_uri(EMULATOR))
    assert any("inputs and outputs of demo://llm_emulator declared" in c for c in changes)
    name = top_level_name(config) or ""
    write_model(tmp_path, name, config, source=EMULATOR)
    with TritonServer(tmp_path) as server:
        run = stream_llm(server.grpc_url, name, [LLMRequest(100, 5)])
        assert run.errors == [] and run.responses[0].texts == [f"t{i}" for i in range(5)]
        assert growth(server, vllm.GENERATION_TOKENS.name, 0.0, 5, model=name) == 5


MOONCAKE = REPO_ROOT / "traces" / "mooncake-conversation-2025.jsonl"
# Mooncake's hash ids stand for 512-token blocks, so the engine keys its cache by them;
# prompts reach 120k tokens, and a fast prefill (no attention cost, which would grow with
# the square of such prompts) keeps the replay short.
PREFIX_ENGINE = {
    "block_size": "512",
    "num_blocks": "1024",
    "max_model_len": "131072",
    "decode_base_s": "0.005",
    "prefill_s_per_token": "0.000005",
    "prefill_s_per_token_pair": "0",
}


def test_a_mooncake_replay_hits_the_prefix_cache_as_the_simulator_does(tmp_path: Path) -> None:
    """The first 40 requests of the Mooncake conversation trace, with their prompt blocks'
    hashes, streamed at their own times: the emulator's prefix-cache counters grow by
    the hits the simulator counts for the same replay (they share a system prompt and
    earlier turns), and every stream completes."""
    with MOONCAKE.open() as lines:
        trace = mooncake(lines)
    requests = trace_requests(trace, max_output_tokens=4, count=40)
    config = reference_config()
    config.name = "prefix"
    for key, value in PREFIX_ENGINE.items():
        config.parameters[key].string_value = value
    write_model(tmp_path, "prefix", text_format.MessageToString(config), source=EMULATOR)
    server = TritonServer(tmp_path).start()
    try:
        target = Target(model="prefix", endpoints=[server.grpc_url], request_timeout_s=60.0)
        duration = requests[-1].offset_s
        result = StreamReplay(requests, target, Limits(max_wall_s=duration + 90)).start().join()
        assert result.failures == 0, result.errors()[:3]
        simulated = replay(
            [
                (
                    r.offset_s,
                    r.request.prompt_tokens,
                    r.request.output_tokens,
                    r.request.block_hashes,
                )
                for r in requests
            ],
            params_from_strings(PREFIX_ENGINE),
        ).engine.stats()
        assert simulated.prefix_hit_tokens > 0
        queried = growth(
            server, vllm.PREFIX_CACHE_QUERIES.name, 0, simulated.prefix_queried_tokens, "prefix"
        )
        hits = counter(server, vllm.PREFIX_CACHE_HITS.name, "prefix")
        assert queried == simulated.prefix_queried_tokens
        # Requests arriving together may reach the cache in another order on a real clock.
        assert hits % 512 == 0 and abs(hits - simulated.prefix_hit_tokens) <= 0.1 * hits, (
            hits,
            simulated.prefix_hit_tokens,
        )
    finally:
        server.stop()


@pytest.mark.prometheus
@pytest.mark.skipif(not prometheus_available(), reason="prometheus not installed")
def test_prometheus_counts_the_engines_that_served_over_a_window(triton: TritonServer) -> None:
    """The engines an LLM service's fit divides its rate by, read from a real Prometheus
    scraping the emulator (``controllers.prometheus_source.engines_query``): pods with a
    TTFT histogram, a warm standby's left out, each counted for the part of the window it
    was scraped in."""
    from controllers.prometheus_source import PrometheusSource, engines_query, service_windows
    from gpuserve.autoscaling.query_windows import QueryWindows

    def target(pod: str, role: str) -> dict[str, object]:
        labels = {"namespace": "team", "service": "chat", "pod": pod, "role": role}
        return {"address": triton.metrics_address, "labels": labels}

    serving = [target("chat-0", "serving"), target("chat-1", "serving")]
    prometheus = PrometheusServer(scrape_interval_s=1.0).start()
    try:
        prometheus.set_targets([*serving, target("chat-2", "warm")])
        ttft = f'{vllm.TIME_TO_FIRST_TOKEN.name}_count{{service="chat"}}'
        prometheus.wait_for(f"count_over_time({ttft}[12s])", _each_at_least(3, 12), timeout=40)
        scraped = time.time()  # every pod scraped for 12 s and more by now
        window = engines_query(10.0, 1.0)

        def engines() -> float:
            found = prometheus.query(window)
            assert len(found) == 1 and found[0]["metric"]["service"] == "chat", found
            return float(found[0]["value"][1])

        assert engines() == pytest.approx(2.0)  # the warm standby serves nothing
        prometheus.set_targets(serving[:1])  # chat-1 and the standby leave
        gone = time.monotonic()
        wait_until(lambda: engines() < 1.95, timeout=10.0, interval=0.25)
        assert time.monotonic() - gone < 9.0 and 1.0 < engines() < 2.0
        wait_until(lambda: engines() == 1.0, timeout=20.0, interval=0.5)
        source, chat = PrometheusSource(prometheus.url, windows=QueryWindows(1.0)), ("team", "chat")
        # Younger than the stable minute, the service is observed over its 15-s window:
        # the minute's count, which counts none before its first scrape, is not its.
        time.sleep(max(0.0, scraped + 8.0 - time.time()))
        young = source.read_vllm(at=scraped + 8.0)  # 15 s back, every pod was scraped
        assert young.error is None and 0.0 < young.engines[chat] < 2.0
        stable = service_windows(young, chat, 0.99).stable
        assert stable is not None and stable.window_s < 60.0 and stable.engines is None
        # A minute on, the stable window is the minute: chat-1 counts for its part of it.
        time.sleep(max(0.0, scraped + 50.0 - time.time()))
        grown = source.read_vllm(at=time.time())
        assert grown.error is None and 1.0 < grown.engines[chat] < 2.0
        stable = service_windows(grown, chat, 0.99).stable
        assert stable is not None and stable.window_s == 60.0
        assert stable.engines == grown.engines[chat]
    finally:
        prometheus.stop()


def _each_at_least(series: int, samples: float) -> Callable[[list[dict[str, Any]]], bool]:
    """Whether an instant vector holds ``series`` series, each of value ``samples`` or
    more."""

    def holds(result: list[dict[str, Any]]) -> bool:
        return len(result) == series and all(float(r["value"][1]) >= samples for r in result)

    return holds
