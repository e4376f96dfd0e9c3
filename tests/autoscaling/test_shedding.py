"""Which backlogged pods the rule routes around, and what it never does."""

from __future__ import annotations

import pytest

from gpuserve.autoscaling.shedding import Backlog, backlogged


def pod(queued: float, rate: float = 6.0, budget: float = 1.0) -> Backlog:
    return Backlog(queued=queued, rate=rate, budget=budget)


def test_a_queue_past_what_its_pod_clears_is_routed_around() -> None:
    pods = [("a", pod(400.0)), ("b", pod(0.0)), ("c", pod(2.0)), ("d", pod(1.0))]
    assert backlogged(pods, arrivals=10.0) == {"a"}


def test_a_queue_its_pod_clears_within_the_budget_stays_in_routing() -> None:
    # 6 req/s for 1 s clears 6: a queue of 6 is served in time, 6.5 is not.
    assert backlogged([("a", pod(6.0)), ("b", pod(0.0))], arrivals=1.0) == frozenset()
    assert backlogged([("a", pod(6.5)), ("b", pod(0.0))], arrivals=1.0) == {"a"}


def test_no_pod_leaves_while_the_rest_could_not_carry_the_arrivals() -> None:
    pods = [("a", pod(400.0)), ("b", pod(0.0)), ("c", pod(0.0))]
    assert backlogged(pods, arrivals=12.0) == {"a"}  # b and c carry 12 req/s
    assert backlogged(pods, arrivals=12.5) == frozenset()


def test_deepest_first_and_never_more_than_the_share() -> None:
    pods = [(k, pod(q)) for k, q in (("a", 50.0), ("b", 300.0), ("c", 90.0), ("d", 0.0))]
    assert backlogged(pods, arrivals=1.0) == {"b", "c"}  # half of four, the two deepest
    assert backlogged(pods, arrivals=1.0, max_share=0.25) == {"b"}


def test_a_lone_pod_always_stays() -> None:
    assert backlogged([("a", pod(1000.0))], arrivals=0.0) == frozenset()


def test_a_faster_pod_clears_more() -> None:
    pods = [("slow", pod(20.0)), ("fast", pod(20.0, rate=30.0)), ("idle", pod(0.0, rate=30.0))]
    assert backlogged(pods, arrivals=1.0) == {"slow"}


def test_the_share_must_leave_a_pod() -> None:
    with pytest.raises(ValueError, match="max_share"):
        backlogged([("a", pod(1.0))], arrivals=0.0, max_share=1.0)
