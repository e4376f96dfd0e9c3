"""Arrivals read from the queue's growth over the last interval, behind a Prometheus that
scrapes less often than the autoscaler evaluates: the gauge then moves once per scrape, by
a whole scrape interval's growth, and that growth is divided by the interval, not by the
seconds between two evaluations."""

from __future__ import annotations

from gpuserve.autoscaling.deciding import _queue_growth
from gpuserve.autoscaling.metrics import MetricHistory, MetricSample

DONE = 10.0  # requests leaving the queue per second (irate, per Prometheus' own timestamps)
GROWTH = 2.0  # the queue grows by this many requests a second


def _history(evaluations: int, every: float, scrape: float) -> MetricHistory:
    """Evaluations ``every`` seconds of a gauge that Prometheus refreshes every ``scrape``."""
    samples = []
    for k in range(evaluations):
        at = k * every
        scraped = (at // scrape) * scrape  # the newest scrape at or before the evaluation
        depth = 50.0 + GROWTH * scraped
        samples.append(
            MetricSample(at=at, queue_depth=depth, recent_completion_rate=DONE, success_rate=DONE)
        )
    return MetricHistory.of(samples)


def test_growth_is_measured_over_the_scrape_interval_it_happened_in() -> None:
    # Evaluations every 5 s, scrapes every 15 s: the evaluation after a scrape sees 30
    # requests more, grown over 15 s.
    history = _history(4, 5.0, 15.0)  # at 0, 5, 10, 15: the gauge moved at 15
    rate, over = _queue_growth(history, clearable=0.0, scrape_interval=15.0)
    assert over == 15.0
    assert rate == DONE + GROWTH
    # Read as the evaluations' 5-s gap, the same step claims three times the growth: a
    # surge that never came.
    unaware, gap = _queue_growth(history, clearable=0.0, scrape_interval=0.0)
    assert gap == 5.0 and unaware == DONE + 3 * GROWTH
    # Between scrapes the gauge stands still: no growth is read, whichever interval.
    still = _history(3, 5.0, 15.0)  # at 0, 5, 10: no scrape since 0
    assert _queue_growth(still, clearable=0.0, scrape_interval=15.0) == (0.0, 0.0)


def test_behind_a_scrape_at_every_evaluation_nothing_changes() -> None:
    history = _history(4, 5.0, 5.0)
    assert _queue_growth(history, clearable=0.0, scrape_interval=5.0) == (
        DONE + GROWTH,
        5.0,
    )
    assert _queue_growth(history, clearable=0.0, scrape_interval=0.0) == (DONE + GROWTH, 5.0)
    # A queue the ready pods clear within the budget is no burst.
    assert _queue_growth(history, clearable=1e6, scrape_interval=5.0) == (0.0, 0.0)
