"""Load generator: replays request traces (or constant-rate / fixed-concurrency load) against
Triton models over gRPC (``tritonclient.grpc.aio``), loopback endpoints only.

Typical use::

    target = Target(model="sleeper", endpoints=["127.0.0.1:8001"])
    result = run_trace(trace_path, target, compress=10, duration_s=60)
    print(result.summary_table())

Streamed LLM load (one gRPC stream per request, time to first token and per output token):
:class:`StreamReplay` in ``e2e.loadgen.streams``.

CLI: ``python -m e2e.loadgen --trace FILE --compress 10 --duration 60 --endpoint
127.0.0.1:PORT --model NAME``.
"""

from e2e.loadgen.endpoints import EndpointRotation, check_loopback
from e2e.loadgen.results import LoadResult, RequestRecord, SecondStats, percentile
from e2e.loadgen.runner import (
    Limits,
    Target,
    closed_loop_async,
    replay,
    replay_async,
    run_closed_loop,
    run_constant_rate,
    run_trace,
)
from e2e.loadgen.streams import (
    StreamRecord,
    StreamReplay,
    StreamResult,
    TimedRequest,
    constant_rate_requests,
    token_requests,
)
from e2e.loadgen.trace import (
    Arrival,
    TraceFormatError,
    constant_rate_arrivals,
    read_trace,
)

__all__ = [
    "Arrival",
    "EndpointRotation",
    "Limits",
    "LoadResult",
    "RequestRecord",
    "SecondStats",
    "StreamRecord",
    "StreamReplay",
    "StreamResult",
    "Target",
    "TimedRequest",
    "TraceFormatError",
    "check_loopback",
    "closed_loop_async",
    "constant_rate_arrivals",
    "constant_rate_requests",
    "percentile",
    "read_trace",
    "replay",
    "replay_async",
    "run_closed_loop",
    "run_constant_rate",
    "run_trace",
    "token_requests",
]
