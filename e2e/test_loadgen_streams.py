"""Streamed LLM load (e2e.loadgen.streams): token counts from a trace, capped; per-stream
TTFT and TPOT; every failure counted; the bounds; and a short replay against the LLM engine
emulator on the real tritonserver."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from e2e.loadgen import (
    Arrival,
    Limits,
    StreamRecord,
    StreamReplay,
    StreamResult,
    Target,
    TimedRequest,
    constant_rate_requests,
    token_requests,
)
from e2e.loadgen.runner import CLIENT_OVERLOAD, NO_ENDPOINT
from e2e.models import resolve_demo_uri
from e2e.triton import TritonServer, triton_available, write_model
from e2e.triton.process import free_loopback_port
from e2e.triton.requests import LLMRequest, LLMResponses

EMULATOR = "demo://llm_emulator"


def test_token_requests_keep_offsets_and_cap_the_counts() -> None:
    arrivals = [Arrival(0.0, 5000, 300), Arrival(0.5, 100, 10), Arrival(1.0, 0, 0)]
    made = token_requests(arrivals, max_prompt_tokens=2048, max_output_tokens=48)
    assert [t.offset_s for t in made] == [0.0, 0.5, 1.0]
    assert [(t.request.prompt_tokens, t.request.output_tokens) for t in made] == [
        (2048, 48),
        (100, 10),
        (1, 1),
    ]
    assert all(t.request.stream for t in made)


def test_constant_rate_requests_are_evenly_spaced() -> None:
    made = constant_rate_requests(LLMRequest(10, 2), rate_per_s=4, duration_s=2)
    assert [t.offset_s for t in made] == [i / 4 for i in range(8)]
    with pytest.raises(ValueError):
        constant_rate_requests(LLMRequest(10, 2), rate_per_s=0, duration_s=2)


def record(ttft: float, tpot: float | None, error: str = "") -> StreamRecord:
    return StreamRecord(0.0, 100, 10, 10, ttft, tpot, 1.0, "127.0.0.1:1", error)


def test_attainment_needs_both_objectives_and_counts_failures_as_misses() -> None:
    result = StreamResult(
        [
            record(0.5, 0.05),  # both met
            record(0.5, None),  # one token: no gap to miss
            record(1.5, 0.05),  # first token late
            record(0.5, 0.2),  # tokens too slow
            record(0.1, 0.01, error="boom"),  # failed
        ]
    )
    assert result.sent == 5 and result.completed == 4 and result.failures == 1
    assert result.attainment(ttft_s=1.0, tpot_s=0.1) == pytest.approx(2 / 5)
    assert result.ttft_ms(50) == pytest.approx(500)
    assert result.tpot_ms(100) == pytest.approx(200)
    assert result.errors() == ["boom"]


def responses(sent: float, times: list[float], final: bool = True) -> LLMResponses:
    got = LLMResponses(sent, times_s=times)
    got.finals = [False] * (len(times) - 1) + [final] if times else []
    return got


class FakeStreams:
    """A streamer answering every request with tokens 10 ms apart, 50 ms after it was
    sent, or raising for a chosen prompt length."""

    def __init__(self, fail_prompt: int = -1, hold_s: float = 0.0) -> None:
        self.fail_prompt = fail_prompt
        self.hold_s = hold_s
        self.calls = 0

    def __call__(
        self, endpoint: str, model: str, requests: list[LLMRequest], timeout_s: float
    ) -> tuple[LLMResponses, list[str]]:
        self.calls += 1
        (request,) = requests
        if request.prompt_tokens == self.fail_prompt:
            raise TimeoutError("not every request ended")
        time.sleep(self.hold_s)
        sent = time.monotonic()
        times = [sent + 0.05 + 0.01 * i for i in range(request.output_tokens)]
        return responses(sent, times), []


def target(endpoints: list[str] | None = None) -> Target:
    return Target(model="llm", endpoints=["127.0.0.1:1"] if endpoints is None else endpoints)


def test_a_replay_measures_each_stream_and_counts_raised_errors() -> None:
    requests = [TimedRequest(0.01 * i, LLMRequest(100 + i, 5)) for i in range(4)]
    replay = StreamReplay(requests, target(), streamer=FakeStreams(fail_prompt=102)).start()
    result = replay.join(timeout_s=10)
    assert result.sent == 4 and result.failures == 1
    assert result.errors() == ["TimeoutError: not every request ended"]
    good = [r for r in result.records if r.ok]
    assert all(r.ttft_s == pytest.approx(0.05) for r in good)
    assert all(r.tpot_s == pytest.approx(0.01) for r in good)
    assert all(r.received == 5 and r.endpoint == "127.0.0.1:1" for r in good)


def test_no_endpoint_and_the_in_flight_limit_are_failures_not_waits() -> None:
    nowhere = StreamReplay([TimedRequest(0.0, LLMRequest(10, 2))], target([]))
    assert nowhere.start().join(timeout_s=5).errors() == [NO_ENDPOINT]
    requests = [TimedRequest(0.0, LLMRequest(10, 2))] * 3
    busy = StreamReplay(
        requests, target(), Limits(max_in_flight=1), streamer=FakeStreams(hold_s=0.3)
    )
    result = busy.start().join(timeout_s=5)
    assert result.sent == 3 and result.errors() == [CLIENT_OVERLOAD] * 2


def test_the_count_and_wall_bounds_stop_the_replay() -> None:
    requests = [TimedRequest(0.05 * i, LLMRequest(10, 2)) for i in range(20)]
    by_count = StreamReplay(requests, target(), Limits(max_requests=3), streamer=FakeStreams())
    result = by_count.start().join(timeout_s=5)
    assert (result.sent, result.stopped_by) == (3, "max_requests")
    by_wall = StreamReplay(requests, target(), Limits(max_wall_s=0.2), streamer=FakeStreams())
    result = by_wall.start().join(timeout_s=5)
    assert (result.sent, result.stopped_by) == (4, "max_wall")


def test_a_stream_short_of_its_tokens_is_a_failure() -> None:
    def short(
        endpoint: str, model: str, requests: list[LLMRequest], timeout_s: float
    ) -> tuple[LLMResponses, list[str]]:
        now = time.monotonic()
        return responses(now, [now + 0.01, now + 0.02], final=False), []

    result = StreamReplay([TimedRequest(0.0, LLMRequest(10, 5))], target(), streamer=short)
    assert result.start().join(timeout_s=5).errors() == ["stream ended after 2 of 5 tokens"]


# ------------------------------------------------------------------ on the real tritonserver
@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """The emulator with 10 ms engine steps and 0.1 ms per prompt token."""
    if not triton_available():
        pytest.skip("nvidia-pytriton wheel not installed")
    config = pb.ModelConfig()
    text_format.Parse(resolve_demo_uri(EMULATOR).reference_config.read_text(), config)
    config.name = "llm"
    for key, value in {"decode_base_s": "0.01", "prefill_s_per_token": "0.0001"}.items():
        config.parameters[key].string_value = value
    repo: Path = tmp_path_factory.mktemp("llm-streams")
    write_model(repo, "llm", text_format.MessageToString(config), source=EMULATOR)
    with TritonServer(repo) as server:
        yield server


@pytest.mark.triton
def test_streams_against_the_emulator_measure_ttft_and_tpot(emulator: TritonServer) -> None:
    dead = f"127.0.0.1:{free_loopback_port()}"
    requests = [
        TimedRequest(0.0, LLMRequest(1000, 8)),  # prefill 100 ms, then 10 ms steps
        TimedRequest(0.05, LLMRequest(10, 0)),  # refused by the engine: no output tokens
        TimedRequest(0.1, LLMRequest(10, 4)),  # to the dead endpoint
    ]
    rotation = [emulator.grpc_url, emulator.grpc_url, dead]
    replay = StreamReplay(requests, Target("llm", rotation, request_timeout_s=10.0))
    result = replay.start().join(timeout_s=30)
    by_prompt = {r.prompt_tokens: r for r in result.records if r.endpoint != dead}
    long = by_prompt[1000]
    assert long.ok and long.received == 8, long
    assert long.ttft_s is not None and long.tpot_s is not None and long.end_s is not None
    # The engine's own costs are floors no stall can undercut; above them the bounds are
    # the stream's own times, since two busy cores can stall a step by hundreds of ms.
    assert long.ttft_s >= 0.1 and long.tpot_s >= 0.009, long
    # The first token, not the last: seven more steps came after it.
    assert long.ttft_s <= long.end_s - long.send_s - 7 * 0.009, long
    assert long.send_s + long.ttft_s + 7 * long.tpot_s == pytest.approx(long.end_s, abs=1e-6)
    assert long.ttft_s < 5.0 and long.tpot_s < 1.0, long
    assert "output_tokens: must be at least 1" in by_prompt[10].error
    assert result.sent == 3 and result.failures == 2
