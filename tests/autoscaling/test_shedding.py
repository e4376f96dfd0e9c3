"""Which backlogged pods the rule routes around, and what it never does."""

from __future__ import annotations

from dataclasses import replace

import pytest
from policy_helpers import capacity, config, history, pools

from e2e.invalid_cases import valid_service
from gpuserve.api.models import parse_inference_service
from gpuserve.autoscaling import Decision, PolicyMemory, decide
from gpuserve.autoscaling.from_spec import policy_config_from_spec
from gpuserve.autoscaling.shedding import Backlog, PodQueue, backlogged


def pod(queued: float, rate: float = 6.0, budget: float = 1.0) -> Backlog:
    return Backlog(queued=queued, rate=rate, budget=budget)


def test_a_queue_past_what_its_pod_clears_is_routed_around() -> None:
    pods = [("a", pod(400.0)), ("b", pod(0.0)), ("c", pod(2.0)), ("d", pod(1.0))]
    assert backlogged(pods, carry=10.0) == ("a",)


def test_a_queue_its_pod_clears_within_the_budget_stays_in_routing() -> None:
    # 6 req/s for 1 s clears 6: a queue of 6 is served in time, 6.5 is not.
    assert backlogged([("a", pod(6.0)), ("b", pod(0.0))], carry=1.0) == ()
    assert backlogged([("a", pod(6.5)), ("b", pod(0.0))], carry=1.0) == ("a",)


def test_no_pod_leaves_while_the_rest_could_not_carry_the_arrivals() -> None:
    pods = [("a", pod(400.0)), ("b", pod(0.0)), ("c", pod(0.0))]
    assert backlogged(pods, carry=12.0) == ("a",)  # b and c carry 12 req/s
    assert backlogged(pods, carry=12.5) == ()


def test_deepest_first_and_never_more_than_the_share() -> None:
    pods = [(k, pod(q)) for k, q in (("a", 50.0), ("b", 300.0), ("c", 90.0), ("d", 0.0))]
    # Half of four: the two deepest, deepest first.
    assert backlogged(pods, carry=1.0) == ("b", "c")
    assert backlogged(pods, carry=1.0, max_share=0.25) == ("b",)


def test_a_lone_pod_always_stays() -> None:
    assert backlogged([("a", pod(1000.0))], carry=0.0) == ()


def test_a_faster_pod_clears_more() -> None:
    pods = [("slow", pod(20.0)), ("fast", pod(20.0, rate=30.0)), ("idle", pod(0.0, rate=30.0))]
    assert backlogged(pods, carry=1.0) == ("slow",)


def test_a_fast_pod_clearing_a_deep_queue_does_not_hide_a_slow_backlogged_one() -> None:
    # Two classes: the fast pod's 25 clear in time, the slow pod's 20 do not.
    pods = [("fast", pod(25.0, rate=30.0)), ("slow", pod(20.0)), ("idle", pod(0.0, rate=30.0))]
    assert backlogged(pods, carry=1.0) == ("slow",)
    # Nor does a pod the rest could not spare hide one they can.
    pods = [("big", pod(900.0, rate=30.0)), ("small", pod(800.0)), ("idle", pod(0.0, rate=30.0))]
    assert backlogged(pods, carry=40.0) == ("small",)


def test_the_share_must_leave_a_pod() -> None:
    with pytest.raises(ValueError, match="max_share"):
        backlogged([("a", pod(1.0))], carry=0.0, max_share=1.0)


def decided(queues: list[PodQueue], **overrides: object) -> Decision:
    """The policy at one pod's worth of demand, spread over four ready pods."""
    return decide(
        config=config(**overrides),
        history=history(capacity(), start=180.0, end=300.0),
        pools=pools(4),
        now=300.0,
        memory=PolicyMemory(),
        queues=queues,
    )


def test_the_policy_names_a_backlogged_pod_with_its_queue_and_what_it_clears() -> None:
    queues = [PodQueue("p0", "a100", 500.0)] + [PodQueue(f"p{i}", "a100", 0.0) for i in (1, 2, 3)]
    decision = decided(queues)
    assert [r.pod for r in decision.routed_around] == ["p0"]
    named = decision.routed_around[0]
    assert named.queued == 500.0 and 0 < named.clears < 500.0
    # Turned off in the spec (scaling.routeAroundBacklogs), or a pod of a class the
    # service does not use: every pod stays in routing.
    body = valid_service()
    body["spec"]["scaling"]["routeAroundBacklogs"] = False  # type: ignore[index]
    off = policy_config_from_spec(parse_inference_service(body).spec)
    assert off.route_around_backlogs is False
    assert decided(queues, route_around_backlogs=False).routed_around == ()
    assert decided([replace(q, class_name="l4") for q in queues]).routed_around == ()


def test_a_scale_down_leaves_the_service_pods_that_carry_the_arrivals() -> None:
    # Eight pods for three pods' worth of demand, two of them holding queues they cannot
    # clear in time: the decision shrinks the service and names pods in one go. The pods
    # it keeps, less those it names, must carry the demand.
    queues = [PodQueue(f"p{i}", "a100", 20.0 if i < 2 else 0.0) for i in range(8)]
    calm = PolicyMemory(
        since=0.0, recommendations=tuple((float(t), 1) for t in range(100, 300, 10))
    )
    decision = decide(
        config=config(),
        history=history(
            3.0 * capacity(), start=0.0, end=300.0, queue=lambda t: 40 + (300 - t) / 10
        ),
        pools=pools(8),
        now=300.0,
        memory=calm,
        queues=queues,
    )
    assert decision.desired_replicas < 8 and decision.routed_around
    left = decision.desired_replicas - len(decision.routed_around)
    assert left * capacity() >= decision.signals["demandPanic"] - 1e-9
