"""The autoscaler's Prometheus windows follow the scrape interval it is told, so each window
holds the samples its query needs."""

from __future__ import annotations

import pytest

from controllers.prometheus_source import PrometheusSource
from controllers.settings import Settings, SettingsError
from controllers.state import OperatorState
from gpuserve.autoscaling.query_windows import QueryWindows


def test_behind_a_fast_scrape_the_windows_are_those_the_rules_were_measured_with() -> None:
    for fast in (0.5, 1.0, 3.0):
        w = QueryWindows(fast)
        assert w.rate_window_s == 15.0 and w.rate_range == "15s"  # the query as before
        assert w.vllm_windows_s == (60.0, 15.0)
        assert w.vllm_mix_s == 600.0  # the token mix pooled over ten minutes


@pytest.mark.parametrize(
    ("scrape", "rate", "stable", "recent", "mix"),
    [
        (15.0, 60.0, 60.0, 15.0, 600.0),  # the chart's PodMonitor default
        (10.0, 40.0, 60.0, 20.0, 600.0),  # 15 s is 1.5 intervals: rounded up to two
        (30.0, 120.0, 120.0, 30.0, 600.0),
        (60.0, 240.0, 240.0, 60.0, 600.0),  # Prometheus' own default interval
        (7.0, 28.0, 63.0, 21.0, 602.0),
        (300.0, 1200.0, 1200.0, 300.0, 2400.0),  # the mix pools more than the stable window
    ],
)
def test_a_slower_scrape_widens_every_window_to_what_its_samples_need(
    scrape: float, rate: float, stable: float, recent: float, mix: float
) -> None:
    w = QueryWindows(scrape)
    assert w.rate_window_s == rate
    assert w.rate_window_s >= 4 * scrape  # rate() needs two samples; four leave margin
    assert w.vllm_windows_s == (stable, recent)
    assert w.vllm_mix_s == mix
    for window in (*w.vllm_windows_s, w.vllm_mix_s):  # a whole number of intervals
        intervals = window / scrape
        assert intervals >= 1 and abs(intervals - round(intervals)) < 1e-9


def test_the_interval_is_read_as_prometheus_writes_it_and_a_bad_one_is_named() -> None:
    name = "GPUSERVE_PROMETHEUS_SCRAPE_INTERVAL"
    assert Settings().scrape_interval == 15.0  # the chart's default when nothing is said
    for raw, seconds in (("15s", 15.0), ("1m", 60.0), ("1m30s", 90.0), ("30", 30.0)):
        assert Settings.from_environment({name: raw}).scrape_interval == seconds
    for raw, why in (("fast", "is not a duration"), ("0s", "must be more than 0"), ("-5", "not")):
        with pytest.raises(SettingsError, match=rf"{name}='{raw}': .*{why}"):
            Settings.from_environment({name: raw})
    with pytest.raises(ValueError, match="scrape interval: must be positive"):
        QueryWindows(0.0)


def test_the_operator_queries_with_the_windows_of_the_interval_it_was_told() -> None:
    env = {"GPUSERVE_PROMETHEUS_URL": "http://127.0.0.1:9"}
    settings = Settings.from_environment({**env, "GPUSERVE_PROMETHEUS_SCRAPE_INTERVAL": "30s"})
    source = OperatorState.start(settings).prometheus
    assert isinstance(source, PrometheusSource)
    assert source.window == "120s"
    assert source.windows.vllm_windows_s == (120.0, 30.0)
