"""The vLLM metric names an LLM service exports on Triton's metrics port, and their buckets.

Two sources, both exported here with Triton's labels ``model`` and ``version`` (those its
vLLM backend uses):

- Triton's vLLM backend (``src/utils/metrics.py`` in triton-inference-server/vllm_backend)
  forwards vLLM's per-step and per-request statistics: the token counters and the TTFT,
  TPOT, end-to-end latency and request-size histograms.
- vLLM's own Prometheus logger (``vllm/v1/metrics/loggers.py`` in vllm-project/vllm) also
  has scheduler and cache figures: running and waiting requests, KV-cache usage,
  prefix-cache queries and hits, preemptions, tokens per step. The Triton backend does not
  forward them; the emulator exports them under vLLM's names, counters with the ``_total``
  that vLLM's Prometheus client appends.

Histogram bounds are those of vLLM's V1 logger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuserve.llm.engine import EngineStats, StepPlan, StepResult

MetricKind = Literal["counter", "gauge", "histogram"]
LABELS = ("model", "version")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: MetricKind
    description: str
    buckets: tuple[float, ...] = ()
    forwarded_by_triton: bool = False  # Triton's vLLM backend exports it too


def one_two_five_buckets(largest: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``largest`` (vLLM's bounds for token counts)."""
    bounds: list[float] = []
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale > largest:
                return tuple(bounds)
            bounds.append(float(step * scale))
        scale *= 10


TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
TPOT_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0),
    *(30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
STEP_TOKEN_BUCKETS = (1.0, *(float(2**k) for k in range(3, 15)))  # 1, 8, 16, ... 16384

# Exported by Triton's vLLM backend.
PROMPT_TOKENS = MetricSpec(
    "vllm:prompt_tokens_total", "counter", "Prompt tokens computed or found cached.", (), True
)
GENERATION_TOKENS = MetricSpec(
    "vllm:generation_tokens_total", "counter", "Output tokens produced.", (), True
)
TIME_TO_FIRST_TOKEN = MetricSpec(
    "vllm:time_to_first_token_seconds",
    "histogram",
    "Seconds from a request's arrival to its first output token.",
    TTFT_BUCKETS,
    True,
)
TIME_PER_OUTPUT_TOKEN = MetricSpec(
    "vllm:time_per_output_token_seconds",
    "histogram",
    "Seconds between consecutive output tokens of a request.",
    TPOT_BUCKETS,
    True,
)
E2E_REQUEST_LATENCY = MetricSpec(
    "vllm:e2e_request_latency_seconds",
    "histogram",
    "Seconds from a request's arrival to its last output token.",
    REQUEST_LATENCY_BUCKETS,
    True,
)

# vLLM's own names, not forwarded by Triton's vLLM backend. kv_cache_usage_perc's V0 name,
# gpu_cache_usage_perc, is still written (deprecated) by vLLM 0.9 and 0.10 and read by many
# dashboards and autoscalers.
_ENGINE_STATE_ROWS: tuple[tuple[str, MetricKind, str], ...] = (
    ("vllm:num_requests_running", "gauge", "Requests in the engine's running batch."),
    ("vllm:num_requests_waiting", "gauge", "Requests queued for admission."),
    ("vllm:kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks held (1 is full)."),
    ("vllm:gpu_cache_usage_perc", "gauge", "Deprecated name of vllm:kv_cache_usage_perc."),
    ("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache."),
    ("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache."),
    ("vllm:num_preemptions_total", "counter", "Sequences preempted for lack of KV cache."),
)
ENGINE_STATE = tuple(MetricSpec(*row) for row in _ENGINE_STATE_ROWS)
(
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    KV_CACHE_USAGE,
    GPU_CACHE_USAGE,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    NUM_PREEMPTIONS,
) = ENGINE_STATE
ITERATION_TOKENS = MetricSpec(
    "vllm:iteration_tokens_total",
    "histogram",
    "Tokens computed per engine step (its count is the number of steps).",
    STEP_TOKEN_BUCKETS,
)


def request_size_metrics(max_model_len: int) -> tuple[MetricSpec, MetricSpec]:
    """The per-request prompt and output size histograms, exported by Triton's vLLM
    backend, with bounds up to the context length."""
    buckets = one_two_five_buckets(max_model_len)
    return (
        MetricSpec(
            "vllm:request_prompt_tokens", "histogram", "Prompt tokens per request.", buckets, True
        ),
        MetricSpec(
            "vllm:request_generation_tokens",
            "histogram",
            "Output tokens per request.",
            buckets,
            True,
        ),
    )


Sample = tuple[MetricSpec, float]


class EngineMetrics:
    """Which metric each engine event feeds: one rule for the emulator, which exports the
    samples, and for a simulator, which may aggregate them."""

    def __init__(self, max_model_len: int) -> None:
        self.request_prompt_tokens, self.request_generation_tokens = request_size_metrics(
            max_model_len
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            PROMPT_TOKENS,
            GENERATION_TOKENS,
            TIME_TO_FIRST_TOKEN,
            TIME_PER_OUTPUT_TOKEN,
            E2E_REQUEST_LATENCY,
            self.request_prompt_tokens,
            self.request_generation_tokens,
            *ENGINE_STATE,
            ITERATION_TOKENS,
        )

    def step_samples(self, plan: StepPlan, result: StepResult) -> list[Sample]:
        """Histogram observations of one step: its size, each token's gap (the first
        token's is its TTFT, the others' are inter-token times) and finished requests."""
        samples: list[Sample] = [(ITERATION_TOKENS, float(plan.tokens))]
        for token in result.tokens:
            spec = TIME_TO_FIRST_TOKEN if token.index == 0 else TIME_PER_OUTPUT_TOKEN
            samples.append((spec, token.gap_s))
        for timing in result.finished:
            if timing.e2e_s is not None:
                samples.append((E2E_REQUEST_LATENCY, timing.e2e_s))
            samples.append((self.request_prompt_tokens, float(timing.prompt_tokens)))
            samples.append((self.request_generation_tokens, float(len(timing.token_s))))
        return samples

    @staticmethod
    def counter_increments(before: EngineStats, after: EngineStats) -> list[Sample]:
        """How much each counter grew between two snapshots (only those that did)."""
        pairs = (
            (PROMPT_TOKENS, after.prompt_tokens - before.prompt_tokens),
            (GENERATION_TOKENS, after.generation_tokens - before.generation_tokens),
            (PREFIX_CACHE_QUERIES, after.prefix_queried_tokens - before.prefix_queried_tokens),
            (PREFIX_CACHE_HITS, after.prefix_hit_tokens - before.prefix_hit_tokens),
            (NUM_PREEMPTIONS, after.preemptions - before.preemptions),
        )
        return [(spec, float(grown)) for spec, grown in pairs if grown > 0]

    @staticmethod
    def gauge_values(stats: EngineStats) -> list[Sample]:
        return [
            (NUM_REQUESTS_RUNNING, float(stats.running)),
            (NUM_REQUESTS_WAITING, float(stats.waiting)),
            (KV_CACHE_USAGE, stats.kv_usage),
            (GPU_CACHE_USAGE, stats.kv_usage),
        ]
