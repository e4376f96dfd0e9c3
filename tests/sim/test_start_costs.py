"""The cheapest schedule that serves at least an oracle's plan and pays for its starts."""

from __future__ import annotations

import itertools
import random

import pytest

from gpuserve.sim.start_costs import paid_plan, start_cost_s


def test_a_dip_shorter_than_a_start_is_held_and_a_longer_one_released() -> None:
    # Holding a replica through one 30-s window costs 30 s; restarting it costs 45 s.
    assert paid_plan([2, 1, 2], 30.0, 45.0) == (2, 2, 2)
    assert start_cost_s([2, 1, 2], 30.0, 45.0) == pytest.approx(30.0)
    # Through two windows holding costs 60 s: the restart is cheaper.
    assert paid_plan([2, 1, 1, 2], 30.0, 45.0) == (2, 1, 1, 2)
    assert start_cost_s([2, 1, 1, 2], 30.0, 45.0) == pytest.approx(45.0)


def test_every_start_after_the_first_window_is_paid_and_free_starts_change_nothing() -> None:
    assert paid_plan([1, 2, 4], 60.0, 45.0) == (1, 2, 4)
    assert start_cost_s([1, 2, 4], 60.0, 45.0) == pytest.approx(3 * 45.0)
    assert paid_plan([3, 1, 3, 1], 60.0, 0.0) == (3, 1, 3, 1)
    assert start_cost_s([3, 1, 3, 1], 60.0, 0.0) == 0.0
    assert paid_plan([], 60.0, 45.0) == () and start_cost_s([], 60.0, 45.0) == 0.0
    with pytest.raises(ValueError, match="window_s"):
        paid_plan([1], 0.0, 45.0)


def _brute_force(plan: list[int], window_s: float, start_s: float) -> float:
    top = max(plan)
    best = float("inf")
    for sizes in itertools.product(*(range(need, top + 1) for need in plan)):
        starts = sum(max(0, b - a) for a, b in itertools.pairwise((plan[0], *sizes)))
        best = min(best, sum(sizes) * window_s + starts * start_s)
    return best - sum(plan) * window_s


def test_the_schedule_is_the_cheapest_of_all_that_serve_the_plan() -> None:
    rng = random.Random(7)
    for _ in range(200):
        plan = [rng.randint(1, 4) for _ in range(rng.randint(1, 6))]
        window_s, start_s = rng.choice([15.0, 30.0, 60.0]), rng.choice([10.0, 45.0, 120.0])
        paid = paid_plan(plan, window_s, start_s)
        assert len(paid) == len(plan) and all(p >= n for p, n in zip(paid, plan, strict=True))
        assert start_cost_s(plan, window_s, start_s) == pytest.approx(
            _brute_force(plan, window_s, start_s)
        )


def test_only_what_falls_in_the_measured_windows_is_counted() -> None:
    # [warm-up, warm-up, measured, measured]: the pod held through the warm-up's dip
    # (window 1) falls before the measured part; the start in window 3 falls in it.
    plan = [2, 1, 2, 3]
    assert paid_plan(plan, 30.0, 45.0) == (2, 2, 2, 3)
    assert start_cost_s(plan, 30.0, 45.0) == pytest.approx(30.0 + 45.0)
    assert start_cost_s(plan, 30.0, 45.0, from_window=2) == pytest.approx(45.0)
    assert start_cost_s(plan, 30.0, 45.0, from_window=4) == 0.0
    # Split anywhere, the parts add up to the whole.
    rng = random.Random(11)
    for _ in range(100):
        plan = [rng.randint(1, 5) for _ in range(rng.randint(1, 8))]
        cut = rng.randint(0, len(plan))
        whole = start_cost_s(plan, 30.0, 45.0)
        later = start_cost_s(plan, 30.0, 45.0, from_window=cut)
        sizes = paid_plan(plan, 30.0, 45.0)
        earlier = sum((s - n) * 30.0 for s, n in zip(sizes[:cut], plan[:cut], strict=True))
        earlier += 45.0 * sum(max(0, b - a) for a, b in itertools.pairwise((plan[0], *sizes[:cut])))
        assert earlier + later == pytest.approx(whole)
