"""The demo's LLM service (pure parts of `make demo`): its manifest is a valid LLM service
sized so that the trace's pace needs more than one replica and no more than its bound, its
load is the trace's token counts (capped, ramped), and its summary and plot figures come
from the streams' own TTFT and TPOT."""

from __future__ import annotations

from typing import Any

import pytest

from e2e import demo
from e2e.loadgen import StreamRecord, StreamResult, percentile, read_trace
from gpuserve.api.durations import parse_duration
from gpuserve.api.models import InferenceServiceSpec
from gpuserve.llm.capacity import LoadShape, TokenObjectives, replica_capacity
from gpuserve.llm.params import params_from_strings

DURATION_S = 60.0


def llm_doc() -> dict[str, Any]:
    (doc,) = [d for d in demo._services() if demo.is_llm(d)]
    return doc


def test_the_demo_has_one_valid_llm_service_with_token_objectives_and_a_warm_pool() -> None:
    doc = llm_doc()
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    assert spec.model.storage_uri == "demo://llm_emulator"
    assert spec.slo.ttft is not None and spec.slo.tpot is not None
    assert spec.scaling.warm_pool >= 1
    series = demo.series_for(doc)
    assert series.is_llm
    assert (series.ttft_ms, series.tpot_ms) == (
        parse_duration(spec.slo.ttft) * 1e3,
        parse_duration(spec.slo.tpot) * 1e3,
    )
    # The sleeper services are shown against their latency objective only.
    assert not any(demo.series_for(d).is_llm for d in demo._services() if not demo.is_llm(d))


def test_llm_load_is_the_traces_token_counts_capped_and_ramped() -> None:
    name = llm_doc()["metadata"]["name"]
    compress = demo.COMPRESSION[name]
    requests = demo.llm_requests(demo.DEFAULT_TRACE, compress, DURATION_S)
    whole = read_trace(demo.DEFAULT_TRACE, compress=compress, duration_s=DURATION_S)
    assert 0 < len(requests) < len(whole)  # the ramp thins the first seconds
    assert max(t.request.prompt_tokens for t in requests) == demo.LLM_MAX_PROMPT_TOKENS
    assert max(t.request.output_tokens for t in requests) == demo.LLM_MAX_OUTPUT_TOKENS
    assert all(t.request.stream for t in requests)
    assert all(t.offset_s < DURATION_S for t in requests)


def test_the_trace_pace_needs_more_than_one_llm_replica_and_fits_the_bound() -> None:
    """By the operator's own capacity model on the emulator's engine and the demo's token
    mix: one replica is too few for the load after the ramp (so it scales up), maxReplicas
    are enough (so the objectives can hold)."""
    doc = llm_doc()
    spec = InferenceServiceSpec.model_validate(doc["spec"])
    params = params_from_strings(doc["spec"]["model"]["parameters"])
    name = doc["metadata"]["name"]
    requests = demo.llm_requests(demo.DEFAULT_TRACE, demo.COMPRESSION[name], DURATION_S)
    prompts = [float(t.request.prompt_tokens) for t in requests]
    outputs = [t.request.output_tokens for t in requests]
    shape = LoadShape(
        prompt_mean=sum(prompts) / len(prompts),
        prompt_high=percentile(prompts, 95) or 1.0,
        output_mean=sum(outputs) / len(outputs),
    )
    assert spec.slo.ttft is not None and spec.slo.tpot is not None
    objectives = TokenObjectives(
        parse_duration(spec.slo.ttft), parse_duration(spec.slo.tpot), spec.slo.percentile / 100
    )
    per_replica = replica_capacity(params, shape, objectives).rate
    after_ramp = sum(1 for t in requests if t.offset_s >= demo.RAMP_S) / (DURATION_S - demo.RAMP_S)
    assert per_replica < after_ramp <= spec.scaling.max_replicas * per_replica, (
        per_replica,
        after_ramp,
    )


def stream(send_s: float, ttft: float, tpot: float, error: str = "") -> StreamRecord:
    return StreamRecord(send_s, 500, 40, 40, ttft, tpot, send_s + ttft + 39 * tpot, "", error)


def sample(t: float, serving: int, warm: int, desired: int) -> demo.Sample:
    return demo.Sample(t, serving, warm, desired, None, None, None, "-")


def test_llm_summary_row_has_token_percentiles_attainment_and_scaling() -> None:
    series = demo.Series(slo_ms=30_000, ttft_ms=1000, tpot_ms=100)
    series.samples = [sample(0, 1, 1, 1), sample(60, 2, 1, 2), sample(120, 1, 1, 1)]
    result = StreamResult(
        [stream(i, 0.5, 0.05) for i in range(18)]
        + [stream(18, 2.0, 0.05), StreamRecord(19, 500, 40, end_s=19.5, error="boom")]
    )
    header, row = demo.llm_summary_rows({"llm": series, "chat": demo.Series(150)}, {"llm": result})
    figures = dict(zip(header, row, strict=True))
    assert figures["streams"] == "20" and figures["failed"] == "1"
    assert figures["TTFT SLO"] == "1000ms" and figures["TPOT SLO"] == "100ms"
    assert figures["TTFT p95"] == "650ms" and figures["TPOT p95"] == "50ms"
    assert figures["both met"] == "90.0%"  # 18 of 20: one late, one failed
    assert (figures["scale-ups"], figures["scale-downs"], figures["max serving"]) == (
        "1",
        "1",
        "2",
    )
    assert figures["GPU-min"] == "5.0"  # 2 pods for a minute, then 3 for a minute


def test_token_series_bin_by_send_time_and_live_figures_cover_the_window() -> None:
    failed = StreamRecord(8.0, 500, 40, end_s=8.5, error="boom")
    result = StreamResult(
        [stream(1.0, 0.2, 0.04), stream(2.0, 0.4, 0.06), stream(7.0, 0.3, 0.05), failed]
    )
    ttft, tpot = demo.token_p95_series(result, offset=10.0)
    assert ttft == [(12.5, pytest.approx(200.0)), (17.5, pytest.approx(300.0))]
    assert tpot == [(12.5, pytest.approx(40.0)), (17.5, pytest.approx(50.0))]
    assert demo.stream_rate_series(result, offset=10.0) == [(12.5, 0.4), (17.5, 0.4)]
    live = demo.live_token_figures(result.records, now_s=10.0, window_s=5.0)
    # Ended within (5, 10]: the stream sent at 7 s (ended ~9.3 s) and the failure.
    assert live.rate == pytest.approx(1 / 5)
    assert live.ttft_p95_ms == pytest.approx(300.0) and live.failed == 1
    assert demo.live_token_figures([], now_s=10.0, window_s=5.0).rate is None
