"""A real Prometheus scraping a real Triton through file_sd targets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_api_client import PrometheusConnect

from e2e.models import sleeper_config
from e2e.prometheus import (
    PrometheusServer,
    build_config,
    check_config,
    prometheus_available,
    targets_document,
)
from e2e.triton import TritonServer, triton_available, write_model
from e2e.triton.process import pid_alive
from e2e.triton.requests import infer_sleeper

needs_prometheus = pytest.mark.skipif(
    not prometheus_available(), reason="prometheus not installed (apt-get install prometheus)"
)


def test_targets_document_accepts_loopback_with_labels() -> None:
    doc = targets_document(
        [{"address": "127.0.0.1:9000", "labels": {"namespace": "ns", "pod": "p-0"}}]
    )
    assert doc == [{"targets": ["127.0.0.1:9000"], "labels": {"namespace": "ns", "pod": "p-0"}}]


@pytest.mark.parametrize(
    "target",
    [
        {"address": "10.0.0.1:8002"},
        {"address": "example.com:8002"},
        {"address": "127.0.0.1"},
        {"address": "127.0.0.1:8002", "labels": {"bad-label": "x"}},
        {"address": "127.0.0.1:8002", "labels": {"__reserved": "x"}},
    ],
)
def test_targets_document_rejects_bad_targets(target: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        targets_document([target])


@pytest.mark.prometheus
@needs_prometheus
def test_generated_config_passes_promtool(tmp_path: Path) -> None:
    import yaml

    good = tmp_path / "good.yml"
    good.write_text(yaml.safe_dump(build_config(tmp_path / "targets.json")))
    result = check_config(good)
    assert result.ok, result.output
    # The check is real: a broken interval is refused.
    bad = tmp_path / "bad.yml"
    bad.write_text(good.read_text().replace("1000ms", "soon"))
    assert not check_config(bad).ok


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    if not triton_available():
        pytest.skip("nvidia-pytriton wheel not installed")
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "sleeper", sleeper_config())
    with TritonServer(repo) as server:
        yield server


@pytest.mark.prometheus
@pytest.mark.triton
@needs_prometheus
def test_scrapes_triton_with_pod_labels_and_forgets_removed_target(triton: TritonServer) -> None:
    infer_sleeper(triton.grpc_url, 4)

    prometheus = PrometheusServer(scrape_interval_s=1.0).start()
    workdir, pid = prometheus.workdir, prometheus.pid
    try:
        assert check_config(prometheus.config_path).ok
        prometheus.set_targets(
            [
                {
                    "address": triton.metrics_address,
                    "labels": {"namespace": "team-a", "pod": "sleeper-0", "service": "sleeper"},
                }
            ]
        )
        query = 'nv_inference_request_success{model="sleeper", namespace="team-a"}'
        prometheus.wait_for(query, lambda r: bool(r) and float(r[0]["value"][1]) >= 4, timeout=30)

        api = PrometheusConnect(url=prometheus.url, disable_ssl=True)
        series = api.custom_query(query)
        assert len(series) == 1
        labels = series[0]["metric"]
        assert labels["pod"] == "sleeper-0" and labels["service"] == "sleeper"
        assert labels["job"] == "triton" and labels["instance"] == triton.metrics_address
        pending = api.custom_query("sum by (pod) (nv_inference_pending_request_count)")
        assert pending and pending[0]["metric"] == {"pod": "sleeper-0"}

        prometheus.set_targets([])
        # Removing a target writes staleness markers: the series disappears from queries.
        prometheus.wait_for('up{job="triton"}', lambda r: r == [], timeout=30)
        assert prometheus.active_targets() == []
    finally:
        prometheus.stop()
    assert workdir is not None and not workdir.exists()
    assert not pid_alive(pid)


@pytest.mark.prometheus
@pytest.mark.triton
@needs_prometheus
def test_one_pass_reads_every_service_as_the_per_service_read_does(triton: TritonServer) -> None:
    """The autoscaler's pass queries Prometheus once per signal for all services; each
    service's figures must be those a query for that service alone gives."""
    from controllers.prometheus_source import PrometheusSource
    from gpuserve.autoscaling.query_windows import QueryWindows

    infer_sleeper(triton.grpc_url, 6)
    prometheus = PrometheusServer(scrape_interval_s=1.0).start()
    try:
        # One Triton, scraped as two services in two namespaces (two targets).
        services = [("team-a", "sleeper"), ("team-b", "other")]
        prometheus.set_targets(
            [
                {
                    "address": triton.metrics_address,
                    "labels": {"namespace": ns, "pod": f"{name}-0", "service": name},
                }
                for ns, name in services
            ]
        )
        prometheus.wait_for(
            "count(rate(nv_inference_request_success[15s])) by (service)",
            lambda r: len(r) == 2,
            timeout=30,
        )
        source = PrometheusSource(prometheus.url, windows=QueryWindows(1.0))
        every = source.read_all()
        assert every.error is None
        for ns, name in services:
            assert every.has_series(ns, name)
            alone = source.read(namespace=ns, service=name).sample
            batched = every.of(ns, name).sample
            assert batched.get("queue_depth") == alone.get("queue_depth") == 0.0
            # Demand needs every term matched by service: a term with no series of its
            # own must count as zero, not drop the sum.
            assert batched.get("arrival_rate") is not None
            assert batched.get("success_rate") is not None
            assert batched.get("recent_completion_rate") is not None  # irate, failures or not
        assert not every.has_series("team-a", "missing")
        assert every.of("team-a", "missing").sample.get("success_rate") is None
        # Prometheus gone: one error for the pass, every service's values missing.
        down = PrometheusSource("http://127.0.0.1:9", windows=QueryWindows(1.0)).read_all()
        assert down.error and down.of("team-a", "sleeper").error == down.error
    finally:
        prometheus.stop()


@pytest.mark.prometheus
@pytest.mark.triton
@needs_prometheus
def test_a_pod_scraped_under_its_old_and_new_role_counts_once(triton: TritonServer) -> None:
    """The chart's PodMonitor copies the pod's role onto its target: after a role change
    the old and the new target both hold the pod's series until the old ones go stale.
    The autoscaler's queries take each Triton's series once."""
    from controllers.prometheus_source import PrometheusSource
    from gpuserve.autoscaling.query_windows import QueryWindows

    stop, errors = threading.Event(), []
    sender = threading.Thread(
        target=_send_until, args=(triton.grpc_url, stop, time.monotonic() + 60, errors)
    )
    prometheus = PrometheusServer(scrape_interval_s=1.0).start()
    sender.start()
    try:
        # The same Triton: once as pod a-0 under two roles, once as pod b-0 under one.
        target = {"namespace": "team-a", "pod": "a-0", "service": "a"}
        prometheus.set_targets(
            [
                {"address": triton.metrics_address, "labels": {**target, "role": "serving"}},
                {"address": triton.metrics_address, "labels": {**target, "role": "routed-around"}},
                {
                    "address": triton.metrics_address,
                    "labels": {
                        "namespace": "team-b",
                        "pod": "b-0",
                        "service": "b",
                        "role": "serving",
                    },
                },
            ]
        )
        windows = QueryWindows(1.0)
        # Every target scraped through a whole rate window: rates from a window's first
        # samples swing by half, and the larger of two such (a-0's) would be read high.
        prometheus.wait_for(
            f'count_over_time(up{{job="triton"}}[{windows.rate_range}])',
            lambda r: len(r) == 3 and min(float(x["value"][1]) for x in r) >= 14,
            timeout=45,
        )
        every = PrometheusSource(prometheus.url, windows=windows).read_all()
        assert every.error is None
        twice, once = every.of("team-a", "a"), every.of("team-b", "b")
        assert twice.pod_queues == {"a-0": 0.0}
        rate_twice, rate_once = twice.sample.get("success_rate"), once.sample.get("success_rate")
        assert rate_twice is not None and rate_once is not None and rate_once > 0
        # The same counters: summed over both targets, a-0's rate would be twice b-0's.
        assert rate_twice == pytest.approx(rate_once, rel=0.25), (rate_twice, rate_once)
        assert twice.sample.get("queue_depth") == 0.0
    finally:
        stop.set()
        sender.join(timeout=10)
        prometheus.stop()
    assert not errors, errors[:3]


def _send_until(grpc_url: str, stop: threading.Event, deadline: float, errors: list[str]) -> None:
    """One request every 0.2 s until ``stop`` or ``deadline``; each failure recorded."""
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            infer_sleeper(grpc_url, 1, timeout_s=5.0)
        except Exception as exc:  # every failure is counted, none ignored
            errors.append(repr(exc))
        stop.wait(0.2)


@pytest.mark.prometheus
@pytest.mark.triton
@needs_prometheus
def test_behind_a_15s_scrape_the_windows_hold_the_samples_their_queries_need(
    triton: TritonServer,
) -> None:
    """The chart's PodMonitor scrapes every 15 s. A 15-s rate() range then holds one sample
    and returns nothing, as the operator's fixed 15-s range did (the autoscaler held, its
    metrics missing); the windows it takes for the interval it is told hold four."""
    from controllers.prometheus_source import PrometheusSource
    from gpuserve.autoscaling.query_windows import QueryWindows

    windows = QueryWindows(15.0)
    prometheus = PrometheusServer(scrape_interval_s=15.0).start()
    stop, errors = threading.Event(), list[str]()
    sender = threading.Thread(
        target=_send_until, args=(triton.grpc_url, stop, time.monotonic() + 150, errors)
    )
    try:
        labels = {"namespace": "team-a", "pod": "sleeper-0", "service": "sleeper"}
        prometheus.set_targets([{"address": triton.metrics_address, "labels": labels}])
        sender.start()
        # Five scrapes: a 60-s range then holds at least four samples.
        prometheus.wait_for(
            'count_over_time(nv_inference_request_success{service="sleeper"}[5m])',
            lambda r: bool(r) and float(r[0]["value"][1]) >= 5,
            timeout=120,
        )
        api = PrometheusConnect(url=prometheus.url, disable_ssl=True)
        series = 'nv_inference_request_success{service="sleeper"}'
        assert api.custom_query(f"rate({series}[15s])") == []  # one sample in the range
        assert api.custom_query(f"rate({series}[{windows.rate_range}])") != []
        sample = PrometheusSource(prometheus.url, windows=windows).read(
            namespace="team-a", service="sleeper"
        ).sample
        for name in ("success_rate", "arrival_rate", "recent_completion_rate"):
            value = sample.get(name)
            assert value is not None and value > 0, (name, value)
        # Five requests a second at most, one at a time: the rate read is of that order.
        assert (sample.get("success_rate") or 0.0) < 6.0
    finally:
        stop.set()
        if sender.ident is not None:  # started
            sender.join(timeout=10)
        prometheus.stop()
    assert errors == []
