"""Streamed LLM load: an open-loop replay of token counts as gRPC streams, one stream per
request, to the LLM engine emulator (or any model with its inputs, see
``e2e.triton.requests``), with the time to first token and the time per output token each
client felt.

Like the other loops of the load generator it is bounded by a request count and a
wall-clock limit, and every failure is a record: no endpoint, the client's in-flight
limit, an error response, a stream that did not end in time, or one that ended short of
its tokens. It runs on a thread of its own so that a live view can read the records while
it goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from e2e.loadgen.endpoints import EndpointRotation
from e2e.loadgen.results import percentile
from e2e.loadgen.runner import CLIENT_OVERLOAD, NO_ENDPOINT, Limits, Target
from e2e.loadgen.trace import Arrival
from e2e.triton.requests import LLMRequest, LLMResponses, stream_llm
from gpuserve.sim.llm.traces import TokenTrace


@dataclass(frozen=True)
class TimedRequest:
    """One streamed request and when to send it (seconds after the replay starts)."""

    offset_s: float
    request: LLMRequest


@dataclass(frozen=True)
class StreamRecord:
    """One stream. Times are seconds after the replay started (monotonic clock)."""

    send_s: float
    prompt_tokens: int
    output_tokens: int  # asked for
    received: int = 0  # token responses that came back
    ttft_s: float | None = None
    tpot_s: float | None = None  # mean gap between tokens; None with fewer than two
    end_s: float | None = None  # when the last response (or the failure) came
    endpoint: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def within(self, ttft_s: float, tpot_s: float) -> bool:
        """Completed, with its first token and its mean gap between tokens in time."""
        return (
            self.ok
            and self.ttft_s is not None
            and self.ttft_s <= ttft_s
            and (self.tpot_s is None or self.tpot_s <= tpot_s)
        )


def token_requests(
    arrivals: Sequence[Arrival], *, max_prompt_tokens: int, max_output_tokens: int
) -> list[TimedRequest]:
    """Streamed requests with each arrival's prompt and output token counts, capped (each
    token streamed is one response round trip on the serving machine), at least one each."""
    return [
        TimedRequest(
            a.offset_s,
            LLMRequest(
                max(1, min(a.context_tokens, max_prompt_tokens)),
                max(1, min(a.generated_tokens, max_output_tokens)),
            ),
        )
        for a in arrivals
    ]


def trace_requests(
    trace: TokenTrace, *, max_output_tokens: int, count: int | None = None
) -> list[TimedRequest]:
    """The first ``count`` requests of a token trace, offsets from its first arrival, with
    their prompt blocks' content hashes (Mooncake's: one per ``trace.block_size`` tokens,
    full blocks only, as the engine keys its prefix cache). Prompts are replayed whole so
    that the hashes stay true; outputs are capped (each streamed token is a round trip)."""
    chosen = trace.requests[:count]
    start = chosen[0].arrival_s if chosen else 0.0
    return [
        TimedRequest(
            r.arrival_s - start,
            LLMRequest(
                r.prompt_tokens,
                max(1, min(r.output_tokens, max_output_tokens)),
                r.block_hashes[: r.prompt_tokens // trace.block_size],
            ),
        )
        for r in chosen
    ]


def constant_rate_requests(
    request: LLMRequest, rate_per_s: float, duration_s: float
) -> list[TimedRequest]:
    """The same request, evenly spaced at ``rate_per_s`` for ``duration_s`` seconds."""
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be > 0")
    return [TimedRequest(i / rate_per_s, request) for i in range(int(rate_per_s * duration_s))]


def record_of(
    responses: LLMResponses, errors: list[str], asked: LLMRequest, t0: float, endpoint: str
) -> StreamRecord:
    """The record of one finished stream (client times ``time.monotonic``, made relative
    to ``t0``); an error response or a stream short of its tokens is a failure."""
    times = responses.times_s
    error = errors[0].splitlines()[0][:200] if errors else ""
    if not error and (not responses.done or len(times) != asked.output_tokens):
        error = f"stream ended after {len(times)} of {asked.output_tokens} tokens"
    gaps = len(times) - 1
    return StreamRecord(
        send_s=responses.sent_s - t0,
        prompt_tokens=asked.prompt_tokens,
        output_tokens=asked.output_tokens,
        received=len(times),
        ttft_s=responses.ttft_s if times else None,
        tpot_s=(times[-1] - times[0]) / gaps if gaps > 0 else None,
        end_s=(times[-1] if times else time.monotonic()) - t0,
        endpoint=endpoint,
        error=error,
    )


@dataclass
class StreamResult:
    """The records of a streamed replay and the figures derived from them."""

    records: list[StreamRecord] = field(default_factory=list)
    stopped_by: str = "done"  # done | max_requests | max_wall

    @property
    def sent(self) -> int:
        return len(self.records)

    @property
    def completed(self) -> int:
        return sum(1 for r in self.records if r.ok)

    @property
    def failures(self) -> int:
        return sum(1 for r in self.records if not r.ok)

    def errors(self) -> list[str]:
        return [r.error for r in self.records if not r.ok]

    def ttft_ms(self, q: float) -> float | None:
        return _ms(percentile([r.ttft_s for r in self.records if r.ok and r.ttft_s is not None], q))

    def tpot_ms(self, q: float) -> float | None:
        return _ms(percentile([r.tpot_s for r in self.records if r.ok and r.tpot_s is not None], q))

    def attainment(self, ttft_s: float, tpot_s: float) -> float:
        """Share of the streams sent that met both objectives (a failed one did not)."""
        if not self.records:
            return 0.0
        return sum(1 for r in self.records if r.within(ttft_s, tpot_s)) / len(self.records)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


Streamer = Callable[[str, str, list[LLMRequest], float], tuple[LLMResponses, list[str]]]


def _stream_with_triton(
    endpoint: str, model: str, requests: list[LLMRequest], timeout_s: float
) -> tuple[LLMResponses, list[str]]:
    run = stream_llm(endpoint, model, requests, timeout_s=timeout_s)
    return run.responses[0], run.errors


class StreamReplay:
    """Sends each request at its offset on its own gRPC stream (one thread per stream, so
    streams overlap as real clients' do), round-robin over the target's endpoints as they
    are now. ``start()`` returns at once; ``join()`` waits and returns the result."""

    def __init__(
        self,
        requests: Sequence[TimedRequest],
        target: Target,
        limits: Limits | None = None,
        streamer: Streamer = _stream_with_triton,
    ) -> None:
        self.requests = list(requests)
        self.target = target
        self.limits = limits or Limits()
        self._streamer = streamer
        self._rotation = EndpointRotation(target.endpoints)
        self._lock = threading.Lock()
        self._records: list[StreamRecord] = []
        self._workers: list[threading.Thread] = []
        self._in_flight = 0
        self._stopped_by = "done"
        self._thread = threading.Thread(target=self._dispatch, name="llm-streams", daemon=True)
        self.t0 = time.monotonic()

    def start(self) -> StreamReplay:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def records(self) -> list[StreamRecord]:
        """The streams that have ended so far."""
        with self._lock:
            return list(self._records)

    def join(self, timeout_s: float | None = None) -> StreamResult:
        """Waits for the dispatcher and every stream (each ends by its own timeout)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._thread.join(_left(deadline))
        for worker in list(self._workers):
            worker.join(_left(deadline))
        return StreamResult(self.records(), self._stopped_by)

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def _dispatch(self) -> None:
        for index, timed in enumerate(self.requests):
            if index >= self.limits.max_requests:
                self._stopped_by = "max_requests"
                return
            if timed.offset_s >= self.limits.max_wall_s:
                self._stopped_by = "max_wall"
                return
            time.sleep(max(0.0, timed.offset_s - self._now()))
            self._send(timed.request)

    def _send(self, request: LLMRequest) -> None:
        endpoint = self._rotation.pick()
        refused = NO_ENDPOINT if endpoint is None else ""
        with self._lock:
            if not refused and self._in_flight >= self.limits.max_in_flight:
                refused = CLIENT_OVERLOAD
            if refused:
                self._records.append(self._refused(request, refused))
                return
            self._in_flight += 1
        worker = threading.Thread(target=self._stream, args=(endpoint, request), daemon=True)
        self._workers.append(worker)
        worker.start()

    def _refused(self, request: LLMRequest, why: str) -> StreamRecord:
        now = self._now()
        return StreamRecord(now, request.prompt_tokens, request.output_tokens, end_s=now, error=why)

    def _stream(self, endpoint: str, request: LLMRequest) -> None:
        sent = time.monotonic()
        try:
            responses, errors = self._streamer(
                endpoint, self.target.model, [request], self.target.request_timeout_s
            )
            record = record_of(responses, errors, request, self.t0, endpoint)
        except Exception as err:  # a timeout or a connection error: counted, never raised
            record = StreamRecord(
                sent - self.t0,
                request.prompt_tokens,
                request.output_tokens,
                end_s=self._now(),
                endpoint=endpoint,
                error=f"{type(err).__name__}: {err}"[:200],
            )
        with self._lock:
            self._records.append(record)
            self._in_flight -= 1


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
