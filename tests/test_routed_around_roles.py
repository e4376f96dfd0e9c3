"""Serving pods routed around while they clear their queues: the role they carry, what
they count as, and the bounds the plan keeps whatever the autoscaler asked."""

from __future__ import annotations

from collections.abc import Sequence

from controllers.converging import routed_around
from gpuserve.placement.roles import DELETION_COST, PodState, RoleChange, assign_roles, draining
from gpuserve.resources.naming import ROLE_ROUTED_AROUND, ROLE_SERVING, ROLE_WARM, serves

ORDER = ["h100"]


def pod(name: str, role: str, *, ready: bool = True) -> PodState:
    return PodState(
        name=name,
        accelerator_class="h100",
        role=role,
        ready=ready,
        node="n",
        deletion_cost=DELETION_COST[role],
    )


def roles(
    pods: Sequence[PodState], desired: int, around: Sequence[str], now: float | None = 100.0
) -> dict[str, RoleChange]:
    changes = assign_roles(
        pods, desired_serving=desired, order=ORDER, now=now, routed_around=around
    )
    return {c.pod: c for c in changes}


FOUR = [pod(n, ROLE_SERVING) for n in ("a", "b", "c", "d")]


def test_a_named_serving_pod_is_routed_around_at_its_serving_cost_without_a_demotion() -> None:
    changes = roles(FOUR, 4, ["b"])
    assert list(changes) == ["b"]
    assert changes["b"].role == ROLE_ROUTED_AROUND
    assert changes["b"].deletion_cost == DELETION_COST[ROLE_SERVING]
    # Not a demotion: no drain starts, and its Deployment keeps it.
    assert changes["b"].demoted_at is None
    assert not draining(FOUR[1], ROLE_ROUTED_AROUND, 100.0)


def test_at_most_half_the_serving_pods_leave_routing_the_first_named_first() -> None:
    changes = roles(FOUR, 4, ["d", "c", "a"])
    assert {n for n, c in changes.items() if c.role == ROLE_ROUTED_AROUND} == {"d", "c"}
    # One serving pod: it stays in routing, whatever the list says.
    assert roles([pod("a", ROLE_SERVING)], 1, ["a"]) == {}


def test_a_routed_around_pod_rejoins_once_no_longer_named() -> None:
    pods = [pod("a", ROLE_ROUTED_AROUND), pod("b", ROLE_SERVING)]
    changes = roles(pods, 2, [])
    assert changes["a"].role == ROLE_SERVING and changes["a"].demoted_at is None
    assert roles(pods, 2, ["a"]) == {}  # still named: nothing to change


def test_a_routed_around_pod_keeps_its_serving_place() -> None:
    # It counts as serving: a scale to the same size promotes no warm pod in its stead,
    # and a scale-down demotes it like any serving pod, with a drain.
    pods = [pod("a", ROLE_ROUTED_AROUND), pod("b", ROLE_SERVING), pod("w", ROLE_WARM)]
    assert roles(pods, 2, ["a"]) == {}
    down = roles(pods, 1, [])
    demoted = [c for c in down.values() if c.role == ROLE_WARM]
    assert len(demoted) == 1 and demoted[0].demoted_at == "100.000"


def test_a_scale_down_demotes_idle_pods_before_one_clearing_a_backlog() -> None:
    # A demoted pod is deleted after its drain: the one routed around still holds a queue.
    down = roles(FOUR, 3, ["d"])
    demoted = {n for n, c in down.items() if c.role == ROLE_WARM}
    assert demoted == {"c"}
    assert down["d"].role == ROLE_ROUTED_AROUND
    # Class preference still comes first: a named pod of a worse class goes before the
    # better class's pods.
    l4 = PodState(
        name="a-l4",
        accelerator_class="l4",
        role=ROLE_SERVING,
        ready=True,
        node="n",
        deletion_cost=DELETION_COST[ROLE_SERVING],
    )
    changes = assign_roles(
        [l4, *FOUR], desired_serving=4, order=["h100", "l4"], now=100.0, routed_around=["a-l4"]
    )
    assert [c.pod for c in changes if c.role == ROLE_WARM] == ["a-l4"]


def test_only_serving_pods_are_routed_around() -> None:
    pods = [pod("a", ROLE_SERVING), pod("b", ROLE_SERVING), pod("w", ROLE_WARM)]
    assert roles(pods, 2, ["w"]) == {}
    # A pod still starting stands warm until it is ready.
    assert roles([*pods, pod("x", ROLE_WARM, ready=False)], 2, ["x"]) == {}


def test_which_roles_serve() -> None:
    assert serves(ROLE_SERVING) and serves(ROLE_ROUTED_AROUND) and not serves(ROLE_WARM)


def test_the_reconcile_reads_the_pods_to_route_around_from_a_raw_status() -> None:
    status = {"routedAround": [{"pod": "a", "queued": 40, "clears": 8}, {"queued": 1}, "b"]}
    assert routed_around(status) == ("a",)
    assert routed_around({}) == () and routed_around({"routedAround": "a"}) == ()
