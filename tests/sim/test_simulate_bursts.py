"""`gpuserve simulate` says what the BurstsCovered condition would: bursts shorter than a
start-up that outran the ready pods, or none."""

from __future__ import annotations

from pathlib import Path

import pytest
from simulate_helpers import ROOT, burst_trace, simulate

SLEEPER = ROOT / "examples" / "sleeper-interactive.yaml"


def heavy_service(tmp_path: Path) -> Path:
    """The sleeper example made slow (60 ms + 120 ms per item, batches of 8: a few req/s a
    pod) with a 2 s objective and no warm pod, so a burst of tens of req/s outruns it."""
    text = SLEEPER.read_text()
    for old, new in (
        ('exec_time_ms: "5", per_item_ms: "0.2"', 'exec_time_ms: "60", per_item_ms: "120"'),
        ("maxBatchSize: 32", "maxBatchSize: 8"),
        ("preferredBatchSizes: [8, 16, 32]", "preferredBatchSizes: [8]"),
        ("maxQueueDelay: 2ms", "maxQueueDelay: 20ms"),
        ("slo: {latency: 50ms, percentile: 95}", "slo: {latency: 2s, percentile: 95}"),
        ("maxReplicas: 8, warmPool: 1", "maxReplicas: 20, warmPool: 0"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "heavy.yaml"
    path.write_text(text)
    return path


def trace(tmp_path: Path, bursts: tuple[float, ...]) -> Path:
    """15 minutes at 1 req/s, and 10 s at 60 req/s from each of ``bursts``."""
    return burst_trace(tmp_path / "trace.csv", bursts, per_second=60, context=100, generated=10)


def test_bursts_shorter_than_a_start_up_that_outran_the_ready_pods_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = simulate(capsys, heavy_service(tmp_path), trace(tmp_path, (300.0, 500.0)))
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("BurstsCovered="))
    assert line.startswith("BurstsCovered=False ShortBurstsOutranReadyPods (at the tallest"), line
    assert "with 1 pod ready" in line and "start-up (60 s)" in line, line


def test_steady_traffic_outruns_nothing_and_other_policies_say_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady = trace(tmp_path, ())
    _, out, _ = simulate(capsys, heavy_service(tmp_path), steady)
    assert "BurstsCovered=True WithinReadyCapacity (throughout)" in out, out
    _, out, _ = simulate(capsys, heavy_service(tmp_path), steady, "--policy", "static")
    assert "BurstsCovered" not in out


def test_the_replay_says_when_max_replicas_held_the_decisions_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = heavy_service(tmp_path)
    _, out, _ = simulate(capsys, service, trace(tmp_path, ()))
    assert "ScalingLimited=False DesiredWithinRange (throughout)" in out, out
    # Two pods at most: a burst of 60 req/s asks for many more.
    service.write_text(service.read_text().replace("maxReplicas: 20", "maxReplicas: 2"))
    code, out, _ = simulate(capsys, service, trace(tmp_path, (300.0,)))
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("ScalingLimited="))
    assert line.startswith("ScalingLimited=True TooManyReplicas: "), line
    assert "than scaling.maxReplicas (2)" in line, line
    most = int(line.rsplit("at most ", 1)[1].split()[0])
    assert most > 2, line
