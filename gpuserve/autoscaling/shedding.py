"""Which serving pods to take out of routing while their queues drain.

A Kubernetes Service spreads requests at random. After a burst, the pod that took it
first holds a queue deeper than it can clear within the queue budget (its capacity times
the budget), and for minutes every request routed to it waits behind that queue and
misses the objective, while the pods started for the burst stand idle. Routing around
such a pod until its queue drains serves those requests on the idle pods. A pod is left
out only while the pods that stay in routing carry the given rate at their modelled
capacity, and never more than ``max_share`` of the pods (outlier ejection's usual bound):
left out together, pods overloaded alike would push all the traffic onto a few pods. The
request rule gives the largest of the arrivals now, the rate it keeps pods for and the
height the bursts seen reached: until its next decision, a burst like those lands on the
pods left in routing alone.

The request rule (``deciding.decide``) names the pods from the per-pod queue depths it is
given; the operator labels them out of the Service (``placement.roles``), and the
simulator routes around them (docs/autoscaling.md, rule 9).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True, slots=True)
class PodQueue:
    """A ready serving pod's queue as Prometheus last read it
    (``nv_inference_pending_request_count``)."""

    pod: str
    class_name: str
    queued: float


@dataclass(frozen=True, slots=True)
class RoutedAround:
    """A pod the rule routes around, and why: its queue against what it clears in time."""

    pod: str
    queued: float
    clears: float


@dataclass(frozen=True, slots=True)
class Backlog:
    """One serving pod as the rule sees it: its queue now and what it clears."""

    queued: float  # requests waiting in the pod's queue
    rate: float  # requests/s the pod serves within the objective (its modelled capacity)
    budget: float  # seconds a request may wait in its queue and still meet the objective

    @property
    def clearable(self) -> float:
        """The deepest queue the pod clears within the budget."""
        return self.rate * self.budget


def backlogged(
    pods: Sequence[tuple[Key, Backlog]], *, carry: float, max_share: float = 0.5
) -> tuple[Key, ...]:
    """The pods to route around, deepest queue first: the queues past what their pod
    clears within the budget, as long as the rest carry ``carry`` (requests/s) at their
    rates and at most ``max_share`` of the pods are left out. A pod that clears its queue,
    or that the rest could not spare, is passed over, not the end: in a service of several
    classes a slower pod further down may still be backlogged, or spared."""
    if not 0.0 <= max_share < 1.0:
        raise ValueError(f"max_share must be in [0, 1), not {max_share}")
    carrying = sum(b.rate for _, b in pods)
    limit = int(max_share * len(pods))
    out: list[Key] = []
    for key, b in sorted(pods, key=lambda kb: kb[1].queued, reverse=True):
        if len(out) >= limit:
            break
        if b.queued <= b.clearable or carrying - b.rate < carry:
            continue
        out.append(key)
        carrying -= b.rate
    return tuple(out)
