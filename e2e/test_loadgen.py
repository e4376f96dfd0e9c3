"""Load generator: trace parsing, compression and slicing, bounds, loopback checks, statistics,
and short real replays against Triton."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.loadgen import (
    Arrival,
    EndpointRotation,
    Limits,
    LoadResult,
    RequestRecord,
    Target,
    TraceFormatError,
    check_loopback,
    constant_rate_arrivals,
    percentile,
    read_trace,
    replay,
    run_closed_loop,
    run_trace,
)
from e2e.models import sleeper_config
from e2e.triton import TritonServer, triton_available, write_model
from e2e.triton.process import free_loopback_port

REPO_ROOT = Path(__file__).resolve().parent.parent
AZURE_TRACE = REPO_ROOT / "traces" / "azure-llm-conv-2023.csv"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write_trace(path: Path, offsets_s: list[float]) -> Path:
    """A trace with arrivals at the given offsets after 2023-11-16 18:00:00 (7-digit fractions)."""
    lines = [HEADER]
    for i, offset in enumerate(offsets_s):
        whole = int(offset)
        fraction = round((offset - whole) * 10_000_000)
        minutes, seconds = divmod(whole, 60)
        lines.append(
            f"2023-11-16 18:{minutes:02d}:{seconds:02d}.{fraction:07d},{100 + i},{10 + i}\n"
        )
    path.write_text("".join(lines))
    return path


# ----------------------------------------------------------------------------- trace parsing
def test_read_trace_offsets_compression_and_slices(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.csv", [0.0, 1.5, 3.0, 10.0, 20.0])
    full = read_trace(trace)
    assert [a.offset_s for a in full] == pytest.approx([0.0, 1.5, 3.0, 10.0, 20.0])
    assert (full[1].context_tokens, full[1].generated_tokens) == (101, 11)
    fast = read_trace(trace, compress=10)
    assert [a.offset_s for a in fast] == pytest.approx([0.0, 0.15, 0.3, 1.0, 2.0])
    # start/duration are replay seconds (after compression); offsets restart at 0.
    window = read_trace(trace, compress=10, start_s=0.2, duration_s=0.85)
    assert [a.offset_s for a in window] == pytest.approx([0.1, 0.8])
    assert len(read_trace(trace, max_requests=2)) == 2


def test_read_trace_sorts_rows_and_reports_bad_lines(tmp_path: Path) -> None:
    unsorted = tmp_path / "u.csv"
    unsorted.write_text(HEADER + "2023-11-16 18:00:05.0,1,1\n2023-11-16 18:00:01.0,2,2\n\n")
    assert [a.context_tokens for a in read_trace(unsorted)] == [2, 1]
    bad_header = tmp_path / "h.csv"
    bad_header.write_text("time,a,b\n1,2,3\n")
    with pytest.raises(TraceFormatError, match="line 1"):
        read_trace(bad_header)
    bad_row = tmp_path / "r.csv"
    bad_row.write_text(HEADER + "2023-11-16 18:00:01.0,1,1\n2023-11-16 18:00:02.0,x,1\n")
    with pytest.raises(TraceFormatError, match="line 3"):
        read_trace(bad_row)
    with pytest.raises(ValueError):
        read_trace(bad_row, compress=0)


def test_reads_the_azure_conversation_trace() -> None:
    arrivals = read_trace(AZURE_TRACE)
    assert len(arrivals) == 19366
    assert arrivals[0].offset_s == 0.0 and (
        arrivals[0].context_tokens,
        arrivals[0].generated_tokens,
    ) == (374, 44)
    # About one hour of arrivals; 10x compression makes it about six minutes.
    assert 3000 < arrivals[-1].offset_s < 4000
    assert read_trace(AZURE_TRACE, compress=10)[-1].offset_s == pytest.approx(
        arrivals[-1].offset_s / 10
    )


def test_constant_rate_arrivals() -> None:
    arrivals = constant_rate_arrivals(50, 2)
    assert len(arrivals) == 100 and arrivals[1].offset_s == pytest.approx(0.02)


# ----------------------------------------------------------------------------- endpoints
@pytest.mark.parametrize("endpoint", ["127.0.0.1:8001", "127.9.8.7:1", "localhost:65535"])
def test_loopback_endpoints_are_accepted(endpoint: str) -> None:
    assert check_loopback(endpoint) == endpoint


@pytest.mark.parametrize(
    "endpoint",
    [
        "10.0.0.1:8001",
        "8.8.8.8:53",
        "example.com:8001",
        "[::1]:8001",
        "127.0.0.1",
        "127.0.0.1:0",
        "127.0.0.1:70000",
        "128.0.0.1:80",
    ],
)
def test_other_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(ValueError):
        check_loopback(endpoint)


def test_rotation_round_robins_and_follows_a_callable() -> None:
    rotation = EndpointRotation(["127.0.0.1:1", "127.0.0.1:2"])
    assert [rotation.pick() for _ in range(4)] == ["127.0.0.1:1", "127.0.0.1:2"] * 2
    current = ["127.0.0.1:1"]
    dynamic = EndpointRotation(lambda: current, refresh_s=0.0)
    assert dynamic.pick() == "127.0.0.1:1"
    current = []
    assert dynamic.pick() is None
    current = ["10.1.1.1:80"]
    with pytest.raises(ValueError):
        dynamic.pick()


# ----------------------------------------------------------------------------- statistics
def test_percentiles_and_time_series() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile(list(range(101)), 95) == pytest.approx(95)
    records = [
        RequestRecord(0.1, 0.010, True),
        RequestRecord(0.5, 0.020, True),
        RequestRecord(0.9, 0.200, True),  # completes in second 1
        RequestRecord(1.5, None, False, error="boom"),
    ]
    result = LoadResult("trace", "m", duration_s=2.0, records=records)
    assert (result.sent, result.successes, result.failures) == (4, 3, 1)
    assert result.throughput == pytest.approx(1.5)
    assert result.p50_ms == pytest.approx(20.0)
    series = result.time_series()
    assert [(s.arrivals, s.completions, s.failures) for s in series] == [(3, 2, 0), (1, 1, 1)]
    assert series[1].p95_ms == pytest.approx(200.0)
    assert result.error_counts() == {"boom": 1}
    assert "p95_ms" in result.summary_table()


# ----------------------------------------------------------------------------- real replays
@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    if not triton_available():
        pytest.skip("nvidia-pytriton wheel not installed")
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "sleeper", sleeper_config(exec_time_ms=5))
    with TritonServer(repo) as server:
        yield server


@pytest.mark.triton
def test_trace_replay_against_triton(triton: TritonServer, tmp_path: Path) -> None:
    offsets = [i * 0.05 for i in range(60)]  # 20/s for 3 s of trace time
    trace = write_trace(tmp_path / "t.csv", offsets)
    result = run_trace(trace, Target("sleeper", [triton.grpc_url]), compress=2.0)
    assert result.stopped_by == "done"
    assert (result.sent, result.failures) == (60, 0)
    assert 1.3 < result.duration_s < 2.5  # 3 s of trace at 2x
    assert result.p50_ms is not None and 5.0 <= result.p50_ms < 200.0
    assert sum(s.arrivals for s in result.time_series()) == 60
    # Requests went out on schedule (open loop), not one after another.
    lags = [r.send_s - r.scheduled_s for r in result.records if r.scheduled_s is not None]
    assert max(lags) < 0.1


@pytest.mark.triton
def test_hard_stops_bound_the_run(triton: TritonServer) -> None:
    target = Target("sleeper", [triton.grpc_url])
    many = [Arrival(i * 0.001, 1, 1) for i in range(10_000)]
    by_count = replay(many, target, Limits(max_requests=25))
    assert by_count.stopped_by == "max_requests" and by_count.sent == 25
    slow = [Arrival(float(i), 1, 1) for i in range(100)]  # would take 100 s
    by_time = replay(slow, target, Limits(max_wall_s=1.5))
    assert by_time.stopped_by == "max_wall" and by_time.sent == 2
    closed = run_closed_loop(target, 4, 30.0, Limits(max_requests=40))
    assert closed.stopped_by == "max_requests" and closed.sent == 40


@pytest.mark.triton
def test_endpoints_can_change_while_running_and_failures_are_recorded(
    triton: TritonServer,
) -> None:
    port = triton.grpc_port
    dead = f"127.0.0.1:{free_loopback_port()}"  # nothing listens there
    state = {"endpoints": [f"127.0.0.1:{port}"]}
    arrivals = [Arrival(i * 0.02, 1, 1) for i in range(75)]  # 1.5 s

    def endpoints() -> list[str]:
        return state["endpoints"]

    def switch() -> None:
        state["endpoints"] = [f"127.0.0.1:{port}", f"localhost:{port}", dead]

    timer = threading.Timer(0.6, switch)
    timer.start()
    try:
        result = replay(arrivals, Target("sleeper", endpoints, request_timeout_s=2.0))
    finally:
        timer.cancel()
    used = {r.endpoint for r in result.records}
    assert {f"127.0.0.1:{port}", f"localhost:{port}", dead} <= used
    failed = [r for r in result.records if not r.ok]
    assert failed and all(r.endpoint == dead for r in failed)
    assert result.successes + result.failures == 75


@pytest.mark.triton
def test_cli_prints_summary_and_refuses_remote_endpoints(
    triton: TritonServer, tmp_path: Path
) -> None:
    trace = write_trace(tmp_path / "t.csv", [i * 0.1 for i in range(20)])
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    base = [
        sys.executable,
        "-m",
        "e2e.loadgen",
        "--trace",
        str(trace),
        "--compress",
        "4",
        "--duration",
        "10",
        "--model",
        "sleeper",
    ]

    def run_cli(endpoint: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, "--endpoint", endpoint], capture_output=True, text=True,
                              timeout=60, cwd=REPO_ROOT, env=env, check=False)

    done = run_cli(triton.grpc_url)
    assert done.returncode == 0, done.stderr
    assert "p95_ms" in done.stdout and re.search(r"^sent\s+20$", done.stdout, re.M)
    refused = run_cli("192.0.2.1:8001")
    assert refused.returncode == 2 and "only 127.0.0.0/8 or localhost" in refused.stderr
