"""Load runs against Triton over gRPC: trace replay / constant rate (open loop) and fixed
concurrency (closed loop). Every run is bounded by a request count and a wall-clock limit.

Open loop: each arrival is sent at its offset whether or not earlier requests have answered
(up to ``Limits.max_in_flight`` outstanding; beyond that the arrival is recorded as a failure
rather than queued, so the client never hides server overload). Closed loop: ``concurrency``
workers each send their next request as soon as the previous one answers.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from tritonclient.utils import InferenceServerException

from e2e.loadgen.client import ConnectionPool, Payload
from e2e.loadgen.endpoints import EndpointRotation, EndpointSource
from e2e.loadgen.results import LoadResult, RequestRecord
from e2e.loadgen.trace import Arrival, constant_rate_arrivals, read_trace

P = ParamSpec("P")
R = TypeVar("R")

NO_ENDPOINT = "no endpoint available"
CLIENT_OVERLOAD = "client in-flight limit reached"
HARD_STOP = "cancelled at hard stop"


@dataclass(frozen=True)
class Target:
    """Where requests go.

    ``endpoints``: gRPC ``host:port`` list (loopback only) or a callable returning the current
    list - it is re-read while running, so endpoints can be added and removed.
    ``connections_per_endpoint``: independent gRPC connections per endpoint (closed-loop
    worker i uses connection i mod this; open loop rotates through them).
    """

    model: str
    endpoints: EndpointSource
    connections_per_endpoint: int = 1
    request_timeout_s: float = 10.0
    model_version: str = ""


@dataclass(frozen=True)
class Limits:
    """Hard stops: whichever comes first ends the run."""

    max_requests: int = 100_000
    max_wall_s: float = 600.0
    max_in_flight: int = 2048


class _Run:
    """State shared by the request tasks of one run."""

    def __init__(self, target: Target, limits: Limits) -> None:
        self.target = target
        self.limits = limits
        self.rotation = EndpointRotation(target.endpoints)
        self.pool = ConnectionPool(target.connections_per_endpoint)
        self.records: list[RequestRecord] = []
        self.payload: Payload | None = None
        self.t0 = time.monotonic()
        self.in_flight = 0
        self._slot = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def wall_left(self) -> float:
        return self.limits.max_wall_s - self.now()

    async def prepare(self) -> None:
        """Reads the model signature from the first endpoint (bounded by the wall limit)."""
        endpoint = self.rotation.pick()
        if endpoint is None:
            raise RuntimeError("no endpoint to read the model signature from")
        self.payload = await asyncio.wait_for(
            Payload.for_model(
                self.pool.get(endpoint),
                self.target.model,
                self.target.model_version,
                self.target.request_timeout_s,
            ),
            timeout=max(1.0, min(self.target.request_timeout_s, self.wall_left())),
        )
        self.t0 = time.monotonic()  # the run's clock starts after set-up

    async def send(self, slot: int | None = None, scheduled_s: float | None = None) -> None:
        """Sends one inference and records it; never raises (except cancellation)."""
        endpoint = self.rotation.pick()
        send_s = self.now()
        if endpoint is None or self.payload is None:
            self.records.append(RequestRecord(send_s, None, False, "", NO_ENDPOINT, scheduled_s))
            return
        if slot is None:
            slot, self._slot = self._slot, self._slot + 1
        client = self.pool.get(endpoint, slot)
        self.in_flight += 1
        try:
            await client.infer(
                self.target.model,
                self.payload.inputs(),
                model_version=self.target.model_version,
                client_timeout=self.target.request_timeout_s,
            )
            record = RequestRecord(send_s, self.now() - send_s, True, endpoint, "", scheduled_s)
        except asyncio.CancelledError:
            self.records.append(
                RequestRecord(send_s, None, False, endpoint, HARD_STOP, scheduled_s)
            )
            raise
        except InferenceServerException as err:
            message = (err.message() or str(err)).splitlines()[0][:200]
            record = RequestRecord(
                send_s, self.now() - send_s, False, endpoint, message, scheduled_s
            )
        except Exception as err:  # connection errors etc.: count them, keep the run going
            record = RequestRecord(
                send_s,
                self.now() - send_s,
                False,
                endpoint,
                f"{type(err).__name__}: {err}"[:200],
                scheduled_s,
            )
        finally:
            self.in_flight -= 1
        self.records.append(record)

    def result(self, mode: str, stopped_by: str, params: Mapping[str, object]) -> LoadResult:
        ends = [r.done_s or r.send_s for r in self.records]
        duration = max(ends) if ends else self.now()
        return LoadResult(mode, self.target.model, duration, self.records, stopped_by, dict(params))


async def _drain(tasks: set[asyncio.Task[None]], timeout: float) -> None:
    """Waits for outstanding requests up to ``timeout``; cancels (and records) the rest."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout))
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5.0)


async def replay_async(
    arrivals: Sequence[Arrival], target: Target, limits: Limits = Limits(), mode: str = "trace"
) -> LoadResult:
    """Open loop: sends arrival i at ``arrivals[i].offset_s`` seconds after the start."""
    run = _Run(target, limits)
    await run.prepare()
    tasks: set[asyncio.Task[None]] = set()
    stopped_by = "done"
    try:
        for index, arrival in enumerate(arrivals):
            if index >= limits.max_requests:
                stopped_by = "max_requests"
                break
            delay = arrival.offset_s - run.now()
            if arrival.offset_s >= limits.max_wall_s or delay >= run.wall_left():
                stopped_by = "max_wall"
                break
            if delay > 0:
                await asyncio.sleep(delay)
            if run.in_flight >= limits.max_in_flight:
                run.records.append(
                    RequestRecord(run.now(), None, False, "", CLIENT_OVERLOAD, arrival.offset_s)
                )
                continue
            task = asyncio.ensure_future(run.send(scheduled_s=arrival.offset_s))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await _drain(tasks, min(run.wall_left(), target.request_timeout_s + 1.0))
    finally:
        await _drain(tasks, 0)
        await run.pool.close()
    params = {"arrivals": len(arrivals), "endpoints": len(run.rotation.seen)}
    return run.result(mode, stopped_by, params)


async def closed_loop_async(
    target: Target,
    concurrency: int,
    duration_s: float,
    limits: Limits = Limits(),
    warmup_s: float = 0.0,
) -> LoadResult:
    """Closed loop: ``concurrency`` workers, each with its own connection slot, for
    ``duration_s`` seconds. Requests sent during the first ``warmup_s`` are not recorded."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    run = _Run(target, limits)
    await run.prepare()
    end_s = min(warmup_s + duration_s, limits.max_wall_s)
    stop = {"by": "duration" if end_s == warmup_s + duration_s else "max_wall"}
    measured = 0  # requests started after the warm-up, bounded by max_requests

    async def worker(slot: int) -> None:
        nonlocal measured
        while run.now() < end_s:
            if run.now() >= warmup_s:
                if measured >= limits.max_requests:
                    stop["by"] = "max_requests"
                    return
                measured += 1
            await run.send(slot=slot)

    tasks = {asyncio.ensure_future(worker(i)) for i in range(concurrency)}
    try:
        await _drain(
            tasks, min(end_s + target.request_timeout_s + 1.0, limits.max_wall_s) - run.now()
        )
    finally:
        await _drain(tasks, 0)
        await run.pool.close()
    # Shift the clock so the measured window starts at 0 after the warm-up.
    kept = [
        RequestRecord(r.send_s - warmup_s, r.latency_s, r.ok, r.endpoint, r.error, None)
        for r in run.records
        if r.send_s >= warmup_s
    ]
    run.records = kept
    params = {
        "concurrency": concurrency,
        "warmup_s": warmup_s,
        "connections": target.connections_per_endpoint,
    }
    return run.result("closed", stop["by"], params)


def _synchronous(loop: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """The coroutine function run to completion on a fresh event loop, same arguments."""

    @functools.wraps(loop)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(loop(*args, **kwargs))

    return run


# The synchronous forms of the two loops.
replay = _synchronous(replay_async)
run_closed_loop = _synchronous(closed_loop_async)


def run_trace(
    path: Path,
    target: Target,
    *,
    compress: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    limits: Limits = Limits(),
) -> LoadResult:
    """Replays an Azure-format trace file (see :func:`e2e.loadgen.trace.read_trace`)."""
    arrivals = read_trace(
        path,
        compress=compress,
        start_s=start_s,
        duration_s=duration_s,
        max_requests=limits.max_requests,
    )
    result = replay(arrivals, target, limits, mode="trace")
    result.params.update(
        {
            "trace": Path(path).name,
            "compress": compress,
            "start_s": start_s,
            "duration_s": duration_s,
        }
    )
    return result


def run_constant_rate(
    target: Target, rate_per_s: float, duration_s: float, limits: Limits = Limits()
) -> LoadResult:
    """Open loop at a fixed rate (evenly spaced arrivals)."""
    result = replay(constant_rate_arrivals(rate_per_s, duration_s), target, limits, mode="rate")
    result.params["rate_per_s"] = rate_per_s
    return result
